// SPDX-License-Identifier: BSD-3-Clause
// Which CUDA forward kernel suits an iterator. ATen's gpu_kernel vectorizes only when every
// operand is contiguous; two common layouts fall to its strided loop, far below the bandwidth
// limit (docs/benchmarks.md), and get kernels of their own:
//  - broadcast: out and one input contiguous [R, C], the other input a row [C] repeated down the
//    rows (a per-channel weight) or a column [R, 1] repeated along them (a per-row weight); or
//    out and one input contiguous [N, C, P], the other a [C, 1] repeated over the planes of P
//    elements and the N blocks (a conv-style weight [C, 1, 1] over NCHW);
//  - transposed: out row-major, an input column-major (x.t()): tiles through shared memory, so
//    that reads and writes are both coalesced.
// Everything else (contiguous, mixed dtypes, other strides, past 32-bit indexing) stays with
// gpu_kernel. The choice is host-only and header-only, so that the CPU tests check it without a GPU.
#pragma once

#include <array>
#include <cstdint>

#include <ATen/TensorIterator.h>

#include "kernels/cuda/vectorized_access.cuh"

namespace custom::cuda {

enum class ForwardLayout { Generic, Broadcast, Transposed };

// Operands of the forward iterator, as the frontend adds them.
enum Operand : int { kOut = 0, kInput = 1, kWeight = 2 };

// What the repeated operand is, against the full one as [R, C] (a plane: as [N, C, P]).
enum class Repeated { Row, Column, Plane };

struct BroadcastPlan {
  int64_t rows = 0;  // a plane: N
  int64_t cols = 0;  // a plane: C * P
  bool input_is_repeated = false;  // else the weight is
  Repeated repeated = Repeated::Row;
  int64_t channels = 0;  // a plane's C
  int64_t plane = 0;  // a plane's P, any length: a vector may straddle planes
};

// The iterator as a matrix out[r, c], c the unit-stride dimension of out; strides in elements,
// {along c, along r}. An operand "across" has unit stride along r.
struct TransposedPlan {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t out_row_stride = 0;
  std::array<int64_t, 2> input_strides{};
  std::array<int64_t, 2> weight_strides{};
  bool input_across = false;
  bool weight_across = false;
};

struct ForwardPlan {
  ForwardLayout layout = ForwardLayout::Generic;
  BroadcastPlan broadcast;
  TransposedPlan transposed;
};

namespace layout_detail {

// The first kDims strides of an operand, in elements.
template <size_t kDims = 2>
std::array<int64_t, kDims> element_strides(const at::TensorIteratorBase& iter, int operand) {
  const auto bytes = iter.strides(operand);
  const auto size = iter.element_size(operand);
  std::array<int64_t, kDims> strides{};
  for (size_t d = 0; d < kDims; ++d) {
    strides[d] = bytes[d] / size;
  }
  return strides;
}

}  // namespace layout_detail

inline ForwardPlan plan_forward(const at::TensorIteratorBase& iter) {
  using layout_detail::element_strides;
  ForwardPlan plan;
  // TensorIterator has already merged every dimension it could, so [B, N, C] with a weight [C]
  // arrives here as [B * N, C], and [N, C, H, W] with a weight [C, 1, 1] as [N, C, H * W].
  if (iter.ntensors() != 3 || iter.noutputs() != 1 || iter.ndim() < 2 || iter.ndim() > 3 ||
      !iter.can_use_32bit_indexing()) {
    return plan;
  }
  const auto dtype = iter.dtype(kOut);
  if (iter.dtype(kInput) != dtype || iter.dtype(kWeight) != dtype) {
    return plan;  // casting belongs to gpu_kernel
  }
  const int64_t vector = kVectorBytes / iter.element_size(kOut);
  const bool aligned = vector_aligned(iter.data_ptr(kOut)) && vector_aligned(iter.data_ptr(kInput)) &&
      vector_aligned(iter.data_ptr(kWeight));
  // A plane plan: the repeated operand's element is (flat index / P) mod C. For [N, C, P] and
  // for a column [C, 1] whose rows are not whole vectors ([C, P], N = 1).
  const auto plane_plan = [&](int64_t plane, int64_t channels, bool input_repeated) {
    if (aligned && iter.numel() % vector == 0) {
      plan.layout = ForwardLayout::Broadcast;
      plan.broadcast = {
          iter.numel() / (plane * channels), plane * channels, input_repeated, Repeated::Plane, channels, plane};
    }
    return plan;
  };
  if (iter.ndim() == 3) {
    const int64_t plane = iter.shape()[0];
    const int64_t channels = iter.shape()[1];
    const auto strides = [&](int operand) { return element_strides<3>(iter, operand); };
    const std::array<int64_t, 3> dense{1, plane, plane * channels};
    const std::array<int64_t, 3> per_channel{0, 1, 0};
    if (strides(kOut) != dense) {
      return plan;
    }
    if (strides(kInput) == dense && strides(kWeight) == per_channel) {
      return plane_plan(plane, channels, false);
    }
    if (strides(kWeight) == dense && strides(kInput) == per_channel) {
      return plane_plan(plane, channels, true);
    }
    return plan;
  }
  const int64_t cols = iter.shape()[0];
  const int64_t rows = iter.shape()[1];
  const auto out = element_strides(iter, kOut);
  const auto input = element_strides(iter, kInput);
  const auto weight = element_strides(iter, kWeight);
  if (out[0] != 1) {
    return plan;
  }

  const std::array<int64_t, 2> dense{1, cols};
  const std::array<int64_t, 2> row{1, 0};
  const std::array<int64_t, 2> column{0, 1};
  const bool input_repeated = (input == row || input == column) && weight == dense;
  const bool weight_repeated = (weight == row || weight == column) && input == dense;
  if (out == dense && (input_repeated || weight_repeated)) {
    const auto repeated = input_repeated ? input : weight;
    if (cols % vector == 0 && aligned) {
      plan.layout = ForwardLayout::Broadcast;
      plan.broadcast = {rows, cols, input_repeated, repeated == row ? Repeated::Row : Repeated::Column};
      return plan;
    }
    if (repeated == column) {
      return plane_plan(cols, rows, input_repeated);
    }
  }

  auto along = [](const std::array<int64_t, 2>& s) { return s[0] == 1; };
  auto across = [](const std::array<int64_t, 2>& s) { return s[1] == 1 && s[0] != 1; };
  const bool input_across = across(input);
  const bool weight_across = across(weight);
  if ((input_across || weight_across) && (input_across || along(input)) && (weight_across || along(weight))) {
    plan.layout = ForwardLayout::Transposed;
    plan.transposed = {rows, cols, out[1], input, weight, input_across, weight_across};
  }
  return plan;
}

// The two kernels, in elementwise_forward_broadcast.cu and elementwise_forward_transposed.cu,
// computing Term::value, for every term of CUSTOM_OPS_TERMS. Each launches on the current stream
// of the iterator's device (the caller's guard has made it current).
template <class Term>
void launch_forward_broadcast(at::TensorIteratorBase& iter, const BroadcastPlan& plan);
template <class Term>
void launch_forward_transposed(at::TensorIteratorBase& iter, const TransposedPlan& plan);

}  // namespace custom::cuda
