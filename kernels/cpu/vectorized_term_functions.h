// SPDX-License-Identifier: BSD-3-Clause
// The Vectorized column of custom_ops/term_functions.h: how a term's functions are computed in
// the CPU's SIMD loops (at::vec::Vectorized<float> and <double>, Sleef where ATen uses it). Every
// CPU kernel that evaluates a term on vectors includes it.
#pragma once

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <custom_ops/term_functions.h>

namespace custom {

template <typename S>
struct Functions<at::vec::Vectorized<S>> {
  using V = at::vec::Vectorized<S>;
#define CUSTOM_OPS_VECTORIZED_FUNCTION(name, f32, f64, vectorized, tensor) \
  static V name(const V& v) { return vectorized; }
#define CUSTOM_OPS_VECTORIZED_FUNCTION_OF_A_CONSTANT(name, f32, f64, vectorized, tensor) \
  static V name(const V& v, double c) { return vectorized; }
  CUSTOM_OPS_TERM_FUNCTIONS(CUSTOM_OPS_VECTORIZED_FUNCTION)
  CUSTOM_OPS_TERM_FUNCTIONS_OF_A_CONSTANT(CUSTOM_OPS_VECTORIZED_FUNCTION_OF_A_CONSTANT)
#undef CUSTOM_OPS_VECTORIZED_FUNCTION
#undef CUSTOM_OPS_VECTORIZED_FUNCTION_OF_A_CONSTANT
};

}  // namespace custom
