// Typed dispatcher handles of the weighted-square operators, each looked up once per process.
// The public C++ API (weighted_sum.cpp) calls them; the autograd kernels and batching rules
// redispatch through them below their own key.
#pragma once

#include <array>
#include <tuple>

#include <ATen/core/Tensor.h>

#include "find_operator.h"

namespace custom::detail {

inline const auto& weighted_sum_handle() {
  static const auto op = find_operator<at::Tensor(const at::Tensor&, const at::Tensor&)>("custom::weighted_sum", "");
  return op;
}

inline const auto& weighted_sum_scalar_handle() {
  static const auto op =
      find_operator<at::Tensor(const at::Tensor&, const at::Scalar&)>("custom::weighted_sum", "Scalar");
  return op;
}

inline const auto& weighted_sum_out_handle() {
  static const auto op =
      find_operator<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>("custom::weighted_sum", "out");
  return op;
}

inline const auto& weighted_sum_inplace_handle() {
  static const auto op = find_operator<void(const at::Tensor&, const at::Tensor&)>("custom::weighted_sum_", "");
  return op;
}

inline const auto& weighted_sum_backward_handle() {
  static const auto op = find_operator<std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, std::array<bool, 2>)>(
      "custom::weighted_sum_backward", "");
  return op;
}

}  // namespace custom::detail
