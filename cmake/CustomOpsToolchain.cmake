# SPDX-License-Identifier: BSD-3-Clause
# Refuses C++ compilers that link libstdc++ statically.
#
# Our library shares C++ objects (strings, exceptions, streams) with libtorch, which uses the
# system's libstdc++.so.6. A library that carries its own copy of libstdc++ (from libstdc++.a) runs
# two C++ runtimes in one process: it passes the C++ tests and then crashes in Python the first time
# an error message formats a number (locale facets of one runtime used by the other). Some GCC
# builds ship only libstdc++.a; the H200 image's /opt/gcc/bin/g++ is one, and that image names it in
# both CXX and CUDAHOSTCXX. nvcc's host compiler matters as much as CMAKE_CXX_COMPILER: CMake adds
# its library directories to our link line, where /opt/gcc's libstdc++.a won over the system
# libstdc++.so. Fail here, naming the variable, instead of building a library that crashes later.

function(custom_ops_links_shared_libstdcxx compiler result)
  set(probe_dir "${CMAKE_BINARY_DIR}/CMakeFiles/custom_ops_toolchain_check")
  file(WRITE "${probe_dir}/probe.cpp"
    "#include <sstream>\nint main() { std::ostringstream s; s << 42; return s.str().size() == 2 ? 0 : 1; }\n")
  get_filename_component(name "${compiler}" NAME)
  set(probe "${probe_dir}/probe-${name}")
  file(REMOVE "${probe}")
  execute_process(COMMAND "${compiler}" "${probe_dir}/probe.cpp" -o "${probe}"
                  RESULT_VARIABLE failed OUTPUT_VARIABLE log ERROR_VARIABLE log)
  if(failed OR NOT EXISTS "${probe}")
    message(FATAL_ERROR "custom-ops: ${compiler} cannot build a C++ program:\n${log}")
  endif()
  execute_process(COMMAND "${CMAKE_OBJDUMP}" -p "${probe}" OUTPUT_VARIABLE headers COMMAND_ERROR_IS_FATAL ANY)
  if(headers MATCHES "NEEDED +libstdc\\+\\+\\.so")
    set(${result} ON PARENT_SCOPE)
  else()
    set(${result} OFF PARENT_SCOPE)
  endif()
endfunction()

function(custom_ops_require_shared_libstdcxx)
  if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux" OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    return()  # libstdc++ is GCC's runtime; other toolchains are not checked
  endif()
  if(NOT CMAKE_OBJDUMP)
    message(WARNING "custom-ops: no objdump found, cannot check how the compilers link libstdc++")
    return()
  endif()
  set(compilers "CMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}")
  if(CMAKE_CUDA_HOST_COMPILER)
    list(APPEND compilers "CMAKE_CUDA_HOST_COMPILER=${CMAKE_CUDA_HOST_COMPILER}")
  elseif(DEFINED ENV{CUDAHOSTCXX} AND NOT "$ENV{CUDAHOSTCXX}" STREQUAL "")
    list(APPEND compilers "CUDAHOSTCXX=$ENV{CUDAHOSTCXX}")
  endif()
  foreach(setting IN LISTS compilers)
    string(REGEX REPLACE "^([^=]+)=(.*)$" "\\1;\\2" parts "${setting}")
    list(GET parts 0 variable)
    list(GET parts 1 compiler)
    unset(shared)
    custom_ops_links_shared_libstdcxx("${compiler}" shared)
    if(NOT DEFINED shared)
      return()  # the probe itself failed, and CMake has said why
    elseif(NOT shared)
      message(FATAL_ERROR
        "custom-ops: ${variable}=${compiler} links libstdc++ statically (a C++ program it builds does "
        "not need libstdc++.so). libcustom_ops.so would carry a second C++ runtime beside libtorch's "
        "and crash when loaded into Python. Point ${variable} at a compiler that links the shared "
        "libstdc++ (e.g. /usr/bin/g++) and configure a fresh build directory.")
    endif()
  endforeach()
endfunction()

custom_ops_require_shared_libstdcxx()

# Without CUDAHOSTCXX, nvcc's host compiler is the first g++ on PATH, which need not be
# CMAKE_CXX_COMPILER. One C++ compiler for every object. (Set before find_package(Torch), which
# enables CUDA.)
if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER AND (NOT DEFINED ENV{CUDAHOSTCXX} OR "$ENV{CUDAHOSTCXX}" STREQUAL ""))
  set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH "nvcc's host compiler: the C++ compiler")
endif()
