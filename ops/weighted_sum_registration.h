// Registers every overload of the weighted square for one dispatch key, given that key's loops:
// the four overloads cannot drift apart between CPU, CUDA and Meta.
#pragma once

#include "kernel_registration.h"
#include "weighted_sum_frontend.h"

namespace custom::detail {

template <const WeightedSumLoops& Loops, typename DeviceGuard = NoDeviceGuard>
void register_weighted_sum_kernels(torch::Library& m) {
  register_kernel<DeviceGuard, Loops, &weighted_sum_impl>(m, "weighted_sum");
  register_kernel<DeviceGuard, Loops, &weighted_sum_out_impl>(m, "weighted_sum.out");
  register_kernel<DeviceGuard, Loops, &weighted_sum_inplace_impl>(m, "weighted_sum_");
  register_kernel<DeviceGuard, Loops, &weighted_sum_backward_impl>(m, "weighted_sum_backward");
}

}  // namespace custom::detail
