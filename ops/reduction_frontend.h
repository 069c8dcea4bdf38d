// The device-independent half of every weighted_square_sum kernel: checks, the result's shape and
// dtype, and the canonical [outer, reduce, inner] view the device loops reduce. A device supplies
// only its reduction loop; the Meta kernel supplies none and so gets the same shapes, dtypes and
// errors as the real kernels, with SymInt shapes.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/OptionalArrayRef.h>
#include <torch/library.h>

#include "kernel_registration.h"

namespace custom::detail {

// What a device loop computes: out[o, i] = sum over r of weight[o, r, i] * input[o, r, i]**2, or
// with `total`, out[0] = the sum over every o, r and i.
struct WeightedSquareSumReduction {
  // Contiguous, [outer, inner] (one element, of any shape, with `total`), of the accumulation dtype
  // (math::weighted_square_sum_acc_t: float32 for float16/bfloat16/float32, float64 for float64)
  // or of the operands' dtype, which the loop's last write rounds to, once: no copy afterwards.
  at::Tensor out;
  // [outer, reduce, inner] views of one dtype, with any strides (0 where broadcast). reduce >= 1
  // and outer * inner >= 1: the frontend handles empty results and empty reductions.
  at::Tensor input;
  at::Tensor weight;
  // A full reduction: the outer and inner dims are summed inside the loop too, in its own fixed
  // order, with no partial tensor nor leftover sum after it.
  bool total = false;
};

using ReductionLoop = void (*)(const WeightedSquareSumReduction& args);

struct WeightedSquareSumLoops {
  // Writes every element of args.out. Sums in the accumulation dtype, in an order fixed by the
  // sizes and strides alone (the same bits on every run and thread count), with the error of a
  // pairwise sum.
  ReductionLoop reduce = nullptr;
};

// Shapes and dtypes only: what the Meta kernel passes.
inline constexpr WeightedSquareSumLoops kNoReductionLoops{};

at::Tensor weighted_square_sum_impl(
    const WeightedSquareSumLoops& loops,
    const at::Tensor& input,
    const at::Tensor& weight,
    at::OptionalIntArrayRef dim,
    bool keepdim,
    std::optional<at::ScalarType> dtype);

// Registers weighted_square_sum for one dispatch key, given that key's reduction loop.
template <const WeightedSquareSumLoops& Loops, typename DeviceGuard = NoDeviceGuard>
void register_weighted_square_sum_kernels(torch::Library& m) {
  register_kernel<DeviceGuard, Loops, &weighted_square_sum_impl>(m, "weighted_square_sum");
}

}  // namespace custom::detail
