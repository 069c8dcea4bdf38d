# SPDX-License-Identifier: BSD-3-Clause
# cmake --install: lib/libcustom_ops.so, include/custom_ops/*.h, share/doc (license, changelog) and the CMake package
# lib/cmake/CustomOps (config, version file, exported target CustomOps::custom_ops); lib and
# include as GNUInstallDirs names them for the platform.
include(CMakePackageConfigHelpers)

set(_package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/CustomOps)
install(TARGETS custom_ops EXPORT CustomOpsTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ops/include/custom_ops DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT CustomOpsTargets NAMESPACE CustomOps:: DESTINATION ${_package_dir})

configure_package_config_file(
  cmake/CustomOpsConfig.cmake.in "${CMAKE_CURRENT_BINARY_DIR}/CustomOpsConfig.cmake"
  INSTALL_DESTINATION ${_package_dir})
write_basic_package_version_file(
  "${CMAKE_CURRENT_BINARY_DIR}/CustomOpsConfigVersion.cmake" COMPATIBILITY SameMinorVersion)
install(FILES
  "${CMAKE_CURRENT_BINARY_DIR}/CustomOpsConfig.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/CustomOpsConfigVersion.cmake"
  cmake/CustomOpsFindTorch.cmake
  DESTINATION ${_package_dir})
install(FILES LICENSE CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
