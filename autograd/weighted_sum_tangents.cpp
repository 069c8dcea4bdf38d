#include "weighted_sum_tangents.h"

#include <ATen/ATen.h>

#include <custom_ops/weighted_sum.h>

namespace custom::autograd {

namespace {

at::Tensor add_defined(const at::Tensor& sum, const at::Tensor& term) {
  return sum.defined() ? sum + term : term;
}

at::Tensor reduced_to(const at::Tensor& tangent, const at::Tensor& like) {
  return tangent.defined() ? at::sum_to(tangent, like.sym_sizes()).to(like.scalar_type()) : tangent;
}

}  // namespace

at::Tensor weighted_sum_tangent(
    const at::Tensor& input, const at::Tensor& weight, const at::Tensor& input_t, const at::Tensor& weight_t) {
  at::Tensor tangent;
  if (input_t.defined()) {
    tangent = 2 * weight * input * input_t;
  }
  if (weight_t.defined()) {
    // input**2 weight_t is the op itself, fused.
    tangent = add_defined(tangent, custom::weighted_sum(input, weight_t));
  }
  return tangent;
}

std::tuple<at::Tensor, at::Tensor> weighted_sum_backward_tangents(
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& grad_t,
    const at::Tensor& input_t,
    const at::Tensor& weight_t,
    std::array<bool, 2> output_mask) {
  at::Tensor grad_input_t;
  at::Tensor grad_weight_t;
  if (output_mask[0]) {
    // d(2 w x g) = 2 (w_t x g + w x_t g + w x g_t)
    if (weight_t.defined()) grad_input_t = weight_t * input * grad;
    if (input_t.defined()) grad_input_t = add_defined(grad_input_t, weight * input_t * grad);
    if (grad_t.defined()) grad_input_t = add_defined(grad_input_t, weight * input * grad_t);
    if (grad_input_t.defined()) grad_input_t = 2 * grad_input_t;
  }
  if (output_mask[1]) {
    // d(x^2 g) = 2 x x_t g + x^2 g_t
    if (input_t.defined()) grad_weight_t = 2 * input * input_t * grad;
    if (grad_t.defined()) grad_weight_t = add_defined(grad_weight_t, input.square() * grad_t);
  }
  return {reduced_to(grad_input_t, input), reduced_to(grad_weight_t, weight)};
}

}  // namespace custom::autograd
