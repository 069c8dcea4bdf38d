// The Autograd kernel of weighted_square_sum, with weighted_sum's mechanism
// (weighted_sum_autograd.cpp): the result from a redispatch below autograd, then a graph node for
// reverse mode and the tangent for forward mode. The node's backward is weighted_sum_backward on
// the broadcast grad, so the reduction inherits the elementwise op's fused backward and its
// derivatives of every order.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include "derivative_dtype.h"
#include "dual_tensors.h"
#include "node_pointer.h"
#include "ops/weighted_square_sum_handles.h"
#include "weighted_square_sum_nodes.h"
#include "weighted_sum_tangents.h"

namespace custom::autograd {
namespace {

using torch::autograd::collect_next_edges;
using torch::autograd::compute_requires_grad;
using torch::autograd::isFwGradDefined;
using torch::autograd::SavedVariable;

at::Tensor weighted_square_sum_autograd(
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
    return detail::weighted_square_sum_handle().redispatch(
        keys & c10::after_autograd_keyset, input, weight, dim, keepdim, dtype);
  }();
  const auto dims = dim.has_value() ? dim->vec() : std::vector<int64_t>{};
  if (requires_grad) {
    auto grad_fn = make_node<WeightedSquareSumBackward0>();
    grad_fn->set_next_edges(collect_next_edges(input, weight));
    grad_fn->input_ = SavedVariable(input, /*is_output=*/false);
    grad_fn->weight_ = SavedVariable(weight, /*is_output=*/false);
    grad_fn->dim_ = dims;
    grad_fn->keepdim_ = keepdim;
    torch::autograd::set_history(result, grad_fn);
    node_attached(grad_fn);
  }
  if (has_tangents) {
    // The sum of the elementwise op's tangent over the same dims, in the dtype the forward sums
    // in (the promoted operands', or a wider dtype=), rounded to the result's once.
    const auto input_p = primal_of(input);
    const auto weight_p = primal_of(weight);
    const auto terms = weighted_sum_tangent(
        input_p, weight_p, tangent_of(input), tangent_of(weight),
        c10::promoteTypes(promoted_dtype({input_p, weight_p}), result.scalar_type()));
    const auto tangent = in_dtype(dims.empty() ? terms.sum() : terms.sum(dims, keepdim), result.scalar_type());
    result._set_fw_grad(
        dims.empty() && keepdim ? tangent.view_symint(result.sym_sizes()) : tangent, /*level=*/0,
        /*is_inplace_op=*/false);
  }
  return result;
}

}  // namespace

TORCH_LIBRARY_IMPL(custom, Autograd, m) {
  m.impl("weighted_square_sum", TORCH_FN(weighted_square_sum_autograd));
}

}  // namespace custom::autograd
