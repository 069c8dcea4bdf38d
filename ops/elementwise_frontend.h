// SPDX-License-Identifier: BSD-3-Clause
// The elementwise engine's device-independent half, for every elementwise operator and every
// term's backward operator: checks, output allocation, out= resizing and the TensorIterator
// set-up. A device supplies only its loops for a term; the Meta kernels supply none and so get the
// same shapes, strides, dtypes and errors as the real kernels, with SymInt shapes. Each key's
// kernel file registers its loops with register_elementwise_kernels.
#pragma once

#include <array>
#include <tuple>

#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "backward_per_channel_plan.h"
#include "kernel_registration.h"
#include "operator_rows.h"

namespace custom::detail {

using Loop = void (*)(at::TensorIteratorBase& iter);
using PerChannelLoop = void (*)(const PerChannelBackward& args);

// A device's loops for one term, computing in the op-math type (float for float16/bfloat16,
// rounded once) through the term's functions.
struct ElementwiseLoops {
  // output: out; inputs: input, weight. value(input, weight) in the iterator's common dtype.
  Loop forward = nullptr;
  // outputs: grad_input, grad_weight; inputs: grad, input, weight, all of one dtype and shape.
  Loop backward_fused = nullptr;
  // output: grad_input; inputs: grad, input, weight. dx(input, weight) * grad.
  Loop backward_input = nullptr;
  // output: grad_weight; inputs: grad, input, and weight when the term's dw reads it.
  // dw(input, weight) * grad.
  Loop backward_weight = nullptr;
  // Both gradients (or the one requested) of a per-channel weight in one pass over grad and input
  // (backward_per_channel_plan.h); grad_weight summed in float32 (float64 for double) per block of
  // a fixed size, then the blocks in a fixed order: the same bits on every run and thread count.
  PerChannelLoop backward_per_channel = nullptr;
};

// One operator's kernel for one key: the names its errors carry, and its term's loops.
struct ElementwiseKernel {
  const char* name = nullptr;  // "custom::weighted_sum"
  const char* out_name = nullptr;  // "custom::weighted_sum.out"
  const char* inplace_name = nullptr;  // "custom::weighted_sum_"
  const char* backward_name = nullptr;  // "custom::weighted_sum_backward"
  bool dw_reads_weight = true;
  ElementwiseLoops loops;
};

// Shapes and dtypes only: what the Meta kernels pass.
template <class Term>
struct NoElementwiseLoops {
  static constexpr ElementwiseLoops value{};
};

// Each takes the key's kernel first, then the schema's arguments (kernel_registration.h).
at::Tensor elementwise_impl(const ElementwiseKernel& kernel, const at::Tensor& input, const at::Tensor& weight);

void elementwise_out_impl(
    const ElementwiseKernel& kernel, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& out);

void elementwise_inplace_impl(const ElementwiseKernel& kernel, const at::Tensor& self, const at::Tensor& weight);

std::tuple<at::Tensor, at::Tensor> elementwise_backward_impl(
    const ElementwiseKernel& kernel,
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    std::array<bool, 2> output_mask);

template <class Row, template <class> class LoopsOf>
struct BoundElementwise {
  static constexpr ElementwiseKernel kernel{
      .name = Row::name,
      .out_name = Row::out_name,
      .inplace_name = Row::inplace_name,
      .backward_name = Row::Backward::name,
      .dw_reads_weight = Row::Term::dw_reads_weight,
      .loops = LoopsOf<typename Row::Term>::value,
  };
};

// Row: a term's backward row (rows::BackwardOf<Term>).
template <class Row, template <class> class LoopsOf>
struct BoundBackward {
  static constexpr ElementwiseKernel kernel{
      .backward_name = Row::name,
      .dw_reads_weight = Row::Term::dw_reads_weight,
      .loops = LoopsOf<typename Row::Term>::value,
  };
};

// Registers every elementwise operator of the table and every term's backward for one dispatch
// key, given that key's loops (LoopsOf<Term>::value): the overloads cannot drift apart between
// CPU, CUDA and Meta, nor between operators.
template <template <class> class LoopsOf, typename DeviceGuard = NoDeviceGuard>
void register_elementwise_kernels(torch::Library& m) {
  rows::ElementwiseRows::for_each([&]<class Row>() {
    constexpr auto& kernel = BoundElementwise<Row, LoopsOf>::kernel;
    register_kernel<DeviceGuard, kernel, &elementwise_impl>(m, Row::name);
    register_kernel<DeviceGuard, kernel, &elementwise_out_impl>(m, Row::out_name);
    register_kernel<DeviceGuard, kernel, &elementwise_inplace_impl>(m, Row::inplace_name);
  });
  rows::BackwardRows::for_each([&]<class Row>() {
    register_kernel<DeviceGuard, BoundBackward<Row, LoopsOf>::kernel, &elementwise_backward_impl>(m, Row::name);
  });
}

}  // namespace custom::detail
