// SPDX-License-Identifier: BSD-3-Clause
// The Autograd kernel of every reduction of the operator table, with the elementwise operators'
// mechanism (elementwise_autograd.cpp): the result from a redispatch below autograd, then a graph
// node for reverse mode and the tangent for forward mode. The node's backward is the term's
// backward operator on the broadcast grad, so a reduction inherits the fused backward and its
// derivatives of every order.
#include <array>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/dynamo/compiled_autograd.h>
#include <torch/library.h>

#include "compiled_autograd_call.h"
#include "derivative_dtype.h"
#include "dual_tensors.h"
#include "node_pointer.h"
#include "ops/handles.h"
#include "ops/operator_rows.h"
#include "term_derivatives.h"

namespace custom::autograd {

// Backward of y = sum(value(input, weight), dim_, keepdim_): the grad broadcast back over the
// reduced dims, then the term's backward operator, so the reduction's backward is the fused
// elementwise one (and every higher order with it). Next edges: input, weight.
template <class Row>
struct ReductionBackward0 : torch::autograd::TraceableFunction {
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override;
  std::string name() const override { return node_name(Row::schema_name); }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    input_.reset_data();
    weight_.reset_data();
  }
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override;
  torch::autograd::variable_list apply_with_saved(
      const torch::autograd::variable_list& grads, torch::dynamo::autograd::SwapSavedVariables& saved) override;

  torch::autograd::SavedVariable input_;
  torch::autograd::SavedVariable weight_;
  std::vector<int64_t> dim_;  // as given; empty: every dim
  bool keepdim_ = false;
};

using torch::autograd::variable_list;
using torch::dynamo::autograd::IValuePacker;
using torch::dynamo::autograd::PackedArgs;

namespace {

// The grad of a reduction's result, broadcast to the shape of its terms: reduced dims put back
// (when keepdim was false) and expanded. No copy.
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

// (grad_input, grad_weight), as a function of the saved values only: both apply and compiled
// autograd run it. An undefined incoming grad means zeros: nothing to compute.
template <class Term>
variable_list reduction_gradients(
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
  std::tie(result[0], result[1]) = detail::backward_handle<rows::BackwardOf<Term>>().call(
      broadcast_over_reduced(grad, shape, dim, keepdim), input, weight, needed);
  return result;
}

template <class Term>
variable_list reduction_gradients_packed(const variable_list& grads, const std::vector<c10::IValue>& args) {
  PackedArgs packed(args);
  const auto needed = packed.unpack<std::array<bool, 2>>();
  const auto input = packed.unpack<at::Tensor>();
  const auto weight = packed.unpack<at::Tensor>();
  const auto dim = packed.unpack<std::vector<int64_t>>();
  const auto keepdim = packed.unpack<bool>();
  return reduction_gradients<Term>(grads, needed, input, weight, dim, keepdim);
}

}  // namespace

template <class Row>
variable_list ReductionBackward0<Row>::apply(variable_list&& grads) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::array<bool, 2> needed = {task_should_compute_output(0), task_should_compute_output(1)};
  return reduction_gradients<typename Row::Term>(grads, needed, input_.unpack(), weight_.unpack(), dim_, keepdim_);
}

template <class Row>
void ReductionBackward0<Row>::compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const {
  args.collect(input_, /*is_output=*/false);
  args.collect(weight_, /*is_output=*/false);
  args.collect(dim_);
  args.collect(keepdim_);
}

template <class Row>
variable_list ReductionBackward0<Row>::apply_with_saved(
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
  auto result = call_traced(*this, saved, grads, packed, bound, reduction_gradients_packed<typename Row::Term>, schema);
  saved.after(input_);
  saved.after(weight_);
  return result;
}

namespace {

using torch::autograd::collect_next_edges;
using torch::autograd::compute_requires_grad;
using torch::autograd::isFwGradDefined;
using torch::autograd::SavedVariable;

template <class Row>
at::Tensor reduction_autograd(
    c10::DispatchKeySet keys,
    const at::Tensor& input,
    const at::Tensor& weight,
    at::OptionalIntArrayRef dim,
    bool keepdim,
    std::optional<at::ScalarType> dtype) {
  const bool dense = all_dense({input, weight});
  const bool requires_grad = dense && compute_requires_grad(input, weight);
  const bool has_tangents = dense && (isFwGradDefined(input) || isFwGradDefined(weight));
  auto result = [&] {
    at::AutoDispatchBelowADInplaceOrView guard;
    return detail::reduction_handle<Row>().redispatch(
        keys & c10::after_autograd_keyset, input, weight, dim, keepdim, dtype);
  }();
  const auto dims = dim.has_value() ? dim->vec() : std::vector<int64_t>{};
  if (requires_grad) {
    auto grad_fn = make_node<ReductionBackward0<Row>>();
    grad_fn->set_next_edges(collect_next_edges(input, weight));
    grad_fn->input_ = SavedVariable(input, /*is_output=*/false);
    grad_fn->weight_ = SavedVariable(weight, /*is_output=*/false);
    grad_fn->dim_ = dims;
    grad_fn->keepdim_ = keepdim;
    torch::autograd::set_history(result, grad_fn);
    node_attached(grad_fn);
  }
  if (has_tangents) {
    // The sum of the term's tangent over the same dims, in the dtype the forward sums
    // in (the promoted operands', or a wider dtype=), rounded to the result's once.
    const auto input_p = primal_of(input);
    const auto weight_p = primal_of(weight);
    const auto terms = term_tangent<typename Row::Term>(
        input_p, weight_p, tangent_of(input), tangent_of(weight),
        c10::promoteTypes(detail::result_dtype({input_p, weight_p}), result.scalar_type()));
    const auto tangent = in_dtype(dims.empty() ? terms.sum() : terms.sum(dims, keepdim), result.scalar_type());
    result._set_fw_grad(
        dims.empty() && keepdim ? tangent.view_symint(result.sym_sizes()) : tangent, /*level=*/0,
        /*is_inplace_op=*/false);
  }
  return result;
}

}  // namespace

TORCH_LIBRARY_IMPL(custom, Autograd, m) {
#define CUSTOM_OPS_REGISTER_REDUCTION(name_, Term_) m.impl(#name_, TORCH_FN(reduction_autograd<rows::name_>));
  CUSTOM_OPS_REDUCTION_OPERATORS(CUSTOM_OPS_REGISTER_REDUCTION)
#undef CUSTOM_OPS_REGISTER_REDUCTION
}

}  // namespace custom::autograd
