// SPDX-License-Identifier: BSD-3-Clause
// Every derivative formula of the library, from the term's partials evaluated on tensors: the
// backward operator's own backward (second order), and the forward-mode tangents of an operator
// and of its backward. They use dispatcher ops on primal values, so they are differentiable
// again: every order, grad of jvp, jvp of grad, hessians. Computed in the op-math type of the
// promoted dtype of their operands (float32 for float16 and bfloat16, as the kernels compute the
// term: a term of many operations would lose half precision at each) and rounded to each
// argument's dtype once, at the end (derivative_dtype.h).
#pragma once

#include <array>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <ATen/ScalarOps.h>
#include <torch/csrc/autograd/function.h>

#include <custom_ops/term.h>

#include "derivative_dtype.h"

namespace custom {

// A term's constant on tensors: a wrapped number, which promotes like a Python number (2 * x
// keeps x's dtype and device).
template <>
struct Number<at::Tensor> {
  static at::Tensor make(double value) { return at::native::wrapped_scalar_tensor(value); }
};

// The Tensor column of custom_ops/term_functions.h: a term's functions as dispatcher ops.
template <>
struct Functions<at::Tensor> {
#define CUSTOM_OPS_TENSOR_FUNCTION(name, f32, f64, vectorized, tensor) \
  static at::Tensor name(const at::Tensor& v) { return tensor; }
#define CUSTOM_OPS_TENSOR_FUNCTION_OF_A_CONSTANT(name, f32, f64, vectorized, tensor) \
  static at::Tensor name(const at::Tensor& v, double c) { return tensor; }
  CUSTOM_OPS_TERM_FUNCTIONS(CUSTOM_OPS_TENSOR_FUNCTION)
  CUSTOM_OPS_TERM_FUNCTIONS_OF_A_CONSTANT(CUSTOM_OPS_TENSOR_FUNCTION_OF_A_CONSTANT)
#undef CUSTOM_OPS_TENSOR_FUNCTION
#undef CUSTOM_OPS_TENSOR_FUNCTION_OF_A_CONSTANT
};

}  // namespace custom

namespace custom::autograd {

// An undefined factor (a zero gradient or tangent) makes the product undefined.
inline at::Tensor times_defined(const at::Tensor& factor, const at::Tensor& partial) {
  return factor.defined() ? factor * partial : at::Tensor();
}

// A term's partials at (x, w), each times a factor: undefined where the factor is (a zero gradient
// or tangent), and each partial computed only when a defined factor asks for it, at most once.
template <class Term>
class Partials {
 public:
  Partials(const at::Tensor& x, const at::Tensor& w) : x_(x), w_(w) {}
  at::Tensor dx(const at::Tensor& factor) {
    return times(factor, dx_, [&] { return Term::dx(x_, w_); });
  }
  at::Tensor dw(const at::Tensor& factor) {
    return times(factor, dw_, [&] { return Term::dw(x_, w_); });
  }
  at::Tensor dxx(const at::Tensor& factor) {
    return times(factor, dxx_, [&] { return Term::dxx(x_, w_); });
  }
  at::Tensor dxw(const at::Tensor& factor) {
    return times(factor, dxw_, [&] { return Term::dxw(x_, w_); });
  }
  at::Tensor dww(const at::Tensor& factor) {
    return times(factor, dww_, [&] { return Term::dww(x_, w_); });
  }

 private:
  template <class Compute>
  static at::Tensor times(const at::Tensor& factor, at::Tensor& partial, const Compute& compute) {
    if (!factor.defined()) {
      return {};
    }
    if (!partial.defined()) {
      partial = compute();
    }
    return factor * partial;
  }

  const at::Tensor& x_;
  const at::Tensor& w_;
  at::Tensor dx_, dw_, dxx_, dxw_, dww_;
};

// An operand as the kernels read it: converted to the promoted dtype, then widened to its op-math
// type (exact).
inline at::Tensor in_math(const at::Tensor& tensor, at::ScalarType dtype) {
  return in_dtype(in_dtype(tensor, dtype), at::toOpMathType(dtype));
}

// A term whose partial is a constant gives a product of one operand's shape only.
inline at::Tensor expanded_to(const at::Tensor& tensor, c10::SymIntArrayRef shape) {
  return !tensor.defined() || tensor.sym_sizes().equals(shape) ? tensor : tensor.expand_symint(shape);
}

// d value = dx x_t + dw w_t over the broadcast shape, in `dtype` (the forward result's promoted
// dtype); the caller rounds it to the result's dtype. At least one tangent is defined.
template <class Term>
at::Tensor term_tangent(
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& input_t,
    const at::Tensor& weight_t,
    at::ScalarType dtype) {
  const auto x = in_math(input, dtype);
  const auto w = in_math(weight, dtype);
  at::Tensor tangent;
  if (input_t.defined()) {
    tangent = Term::dx(x, w) * in_math(input_t, dtype);
  }
  if (weight_t.defined()) {
    tangent = add_defined(tangent, Term::dw(x, w) * in_math(weight_t, dtype));
  }
  return in_dtype(expanded_to(tangent, at::infer_size_symdimvector(input.sym_sizes(), weight.sym_sizes())), dtype);
}

// The backward operator (grad_input, grad_weight) = (sum_to(g dx), sum_to(g dw)) differentiated
// with respect to (grad, input, weight), given the gradients of its two outputs (undefined: zero),
// for the inputs `needed` asks for.
template <class Term>
torch::autograd::variable_list term_backward_gradients(
    const torch::autograd::variable_list& grads,
    std::array<bool, 3> needed,
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight) {
  const auto dtype = detail::result_dtype({grad, input, weight});
  const auto g = in_math(grad, dtype);
  const auto x = in_math(input, dtype);
  const auto w = in_math(weight, dtype);
  const auto gg_input = in_math(grads[0], dtype);
  const auto gg_weight = in_math(grads[1], dtype);
  at::Tensor d_grad;
  at::Tensor d_input;
  at::Tensor d_weight;
  Partials<Term> partials(x, w);
  if (needed[0]) {
    d_grad = add_defined(partials.dx(gg_input), partials.dw(gg_weight));
  }
  if (needed[1]) {
    d_input = times_defined(add_defined(partials.dxx(gg_input), partials.dxw(gg_weight)), g);
  }
  if (needed[2]) {
    d_weight = times_defined(add_defined(partials.dxw(gg_input), partials.dww(gg_weight)), g);
  }
  return {
      reduced_to(expanded_to(d_grad, grad.sym_sizes()), grad), reduced_to(d_input, input),
      reduced_to(d_weight, weight)};
}

// Tangents of the backward operator's outputs, for the outputs the mask asks for (undefined where
// it does not or the tangent is zero):
//   d(g dx) = g_t dx + g (dxx x_t + dxw w_t),   d(g dw) = g_t dw + g (dxw x_t + dww w_t).
template <class Term>
std::tuple<at::Tensor, at::Tensor> term_backward_tangents(
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& grad_t,
    const at::Tensor& input_t,
    const at::Tensor& weight_t,
    std::array<bool, 2> output_mask) {
  const auto dtype = detail::result_dtype({grad, input, weight});
  const auto g = in_math(grad, dtype);
  const auto x = in_math(input, dtype);
  const auto w = in_math(weight, dtype);
  const auto g_t = in_math(grad_t, dtype);
  const auto x_t = in_math(input_t, dtype);
  const auto w_t = in_math(weight_t, dtype);
  at::Tensor grad_input_t;
  at::Tensor grad_weight_t;
  Partials<Term> partials(x, w);
  if (output_mask[0]) {
    const auto by_inputs = add_defined(partials.dxx(x_t), partials.dxw(w_t));
    grad_input_t = add_defined(partials.dx(g_t), times_defined(by_inputs, g));
  }
  if (output_mask[1]) {
    const auto by_inputs = add_defined(partials.dxw(x_t), partials.dww(w_t));
    grad_weight_t = add_defined(partials.dw(g_t), times_defined(by_inputs, g));
  }
  return {reduced_to(grad_input_t, input), reduced_to(grad_weight_t, weight)};
}

}  // namespace custom::autograd
