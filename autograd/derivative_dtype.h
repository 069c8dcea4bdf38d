// SPDX-License-Identifier: BSD-3-Clause
// The dtype every derivative formula of the `custom` ops computes in: that of the forward's
// promoted result (float64 for a float32 input and a float64 weight), each operand converted to it
// first and each gradient or tangent rounded to its argument's dtype once, at the end, as ATen's
// derivatives of `mul` do. An operand or intermediate rounded to a narrower dtype on the way
// (x.square() of a float32 x) would cost a float64 result its precision.
#pragma once

#include <ATen/ATen.h>

#include "ops/operand_checks.h"  // detail::result_dtype: the promoted dtype, as in the forward

namespace custom::autograd {

// `tensor` in `dtype`: itself, with no copy and no dispatcher call, when it has it or is undefined.
inline at::Tensor in_dtype(const at::Tensor& tensor, at::ScalarType dtype) {
  return !tensor.defined() || tensor.scalar_type() == dtype ? tensor : tensor.to(dtype);
}

// An undefined gradient or tangent term is zero.
inline at::Tensor add_defined(const at::Tensor& sum, const at::Tensor& term) {
  if (!sum.defined() || !term.defined()) {
    return sum.defined() ? sum : term;
  }
  return sum + term;
}

// Terms over the broadcast shape, summed to `like`'s shape in their dtype, then rounded to `like`'s.
inline at::Tensor reduced_to(const at::Tensor& terms, const at::Tensor& like) {
  return terms.defined() ? in_dtype(at::sum_to(terms, like.sym_sizes()), like.scalar_type()) : terms;
}

}  // namespace custom::autograd
