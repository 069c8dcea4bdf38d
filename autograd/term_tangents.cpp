#include "weighted_sum_tangents.h"

#include <ATen/ATen.h>

#include <custom_ops/weighted_sum.h>

#include "derivative_dtype.h"

namespace custom::autograd {

at::Tensor weighted_sum_tangent(
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& input_t,
    const at::Tensor& weight_t,
    at::ScalarType dtype) {
  const auto x = in_dtype(input, dtype);
  at::Tensor tangent;
  if (input_t.defined()) {
    tangent = 2 * in_dtype(weight, dtype) * x * in_dtype(input_t, dtype);
  }
  if (weight_t.defined()) {
    // input**2 weight_t is the op itself, fused.
    tangent = add_defined(tangent, custom::weighted_sum(x, in_dtype(weight_t, dtype)));
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
  const auto dtype = detail::result_dtype({grad, input, weight});
  const auto g = in_dtype(grad, dtype);
  const auto x = in_dtype(input, dtype);
  const auto w = in_dtype(weight, dtype);
  const auto g_t = in_dtype(grad_t, dtype);
  const auto x_t = in_dtype(input_t, dtype);
  const auto w_t = in_dtype(weight_t, dtype);
  at::Tensor grad_input_t;
  at::Tensor grad_weight_t;
  if (output_mask[0]) {
    // d(2 w x g) = 2 (w_t x g + w x_t g + w x g_t)
    if (w_t.defined()) grad_input_t = w_t * x * g;
    if (x_t.defined()) grad_input_t = add_defined(grad_input_t, w * x_t * g);
    if (g_t.defined()) grad_input_t = add_defined(grad_input_t, w * x * g_t);
    if (grad_input_t.defined()) grad_input_t = 2 * grad_input_t;
  }
  if (output_mask[1]) {
    // d(x^2 g) = 2 x x_t g + x^2 g_t
    if (x_t.defined()) grad_weight_t = 2 * x * x_t * g;
    if (g_t.defined()) grad_weight_t = add_defined(grad_weight_t, x.square() * g_t);
  }
  return {reduced_to(grad_input_t, input), reduced_to(grad_weight_t, weight)};
}

}  // namespace custom::autograd
