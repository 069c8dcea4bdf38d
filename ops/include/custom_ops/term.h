// SPDX-License-Identifier: BSD-3-Clause
// What an operator's term is: the one place its math is written. A term is a struct of six
// static functions of (x, w), each a template over the type it is evaluated in, which is
//   - the accumulation type on CPU and CUDA (float for float16/bfloat16/float32, double for
//     double): the device loops, the fused backward, the reductions;
//   - at::vec::Vectorized of it: the CPU's SIMD loops;
//   - at::Tensor: the derivatives of every order and the tangents (autograd/term_tensors.h).
// so its formulas are arithmetic (+ - * /) over x, w and number<T>(c), and calls of the functions
// of custom_ops/term_functions.h (fn::tanh(x), fn::pow(x, 1.5), ...):
//
//   value(x, w)   the operator's elementwise value, y = f(x, w)
//   dx(x, w)      df/dx                 dxx(x, w)   d2f/dx2
//   dw(x, w)      df/dw                 dxw(x, w)   d2f/dxdw
//                                       dww(x, w)   d2f/dw2
//   dw_reads_weight   whether dw depends on w (when not, the weight gradient's loop skips it)
//
// scripts/new_op.py writes a term from those six expressions; terms/weighted_square.h is one.
#pragma once

#include <c10/macros/Macros.h>

#include <custom_ops/term_functions.h>

namespace custom {

// A constant of a formula in the type it is evaluated in (a specialization makes it a wrapped
// number for at::Tensor, so it never changes a tensor's dtype).
template <typename T>
struct Number {
  C10_HOST_DEVICE static T make(double value) { return T(value); }
};

template <typename T>
C10_HOST_DEVICE T number(double value) {
  return Number<T>::make(value);
}

}  // namespace custom
