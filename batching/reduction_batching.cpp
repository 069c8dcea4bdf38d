// SPDX-License-Identifier: BSD-3-Clause
// The batching rule of every reduction of the operator table for torch.vmap: the operands with their batch dims
// first (batching_helpers.h), the per-example dims shifted past the batch dim, one call.
#include <algorithm>
#include <vector>

#include <ATen/WrapDimUtils.h>
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
at::Tensor reduction_batched(
    const at::Tensor& input,
    const at::Tensor& weight,
    at::OptionalIntArrayRef dim,
    bool keepdim,
    std::optional<at::ScalarType> dtype) {
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const auto level = current_level();
  if (!isBatchedAtLevel(input, level) && !isBatchedAtLevel(weight, level)) {
    return custom::detail::reduction_handle<Row>().call(input, weight, dim, keepdim, dtype);
  }
  const auto x = unwrap(input, level);
  const auto w = unwrap(weight, level);
  const auto rank = std::max(x.logical_rank, w.logical_rank);
  auto x_physical = batch_first(x, rank);
  auto w_physical = batch_first(w, rank);
  const auto per_example = logical_result_type({&x, &w});
  const auto promoted = at::native::result_type(x_physical, w_physical);
  x_physical = promoted_as_per_example(x_physical, per_example, promoted);
  w_physical = promoted_as_per_example(w_physical, per_example, promoted);

  // The per-example dims to reduce, one past the batch dim. A per-example 0-dim "reduction" sums
  // one term: a trailing dim of size 1, reduced, stands for it.
  std::vector<int64_t> physical_dims;
  if (rank == 0) {
    for (const auto d : dim.value_or(at::IntArrayRef{})) {
      at::maybe_wrap_dim(d, int64_t{0});  // torch.sum's range check for a 0-dim input
    }
    for (auto* physical : {&x_physical, &w_physical}) {
      if (physical->dim() == 1) {
        *physical = physical->unsqueeze(-1);
      }
    }
    physical_dims.push_back(1);
    return makeBatched(
        custom::detail::reduction_handle<Row>().call(x_physical, w_physical, physical_dims, false, dtype), 0, level);
  }
  if (!dim.has_value() || dim->empty()) {
    for (int64_t d = 0; d < rank; ++d) {
      physical_dims.push_back(d + 1);
    }
  } else {
    for (const auto d : *dim) {
      physical_dims.push_back(at::maybe_wrap_dim(d, rank) + 1);
    }
  }
  return makeBatched(
      custom::detail::reduction_handle<Row>().call(x_physical, w_physical, physical_dims, keepdim, dtype), 0, level);
}

}  // namespace

TORCH_LIBRARY_IMPL(custom, FuncTorchBatched, m) {
  rows::ReductionRows::for_each([&]<class Row>() { m.impl(Row::name, TORCH_FN(reduction_batched<Row>)); });
}

}  // namespace custom::batching
