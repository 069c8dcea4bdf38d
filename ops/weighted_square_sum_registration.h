// Registers weighted_square_sum for one dispatch key, given that key's reduction loop.
#pragma once

#include "kernel_registration.h"
#include "weighted_square_sum_frontend.h"

namespace custom::detail {

template <const WeightedSquareSumLoops& Loops, typename DeviceGuard = NoDeviceGuard>
void register_weighted_square_sum_kernels(torch::Library& m) {
  register_kernel<DeviceGuard, Loops, &weighted_square_sum_impl>(m, "weighted_square_sum");
}

}  // namespace custom::detail
