// The device guard of every CUDA kernel registration (kernel_registration.h): kernels run on the
// device of their tensors, not whichever device is current.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>

namespace custom::cuda {

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(const at::Tensor& tensor)
      : guard_(tensor.is_cuda() ? std::make_optional(tensor.device()) : std::nullopt) {}

 private:
  c10::cuda::OptionalCUDAGuard guard_;
};

}  // namespace custom::cuda
