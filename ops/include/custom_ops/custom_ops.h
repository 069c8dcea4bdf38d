// SPDX-License-Identifier: BSD-3-Clause
// Public C++ API of the `custom` operator library: one set of functions per row of the operator
// table (custom_ops/operators.h), for weighted_sum, say:
//
//   at::Tensor weighted_sum(const at::Tensor& input, const at::Tensor& weight);
//   at::Tensor weighted_sum(const at::Tensor& input, const at::Scalar& weight);
//   at::Tensor& weighted_sum_out(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight);
//   at::Tensor& weighted_sum_(at::Tensor& self, const at::Tensor& weight);
//   std::tuple<at::Tensor, at::Tensor> weighted_sum_backward(grad, input, weight, output_mask);
//   at::Tensor weighted_square_sum(input, weight, dim = std::nullopt, keepdim = false, dtype = std::nullopt);
//
// Every function calls its operator through the PyTorch dispatcher, never a kernel, so autograd,
// vmap, tracing, Meta/fake tensors and whichever device kernel fits the arguments apply exactly as
// they do for Python callers of torch.ops.custom.*.
//
// Elementwise: value(input, weight) with broadcasting and type promotion, as the composite (for
// weighted_sum, `weight * input.square()`); float16/bfloat16 compute in float32 and round once;
// the result is laid out as the composite's (channels_last stays channels_last). A number as
// weight behaves like `input * 2.5` (aten::mul.Scalar): a float input keeps its dtype. `_out`
// resizes a wrong-shaped `out` with ATen's warning; `_` writes into self, which weight must
// broadcast to. The mutating functions return the tensor they wrote, ATen-style.
// Backward: (grad_input, grad_weight) = (grad * dx, grad * dw), each summed back to its
// argument's shape; a gradient whose output_mask entry is false is undefined.
// Reductions: `(value(input, weight)).sum(dim, keepdim, dtype=dtype)` in one pass, without the
// temporary; `dim` empty or absent reduces every dim; sums in float32 (float64 for float64),
// pairwise, in an order fixed by the shape and strides: the same bits on every run.
#pragma once

#include <array>
#include <optional>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <c10/util/OptionalArrayRef.h>

#include <custom_ops/export.h>
#include <custom_ops/operators.h>

namespace custom {

#define CUSTOM_OPS_DECLARE_BACKWARD(Term, backward)           \
  CUSTOM_OPS_API std::tuple<at::Tensor, at::Tensor> backward( \
      const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, std::array<bool, 2> output_mask);
CUSTOM_OPS_TERMS(CUSTOM_OPS_DECLARE_BACKWARD)
#undef CUSTOM_OPS_DECLARE_BACKWARD

#define CUSTOM_OPS_DECLARE_ELEMENTWISE(name, Term)                                                           \
  CUSTOM_OPS_API at::Tensor name(const at::Tensor& input, const at::Tensor& weight);                         \
  CUSTOM_OPS_API at::Tensor name(const at::Tensor& input, const at::Scalar& weight);                         \
  CUSTOM_OPS_API at::Tensor& name##_out(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight); \
  CUSTOM_OPS_API at::Tensor& name##_(at::Tensor& self, const at::Tensor& weight);
CUSTOM_OPS_ELEMENTWISE_OPERATORS(CUSTOM_OPS_DECLARE_ELEMENTWISE)
#undef CUSTOM_OPS_DECLARE_ELEMENTWISE

#define CUSTOM_OPS_DECLARE_REDUCTION(name, Term)                                                     \
  CUSTOM_OPS_API at::Tensor name(                                                                    \
      const at::Tensor& input, const at::Tensor& weight, at::OptionalIntArrayRef dim = std::nullopt, \
      bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt);
CUSTOM_OPS_REDUCTION_OPERATORS(CUSTOM_OPS_DECLARE_REDUCTION)
#undef CUSTOM_OPS_DECLARE_REDUCTION

}  // namespace custom
