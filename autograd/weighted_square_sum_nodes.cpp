#include "weighted_square_sum_nodes.h"

#include <array>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

#include <custom_ops/weighted_sum.h>

#include "compiled_autograd_call.h"

namespace custom::autograd {

using torch::autograd::variable_list;
using torch::dynamo::autograd::IValuePacker;
using torch::dynamo::autograd::PackedArgs;

at::Tensor broadcast_over_reduced(
    const at::Tensor& grad, c10::SymIntArrayRef shape, const std::vector<int64_t>& dim, bool keepdim) {
  auto expanded = grad;
  if (!keepdim) {
    const auto ndim = static_cast<int64_t>(shape.size());
    std::vector<bool> reduced(static_cast<size_t>(ndim), dim.empty());
    for (const auto d : dim) {
      if (ndim > 0) {
        reduced[static_cast<size_t>(at::maybe_wrap_dim(d, ndim))] = true;
      }
    }
    for (int64_t d = 0; d < ndim; ++d) {  // ascending: each lands at its own position
      if (reduced[static_cast<size_t>(d)]) {
        expanded = expanded.unsqueeze(d);
      }
    }
  }
  return expanded.expand_symint(shape);
}

namespace {

// (grad_input, grad_weight), as a function of the saved values only: both apply and compiled
// autograd run it. An undefined incoming grad means zeros: nothing to compute.
variable_list weighted_square_sum_gradients(
    const variable_list& grads,
    std::array<bool, 2> needed,
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::vector<int64_t>& dim,
    bool keepdim) {
  variable_list result(2);
  const auto& grad = grads[0];
  if (!grad.defined() || !(needed[0] || needed[1])) {
    return result;
  }
  const auto shape = at::infer_size_symdimvector(input.sym_sizes(), weight.sym_sizes());
  std::tie(result[0], result[1]) =
      custom::weighted_sum_backward(broadcast_over_reduced(grad, shape, dim, keepdim), input, weight, needed);
  return result;
}

variable_list weighted_square_sum_gradients_packed(const variable_list& grads, const std::vector<c10::IValue>& args) {
  PackedArgs packed(args);
  const auto needed = packed.unpack<std::array<bool, 2>>();
  const auto input = packed.unpack<at::Tensor>();
  const auto weight = packed.unpack<at::Tensor>();
  const auto dim = packed.unpack<std::vector<int64_t>>();
  const auto keepdim = packed.unpack<bool>();
  return weighted_square_sum_gradients(grads, needed, input, weight, dim, keepdim);
}

}  // namespace

variable_list WeightedSquareSumBackward0::apply(variable_list&& grads) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::array<bool, 2> needed = {task_should_compute_output(0), task_should_compute_output(1)};
  return weighted_square_sum_gradients(grads, needed, input_.unpack(), weight_.unpack(), dim_, keepdim_);
}

void WeightedSquareSumBackward0::compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const {
  args.collect(input_, /*is_output=*/false);
  args.collect(weight_, /*is_output=*/false);
  args.collect(dim_);
  args.collect(keepdim_);
}

variable_list WeightedSquareSumBackward0::apply_with_saved(
    const variable_list& grads, torch::dynamo::autograd::SwapSavedVariables& saved) {
  saved.before(input_);
  saved.before(weight_);
  PackedArgs packed;
  packed.pack(std::array<bool, 2>{task_should_compute_output(0), task_should_compute_output(1)});
  packed.pack(input_.unpack());
  packed.pack(weight_.unpack());
  packed.pack(dim_);
  packed.pack(keepdim_);
  static std::once_flag bound;
  const std::vector<at::TypePtr> schema = {
      IValuePacker<std::array<bool, 2>>::packed_type(), IValuePacker<at::Tensor>::packed_type(),
      IValuePacker<at::Tensor>::packed_type(), IValuePacker<std::vector<int64_t>>::packed_type(),
      IValuePacker<bool>::packed_type()};
  auto result = call_traced(*this, saved, grads, packed, bound, weighted_square_sum_gradients_packed, schema);
  saved.after(input_);
  saved.after(weight_);
  return result;
}

}  // namespace custom::autograd
