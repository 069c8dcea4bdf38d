// SPDX-License-Identifier: BSD-3-Clause
// The Autograd kernel of every reduction of the operator table, with the elementwise operators'
// mechanism (elementwise_autograd.cpp): the result from a redispatch below autograd, then a graph
// node for reverse mode and the tangent for forward mode. The node's backward is the term's
// backward operator on the broadcast grad, so a reduction inherits the fused backward and its
// derivatives of every order.
#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include "derivative_dtype.h"
#include "dual_tensors.h"
#include "formula_node.h"
#include "node_pointer.h"
#include "ops/handles.h"
#include "ops/operator_rows.h"
#include "term_derivatives.h"

namespace custom::autograd {

using torch::autograd::variable_list;

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

// The formula of y = sum(value(input, weight), dim, keepdim) (dim as given, empty: every dim):
// the grad broadcast back over the reduced dims, then the term's backward operator, so the
// reduction's backward is the fused elementwise one (and every higher order with it). Next edges:
// input, weight.
template <class Row>
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
    return result;  // an undefined incoming grad means zeros: nothing to compute
  }
  const auto shape = at::infer_size_symdimvector(input.sym_sizes(), weight.sym_sizes());
  std::tie(result[0], result[1]) = detail::backward_handle<typename Row::Backward>().call(
      broadcast_over_reduced(grad, shape, dim, keepdim), input, weight, needed);
  return result;
}

using torch::autograd::collect_next_edges;
using torch::autograd::compute_requires_grad;
using torch::autograd::isFwGradDefined;

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
    set_history_and_attach(
        result,
        make_formula_node<Row, &reduction_gradients<Row>>(
            collect_next_edges(input, weight), input, weight, dims, keepdim));
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
  rows::ReductionRows::for_each([&]<class Row>() { m.impl(Row::name, TORCH_FN(reduction_autograd<Row>)); });
}

}  // namespace custom::autograd
