// The typed dispatcher handle of weighted_square_sum, looked up once per process: the public C++
// API calls it; the autograd kernel and the batching rule redispatch through it.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/util/OptionalArrayRef.h>

#include "find_operator.h"

namespace custom::detail {

inline const auto& weighted_square_sum_handle() {
  static const auto op = find_operator<at::Tensor(
      const at::Tensor&, const at::Tensor&, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>)>(
      "custom::weighted_square_sum", "");
  return op;
}

}  // namespace custom::detail
