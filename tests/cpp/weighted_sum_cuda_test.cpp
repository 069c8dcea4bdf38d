// SPDX-License-Identifier: BSD-3-Clause
// The CUDA kernels: values, out=, in place, autograd and device errors on the GPU. Every test
// skips, saying why, unless a GPU is visible and the library registered its CUDA kernels
// (cuda_test.h; cuda_build_test.cpp fails where a CUDA build lacks them).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <custom_ops/custom_ops.h>

#include "cuda_test.h"
#include "expect_error.h"
#include "reference.h"

namespace {

using custom_ops_test::AllClose;
using custom_ops_test::IsWeightedSumOf;
using custom_ops_test::kFloatingDtypes;
using custom_ops_test::nan_filled;
using custom_ops_test::random;
using custom_ops_test::reference;

constexpr int64_t kRows = 37;
constexpr int64_t kCols = 259;

class WeightedSumCuda : public custom_ops_test::CudaTest {};

TEST_F(WeightedSumCuda, ValuesMatchReferenceForEachDtypePairAndBroadcast) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kCols}, dtype, cuda);
    for (const auto& w :
         {random({kRows, kCols}, dtype, cuda), random({kCols}, dtype, cuda), random({kRows, 1}, dtype, cuda),
          random({}, dtype, cuda)}) {
      SCOPED_TRACE("weight shape " + c10::str(w.sizes()));
      EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(x, w), x, w));
    }
    const auto a = random({4, 1, 9}, dtype, cuda);
    const auto b = random({3, 1}, dtype, cuda);
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(a, b), a, b));
  }
  {
    const std::vector<std::pair<at::ScalarType, at::ScalarType>> pairs = {
        {at::kHalf, at::kFloat}, {at::kBFloat16, at::kHalf}, {at::kFloat, at::kDouble}, {at::kDouble, at::kBFloat16}};
    for (const auto& [input_dtype, weight_dtype] : pairs) {
      SCOPED_TRACE(std::string(c10::toString(input_dtype)) + " input, " + c10::toString(weight_dtype) + " weight");
      const auto x = random({kRows, kCols}, input_dtype, cuda);
      const auto w = random({kCols}, weight_dtype, cuda);
      EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(x, w), x, w));
    }
    const auto x = random({kCols}, at::kHalf, cuda);
    const auto w0 = random({}, at::kDouble, cuda);
    EXPECT_EQ(custom::weighted_sum(x, w0).scalar_type(), at::kHalf);
  }
  const auto x = random({kRows, kCols}, at::kFloat, cuda);
  const auto w = random({kCols}, at::kFloat, cuda);
  EXPECT_TRUE(torch::equal(custom::weighted_sum(x, w), w * x.square()));
  const auto xh = random({kRows, kCols}, at::kHalf, cuda);
  const auto wh = random({kRows, kCols}, at::kHalf, cuda);
  EXPECT_TRUE(
      torch::equal(custom::weighted_sum(xh, wh), (wh.to(at::kFloat) * xh.to(at::kFloat).square()).to(at::kHalf)));
}

TEST_F(WeightedSumCuda, NonContiguousMisalignedZeroDimEmptyAndLargeOperandsMatchReference) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto c = random({kRows, kCols}, dtype, cuda);
    const auto t = custom_ops_test::transposed(kRows, kCols, dtype, cuda);
    const auto s = custom_ops_test::sliced_with_step(kRows, kCols, dtype, cuda);
    const auto o = custom_ops_test::offset_by_one(kRows, kCols, dtype, cuda);
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(t, c), t, c));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(c, s), c, s));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(o, c), o, c));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(o, o), o, o));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(s, t), s, t));
  }
  const auto x0 = random({}, at::kFloat, cuda);
  const auto y0 = custom::weighted_sum(x0, x0);
  EXPECT_EQ(y0.dim(), 0);
  EXPECT_TRUE(IsWeightedSumOf(y0, x0, x0));
  const auto e = custom::weighted_sum(random({0, 3}, at::kFloat, cuda), random({3}, at::kFloat, cuda));
  EXPECT_EQ(e.sizes(), (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(e.is_cuda());
  // Many blocks, and the vectorized path with a tail.
  const auto x = random({1 << 20 | 3}, at::kBFloat16, cuda);
  const auto w = random({1 << 20 | 3}, at::kBFloat16, cuda);
  EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(x, w), x, w));
}

// The broadcast and transposed kernels (kernels/cuda/weighted_sum_forward_layout.h picks them), at sizes with
// partial blocks and partial tiles; under compute-sanitizer these are what memcheck and
// racecheck (the tiles' shared memory) look at.
TEST_F(WeightedSumCuda, BroadcastAndTransposedKernelsMatchReference) {
  constexpr int64_t kWideCols = 96;  // whole 16-byte vectors for every dtype
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kWideCols}, dtype, cuda);
    const auto row = random({kWideCols}, dtype, cuda);
    const auto column = random({kRows, 1}, dtype, cuda);
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(x, row), x, row));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(x, column), x, column));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(row, x), row, x));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(column, x), column, x));

    const auto t = custom_ops_test::transposed(kRows, kCols, dtype, cuda);
    const auto c = random({kRows, kCols}, dtype, cuda);
    const auto w = random({kCols}, dtype, cuda);
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(t, c), t, c));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(c, t), c, t));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(t, t), t, t));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(t, w), t, w));
    // Whole tiles for every dtype (32 x 32, 64 x 64 for 2-byte types) beside partial ones.
    const auto big = custom_ops_test::transposed(130, 200, dtype, cuda);
    const auto big_weight = random({130, 200}, dtype, cuda);
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(big, big_weight), big, big_weight));
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(big, big), big, big));
    auto out = nan_filled({kCols, kRows}, dtype, cuda).t();  // column-major out=
    custom::weighted_sum_out(out, c, w);
    EXPECT_TRUE(AllClose(out, reference(c, w), dtype));
  }
}

TEST_F(WeightedSumCuda, AutogradAndBackwardOpGiveAnalyticGradients) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    auto x = random({kRows, kCols}, dtype, cuda).requires_grad_();
    auto w = random({kCols}, dtype, cuda).requires_grad_();
    const auto g = random({kRows, kCols}, dtype, cuda);
    custom::weighted_sum(x, w).backward(g);
    const auto xd = x.detach().to(at::kCPU, at::kDouble);
    const auto wd = w.detach().to(at::kCPU, at::kDouble);
    const auto gd = g.to(at::kCPU, at::kDouble);
    ASSERT_TRUE(x.grad().defined());
    ASSERT_TRUE(w.grad().defined());
    EXPECT_TRUE(x.grad().is_cuda());
    EXPECT_EQ(w.grad().sizes(), w.sizes());
    const auto tol = custom_ops_test::tolerance(dtype);
    EXPECT_TRUE(custom_ops_test::AllCloseToSumOf(x.grad(), 2 * wd * xd * gd, x.sizes(), tol));
    EXPECT_TRUE(custom_ops_test::AllCloseToSumOf(w.grad(), xd.square() * gd, w.sizes(), tol));
  }
  {
    const auto g = random({kRows, kCols}, at::kFloat, cuda);
    const auto x = random({kRows, kCols}, at::kFloat, cuda);
    for (const auto& w : {random({kRows, kCols}, at::kFloat, cuda), random({kCols}, at::kFloat, cuda)}) {
      for (const std::array<bool, 2> mask :
           {std::array{true, true}, std::array{true, false}, std::array{false, true}, std::array{false, false}}) {
        SCOPED_TRACE(
            "weight shape " + c10::str(w.sizes()) + ", mask " + std::to_string(mask[0]) + std::to_string(mask[1]));
        const auto [gi, gw] = custom::weighted_sum_backward(g, x, w, mask);
        ASSERT_EQ(gi.defined(), mask[0]);
        ASSERT_EQ(gw.defined(), mask[1]);
        const auto xd = x.to(at::kCPU, at::kDouble);
        const auto gd = g.to(at::kCPU, at::kDouble);
        const auto wd = w.to(at::kCPU, at::kDouble);
        const auto tol = custom_ops_test::tolerance(at::kFloat);
        if (mask[0]) {
          EXPECT_TRUE(custom_ops_test::AllCloseToSumOf(gi, 2 * wd * xd * gd, x.sizes(), tol));
        }
        if (mask[1]) {
          EXPECT_TRUE(custom_ops_test::AllCloseToSumOf(gw, xd.square() * gd, w.sizes(), tol));
        }
      }
    }
  }
}

TEST_F(WeightedSumCuda, OutIsWrittenResizedAndCastLikeAten) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kCols}, dtype, cuda);
    const auto w = random({kCols}, dtype, cuda);
    auto out = nan_filled({kRows, kCols}, dtype, cuda);
    const void* storage = out.data_ptr();
    custom::weighted_sum_out(out, x, w);
    EXPECT_EQ(out.data_ptr(), storage);
    EXPECT_TRUE(AllClose(out, reference(x, w), dtype));
  }
  const auto x = random({kRows, kCols}, at::kFloat, cuda);
  const auto w = random({kRows, 1}, at::kFloat, cuda);
  auto resized = nan_filled({3}, at::kFloat, cuda);
  custom::weighted_sum_out(resized, x, w);
  EXPECT_EQ(resized.sizes(), (std::vector<int64_t>{kRows, kCols}));
  EXPECT_TRUE(AllClose(resized, reference(x, w), at::kFloat));
  auto wider = nan_filled({kRows, kCols}, at::kDouble, cuda);
  custom::weighted_sum_out(wider, x, w);
  EXPECT_TRUE(AllClose(wider, reference(x, w), at::kFloat));
  auto base = nan_filled({kRows, 2 * kCols}, at::kFloat, cuda);
  auto strided = base.slice(1, 1, 2 * kCols, 2);
  custom::weighted_sum_out(strided, x, w);
  EXPECT_TRUE(AllClose(strided, reference(x, w), at::kFloat));
  EXPECT_TRUE(base.slice(1, 0, 2 * kCols, 2).isnan().all().item<bool>()) << "wrote outside the view";
  auto int_out = torch::zeros({kRows, kCols}, torch::dtype(at::kInt).device(cuda));
  EXPECT_C10_ERROR(custom::weighted_sum_out(int_out, x, w), "out must have dtype");
}

TEST_F(WeightedSumCuda, InplaceOverwritesSelfForEachDtype) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    auto base = nan_filled({kRows, 2 * kCols + 1}, dtype, cuda);
    auto self = base.slice(1, 1, 2 * kCols + 1, 2);
    self.copy_(random({kRows, kCols}, dtype, cuda));
    const auto w = random({kCols}, dtype, cuda);
    const auto expected = reference(self, w);
    custom::weighted_sum_(self, w);
    EXPECT_TRUE(AllClose(self, expected, dtype));
    EXPECT_TRUE(base.slice(1, 0, 2 * kCols + 1, 2).isnan().all().item<bool>()) << "wrote outside the view";
  }
  auto self = random({kCols}, at::kFloat, cuda);
  EXPECT_C10_ERROR(custom::weighted_sum_(self, random({kRows, kCols}, at::kFloat, cuda)), "cannot resize self");
}

TEST_F(WeightedSumCuda, OperandsOnDifferentDevicesAreRejected) {
  const auto x = random({kCols}, at::kFloat, cuda);
  const auto w_cpu = random({kCols}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_sum(x, w_cpu), "input and weight on the same device", "cuda:0", "cpu");
  EXPECT_C10_ERROR(custom::weighted_sum(w_cpu, x), "same device");
  auto cpu_out = torch::empty({kCols});
  EXPECT_C10_ERROR(custom::weighted_sum_out(cpu_out, x, x), "expected out on cuda:0", "got out on cpu");
  auto cuda_out = torch::empty({kCols}, torch::device(cuda));
  EXPECT_C10_ERROR(custom::weighted_sum_out(cuda_out, w_cpu, w_cpu), "expected out on cpu", "got out on cuda:0");
  auto self = random({kCols}, at::kFloat, cuda);
  EXPECT_C10_ERROR(custom::weighted_sum_(self, w_cpu), "self and weight on the same device");
}

TEST_F(WeightedSumCuda, RunsOnTheDeviceOfItsOperandsNotTheCurrentDevice) {
  if (torch::cuda::device_count() < 2) {
    GTEST_SKIP() << "needs two CUDA devices, found " << torch::cuda::device_count();
  }
  const at::Device second(at::kCUDA, 1);
  const auto x = random({kRows, kCols}, at::kFloat, second);
  const auto w = random({kCols}, at::kFloat, second);
  const auto y = custom::weighted_sum(x, w);  // current device is still 0
  EXPECT_EQ(y.device(), second);
  EXPECT_TRUE(IsWeightedSumOf(y, x, w));
}

}  // namespace
