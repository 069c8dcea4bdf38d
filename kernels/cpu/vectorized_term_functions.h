// SPDX-License-Identifier: BSD-3-Clause
// The Vectorized column of custom_ops/term_functions.h: how a term's functions are computed in
// the CPU's SIMD loops (at::vec::Vectorized<float> and <double>, Sleef where ATen uses it). Every
// CPU kernel that evaluates a term on vectors includes it.
#pragma once

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <type_traits>

#include <custom_ops/term_functions.h>

namespace custom {

// ATen's Vectorized<float>::erf (AVX2, AVX-512) is a polynomial good to about 1.5e-7 absolute:
// hundreds of ulps near 0, where a GELU evaluates it. torch.erf is within an ulp (MKL's or
// Sleef's), so float vectors call Sleef's 1-ulp erf, which ATen's own vectors compile in (as its
// Vectorized<double>::erf does); other instruction sets keep ATen's (std::erf per lane).
template <typename S>
at::vec::Vectorized<S> vectorized_erf(const at::vec::Vectorized<S>& v) {
#if defined(CPU_CAPABILITY_AVX512) && !defined(_MSC_VER)
  if constexpr (std::is_same_v<S, float>) {
    return Sleef_erff16_u10(v);
  }
#elif defined(CPU_CAPABILITY_AVX2) && !defined(_MSC_VER)
  if constexpr (std::is_same_v<S, float>) {
    return Sleef_erff8_u10(v);
  }
#endif
  return v.erf();
}

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
