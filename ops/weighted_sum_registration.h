// Registers every overload of the weighted square for one dispatch key, given that key's loops.
// Each key's kernel file is then only its arithmetic plus one line of registration, and the
// four overloads cannot drift apart between CPU, CUDA and Meta.
#pragma once

#include <torch/library.h>

#include "weighted_sum_frontend.h"

namespace custom::detail {

// For keys with no device to select (CPU, Meta).
struct NoDeviceGuard {
  explicit NoDeviceGuard(const at::Tensor& /*unused*/) {}
};

template <const WeightedSumLoops& Loops, typename DeviceGuard = NoDeviceGuard>
void register_weighted_sum_kernels(torch::Library& m) {
  m.impl("weighted_sum", [](const at::Tensor& input, const at::Tensor& weight) {
    DeviceGuard guard(input);
    return weighted_sum_impl(input, weight, Loops);
  });
  m.impl("weighted_sum.out", [](const at::Tensor& input, const at::Tensor& weight, const at::Tensor& out) {
    DeviceGuard guard(input);
    weighted_sum_out_impl(input, weight, out, Loops);
  });
  m.impl("weighted_sum_", [](const at::Tensor& self, const at::Tensor& weight) {
    DeviceGuard guard(self);
    weighted_sum_inplace_impl(self, weight, Loops);
  });
  m.impl(
      "weighted_sum_backward",
      [](const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, std::array<bool, 2> mask) {
        DeviceGuard guard(input);
        return weighted_sum_backward_impl(grad, input, weight, mask, Loops);
      });
}

}  // namespace custom::detail
