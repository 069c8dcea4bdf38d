// SPDX-License-Identifier: BSD-3-Clause
// The reduction engine's device-independent half, for every reduction operator of the table: the
// checks, the result's shape and dtype, and the canonical [outer, reduce, inner] views the device
// loops sum a term over. A device supplies only its loops for a term; the Meta kernel supplies
// none and so gets the same shapes, dtypes and errors as the real kernels, with SymInt shapes.
// Each key's kernel file registers its loops with register_reduction_kernels.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/OptionalArrayRef.h>
#include <torch/library.h>

#include "kernel_registration.h"
#include "operator_rows.h"

namespace custom::detail {

// What a device loop computes: out[o, i] = sum over r of Term::value(input[o, r, i],
// weight[o, r, i]), or with `total`, out[0] = the sum over every o, r and i.
struct Reduction {
  // Contiguous, [outer, inner] (one element, of any shape, with `total`), of the accumulation dtype
  // (at::opmath_type: float32 for float16/bfloat16/float32, float64 for float64) or of the
  // operands' dtype, which the loop's last write rounds to, once: no copy afterwards.
  at::Tensor out;
  // [outer, reduce, inner] views of one dtype, with any strides (0 where broadcast). reduce >= 1
  // and outer * inner >= 1: the frontend handles empty results and empty reductions.
  at::Tensor input;
  at::Tensor weight;
  // A full reduction: the outer and inner dims are summed inside the loop too, in its own fixed
  // order, with no partial tensor nor leftover sum after it.
  bool total = false;
  const char* name = nullptr;  // the operator, for errors: "custom::weighted_square_sum"
};

using ReductionLoop = void (*)(const Reduction& args);
// A loop for operands that broadcast against each other: out [I, J], input and weight [I, J, K]
// views, one of them with stride 0 along J and the other with stride 0 along I (x [N, 1, D] with
// w [1, M, D] summed over D). Returns false, having done nothing, where it has no plan for the
// sizes; the frontend then runs `reduce` once per i.
using PairsLoop = bool (*)(const Reduction& args);

// A device's loops for one term.
struct ReductionLoops {
  // Writes every element of args.out. Each term is Term::value(x, w) in the accumulation dtype,
  // summed in it, in an order fixed by the sizes and strides alone (the same bits on every run and
  // thread count), with the error of a pairwise sum.
  ReductionLoop reduce = nullptr;
  PairsLoop reduce_pairs = nullptr;  // optional
};

// One operator's kernel for one key: the name its errors carry, and its term's loops.
struct ReductionKernel {
  const char* name = nullptr;  // "custom::weighted_square_sum"
  ReductionLoops loops;
};

// Shapes and dtypes only: what the Meta kernel passes.
template <class Term>
struct NoReductionLoops {
  static constexpr ReductionLoops value{};
};

// The schema's arguments, as torch.sum takes them; input and weight broadcast together.
at::Tensor reduction_impl(
    const ReductionKernel& kernel,
    const at::Tensor& input,
    const at::Tensor& weight,
    at::OptionalIntArrayRef dim,  // None or []: every dim
    bool keepdim,
    std::optional<at::ScalarType> dtype);  // the result's (float64: the sum runs in float64 too)

template <class Row, template <class> class LoopsOf>
struct BoundReduction {
  static constexpr ReductionKernel kernel{
      .name = Row::name,
      .loops = LoopsOf<typename Row::Term>::value,
  };
};

// Registers every reduction operator of the table for one dispatch key, given that key's loops
// (LoopsOf<Term>::value).
template <template <class> class LoopsOf, typename DeviceGuard = NoDeviceGuard>
void register_reduction_kernels(torch::Library& m) {
  rows::ReductionRows::for_each([&]<class Row>() {
    register_kernel<DeviceGuard, BoundReduction<Row, LoopsOf>::kernel, &reduction_impl>(m, Row::name);
  });
}

}  // namespace custom::detail
