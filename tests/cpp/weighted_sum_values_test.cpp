// SPDX-License-Identifier: BSD-3-Clause
// custom::weighted_sum on the CPU: values against the float64 reference for every dtype, dtype
// pair, broadcast and memory layout. (ctest runs each TEST as its own process, which costs about
// half a second of libtorch start-up, so related checks share a TEST.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <custom_ops/custom_ops.h>

#include <limits>
#include <utility>
#include <vector>

#include "reference.h"

namespace {

using custom_ops_test::IsWeightedSumOf;
using custom_ops_test::kFloatingDtypes;
using custom_ops_test::random;

// 5 x 67: several vector widths plus a scalar tail in each row.
constexpr int64_t kRows = 5;
constexpr int64_t kCols = 67;

class WeightedSumValues : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_F(WeightedSumValues, SameShapeMatchesReferenceForEachDtype) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kCols}, dtype);
    const auto w = random({kRows, kCols}, dtype);
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(x, w), x, w));
    // More elements than at::internal::GRAIN_SIZE, so at::parallel_for splits the work.
    const auto big_x = random({129, 257}, dtype);
    const auto big_w = random({129, 257}, dtype);
    EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(big_x, big_w), big_x, big_w));
  }
}

TEST_F(WeightedSumValues, MixedDtypesPromoteLikeResultType) {
  const std::vector<std::pair<at::ScalarType, at::ScalarType>> pairs = {
      {at::kHalf, at::kFloat},    {at::kFloat, at::kHalf},   {at::kBFloat16, at::kFloat},  {at::kHalf, at::kBFloat16},
      {at::kBFloat16, at::kHalf}, {at::kFloat, at::kDouble}, {at::kDouble, at::kBFloat16}, {at::kHalf, at::kDouble},
  };
  for (const auto& [input_dtype, weight_dtype] : pairs) {
    SCOPED_TRACE(std::string(c10::toString(input_dtype)) + " input, " + c10::toString(weight_dtype) + " weight");
    const auto x = random({kRows, kCols}, input_dtype);
    const auto w = random({kCols}, weight_dtype);
    const auto y = custom::weighted_sum(x, w);
    EXPECT_EQ(y.scalar_type(), c10::promoteTypes(input_dtype, weight_dtype));
    EXPECT_TRUE(IsWeightedSumOf(y, x, w));
  }
  // at::result_type: a 0-dim float64 operand does not widen a float16 tensor's result.
  const auto x = random({kCols}, at::kHalf);
  const auto w0 = random({}, at::kDouble);
  const auto y = custom::weighted_sum(x, w0);
  EXPECT_EQ(y.scalar_type(), at::kHalf);
  EXPECT_TRUE(IsWeightedSumOf(y, x, w0));
  EXPECT_EQ(custom::weighted_sum(w0, x).scalar_type(), at::kHalf);
}

TEST_F(WeightedSumValues, BroadcastWeightAndBothOperandsMatchReference) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kCols}, dtype);
    for (const auto& w : {random({kCols}, dtype), random({kRows, 1}, dtype), random({1, 1, kCols}, dtype)}) {
      SCOPED_TRACE("weight shape " + c10::str(w.sizes()));
      EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(x, w), x, w));
    }
  }
  // Both grow: {4, 1, 7} and {3, 1} broadcast to {4, 3, 7}, whichever is the input.
  const auto a = random({4, 1, 7}, at::kFloat);
  const auto b = random({3, 1}, at::kFloat);
  const auto y = custom::weighted_sum(a, b);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{4, 3, 7}));
  EXPECT_TRUE(IsWeightedSumOf(y, a, b));
  EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(b, a), b, a));
}

TEST_F(WeightedSumValues, ZeroDimAndEmptyOperandsGiveTheBroadcastShape) {
  const auto x0 = random({}, at::kDouble);
  const auto w0 = random({}, at::kDouble);
  const auto y0 = custom::weighted_sum(x0, w0);
  EXPECT_EQ(y0.dim(), 0);
  EXPECT_TRUE(IsWeightedSumOf(y0, x0, w0));
  const auto x = random({kRows, kCols}, at::kDouble);
  EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(x, w0), x, w0));
  EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(x0, x), x0, x));

  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto y = custom::weighted_sum(random({0, 3}, dtype), random({3}, dtype));
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{0, 3}));
    EXPECT_EQ(y.scalar_type(), dtype);
    EXPECT_EQ(custom::weighted_sum(random({0, 1}, dtype), random({4}, dtype)).sizes(), (std::vector<int64_t>{0, 4}));
    EXPECT_EQ(custom::weighted_sum(random({0}, dtype), random({}, dtype)).sizes(), (std::vector<int64_t>{0}));
  }
}

TEST_F(WeightedSumValues, TransposedSlicedOffsetAndExpandedOperandsMatchReference) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto contiguous = random({kRows, kCols}, dtype);
    const auto transposed = custom_ops_test::transposed(kRows, kCols, dtype);
    const auto sliced = custom_ops_test::sliced_with_step(kRows, kCols, dtype);
    const auto offset = custom_ops_test::offset_by_one(kRows, kCols, dtype);
    const auto expanded = random({kCols}, dtype).expand({kRows, kCols});
    ASSERT_FALSE(transposed.is_contiguous());
    ASSERT_EQ(sliced.stride(1), 2);
    ASSERT_EQ(offset.storage_offset(), 1);
    ASSERT_EQ(expanded.stride(0), 0);
    const std::vector<std::pair<const char*, at::Tensor>> layouts = {
        {"contiguous", contiguous},
        {"transposed", transposed},
        {"sliced with step 2", sliced},
        {"offset by one", offset},
        {"expanded", expanded}};
    for (const auto& [input_name, x] : layouts) {
      for (const auto& [weight_name, w] : layouts) {
        SCOPED_TRACE(std::string(input_name) + " input, " + weight_name + " weight");
        EXPECT_TRUE(IsWeightedSumOf(custom::weighted_sum(x, w), x, w));
      }
    }
  }
}

TEST_F(WeightedSumValues, RoundsLikeTheAtenExpressionIncludingNonFiniteValues) {
  // float32 and float64 keep the operation order of w * x.square(): bitwise equal.
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kCols}, dtype);
    const auto w = random({kCols}, dtype);
    EXPECT_TRUE(torch::equal(custom::weighted_sum(x, w), w * x.square()));
  }
  // float16 and bfloat16 compute in float32 and round once at the end.
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kCols}, dtype);
    const auto w = random({kRows, kCols}, dtype);
    const auto in_float = (w.to(at::kFloat) * x.to(at::kFloat).square()).to(dtype);
    EXPECT_TRUE(torch::equal(custom::weighted_sum(x, w), in_float));
  }
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto x = torch::tensor({inf, -inf, nan, 2.0, inf}, torch::kFloat);
  const auto w = torch::tensor({1.0, -1.0, 1.0, inf, 0.0}, torch::kFloat);
  const auto y = custom::weighted_sum(x, w);
  EXPECT_TRUE(torch::allclose(y, w * x.square(), 0, 0, /*equal_nan=*/true)) << y;  // inf, -inf, nan, inf, nan
}

}  // namespace
