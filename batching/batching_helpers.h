// SPDX-License-Identifier: BSD-3-Clause
// What every batching rule does with its operands (see elementwise_batching.cpp): unwrap them at
// the current vmap level, move their batch dims to the front and pad their per-example ranks to a
// common one, and promote as the per-example op would. Written against functorch's exported
// plumbing only (BatchRulesHelper.h's helpers are not exported from libtorch).
#pragma once

#include <initializer_list>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <ATen/functorch/DynamicLayer.h>
#include <ATen/functorch/PlumbingHelper.h>
#include <ATen/native/TypeProperties.h>

namespace custom::batching {

// A tensor seen at the current vmap level: its value below the level, the value's batch dim (none
// when the tensor is not batched at this level) and its per-example rank.
struct Operand {
  at::Tensor value;
  std::optional<int64_t> bdim;
  int64_t logical_rank;
};

inline Operand unwrap(const at::Tensor& tensor, int64_t level) {
  auto [value, bdim] = at::functorch::unwrapTensorAtLevel(tensor, level);
  const auto rank = value.dim() - (bdim.has_value() ? 1 : 0);
  return {std::move(value), bdim, rank};
}

inline int64_t current_level() {
  const auto layer = at::functorch::maybeCurrentDynamicLayer();
  TORCH_INTERNAL_ASSERT(layer.has_value(), "custom ops: a batching rule ran outside vmap");
  return layer->layerId();
}

// Physical [batch, 1 (padding)..., logical dims] with `rank` logical dims. An operand without a
// batch dim gets one (expanded: no copy) when `batch_size` is given, else stays as it is, which
// right-aligned broadcasting against the padded operands handles.
inline at::Tensor batch_first(
    const Operand& operand, int64_t rank, std::optional<c10::SymInt> batch_size = std::nullopt) {
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
inline at::ScalarType logical_result_type(std::initializer_list<const Operand*> operands) {
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
inline at::Tensor promoted_as_per_example(
    const at::Tensor& physical, at::ScalarType per_example, at::ScalarType promoted) {
  return per_example != promoted && physical.scalar_type() != per_example ? physical.to(per_example) : physical;
}

}  // namespace custom::batching
