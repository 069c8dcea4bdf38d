// Forward-mode derivatives (tangents) of the `custom` ops, computed with dispatcher ops on primal
// values, so they are differentiable again (grad of jvp, jvp of grad, hessian). An undefined
// tangent means zero; at least one is defined.
#pragma once

#include <array>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace custom::autograd {

// d(weight * input**2) = 2 weight input input_t + input**2 weight_t, broadcast, computed in `dtype`
// (the forward's promoted result's: derivative_dtype.h); the caller rounds it to the result's dtype.
at::Tensor weighted_sum_tangent(
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& input_t,
    const at::Tensor& weight_t,
    at::ScalarType dtype);

// d of (grad_input, grad_weight) = (sum_to(2 weight input grad), sum_to(input**2 grad)), for the
// outputs the mask asks for; undefined where the mask is false or the tangent is zero. Computed
// in the promoted dtype of grad, input and weight, rounded to input's and weight's at the end.
std::tuple<at::Tensor, at::Tensor> weighted_sum_backward_tangents(
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    const at::Tensor& grad_t,
    const at::Tensor& input_t,
    const at::Tensor& weight_t,
    std::array<bool, 2> output_mask);

}  // namespace custom::autograd
