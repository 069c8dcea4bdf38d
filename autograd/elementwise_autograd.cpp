// SPDX-License-Identifier: BSD-3-Clause
// The Autograd kernels of every elementwise operator and every term's backward operator, from the
// operator table: registered at the Autograd key, written like the kernels PyTorch generates for
// its own ops (VariableType): they compute the result by redispatching below autograd, then
// record a graph node for reverse mode (set_history / rebase_history) and set the result's
// tangent for forward mode. Grad mode is never toggled, so under torch.func transforms each level
// records its own graph (functorch reuses exactly these kernels, level by level), and every
// caller (Python, C++, TorchScript, torch.compile) differentiates the op the same way.
#include <array>
#include <cstddef>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/functorch/TensorWrapper.h>
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

using torch::autograd::collect_next_edges;
using torch::autograd::compute_requires_grad;
using torch::autograd::isFwGradDefined;

// The formula of y = value(input, weight), and of the in-place form (then input is a copy of self
// taken before the write): (grad_input, grad_weight) by the term's backward operator. Next edges:
// input, weight. The term's backward has its own formula, term_backward_gradients.
template <class Row>
variable_list elementwise_gradients(
    const variable_list& grads, std::array<bool, 2> needed, const at::Tensor& input, const at::Tensor& weight) {
  variable_list result(2);
  const auto& grad = grads[0];
  if (!grad.defined() || !(needed[0] || needed[1])) {
    return result;  // an undefined incoming grad means zeros: nothing to compute
  }
  std::tie(result[0], result[1]) = detail::backward_handle<typename Row::Backward>().call(grad, input, weight, needed);
  return result;
}

template <class Row>
at::Tensor elementwise_autograd(c10::DispatchKeySet keys, const at::Tensor& input, const at::Tensor& weight) {
  const bool requires_grad = compute_requires_grad(input, weight);
  const bool has_tangents = isFwGradDefined(input) || isFwGradDefined(weight);
  auto result = [&] {
    at::AutoDispatchBelowADInplaceOrView guard;
    return detail::functional_handle<Row>().redispatch(keys & c10::after_autograd_keyset, input, weight);
  }();
  if (requires_grad) {
    set_history_and_attach(
        result, make_formula_node<Row, &elementwise_gradients<Row>>(collect_next_edges(input, weight), input, weight));
  }
  if (has_tangents) {
    const auto tangent = term_tangent<typename Row::Term>(
        primal_of(input), primal_of(weight), tangent_of(input), tangent_of(weight), result.scalar_type());
    result._set_fw_grad(tangent, /*level=*/0, /*is_inplace_op=*/false);
  }
  return result;
}

// functorch refuses in place into a tensor captured from outside a grad transform only for
// schemas that return the mutated tensor; ours returns nothing (for torch.compile), so the check
// is here: under grad/jvp, such a tensor arrives as an immutable wrapper, and writing into it
// would silently drop its gradient. Same message as ATen's ops.
void check_not_captured(const at::Tensor& self, const char* op) {
  const auto* wrapper = at::functorch::maybeGetTensorWrapper(self);
  TORCH_CHECK(
      wrapper == nullptr || !wrapper->is_immutable(),
      "During a grad (vjp, jvp, grad, etc) transform, the function provided attempted to call in-place "
      "operation (",
      op,
      ") that would mutate a captured Tensor. A captured Tensor is one that "
      "is defined outside of the function transform and is not an input to the transformed function.");
}

template <class Row>
void elementwise_inplace_autograd(c10::DispatchKeySet keys, const at::Tensor& self, const at::Tensor& weight) {
  const auto& op = detail::inplace_handle<Row>();
  check_not_captured(self, Row::inplace_name);
  const bool dense = all_dense({self, weight});
  const bool requires_grad = dense && compute_requires_grad(self, weight);
  const bool has_tangents = dense && (isFwGradDefined(self) || isFwGradDefined(weight));
  at::Tensor original_self;
  at::Tensor original_weight = weight;
  decltype(make_node<FormulaNode<Row, &elementwise_gradients<Row>>>()) grad_fn;
  if (requires_grad || has_tangents) {
    // ATen's checks before anything is written: no in-place on a leaf (or a view of one) that
    // requires grad.
    torch::autograd::check_inplace(self, requires_grad);
    // The derivatives read self as it was: a copy made before the write, with grad mode on so
    // its history reaches self's old history (second order). weight is copied only when the
    // write would change it (weighted_sum_(a, a), say).
    original_self = self.clone();
    if (at::get_overlap_status(self, weight) != at::MemOverlapStatus::No) {
      original_weight = weight.clone();
    }
  }
  if (requires_grad) {
    grad_fn = make_formula_node<Row, &elementwise_gradients<Row>>(
        collect_next_edges(self, weight), original_self, original_weight);
  }
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatch(keys & c10::after_autograd_keyset, self, weight);
  }
  // What ATen's ADInplaceOrView kernel does for its own in-place ops: tensors saved for a
  // backward before this call must see that they changed.
  torch::autograd::increment_version(self);
  if (grad_fn) {
    rebase_history_and_attach(self, grad_fn);
  }
  if (has_tangents) {
    // Computed in the promoted dtype, as the write was, then rounded to self's.
    const auto tangent = term_tangent<typename Row::Term>(
                             primal_of(original_self), primal_of(original_weight), tangent_of(original_self),
                             tangent_of(original_weight), detail::result_dtype({original_self, original_weight}))
                             .to(self.scalar_type());
    // An existing tangent is updated in place (it may be a view other tensors share); a new one
    // is attached.
    auto self_t = tangent_of(self);
    if (self_t.defined()) {
      self_t.copy_(tangent);
      self._set_fw_grad(self_t, /*level=*/0, /*is_inplace_op=*/true);
    } else {
      self._set_fw_grad(tangent, /*level=*/0, /*is_inplace_op=*/true);
    }
  }
}

template <class Row>
void elementwise_out_autograd(
    c10::DispatchKeySet keys, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& out) {
  const auto& op = detail::out_handle<Row>();
  // ATen's rules and messages for out= under autograd.
  TORCH_CHECK(
      !compute_requires_grad(input, weight, out), Row::out_name,
      ": out=... arguments don't support automatic differentiation, "
      "but one of the arguments requires grad.");
  TORCH_CHECK_NOT_IMPLEMENTED(
      !(isFwGradDefined(input) || isFwGradDefined(weight) || isFwGradDefined(out)), "Trying to use forward AD with ",
      Row::out_name,
      " that does not support it because it is an out= "
      "function");
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatch(keys & c10::after_autograd_keyset, input, weight, out);
  }
  torch::autograd::increment_version(out);
}

template <class Row>
std::tuple<at::Tensor, at::Tensor> term_backward_autograd(
    c10::DispatchKeySet keys,
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    std::array<bool, 2> output_mask) {
  using Term = Row::Term;
  const auto& op = detail::backward_handle<Row>();
  const bool computes_any = (output_mask[0] || output_mask[1]) && all_dense({grad, input, weight});
  const bool requires_grad = computes_any && compute_requires_grad(grad, input, weight);
  const bool has_tangents =
      computes_any && (isFwGradDefined(grad) || isFwGradDefined(input) || isFwGradDefined(weight));
  auto [grad_input, grad_weight] = [&] {
    at::AutoDispatchBelowADInplaceOrView guard;
    return op.redispatch(keys & c10::after_autograd_keyset, grad, input, weight, output_mask);
  }();
  if (requires_grad) {
    set_history_and_attach(
        variable_list{grad_input, grad_weight},
        make_formula_node<Row, &term_backward_gradients<Term>>(
            collect_next_edges(grad, input, weight), grad, input, weight));
  }
  if (has_tangents) {
    const auto [grad_input_t, grad_weight_t] = term_backward_tangents<Term>(
        primal_of(grad), primal_of(input), primal_of(weight), tangent_of(grad), tangent_of(input), tangent_of(weight),
        output_mask);
    if (grad_input_t.defined()) {
      grad_input._set_fw_grad(grad_input_t, /*level=*/0, /*is_inplace_op=*/false);
    }
    if (grad_weight_t.defined()) {
      grad_weight._set_fw_grad(grad_weight_t, /*level=*/0, /*is_inplace_op=*/false);
    }
  }
  return {std::move(grad_input), std::move(grad_weight)};
}

}  // namespace

TORCH_LIBRARY_IMPL(custom, Autograd, m) {
  rows::ElementwiseRows::for_each([&]<class Row>() {
    m.impl(Row::name, TORCH_FN(elementwise_autograd<Row>));
    m.impl(Row::out_name, TORCH_FN(elementwise_out_autograd<Row>));
    m.impl(Row::inplace_name, TORCH_FN(elementwise_inplace_autograd<Row>));
  });
  rows::BackwardRows::for_each([&]<class Row>() { m.impl(Row::name, TORCH_FN(term_backward_autograd<Row>)); });
}

}  // namespace custom::autograd
