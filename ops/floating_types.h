// SPDX-License-Identifier: BSD-3-Clause
// The dtypes the kernels compute in: one list for the argument checks and for every kernel's dtype
// dispatch, so adding a dtype is a one-line change.
#pragma once

#include <ATen/Dispatch.h>
#include <c10/core/ScalarType.h>

// AT_DISPATCH over float16, bfloat16, float32 and float64.
#define CUSTOM_OPS_DISPATCH_FLOATING_TYPES(dtype, name, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, name, __VA_ARGS__)

// The same over a TensorIterator's common dtype, the one its loops compute in.
#define CUSTOM_OPS_DISPATCH_ITER_FLOATING(iter, name, ...) \
  CUSTOM_OPS_DISPATCH_FLOATING_TYPES((iter).common_dtype(), name, __VA_ARGS__)

namespace custom::detail {

// Whether CUSTOM_OPS_DISPATCH_FLOATING_TYPES covers `dtype`.
constexpr bool is_supported_floating_type(c10::ScalarType dtype) {
  return dtype == c10::kHalf || dtype == c10::kBFloat16 || dtype == c10::kFloat || dtype == c10::kDouble;
}

}  // namespace custom::detail
