// SPDX-License-Identifier: BSD-3-Clause
// The device guard of every CUDA kernel registration (kernel_registration.h): kernels run on the
// device of their tensors, not whichever device is current, and the first call on a device warns
// if the library has no kernels for it.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>

namespace custom::cuda {

void warn_once_if_not_built_for(c10::DeviceIndex device);

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(const at::Tensor& tensor)
      : guard_(tensor.is_cuda() ? std::make_optional(tensor.device()) : std::nullopt) {
    if (tensor.is_cuda()) {
      warn_once_if_not_built_for(tensor.device().index());
    }
  }

 private:
  c10::cuda::OptionalCUDAGuard guard_;
};

}  // namespace custom::cuda
