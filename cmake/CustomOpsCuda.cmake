# SPDX-License-Identifier: BSD-3-Clause
# Turns CUSTOM_OPS_CUDA (AUTO|ON|OFF) into CUSTOM_OPS_WITH_CUDA. Asking for CUDA without a CUDA
# torch or without nvcc is an error: a library that claims CUDA but has no CUDA kernels is the
# most common bug in this field.
if(EXISTS "${TORCH_LIB_DIR}/libtorch_cuda.so")
  set(_torch_has_cuda ON)
else()
  set(_torch_has_cuda OFF)
endif()
# torch's own CMake config enables the CUDA language when it finds the toolkit.
if(CAFFE2_USE_CUDA AND CMAKE_CUDA_COMPILER)
  set(_nvcc_found ON)
else()
  set(_nvcc_found OFF)
endif()

if(NOT CUSTOM_OPS_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "CUSTOM_OPS_CUDA must be AUTO, ON or OFF, got '${CUSTOM_OPS_CUDA}'")
endif()

if(CUSTOM_OPS_CUDA STREQUAL "OFF")
  set(CUSTOM_OPS_WITH_CUDA OFF)
elseif(_torch_has_cuda AND _nvcc_found)
  set(CUSTOM_OPS_WITH_CUDA ON)
elseif(CUSTOM_OPS_CUDA STREQUAL "ON")
  message(FATAL_ERROR
    "CUSTOM_OPS_CUDA=ON, but torch has CUDA: ${_torch_has_cuda} and nvcc was found: ${_nvcc_found}. "
    "Install a CUDA build of torch and a matching CUDA toolkit, or configure with -DCUSTOM_OPS_CUDA=OFF.")
else()  # AUTO without a CUDA torch or without nvcc
  set(CUSTOM_OPS_WITH_CUDA OFF)
endif()
if(NOT CUSTOM_OPS_WITH_CUDA)
  set(CUSTOM_OPS_CUDA_ARCHS "")
endif()
message(STATUS "custom-ops: CUDA kernels ${CUSTOM_OPS_WITH_CUDA} (torch CUDA: ${_torch_has_cuda}, nvcc: ${_nvcc_found})")
