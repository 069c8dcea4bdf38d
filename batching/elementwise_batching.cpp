// SPDX-License-Identifier: BSD-3-Clause
// Batching rules for torch.vmap (the FuncTorchBatched key) of every elementwise operator and term
// backward of the operator table: one call of the op on the whole
// batch instead of functorch's per-example fallback loop, which warns, is slow, and cannot run
// the mutating overloads at all: unwrap the operands at the current level, move their batch dims
// to the front, pad their per-example (logical) ranks to a common one so broadcasting never pairs
// a batch dim with a logical dim (batching_helpers.h), call the op once and wrap the result at the
// same level.
#include <algorithm>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include "batching_helpers.h"
#include "ops/handles.h"
#include "ops/operator_rows.h"

namespace custom::batching {
namespace {

using at::functorch::isBatchedAtLevel;
using at::functorch::makeBatched;

template <class Row>
at::Tensor elementwise_batched(const at::Tensor& input, const at::Tensor& weight) {
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const auto level = current_level();
  if (!isBatchedAtLevel(input, level) && !isBatchedAtLevel(weight, level)) {
    return custom::detail::functional_handle<Row>().call(input, weight);
  }
  const auto x = unwrap(input, level);
  const auto w = unwrap(weight, level);
  const auto rank = std::max(x.logical_rank, w.logical_rank);
  const auto x_physical = batch_first(x, rank);
  const auto w_physical = batch_first(w, rank);
  const auto per_example = logical_result_type({&x, &w});
  const auto promoted = at::native::result_type(x_physical, w_physical);
  return makeBatched(
      custom::detail::functional_handle<Row>().call(
          promoted_as_per_example(x_physical, per_example, promoted),
          promoted_as_per_example(w_physical, per_example, promoted)),
      0, level);
}

template <class Row>
void elementwise_inplace_batched(const at::Tensor& self, const at::Tensor& weight) {
  const auto& op = custom::detail::inplace_handle<Row>();
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const auto level = current_level();
  const bool self_batched = isBatchedAtLevel(self, level);
  if (!self_batched && !isBatchedAtLevel(weight, level)) {
    op.call(self, weight);
    return;
  }
  // ATen's rule for in-place ops under vmap: the result has a batch dim, so self must have one.
  TORCH_CHECK(
      self_batched, "vmap: ", Row::inplace_name,
      "(self, weight) is not possible because weight is batched (vmapped over) "
      "but self is not, and an in-place op cannot give self a batch dimension. Use the out-of-place ",
      Row::name, " instead.");
  const auto s = unwrap(self, level);
  const auto w = unwrap(weight, level);
  TORCH_CHECK(
      w.logical_rank <= s.logical_rank, Row::inplace_name, ": weight has ", w.logical_rank,
      " dimensions per vmapped example, more than self's ", s.logical_rank, ", but an in-place op cannot resize self");
  const auto self_physical = batch_first(s, s.logical_rank);  // a view: the op writes into self
  auto w_physical = batch_first(w, s.logical_rank);
  // Only weight can change: self is written. Where the promotions differ, either weight is a
  // per-example 0-dim of a wider dtype (cast it), or self is a per-example 0-dim and weight an
  // unbatched 0-dim of a wider dtype, which must then count as dimensioned, as self does.
  const auto per_example = logical_result_type({&s, &w});
  const auto promoted = at::native::result_type(self_physical, w_physical);
  if (per_example != promoted) {
    w_physical = w_physical.scalar_type() != per_example ? w_physical.to(per_example) : w_physical.unsqueeze(0);
  }
  op.call(self_physical, w_physical);
}

template <class Row>
void elementwise_out_batched(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& out) {
  const auto& op = custom::detail::out_handle<Row>();
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const auto level = current_level();
  TORCH_CHECK(
      !isBatchedAtLevel(input, level) && !isBatchedAtLevel(weight, level) && !isBatchedAtLevel(out, level),
      Row::out_name, ": vmap over the out= overload is not supported; call the functional ", Row::name,
      " inside vmap instead.");
  op.call(input, weight, out);
}

template <class Row>
std::tuple<at::Tensor, at::Tensor> term_backward_batched(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, std::array<bool, 2> output_mask) {
  const auto& backward = custom::detail::backward_handle<Row>();
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const auto level = current_level();
  if (!isBatchedAtLevel(grad, level) && !isBatchedAtLevel(input, level) && !isBatchedAtLevel(weight, level)) {
    return backward.call(grad, input, weight, output_mask);
  }
  const auto g = unwrap(grad, level);
  const auto x = unwrap(input, level);
  const auto w = unwrap(weight, level);
  std::optional<c10::SymInt> batch_size;
  for (const auto* operand : {&g, &x, &w}) {
    if (operand->bdim.has_value()) {
      batch_size = operand->value.sym_size(*operand->bdim);
    }
  }
  // Every operand gets the batch dim, unbatched ones expanded: otherwise the reduction of a
  // broadcast argument's gradient would sum the examples' gradients over the batch.
  const auto rank = std::max({g.logical_rank, x.logical_rank, w.logical_rank});
  const auto g_physical = batch_first(g, rank, batch_size);
  const auto x_physical = batch_first(x, rank, batch_size);
  const auto w_physical = batch_first(w, rank, batch_size);
  auto [grad_input, grad_weight] = backward.call(g_physical, x_physical, w_physical, output_mask);
  // Back from the padded [batch, 1..., logical dims] to [batch, logical dims].
  const auto unpadded = [&](const at::Tensor& gradient, const Operand& like) {
    if (!gradient.defined()) {
      return gradient;
    }
    c10::SymDimVector sizes{*batch_size};
    const auto logical = like.value.sym_sizes();
    for (int64_t d = 0; d < static_cast<int64_t>(logical.size()); ++d) {
      if (!like.bdim.has_value() || d != *like.bdim) {
        sizes.push_back(logical[d]);
      }
    }
    return makeBatched(gradient.reshape_symint(sizes), 0, level);
  };
  return {unpadded(grad_input, x), unpadded(grad_weight, w)};
}

}  // namespace

TORCH_LIBRARY_IMPL(custom, FuncTorchBatched, m) {
  rows::BackwardRows::for_each([&]<class Row>() { m.impl(Row::name, TORCH_FN(term_backward_batched<Row>)); });
  rows::ElementwiseRows::for_each([&]<class Row>() {
    m.impl(Row::name, TORCH_FN(elementwise_batched<Row>));
    m.impl(Row::inplace_name, TORCH_FN(elementwise_inplace_batched<Row>));
    m.impl(Row::out_name, TORCH_FN(elementwise_out_batched<Row>));
  });
}

}  // namespace custom::batching
