// SPDX-License-Identifier: BSD-3-Clause
// custom::weighted_square_sum on the GPU: values, rounding, full-reduction totals, gradients and
// device errors, as on the CPU. Every test skips, saying why, unless a GPU is visible and the
// library registered its CUDA kernels (cuda_test.h).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <custom_ops/custom_ops.h>

#include <optional>
#include <vector>

#include "cuda_test.h"
#include "expect_error.h"
#include "reference.h"
#include "weighted_square_sum_reference.h"

namespace {

using custom_ops_test::gradients;
using custom_ops_test::IsWeightedSquareSumOf;
using custom_ops_test::kCols;
using custom_ops_test::kRows;
using custom_ops_test::random;
using custom_ops_test::Reduction;
using custom_ops_test::Shape;
using custom_ops_test::weighted_square_sum;

constexpr const char* kOp = "custom::weighted_square_sum";

class WeightedSquareSumCuda : public custom_ops_test::CudaTest {};

TEST_F(WeightedSquareSumCuda, ValuesMatchReferenceForEachDtypeDimAndLayout) {
  for (const auto dtype : custom_ops_test::kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kCols}, dtype, cuda);
    for (const auto& w :
         {random({kRows, kCols}, dtype, cuda), random({kCols}, dtype, cuda), random({kRows, 1}, dtype, cuda),
          custom_ops_test::transposed(kRows, kCols, dtype, cuda)}) {
      SCOPED_TRACE("weight shape " + c10::str(w.sizes()) + ", strides " + c10::str(w.strides()));
      for (const auto& r : custom_ops_test::rank2_reductions()) {
        SCOPED_TRACE(r.str());
        EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
      }
    }
  }
  const auto x = random({3, 4, 5, 6}, at::kFloat, cuda);
  const auto w = random({4, 1, 6}, at::kFloat, cuda);
  for (const auto& dim : std::vector<Shape>{{0, 2}, {1, 3}, {3}, {0, 1, 2, 3}}) {
    const Reduction r{dim, false, at::kDouble};
    SCOPED_TRACE(r.str());
    EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
  }
  const auto empty = random({0, 4}, at::kFloat, cuda);
  const auto w4 = random({4}, at::kFloat, cuda);
  for (const auto& r : {Reduction{std::nullopt}, Reduction{Shape{0}}, Reduction{Shape{1}, true}}) {
    SCOPED_TRACE("empty input, " + r.str());
    EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(empty, w4, r), empty, w4, r));
  }
}

TEST_F(WeightedSquareSumCuda, LowPrecisionResultsAreTheFloat32SumsRoundedOnce) {
  custom_ops_test::expect_rounded_once(cuda);
}

TEST_F(WeightedSquareSumCuda, TotalsWithBroadcastWeightsMatchAndRepeatBitwise) {
  custom_ops_test::expect_totals_match(cuda);
  // 2^26 elements: a few hundred block partials, added by the last block; the same bits each run.
  const auto x = random({1 << 16, 1024}, at::kBFloat16, cuda);
  const auto w = random({1024}, at::kBFloat16, cuda);
  const auto y = custom::weighted_square_sum(x, w);
  EXPECT_TRUE(IsWeightedSquareSumOf(y, x, w, {std::nullopt}));
  for (int run = 0; run < 3; ++run) {
    EXPECT_TRUE(torch::equal(custom::weighted_square_sum(x, w), y));
  }
}

TEST_F(WeightedSquareSumCuda, GradientsMatchTheCpuOnes) {
  const auto x = random({kRows, kCols}, at::kDouble);
  const auto w = random({kCols}, at::kDouble);
  const Reduction r{Shape{1}};
  const auto g = random({kRows}, at::kDouble);
  const auto f = [&](const at::Tensor& a, const at::Tensor& b) { return weighted_square_sum(a, b, r); };
  const auto cpu = gradients(f, x, w, g);
  const auto gpu = gradients(f, x.to(cuda), w.to(cuda), g.to(cuda));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(gpu[i].is_cuda());
    EXPECT_TRUE(torch::allclose(gpu[i].cpu(), cpu[i], 1e-12, 1e-12));
  }
}

TEST_F(WeightedSquareSumCuda, OperandsOnCpuAndCudaAreRejectedNamingBoth) {
  const auto x = random({4}, at::kFloat, cuda);
  const auto w = random({4}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w), kOp, "input on cuda:0", "weight on cpu");
}

}  // namespace
