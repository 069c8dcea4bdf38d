// SPDX-License-Identifier: BSD-3-Clause
// custom::weighted_square_sum's argument checks: each error names the op, the argument and the
// problem (dims out of range or repeated, non-floating operands or dtype=, shapes that do not
// broadcast, operands on different devices or undefined).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <custom_ops/custom_ops.h>

#include <optional>
#include <vector>

#include "expect_error.h"
#include "reference.h"

namespace {

using custom_ops_test::random;
using Shape = std::vector<int64_t>;

constexpr const char* kOp = "custom::weighted_square_sum";

TEST(WeightedSquareSumErrors, DimOutOfRangeOfTheBroadcastShapeIsAnIndexError) {
  const auto x = random({2, 3}, at::kFloat);
  const auto w = random({3}, at::kFloat);
  EXPECT_THROW(custom::weighted_square_sum(x, w, Shape{2}), c10::IndexError);
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{2}), kOp, "dim 2 is out of range", "[-2, 1]");
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{0, -3}), kOp, "dim -3 is out of range");
  // The range is the broadcast shape's, not the input's.
  const auto x1 = random({3}, at::kFloat);
  const auto w2 = random({2, 3}, at::kFloat);
  EXPECT_NO_THROW(custom::weighted_square_sum(x1, w2, Shape{-2}));
  EXPECT_C10_ERROR(custom::weighted_square_sum(x1, w2, Shape{2}), kOp, "dim 2 is out of range");
  // A 0-dim shape takes 0 and -1 only, as torch.sum.
  const auto s = random({}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_square_sum(s, s, Shape{1}), kOp, "dim 1 is out of range", "[-1, 0]");
  // The same through the Autograd kernel.
  const auto xg = random({2, 3}, at::kFloat).requires_grad_();
  EXPECT_C10_ERROR(custom::weighted_square_sum(xg, w, Shape{5}), kOp, "dim 5 is out of range");
}

TEST(WeightedSquareSumErrors, RepeatedDimIsRejectedNamingIt) {
  const auto x = random({2, 3}, at::kFloat);
  const auto w = random({3}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{1, 1}), kOp, "dim 1 appears more than once");
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{1, -1}), kOp, "appears more than once");
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{0, -2}, true), kOp, "appears more than once");
  const auto s = random({}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_square_sum(s, s, Shape{0, -1}), kOp, "appears more than once");
}

TEST(WeightedSquareSumErrors, NonFloatingOperandsAreRejectedNamingTheArgument) {
  const auto good = random({4}, at::kFloat);
  for (const auto dtype : {at::kByte, at::kInt, at::kLong, at::kBool, at::kComplexFloat}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto bad = torch::ones({4}, torch::dtype(dtype));
    EXPECT_C10_ERROR(
        custom::weighted_square_sum(bad, good),
        "custom::weighted_square_sum: input must have dtype float16, bfloat16, float32 or float64, got",
        c10::toString(dtype));
    EXPECT_C10_ERROR(
        custom::weighted_square_sum(good, bad, Shape{0}), "custom::weighted_square_sum: weight must have dtype",
        c10::toString(dtype));
  }
}

TEST(WeightedSquareSumErrors, NonFloatingDtypeArgumentIsRejectedNamingIt) {
  const auto x = random({2, 3}, at::kFloat);
  const auto w = random({3}, at::kFloat);
  for (const auto dtype : {at::kInt, at::kLong, at::kBool, at::kComplexDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    EXPECT_C10_ERROR(
        custom::weighted_square_sum(x, w, std::nullopt, false, dtype),
        "custom::weighted_square_sum: dtype must be float16, bfloat16, float32 or float64, got", c10::toString(dtype));
    EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{1}, true, dtype), kOp, "dtype must be");
  }
}

TEST(WeightedSquareSumErrors, NonBroadcastableShapesAreRejectedNamingBoth) {
  const auto x = random({2, 3}, at::kFloat);
  const auto w = random({4}, at::kFloat);
  EXPECT_C10_ERROR(
      custom::weighted_square_sum(x, w), kOp, "input of shape [2, 3]", "weight of shape [4]", "not broadcastable");
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{0}, true), kOp, "not broadcastable");
  // Before the dims are checked against the (nonexistent) broadcast shape.
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{7}), kOp, "not broadcastable");
}

TEST(WeightedSquareSumErrors, OperandsOnDifferentDevicesOrUndefinedAreRejectedNamingThem) {
  // The Meta device stands in for a second device: it needs no GPU.
  const auto x = random({4}, at::kFloat);
  const auto meta = torch::empty({4}, torch::dtype(at::kFloat).device(at::kMeta));
  EXPECT_C10_ERROR(
      custom::weighted_square_sum(x, meta), kOp, "expected input and weight on the same device", "input on cpu",
      "weight on meta");
  EXPECT_C10_ERROR(custom::weighted_square_sum(at::Tensor(), x), kOp, "input is an undefined tensor");
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, at::Tensor()), kOp, "weight is an undefined tensor");
}

}  // namespace
