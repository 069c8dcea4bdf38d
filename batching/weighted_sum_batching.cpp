// Batching rules for torch.vmap (the FuncTorchBatched key): one call of the op on the whole
// batch instead of functorch's per-example fallback loop, which warns, is slow, and cannot run
// the mutating overloads at all. Written against functorch's exported plumbing only
// (BatchRulesHelper.h's helpers are not exported from libtorch): unwrap the operands at the
// current level, move their batch dims to the front, pad their per-example (logical) ranks to a
// common one so broadcasting never pairs a batch dim with a logical dim, call the op once and
// wrap the result at the same level.
#include <algorithm>
#include <initializer_list>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <ATen/functorch/DynamicLayer.h>
#include <ATen/functorch/PlumbingHelper.h>
#include <ATen/native/TypeProperties.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <custom_ops/weighted_sum.h>

#include "ops/weighted_sum_handles.h"

namespace custom::batching {
namespace {

using at::functorch::isBatchedAtLevel;
using at::functorch::makeBatched;

// A tensor seen at the current vmap level: its value below the level, the value's batch dim (none
// when the tensor is not batched at this level) and its per-example rank.
struct Operand {
  at::Tensor value;
  std::optional<int64_t> bdim;
  int64_t logical_rank;
};

Operand unwrap(const at::Tensor& tensor, int64_t level) {
  auto [value, bdim] = at::functorch::unwrapTensorAtLevel(tensor, level);
  const auto rank = value.dim() - (bdim.has_value() ? 1 : 0);
  return {std::move(value), bdim, rank};
}

int64_t current_level() {
  const auto layer = at::functorch::maybeCurrentDynamicLayer();
  TORCH_INTERNAL_ASSERT(layer.has_value(), "custom ops: a batching rule ran outside vmap");
  return layer->layerId();
}

// Physical [batch, 1 (padding)..., logical dims] with `rank` logical dims. An operand without a
// batch dim gets one (expanded: no copy) when `batch_size` is given, else stays as it is, which
// right-aligned broadcasting against the padded operands handles.
at::Tensor batch_first(const Operand& operand, int64_t rank, std::optional<c10::SymInt> batch_size = std::nullopt) {
  at::Tensor moved;
  if (operand.bdim.has_value()) {
    moved = operand.value.movedim(*operand.bdim, 0);
  } else if (batch_size.has_value()) {
    c10::SymDimVector expanded{*batch_size};
    const auto sizes = operand.value.sym_sizes();
    expanded.insert(expanded.end(), sizes.begin(), sizes.end());
    moved = operand.value.unsqueeze(0).expand_symint(expanded);
  } else {
    return operand.value;
  }
  if (operand.logical_rank == rank) {
    return moved;
  }
  const auto sizes = moved.sym_sizes();
  c10::SymDimVector padded{sizes[0]};
  padded.insert(padded.end(), static_cast<size_t>(rank - operand.logical_rank), c10::SymInt(1));
  padded.insert(padded.end(), sizes.begin() + 1, sizes.end());
  return moved.view_symint(padded);
}

// torch.result_type of the per-example tensors. A per-example 0-dim tensor promotes like a Python
// scalar of its category (float32 input with a float64 0-dim weight gives float32), but its
// physical value has a batch dim and would promote as a dimensioned tensor.
at::ScalarType logical_result_type(std::initializer_list<const Operand*> operands) {
  at::native::ResultTypeState state;
  for (const auto* operand : operands) {
    if (operand->bdim.has_value() && operand->logical_rank == 0) {
      const auto dtype = operand->value.scalar_type();
      state.zeroResult =
          state.zeroResult == at::ScalarType::Undefined ? dtype : c10::promoteTypes(state.zeroResult, dtype);
    } else {
      state = at::native::update_result_type_state(operand->value, state);
    }
  }
  return at::native::result_type(state);
}

// Where the physical operands promote differently from the per-example ones, an operand cast to
// the per-example result dtype first gives exactly what the op gives per example (ATen casts a
// wider 0-dim operand to the result dtype before computing).
at::Tensor promoted_as_per_example(const at::Tensor& physical, at::ScalarType per_example, at::ScalarType promoted) {
  return per_example != promoted && physical.scalar_type() != per_example ? physical.to(per_example) : physical;
}

at::Tensor weighted_sum_batched(const at::Tensor& input, const at::Tensor& weight) {
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const auto level = current_level();
  if (!isBatchedAtLevel(input, level) && !isBatchedAtLevel(weight, level)) {
    return custom::weighted_sum(input, weight);
  }
  const auto x = unwrap(input, level);
  const auto w = unwrap(weight, level);
  const auto rank = std::max(x.logical_rank, w.logical_rank);
  const auto x_physical = batch_first(x, rank);
  const auto w_physical = batch_first(w, rank);
  const auto per_example = logical_result_type({&x, &w});
  const auto promoted = at::native::result_type(x_physical, w_physical);
  return makeBatched(
      custom::weighted_sum(
          promoted_as_per_example(x_physical, per_example, promoted),
          promoted_as_per_example(w_physical, per_example, promoted)),
      0, level);
}

void weighted_sum_inplace_batched(const at::Tensor& self, const at::Tensor& weight) {
  const auto& op = custom::detail::weighted_sum_inplace_handle();
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const auto level = current_level();
  const bool self_batched = isBatchedAtLevel(self, level);
  if (!self_batched && !isBatchedAtLevel(weight, level)) {
    op.call(self, weight);
    return;
  }
  // ATen's rule for in-place ops under vmap: the result has a batch dim, so self must have one.
  TORCH_CHECK(
      self_batched,
      "vmap: custom::weighted_sum_(self, weight) is not possible because weight is batched (vmapped over) "
      "but self is not, and an in-place op cannot give self a batch dimension. Use the out-of-place "
      "custom::weighted_sum instead.");
  const auto s = unwrap(self, level);
  const auto w = unwrap(weight, level);
  TORCH_CHECK(
      w.logical_rank <= s.logical_rank, "custom::weighted_sum_: weight has ", w.logical_rank,
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

void weighted_sum_out_batched(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& out) {
  const auto& op = custom::detail::weighted_sum_out_handle();
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const auto level = current_level();
  TORCH_CHECK(
      !isBatchedAtLevel(input, level) && !isBatchedAtLevel(weight, level) && !isBatchedAtLevel(out, level),
      "custom::weighted_sum.out: vmap over the out= overload is not supported; call the functional "
      "custom::weighted_sum inside vmap instead.");
  op.call(input, weight, out);
}

std::tuple<at::Tensor, at::Tensor> weighted_sum_backward_batched(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, std::array<bool, 2> output_mask) {
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const auto level = current_level();
  if (!isBatchedAtLevel(grad, level) && !isBatchedAtLevel(input, level) && !isBatchedAtLevel(weight, level)) {
    return custom::weighted_sum_backward(grad, input, weight, output_mask);
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
  auto [grad_input, grad_weight] = custom::weighted_sum_backward(g_physical, x_physical, w_physical, output_mask);
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
  m.impl("weighted_sum", TORCH_FN(weighted_sum_batched));
  m.impl("weighted_sum_", TORCH_FN(weighted_sum_inplace_batched));
  m.impl("weighted_sum.out", TORCH_FN(weighted_sum_out_batched));
  m.impl("weighted_sum_backward", TORCH_FN(weighted_sum_backward_batched));
}

}  // namespace custom::batching
