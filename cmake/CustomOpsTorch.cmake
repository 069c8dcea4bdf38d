# SPDX-License-Identifier: BSD-3-Clause
# Finds libtorch: a standalone libtorch or torch install on CMAKE_PREFIX_PATH / Torch_DIR first,
# else the torch of the Python interpreter CMake finds (only its interpreter: nothing links libpython),
# and refuses a torch release outside the supported range (requirements.txt states it, once).
include(CustomOpsFindTorch)
# The GPU architectures must be set before torch's CMake config reads them.
include(CustomOpsCudaArchs)
custom_ops_set_cuda_archs()

find_path(_torch_config_dir TorchConfig.cmake PATH_SUFFIXES share/cmake/Torch NO_CACHE)
if(NOT _torch_config_dir AND NOT Torch_DIR)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -W ignore -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _torch_result)
  if(NOT _torch_result EQUAL 0)
    message(FATAL_ERROR
      "libtorch not found: set CMAKE_PREFIX_PATH to a libtorch, or make ${Python3_EXECUTABLE} one with torch installed")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
endif()
custom_ops_find_torch(CONFIG REQUIRED)
get_filename_component(TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)
message(STATUS "custom-ops: libtorch ${Torch_VERSION} from ${Torch_DIR}")

# requirements.txt: "torch>=2.11,<2.16".
file(STRINGS "${PROJECT_SOURCE_DIR}/requirements.txt" _torch_requirement REGEX "^torch>=")
if(NOT _torch_requirement MATCHES "^torch>=([0-9]+\\.[0-9]+),<([0-9]+\\.[0-9]+)")
  message(FATAL_ERROR "custom-ops: requirements.txt must state the torch range as torch>=A.B,<C.D")
endif()
set(CUSTOM_OPS_TORCH_MIN "${CMAKE_MATCH_1}")
set(CUSTOM_OPS_TORCH_BELOW "${CMAKE_MATCH_2}")
string(REGEX MATCH "^[0-9]+\\.[0-9]+" _torch_release "${Torch_VERSION}")
if(_torch_release VERSION_LESS CUSTOM_OPS_TORCH_MIN OR NOT _torch_release VERSION_LESS CUSTOM_OPS_TORCH_BELOW)
  message(FATAL_ERROR
    "custom-ops supports torch >= ${CUSTOM_OPS_TORCH_MIN}, < ${CUSTOM_OPS_TORCH_BELOW}; found torch ${Torch_VERSION} (${Torch_DIR})")
endif()
