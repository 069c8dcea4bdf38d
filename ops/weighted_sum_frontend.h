// The device-independent half of every kernel: checks, output allocation, out= resizing and the
// TensorIterator set-up. A device supplies only its loops; the Meta kernels supply none and so
// get the same shapes, strides, dtypes and errors as the real kernels, with SymInt shapes. Each
// key's kernel file registers its loops with register_weighted_sum_kernels.
#pragma once

#include <array>
#include <tuple>

#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "kernel_registration.h"
#include "weighted_sum_backward_plan.h"

namespace custom::detail {

using Loop = void (*)(at::TensorIteratorBase& iter);
using PerChannelLoop = void (*)(const PerChannelBackward& args);

struct WeightedSumLoops {
  // output: out; inputs: input, weight. Computes weight * input**2 in the iterator's common dtype.
  Loop forward = nullptr;
  // outputs: grad_input, grad_weight; inputs: grad, input, weight, all of one dtype and shape.
  Loop backward_fused = nullptr;
  // output: grad_input; inputs: grad, input, weight. Computes 2 * weight * input * grad.
  Loop backward_input = nullptr;
  // output: grad_weight; inputs: grad, input. Computes input**2 * grad.
  Loop backward_weight = nullptr;
  // Both gradients (or the one requested) of a per-channel weight in one pass over grad and input
  // (weighted_sum_backward_plan.h); grad_weight summed in float32 (float64 for double) per block of
  // a fixed size, then the blocks in a fixed order: the same bits on every run and thread count.
  PerChannelLoop backward_per_channel = nullptr;
};

// Shapes and dtypes only: what the Meta kernels pass.
inline constexpr WeightedSumLoops kNoLoops{};

// Each takes the key's loops first, then the schema's arguments (kernel_registration.h).
at::Tensor weighted_sum_impl(const WeightedSumLoops& loops, const at::Tensor& input, const at::Tensor& weight);

void weighted_sum_out_impl(
    const WeightedSumLoops& loops, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& out);

void weighted_sum_inplace_impl(const WeightedSumLoops& loops, const at::Tensor& self, const at::Tensor& weight);

std::tuple<at::Tensor, at::Tensor> weighted_sum_backward_impl(
    const WeightedSumLoops& loops,
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    std::array<bool, 2> output_mask);

// Registers every overload of the weighted square for one dispatch key, given that key's loops:
// the four overloads cannot drift apart between CPU, CUDA and Meta.
template <const WeightedSumLoops& Loops, typename DeviceGuard = NoDeviceGuard>
void register_weighted_sum_kernels(torch::Library& m) {
  register_kernel<DeviceGuard, Loops, &weighted_sum_impl>(m, "weighted_sum");
  register_kernel<DeviceGuard, Loops, &weighted_sum_out_impl>(m, "weighted_sum.out");
  register_kernel<DeviceGuard, Loops, &weighted_sum_inplace_impl>(m, "weighted_sum_");
  register_kernel<DeviceGuard, Loops, &weighted_sum_backward_impl>(m, "weighted_sum_backward");
}

}  // namespace custom::detail
