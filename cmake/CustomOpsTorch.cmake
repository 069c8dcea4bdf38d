# Finds libtorch: a standalone libtorch or torch install on CMAKE_PREFIX_PATH / Torch_DIR first,
# else the torch of the Python interpreter CMake finds (only its interpreter: nothing links libpython).
# The GPU architectures must be set before torch's CMake config reads them.
set(TORCH_CUDA_ARCH_LIST "${CUSTOM_OPS_CUDA_ARCHS}" CACHE STRING "" FORCE)

find_package(Torch CONFIG QUIET)
if(NOT Torch_FOUND)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _torch_result)
  if(NOT _torch_result EQUAL 0)
    message(FATAL_ERROR
      "libtorch not found: set CMAKE_PREFIX_PATH to a libtorch, or make ${Python3_EXECUTABLE} one with torch installed")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
  find_package(Torch CONFIG REQUIRED)
endif()
get_filename_component(TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)
message(STATUS "custom-ops: libtorch ${Torch_VERSION} from ${Torch_DIR}")
