#include "weighted_sum_nodes.h"

#include <array>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

#include <custom_ops/weighted_sum.h>

#include "compiled_autograd_call.h"
#include "derivative_dtype.h"

namespace custom::autograd {

namespace {

using torch::dynamo::autograd::IValuePacker;
using torch::dynamo::autograd::PackedArgs;

// The backward formulas, as functions of the saved values only: both the node's apply and
// compiled autograd (which calls them on the traced graph's tensors) run them.

// (grad_input, grad_weight) of y = weight * input**2, by the fused backward operator. An
// undefined incoming grad means zeros: nothing to compute.
variable_list weighted_sum_gradients(
    const variable_list& grads, std::array<bool, 2> needed, const at::Tensor& input, const at::Tensor& weight) {
  variable_list result(2);
  const auto& grad = grads[0];
  if (!grad.defined() || !(needed[0] || needed[1])) {
    return result;
  }
  std::tie(result[0], result[1]) = custom::weighted_sum_backward(grad, input, weight, needed);
  return result;
}

// Differentiates (grad_input, grad_weight) = (sum_to(2 w x g), sum_to(x^2 g)) with plain ATen
// ops, which are differentiable again, so every higher order works too; in the promoted dtype of
// grad, input and weight (derivative_dtype.h).
variable_list weighted_sum_backward_gradients(
    const variable_list& grads,
    std::array<bool, 3> needed,
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight) {
  const auto dtype = promoted_dtype({grad, input, weight});
  const auto g = in_dtype(grad, dtype);
  const auto x = in_dtype(input, dtype);
  const auto w = in_dtype(weight, dtype);
  const auto grad_grad_input = in_dtype(grads[0], dtype);
  const auto grad_grad_weight = in_dtype(grads[1], dtype);
  at::Tensor d_grad;
  at::Tensor d_input;
  at::Tensor d_weight;
  if (grad_grad_input.defined()) {
    const auto two_ggi = 2 * grad_grad_input;
    if (needed[0]) d_grad = two_ggi * w * x;
    if (needed[1]) d_input = two_ggi * w * g;
    if (needed[2]) d_weight = two_ggi * x * g;
  }
  if (grad_grad_weight.defined()) {
    if (needed[0]) d_grad = add_defined(d_grad, grad_grad_weight * x.square());
    if (needed[1]) d_input = add_defined(d_input, 2 * grad_grad_weight * x * g);
  }
  return {reduced_to(d_grad, grad), reduced_to(d_input, input), reduced_to(d_weight, weight)};
}

variable_list weighted_sum_gradients_packed(const variable_list& grads, const std::vector<c10::IValue>& args) {
  PackedArgs packed(args);
  const auto needed = packed.unpack<std::array<bool, 2>>();
  const auto input = packed.unpack<at::Tensor>();
  const auto weight = packed.unpack<at::Tensor>();
  return weighted_sum_gradients(grads, needed, input, weight);
}

variable_list weighted_sum_backward_gradients_packed(const variable_list& grads, const std::vector<c10::IValue>& args) {
  PackedArgs packed(args);
  const auto needed = packed.unpack<std::array<bool, 3>>();
  const auto grad = packed.unpack<at::Tensor>();
  const auto input = packed.unpack<at::Tensor>();
  const auto weight = packed.unpack<at::Tensor>();
  return weighted_sum_backward_gradients(grads, needed, grad, input, weight);
}

}  // namespace

variable_list WeightedSumBackward0::apply(variable_list&& grads) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::array<bool, 2> needed = {task_should_compute_output(0), task_should_compute_output(1)};
  return weighted_sum_gradients(grads, needed, input_.unpack(), weight_.unpack());
}

void WeightedSumBackward0::compiled_args(CompiledNodeArgs& args) const {
  args.collect(input_, /*is_output=*/false);
  args.collect(weight_, /*is_output=*/false);
}

variable_list WeightedSumBackward0::apply_with_saved(const variable_list& grads, SwapSavedVariables& saved) {
  saved.before(input_);
  saved.before(weight_);
  PackedArgs packed;
  packed.pack(std::array<bool, 2>{task_should_compute_output(0), task_should_compute_output(1)});
  packed.pack(input_.unpack());
  packed.pack(weight_.unpack());
  static std::once_flag bound;
  const std::vector<at::TypePtr> schema = {
      IValuePacker<std::array<bool, 2>>::packed_type(), IValuePacker<at::Tensor>::packed_type(),
      IValuePacker<at::Tensor>::packed_type()};
  auto result = call_traced(*this, saved, grads, packed, bound, weighted_sum_gradients_packed, schema);
  saved.after(input_);
  saved.after(weight_);
  return result;
}

variable_list WeightedSumBackwardBackward0::apply(variable_list&& grads) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::array<bool, 3> needed = {
      task_should_compute_output(0), task_should_compute_output(1), task_should_compute_output(2)};
  return weighted_sum_backward_gradients(grads, needed, grad_.unpack(), input_.unpack(), weight_.unpack());
}

void WeightedSumBackwardBackward0::compiled_args(CompiledNodeArgs& args) const {
  args.collect(grad_, /*is_output=*/false);
  args.collect(input_, /*is_output=*/false);
  args.collect(weight_, /*is_output=*/false);
}

variable_list WeightedSumBackwardBackward0::apply_with_saved(const variable_list& grads, SwapSavedVariables& saved) {
  saved.before(grad_);
  saved.before(input_);
  saved.before(weight_);
  PackedArgs packed;
  packed.pack(
      std::array<bool, 3>{task_should_compute_output(0), task_should_compute_output(1), task_should_compute_output(2)});
  packed.pack(grad_.unpack());
  packed.pack(input_.unpack());
  packed.pack(weight_.unpack());
  static std::once_flag bound;
  const std::vector<at::TypePtr> schema = {
      IValuePacker<std::array<bool, 3>>::packed_type(), IValuePacker<at::Tensor>::packed_type(),
      IValuePacker<at::Tensor>::packed_type(), IValuePacker<at::Tensor>::packed_type()};
  auto result = call_traced(*this, saved, grads, packed, bound, weighted_sum_backward_gradients_packed, schema);
  saved.after(grad_);
  saved.after(input_);
  saved.after(weight_);
  return result;
}

}  // namespace custom::autograd
