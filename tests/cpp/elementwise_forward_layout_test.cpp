// SPDX-License-Identifier: BSD-3-Clause
// Which CUDA forward kernel each layout gets (kernels/cuda/weighted_sum_forward_layout.h). The
// choice is host code, so it is checked here on CPU iterators, without a GPU; the CUDA tests and
// tests/python/test_layout_kernels.py check the values each kernel computes on these layouts.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/TensorIterator.h>

#include "kernels/cuda/elementwise_forward_layout.h"

namespace {

using custom::cuda::ForwardLayout;
using custom::cuda::ForwardPlan;
using custom::cuda::plan_forward;
using custom::cuda::Repeated;

// The forward iterator as the frontend builds it: out, input, weight.
ForwardPlan plan_for(const at::Tensor& out, const at::Tensor& input, const at::Tensor& weight) {
  auto iter = at::TensorIteratorConfig()
                  .add_output(out)
                  .add_const_input(input)
                  .add_const_input(weight)
                  .promote_inputs_to_common_dtype(true)
                  .cast_common_dtype_to_outputs(true)
                  .enforce_safe_casting_to_output(true)
                  .build();
  return plan_forward(iter);
}

ForwardPlan plan_for(const at::Tensor& input, const at::Tensor& weight) {
  const auto shape = at::infer_size(input.sizes(), weight.sizes());
  return plan_for(torch::empty(shape, input.options().dtype(torch::result_type(input, weight))), input, weight);
}

const auto kFloat = torch::TensorOptions().dtype(torch::kFloat);

TEST(CudaForwardLayout, RowAndColumnBroadcastGetTheVectorizedKernel) {
  for (const auto dtype : {torch::kHalf, torch::kBFloat16, torch::kFloat, torch::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto options = torch::TensorOptions().dtype(dtype);
    const auto x = torch::randn({64, 96}, options);

    auto plan = plan_for(x, torch::randn({96}, options));
    ASSERT_EQ(plan.layout, ForwardLayout::Broadcast);
    EXPECT_EQ(plan.broadcast.rows, 64);
    EXPECT_EQ(plan.broadcast.cols, 96);
    EXPECT_FALSE(plan.broadcast.input_is_repeated);
    EXPECT_EQ(plan.broadcast.repeated, Repeated::Row);

    plan = plan_for(x, torch::randn({64, 1}, options));
    ASSERT_EQ(plan.layout, ForwardLayout::Broadcast);
    EXPECT_FALSE(plan.broadcast.input_is_repeated);
    EXPECT_EQ(plan.broadcast.repeated, Repeated::Column);

    plan = plan_for(torch::randn({96}, options), x);
    ASSERT_EQ(plan.layout, ForwardLayout::Broadcast);
    EXPECT_TRUE(plan.broadcast.input_is_repeated);
    EXPECT_EQ(plan.broadcast.repeated, Repeated::Row);
  }
}

TEST(CudaForwardLayout, BroadcastOverLeadingDimsIsMergedIntoRows) {
  auto plan = plan_for(torch::randn({3, 5, 16}, kFloat), torch::randn({16}, kFloat));
  ASSERT_EQ(plan.layout, ForwardLayout::Broadcast);
  EXPECT_EQ(plan.broadcast.rows, 15);
  EXPECT_EQ(plan.broadcast.cols, 16);

  plan = plan_for(torch::randn({3, 5, 16}, kFloat), torch::randn({5, 16}, kFloat));
  ASSERT_EQ(plan.layout, ForwardLayout::Broadcast);
  EXPECT_EQ(plan.broadcast.rows, 3);
  EXPECT_EQ(plan.broadcast.cols, 80);
}

TEST(CudaForwardLayout, ConvStyleWeightsGetThePlaneKernelForAnyPlaneLength) {
  // [N, C, H, W] with a weight [C, 1, 1] or [1, C, 1, 1], planes of whole vectors or not (7 x 7).
  for (const int64_t side : {16, 7, 1}) {
    SCOPED_TRACE(side);
    for (const auto& weight : {torch::randn({32, 1, 1}, kFloat), torch::randn({1, 32, 1, 1}, kFloat)}) {
      const auto x = torch::randn({4, 32, side, side}, kFloat);
      auto plan = plan_for(x, weight);
      ASSERT_EQ(plan.layout, ForwardLayout::Broadcast);
      if (side == 1) {  // no planes: a row [C] over [N, C]
        EXPECT_EQ(plan.broadcast.repeated, Repeated::Row);
        continue;
      }
      EXPECT_EQ(plan.broadcast.repeated, Repeated::Plane);
      EXPECT_FALSE(plan.broadcast.input_is_repeated);
      EXPECT_EQ(plan.broadcast.rows, 4);
      EXPECT_EQ(plan.broadcast.cols, 32 * side * side);
      EXPECT_EQ(plan.broadcast.channels, 32);
      EXPECT_EQ(plan.broadcast.plane, side * side);

      plan = plan_for(weight, x);
      ASSERT_EQ(plan.layout, ForwardLayout::Broadcast);
      EXPECT_EQ(plan.broadcast.repeated, Repeated::Plane);
      EXPECT_TRUE(plan.broadcast.input_is_repeated);
    }
  }
  // One image: [C, P] with a column [C, 1]; its rows of 49 are not whole vectors.
  auto plan = plan_for(torch::randn({1, 32, 7, 7}, kFloat), torch::randn({32, 1, 1}, kFloat));
  ASSERT_EQ(plan.layout, ForwardLayout::Broadcast);
  EXPECT_EQ(plan.broadcast.repeated, Repeated::Plane);
  EXPECT_EQ(plan.broadcast.rows, 1);
  EXPECT_EQ(plan.broadcast.channels, 32);
  EXPECT_EQ(plan.broadcast.plane, 49);
  // Channels-last input: the weight is a row [C] of every pixel.
  const auto channels_last = torch::randn({4, 32, 7, 7}, kFloat).contiguous(at::MemoryFormat::ChannelsLast);
  plan = plan_for(torch::empty_like(channels_last), channels_last, torch::randn({32, 1, 1}, kFloat));
  ASSERT_EQ(plan.layout, ForwardLayout::Broadcast);
  EXPECT_EQ(plan.broadcast.repeated, Repeated::Row);
}

TEST(CudaForwardLayout, ConvStyleWeightsThatCannotUseSixteenByteVectorsStayGeneric) {
  // 3 * 5 * 7 * 7 floats are not a whole number of vectors.
  EXPECT_EQ(
      plan_for(torch::randn({3, 5, 7, 7}, kFloat), torch::randn({5, 1, 1}, kFloat)).layout, ForwardLayout::Generic);
  // An input one element off 16-byte alignment.
  const auto base = torch::randn({4 * 32 * 49 + 1}, kFloat);
  const auto shifted = base.narrow(0, 1, 4 * 32 * 49).view({4, 32, 7, 7});
  EXPECT_EQ(plan_for(shifted, torch::randn({32, 1, 1}, kFloat)).layout, ForwardLayout::Generic);
  // A weight [C, 1, W] varies along the planes and is broadcast down them: four dimensions.
  EXPECT_EQ(
      plan_for(torch::randn({4, 32, 8, 8}, kFloat), torch::randn({32, 1, 8}, kFloat)).layout, ForwardLayout::Generic);
}

TEST(CudaForwardLayout, AnyWeightRepeatedOverBlocksAndPlanesIsAPlane) {
  // A weight [C, H, 1] over [N, C, H, W]: C and H merge, planes of W.
  const auto plan = plan_for(torch::randn({4, 32, 8, 8}, kFloat), torch::randn({32, 8, 1}, kFloat));
  ASSERT_EQ(plan.layout, ForwardLayout::Broadcast);
  EXPECT_EQ(plan.broadcast.repeated, Repeated::Plane);
  EXPECT_EQ(plan.broadcast.channels, 32 * 8);
  EXPECT_EQ(plan.broadcast.plane, 8);
}

TEST(CudaForwardLayout, BroadcastThatCannotUseSixteenByteVectorsStaysGeneric) {
  // A row of 6 floats is not a whole number of 16-byte vectors.
  EXPECT_EQ(plan_for(torch::randn({64, 6}, kFloat), torch::randn({6}, kFloat)).layout, ForwardLayout::Generic);
  // Pointers off 16-byte alignment (a slice one element in), for each operand in turn.
  const auto base = torch::randn({64 * 96 + 1}, kFloat);
  const auto shifted = base.narrow(0, 1, 64 * 96).view({64, 96});
  EXPECT_EQ(plan_for(shifted, torch::randn({96}, kFloat)).layout, ForwardLayout::Generic);
  EXPECT_EQ(plan_for(torch::randn({64, 96}, kFloat), base.narrow(0, 1, 96)).layout, ForwardLayout::Generic);
  const auto out = base.narrow(0, 1, 64 * 96).view({64, 96});
  EXPECT_EQ(plan_for(out, torch::randn({64, 96}, kFloat), torch::randn({96}, kFloat)).layout, ForwardLayout::Generic);
}

TEST(CudaForwardLayout, TransposedInputsGetTheTiledKernel) {
  const auto xt = torch::randn({96, 64}, kFloat).t();  // [64, 96], strides (1, 64)
  auto plan = plan_for(torch::empty({64, 96}, kFloat), xt, torch::randn({64, 96}, kFloat));
  ASSERT_EQ(plan.layout, ForwardLayout::Transposed);
  EXPECT_EQ(plan.transposed.rows, 64);
  EXPECT_EQ(plan.transposed.cols, 96);
  EXPECT_EQ(plan.transposed.out_row_stride, 96);
  EXPECT_TRUE(plan.transposed.input_across);
  EXPECT_FALSE(plan.transposed.weight_across);
  EXPECT_EQ(plan.transposed.input_strides, (std::array<int64_t, 2>{64, 1}));
  EXPECT_EQ(plan.transposed.weight_strides, (std::array<int64_t, 2>{1, 96}));

  plan = plan_for(torch::empty({64, 96}, kFloat), torch::randn({64, 96}, kFloat), xt);
  ASSERT_EQ(plan.layout, ForwardLayout::Transposed);
  EXPECT_FALSE(plan.transposed.input_across);
  EXPECT_TRUE(plan.transposed.weight_across);

  plan = plan_for(torch::empty({64, 96}, kFloat), xt, xt);
  ASSERT_EQ(plan.layout, ForwardLayout::Transposed);
  EXPECT_TRUE(plan.transposed.input_across);
  EXPECT_TRUE(plan.transposed.weight_across);

  // A transposed slice: the column stride is the parent's row length, not the row count.
  const auto slice = torch::randn({96, 100}, kFloat).narrow(1, 2, 64).t();
  plan = plan_for(torch::empty({64, 96}, kFloat), slice, torch::randn({96}, kFloat));
  ASSERT_EQ(plan.layout, ForwardLayout::Transposed);
  EXPECT_EQ(plan.transposed.input_strides, (std::array<int64_t, 2>{100, 1}));
  EXPECT_EQ(plan.transposed.weight_strides, (std::array<int64_t, 2>{1, 0}));

  // An output row pitch wider than a row (out= a slice of a wider tensor).
  const auto out = torch::empty({64, 128}, kFloat).narrow(1, 0, 96);
  plan = plan_for(out, xt, torch::randn({64, 96}, kFloat));
  ASSERT_EQ(plan.layout, ForwardLayout::Transposed);
  EXPECT_EQ(plan.transposed.out_row_stride, 128);

  // "Transposed" is relative to the output: a column-major out= makes row-major inputs across.
  const auto column_major_out = torch::empty({96, 64}, kFloat).t();
  plan = plan_for(column_major_out, torch::randn({64, 96}, kFloat), torch::randn({96}, kFloat));
  ASSERT_EQ(plan.layout, ForwardLayout::Transposed);
  EXPECT_EQ(plan.transposed.rows, 96);
  EXPECT_EQ(plan.transposed.cols, 64);
  EXPECT_TRUE(plan.transposed.input_across);
  EXPECT_TRUE(plan.transposed.weight_across);
}

TEST(CudaForwardLayout, EverythingElseStaysWithGpuKernel) {
  const auto x = torch::randn({64, 96}, kFloat);
  // Contiguous operands merge into one dimension: gpu_kernel's vectorized loop.
  EXPECT_EQ(plan_for(x, torch::randn({64, 96}, kFloat)).layout, ForwardLayout::Generic);
  // Mixed dtypes: casting belongs to gpu_kernel. (On the CPU, TensorIterator would cast to
  // temporaries first; on Meta it leaves the dtypes as given, as it does on CUDA.)
  const auto meta = torch::TensorOptions().device(torch::kMeta);
  EXPECT_EQ(
      plan_for(torch::empty({64, 96}, meta), torch::empty({96}, meta.dtype(torch::kDouble))).layout,
      ForwardLayout::Generic);
  EXPECT_EQ(
      plan_for(
          torch::empty({64, 96}, meta.dtype(torch::kDouble)), torch::empty({64, 96}, meta), torch::empty({96}, meta))
          .layout,
      ForwardLayout::Generic);
  // The same layouts with one dtype: the broadcast kernel.
  EXPECT_EQ(plan_for(torch::empty({64, 96}, meta), torch::empty({96}, meta)).layout, ForwardLayout::Broadcast);
  // Strided in both dimensions (every other column).
  const auto strided = torch::randn({64, 192}, kFloat).slice(1, 0, 192, 2);
  EXPECT_EQ(plan_for(strided, torch::randn({96}, kFloat)).layout, ForwardLayout::Generic);
  // Three dimensions that cannot merge.
  const auto permuted = torch::randn({4, 8, 16}, kFloat).permute({1, 0, 2});
  EXPECT_EQ(plan_for(permuted, torch::randn({16}, kFloat)).layout, ForwardLayout::Generic);
}

}  // namespace
