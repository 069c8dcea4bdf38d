// SPDX-License-Identifier: BSD-3-Clause
// The functions a term may call, fn::NAME(e) (and fn::pow(e, c) for a constant c): one row each,
// saying how it is computed on every type a term is evaluated in (custom_ops/term.h):
//
//   float, double   the kernels' op-math scalars, on the CPU and in CUDA device code: the C
//                   library's single or double function (CUDA's libm on the GPU), as ATen's
//                   kernels compute it, so float16 and bfloat16 compute in float and round once;
//   Vectorized      at::vec::Vectorized<float or double>: the CPU's SIMD loops (Sleef), as ATen's;
//   Tensor          at::Tensor: the derivatives and tangents, through dispatcher ops, so they are
//                   differentiable again.
//
// The Python side of each row (its derivative, its torch and ONNX forms, its documented error) is
// the row of the same name in python/custom_ops/_operators.py, FUNCTIONS; a test checks that the
// two tables name the same functions. Each column is expanded only where its type is available
// (the Vectorized one in kernels/cpu/vectorized_term_functions.h, the Tensor one in
// autograd/term_derivatives.h), so CUDA code never sees at::vec nor at::Tensor code.
//
// ATen's conventions where a function is not differentiable or not defined: sign(0) = 0 (abs's
// derivative), step(0) = 0 and step(nan) = 1 (relu's derivative: its backward passes the gradient
// of a nan input), relu(nan) = nan; outside a function's domain the result is nan or inf, as
// ATen's, never an error.
#pragma once

#include <cmath>

#include <c10/macros/Macros.h>

// clang-format off
// X(name, float, double, Vectorized (of V = at::vec::Vectorized<S>), at::Tensor), over v.
#define CUSTOM_OPS_TERM_FUNCTIONS(X)                                                                          \
  X(exp,     ::expf(v),                       ::exp(v),                     v.exp(),     at::exp(v))          \
  X(log,     ::logf(v),                       ::log(v),                     v.log(),     at::log(v))          \
  X(log1p,   ::log1pf(v),                     ::log1p(v),                   v.log1p(),   at::log1p(v))        \
  X(expm1,   ::expm1f(v),                     ::expm1(v),                   v.expm1(),   at::expm1(v))        \
  X(sqrt,    ::sqrtf(v),                      ::sqrt(v),                    v.sqrt(),    at::sqrt(v))         \
  X(rsqrt,   1.0F / ::sqrtf(v),               1.0 / ::sqrt(v),              v.rsqrt(),   at::rsqrt(v))        \
  X(tanh,    ::tanhf(v),                      ::tanh(v),                    v.tanh(),    at::tanh(v))         \
  X(sigmoid, 1.0F / (1.0F + ::expf(-v)),      1.0 / (1.0 + ::exp(-v)),                                        \
             (V(S(1)) + v.neg().exp()).reciprocal(),                                     at::sigmoid(v))      \
  X(erf,     ::erff(v),                       ::erf(v),                     vectorized_erf(v), at::erf(v))    \
  X(sin,     ::sinf(v),                       ::sin(v),                     v.sin(),     at::sin(v))          \
  X(cos,     ::cosf(v),                       ::cos(v),                     v.cos(),     at::cos(v))          \
  X(abs,     ::fabsf(v),                      ::fabs(v),                    v.abs(),     at::abs(v))          \
  X(relu,    v < 0.0F ? 0.0F : v,             v < 0.0 ? 0.0 : v,                                              \
             at::vec::clamp_min(v, V(S(0))),                                             at::relu(v))         \
  X(sign,    float((0.0F < v) - (v < 0.0F)),  double((0.0 < v) - (v < 0.0)),                                  \
             v.gt(V(S(0))) - v.lt(V(S(0))),                                              at::sign(v))         \
  X(step,    v <= 0.0F ? 0.0F : 1.0F,         v <= 0.0 ? 0.0 : 1.0,                                           \
             V(S(1)) - v.le(V(S(0))),                      at::logical_not(at::le(v, 0)).to(v.scalar_type()))
// The one function of a constant c besides e, with the same columns. ATen's pow(tensor, number)
// computes six exponents as other functions (x * x, sqrt, ...), whose results differ from pow's
// where pow(-inf, 0.5) is inf and sqrt(-inf) nan; so does this row, for the composite's results.
#define CUSTOM_OPS_POW_AS_ATEN(one, root, other)                                                              \
  (c == 2.0 ? v * v : c == 3.0 ? v * v * v : c == 0.5 ? (root) : c == -0.5 ? (one) / (root)                  \
   : c == -1.0 ? (one) / v : c == -2.0 ? (one) / (v * v) : (other))
#define CUSTOM_OPS_TERM_FUNCTIONS_OF_A_CONSTANT(X)                                                            \
  X(pow,     CUSTOM_OPS_POW_AS_ATEN(1.0F, ::sqrtf(v), ::powf(v, static_cast<float>(c))),                     \
             CUSTOM_OPS_POW_AS_ATEN(1.0, ::sqrt(v), ::pow(v, c)),                                              \
             CUSTOM_OPS_POW_AS_ATEN(V(S(1)), v.sqrt(), v.pow(V(static_cast<S>(c)))),                           \
                                                                                          at::pow(v, c))
// clang-format on

namespace custom {

// How each function is computed on T: specialized for every type a term is evaluated in.
template <typename T>
struct Functions;

#define CUSTOM_OPS_SCALAR_FUNCTION(name, f32, f64, vectorized, tensor) \
  C10_HOST_DEVICE static float name(float v) {                         \
    return f32;                                                        \
  }                                                                    \
  C10_HOST_DEVICE static double name(double v) {                       \
    return f64;                                                        \
  }
#define CUSTOM_OPS_SCALAR_FUNCTION_OF_A_CONSTANT(name, f32, f64, vectorized, tensor) \
  C10_HOST_DEVICE static float name(float v, double c) {                             \
    return f32;                                                                      \
  }                                                                                  \
  C10_HOST_DEVICE static double name(double v, double c) {                           \
    return f64;                                                                      \
  }

struct ScalarFunctions {
  CUSTOM_OPS_TERM_FUNCTIONS(CUSTOM_OPS_SCALAR_FUNCTION)
  CUSTOM_OPS_TERM_FUNCTIONS_OF_A_CONSTANT(CUSTOM_OPS_SCALAR_FUNCTION_OF_A_CONSTANT)
};
#undef CUSTOM_OPS_SCALAR_FUNCTION
#undef CUSTOM_OPS_SCALAR_FUNCTION_OF_A_CONSTANT

template <>
struct Functions<float> : ScalarFunctions {};
template <>
struct Functions<double> : ScalarFunctions {};

// What a term calls: fn::tanh(x) is Functions<T>::tanh(x) for whichever T it is evaluated in.
namespace fn {
#define CUSTOM_OPS_FUNCTION_ENTRY(name, ...) \
  template <typename T>                      \
  C10_HOST_DEVICE T name(const T& v) {       \
    return Functions<T>::name(v);            \
  }
#define CUSTOM_OPS_FUNCTION_OF_A_CONSTANT_ENTRY(name, ...) \
  template <typename T>                                    \
  C10_HOST_DEVICE T name(const T& v, double c) {           \
    return Functions<T>::name(v, c);                       \
  }
CUSTOM_OPS_TERM_FUNCTIONS(CUSTOM_OPS_FUNCTION_ENTRY)
CUSTOM_OPS_TERM_FUNCTIONS_OF_A_CONSTANT(CUSTOM_OPS_FUNCTION_OF_A_CONSTANT_ENTRY)
#undef CUSTOM_OPS_FUNCTION_ENTRY
#undef CUSTOM_OPS_FUNCTION_OF_A_CONSTANT_ENTRY
}  // namespace fn

}  // namespace custom
