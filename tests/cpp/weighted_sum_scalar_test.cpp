// SPDX-License-Identifier: BSD-3-Clause
// custom::weighted_sum(input, Scalar): the C++ overload for a number as weight.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <custom_ops/custom_ops.h>

#include "reference.h"

namespace {

using custom_ops_test::kFloatingDtypes;
using custom_ops_test::random;

TEST(WeightedSumScalar, KeepsInputDtypeAndEqualsTheTensorOverload) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({5, 7}, dtype);
    const auto result = custom::weighted_sum(x, 2.5);
    EXPECT_EQ(result.scalar_type(), dtype);  // like x * 2.5
    EXPECT_TRUE(torch::equal(result, custom::weighted_sum(x, torch::tensor(2.5, torch::dtype(dtype)))));
  }
}

TEST(WeightedSumScalar, GradientWithRespectToInput) {
  const auto x = random({4, 3}, at::kDouble).requires_grad_();
  const auto y = custom::weighted_sum(x, 1.5);
  const auto grad = torch::autograd::grad({y}, {x}, {torch::ones_like(y)})[0];
  EXPECT_TRUE(torch::allclose(grad, 3.0 * x.detach()));
}

TEST(WeightedSumScalar, IntegerInputIsRefused) {
  EXPECT_THROW(custom::weighted_sum(torch::ones({3}, torch::kInt), 2.0), c10::Error);
}

}  // namespace
