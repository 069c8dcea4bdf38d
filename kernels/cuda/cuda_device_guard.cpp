// SPDX-License-Identifier: BSD-3-Clause
// The first kernel call on each device checks that the library was built for it: a GPU left out of
// TORCH_CUDA_ARCH_LIST would otherwise fail with CUDA's "no kernel image is available".
#include "kernels/cuda/cuda_device_guard.h"

#include <array>
#include <mutex>

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include "kernels/cuda/architecture_coverage.h"

namespace custom::cuda {

void warn_once_if_not_built_for(c10::DeviceIndex device) {
  static std::array<std::once_flag, C10_COMPILE_TIME_MAX_GPUS> checked;
  std::call_once(checked.at(device), [device] {
    const cudaDeviceProp* properties = at::cuda::getDeviceProperties(device);
    if (!architectures_cover(CUSTOM_OPS_CUDA_ARCHS, properties->major, properties->minor)) {
      TORCH_WARN(
          "custom-ops: libcustom_ops.so has no kernels for cuda:", static_cast<int>(device), " (", properties->name,
          ", compute capability ", properties->major, ".", properties->minor,
          "): it was built with TORCH_CUDA_ARCH_LIST=\"", CUSTOM_OPS_CUDA_ARCHS,
          "\". Rebuild it with TORCH_CUDA_ARCH_LIST=\"", properties->major, ".", properties->minor,
          "\" in the environment (make install, pip install .).");
    }
  });
}

}  // namespace custom::cuda
