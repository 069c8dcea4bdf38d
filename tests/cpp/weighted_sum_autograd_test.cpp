// SPDX-License-Identifier: BSD-3-Clause
// Autograd from C++: gradients of custom::weighted_sum against the analytic ones (2*w*x*g for the
// input, x^2*g for the weight, each reduced to its argument's shape), second order, the in-place
// and out= overloads under autograd, and custom::weighted_sum_backward per output_mask.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <custom_ops/custom_ops.h>

#include "expect_error.h"
#include "reference.h"

namespace {

using custom_ops_test::AllClose;
using custom_ops_test::kFloatingDtypes;
using custom_ops_test::random;

constexpr int64_t kRows = 5;
constexpr int64_t kCols = 67;

at::Tensor as_double(const at::Tensor& t) {
  return t.detach().to(at::kCPU, at::kDouble);
}

// The terms whose sums over the broadcast dimensions are the analytic gradients of
// sum(g * w * x^2): 2*w*x*g for the input, x^2*g for the weight.
at::Tensor input_grad_terms(const at::Tensor& g, const at::Tensor& x, const at::Tensor& w) {
  return 2 * as_double(w) * as_double(x) * as_double(g);
}
at::Tensor weight_grad_terms(const at::Tensor& g, const at::Tensor& x, const at::Tensor& /*w*/) {
  return as_double(x).square() * as_double(g);
}

// The gradient of `argument` is the sum of `terms` down to the argument's shape.
::testing::AssertionResult IsGradient(
    const at::Tensor& grad, const at::Tensor& argument, const at::Tensor& terms, at::ScalarType compute) {
  if (!grad.defined()) {
    return ::testing::AssertionFailure() << "gradient is undefined";
  }
  if (grad.scalar_type() != argument.scalar_type()) {
    return ::testing::AssertionFailure() << "gradient dtype " << grad.scalar_type() << ", expected "
                                         << argument.scalar_type();
  }
  return custom_ops_test::AllCloseToSumOf(
      grad, terms, argument.sizes(), custom_ops_test::tolerance(compute, argument.scalar_type()));
}

class WeightedSumAutograd : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_F(WeightedSumAutograd, BackwardGivesAnalyticGradientsForEachDtype) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    auto x = random({kRows, kCols}, dtype).requires_grad_();
    auto w = random({kRows, kCols}, dtype).requires_grad_();
    const auto y = custom::weighted_sum(x, w);
    ASSERT_TRUE(y.requires_grad());
    ASSERT_NE(y.grad_fn(), nullptr);
    y.sum().backward();
    const auto ones = torch::ones({kRows, kCols}, torch::kDouble);
    EXPECT_TRUE(IsGradient(x.grad(), x, input_grad_terms(ones, x, w), dtype));
    EXPECT_TRUE(IsGradient(w.grad(), w, weight_grad_terms(ones, x, w), dtype));
  }
  // A non-trivial upstream gradient.
  auto x = random({kRows, kCols}, at::kDouble).requires_grad_();
  auto w = random({kRows, kCols}, at::kDouble).requires_grad_();
  const auto g = random({kRows, kCols}, at::kDouble);
  custom::weighted_sum(x, w).backward(g);
  EXPECT_TRUE(IsGradient(x.grad(), x, input_grad_terms(g, x, w), at::kDouble));
  EXPECT_TRUE(IsGradient(w.grad(), w, weight_grad_terms(g, x, w), at::kDouble));
}

TEST_F(WeightedSumAutograd, BroadcastGradientsAreReducedToEachArgumentsShape) {
  for (const auto& weight_shape : std::vector<std::vector<int64_t>>{{kCols}, {1, kCols}, {kRows, 1}, {}}) {
    SCOPED_TRACE("weight shape " + c10::str(at::IntArrayRef(weight_shape)));
    auto x = random({kRows, kCols}, at::kDouble).requires_grad_();
    auto w = random(weight_shape, at::kDouble).requires_grad_();
    const auto g = random({kRows, kCols}, at::kDouble);
    custom::weighted_sum(x, w).backward(g);
    EXPECT_TRUE(IsGradient(w.grad(), w, weight_grad_terms(g, x, w), at::kDouble));
    EXPECT_TRUE(IsGradient(x.grad(), x, input_grad_terms(g, x, w), at::kDouble));
  }
  // The input broadcast instead: {67} against {5, 1, 67}.
  auto x = random({kCols}, at::kFloat).requires_grad_();
  auto w = random({kRows, 1, kCols}, at::kFloat).requires_grad_();
  const auto g = random({kRows, 1, kCols}, at::kFloat);
  custom::weighted_sum(x, w).backward(g);
  EXPECT_TRUE(IsGradient(x.grad(), x, input_grad_terms(g, x, w), at::kFloat));
  EXPECT_TRUE(IsGradient(w.grad(), w, weight_grad_terms(g, x, w), at::kFloat));
}

TEST_F(WeightedSumAutograd, MixedDtypeGradientsHaveEachArgumentsDtype) {
  auto x = random({kRows, kCols}, at::kFloat).requires_grad_();
  auto w = random({kCols}, at::kDouble).requires_grad_();
  const auto y = custom::weighted_sum(x, w);
  EXPECT_EQ(y.scalar_type(), at::kDouble);
  y.sum().backward();
  const auto ones = torch::ones({kRows, kCols}, torch::kDouble);
  EXPECT_TRUE(IsGradient(x.grad(), x, input_grad_terms(ones, x, w), at::kDouble));  // float32
  EXPECT_TRUE(IsGradient(w.grad(), w, weight_grad_terms(ones, x, w), at::kDouble));  // float64
}

TEST_F(WeightedSumAutograd, OnlyArgumentsThatRequireGradReceiveOneAndNoGradRecordsNothing) {
  auto x = random({kRows, kCols}, at::kDouble).requires_grad_();
  auto w = random({kCols}, at::kDouble);
  custom::weighted_sum(x, w).sum().backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());

  auto x2 = random({kRows, kCols}, at::kDouble);
  auto w2 = random({kCols}, at::kDouble).requires_grad_();
  custom::weighted_sum(x2, w2).sum().backward();
  EXPECT_FALSE(x2.grad().defined());
  EXPECT_TRUE(AllClose(w2.grad(), x2.square().sum(0), at::kDouble));

  torch::NoGradGuard no_grad;
  const auto y = custom::weighted_sum(x, w2);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

TEST_F(WeightedSumAutograd, SecondOrderGradientsMatchAnalytic) {
  // L = sum(w * x^2): dL/dx = 2 w x, and d(sum(dL/dx))/dx = 2 w, d(sum(dL/dx))/dw = 2 x (summed to w).
  auto x = random({kRows, kCols}, at::kDouble).requires_grad_();
  auto w = random({kCols}, at::kDouble).requires_grad_();
  const auto loss = custom::weighted_sum(x, w).sum();
  const auto first = torch::autograd::grad({loss}, {x, w}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  ASSERT_TRUE(first[0].requires_grad());
  EXPECT_TRUE(AllClose(first[0], 2 * w.detach() * x.detach(), at::kDouble));
  EXPECT_TRUE(AllClose(first[1], x.detach().square().sum(0), at::kDouble));
  const auto second = torch::autograd::grad({first[0].sum()}, {x, w});
  EXPECT_TRUE(AllClose(second[0], (2 * w.detach()).expand({kRows, kCols}), at::kDouble));
  EXPECT_TRUE(AllClose(second[1], (2 * x.detach()).sum(0), at::kDouble));

  // Only one argument requires grad, so the backward op runs with a one-sided output_mask.
  auto x_only = random({kRows, kCols}, at::kDouble).requires_grad_();
  const auto w_const = random({kCols}, at::kDouble);
  const auto gx = torch::autograd::grad(
      {custom::weighted_sum(x_only, w_const).sum()}, {x_only}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  EXPECT_TRUE(
      AllClose(torch::autograd::grad({gx.sum()}, {x_only})[0], (2 * w_const).expand({kRows, kCols}), at::kDouble));
  auto w_only = random({kCols}, at::kDouble).requires_grad_();
  const auto x_const = random({kRows, kCols}, at::kDouble);
  const auto gw = torch::autograd::grad(
      {custom::weighted_sum(x_const, w_only).sum()}, {w_only}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  EXPECT_TRUE(AllClose(gw, x_const.square().sum(0), at::kDouble));
  // gw does not depend on w: its gradient is zero or absent.
  const auto ggw = torch::autograd::grad({gw.sum()}, {w_only}, {}, std::nullopt, false, /*allow_unused=*/true)[0];
  EXPECT_TRUE(!ggw.defined() || torch::equal(ggw, torch::zeros_like(ggw)));
}

TEST_F(WeightedSumAutograd, MixedDtypeSecondOrderComputesInThePromotedDtype) {
  // A float32 input and a float64 weight: the double backward computes in float64 and rounds to
  // each argument's dtype at the end, so the weight's second derivative keeps float64 precision.
  auto x = random({kRows, kCols}, at::kFloat).requires_grad_();
  auto w = random({kCols}, at::kDouble).requires_grad_();
  const auto g = random({kRows, kCols}, at::kDouble);
  const auto v = random({kRows, kCols}, at::kFloat);
  const auto gx = torch::autograd::grad({custom::weighted_sum(x, w)}, {x}, {g}, true, /*create_graph=*/true)[0];
  const auto second = torch::autograd::grad({(gx * v).sum()}, {x, w});
  // d(sum(2 w x g v))/dx = 2 w g v, /dw = sum_to(2 x g v, w).
  EXPECT_TRUE(IsGradient(second[0], x, 2 * as_double(w) * g * as_double(v), at::kDouble));  // float32
  EXPECT_TRUE(IsGradient(second[1], w, 2 * as_double(x) * g * as_double(v), at::kDouble));  // float64
}

TEST_F(WeightedSumAutograd, InplaceOnNonLeafOrItsViewBackpropagatesThroughTheOriginalValues) {
  auto leaf = random({kRows, kCols}, at::kDouble).requires_grad_();
  auto w = random({kCols}, at::kDouble).requires_grad_();
  auto self = leaf * 1.0;  // a non-leaf holding leaf's values
  custom::weighted_sum_(self, w);
  EXPECT_TRUE(AllClose(self, custom_ops_test::reference(leaf, w), at::kDouble));
  const auto g = random({kRows, kCols}, at::kDouble);
  self.backward(g);
  EXPECT_TRUE(IsGradient(leaf.grad(), leaf, input_grad_terms(g, leaf, w), at::kDouble));
  EXPECT_TRUE(IsGradient(w.grad(), w, weight_grad_terms(g, leaf, w), at::kDouble));

  // In place on a view (one row) of a non-leaf: the base's graph is rewritten, so only that row's
  // gradient changes.
  auto leaf2 = random({kRows, kCols}, at::kDouble).requires_grad_();
  auto w2 = random({kCols}, at::kDouble).requires_grad_();
  auto base = leaf2 * 1.0;
  auto row = base.select(0, 2);
  custom::weighted_sum_(row, w2);
  base.sum().backward();
  auto expected = torch::ones({kRows, kCols}, torch::kDouble);
  expected.select(0, 2).copy_(2 * w2.detach() * leaf2.detach().select(0, 2));
  EXPECT_TRUE(AllClose(leaf2.grad(), expected, at::kDouble));
  EXPECT_TRUE(AllClose(w2.grad(), leaf2.detach().select(0, 2).square(), at::kDouble));
}

TEST_F(WeightedSumAutograd, MutatingOverloadsRefuseWhatAtenRefuses) {
  // In place on a leaf that requires grad.
  auto leaf = random({kCols}, at::kFloat).requires_grad_();
  EXPECT_C10_ERROR(custom::weighted_sum_(leaf, random({kCols}, at::kFloat)), "leaf Variable that requires grad");
  // out= with an argument that requires grad, unless grad mode is off.
  auto x = random({kCols}, at::kFloat).requires_grad_();
  auto out = torch::empty({kCols});
  EXPECT_C10_ERROR(
      custom::weighted_sum_out(out, x, random({kCols}, at::kFloat)), "custom::weighted_sum.out",
      "don't support automatic differentiation");
  {
    torch::NoGradGuard no_grad;
    custom::weighted_sum_out(out, x, random({kCols}, at::kFloat));
  }
  // In place on a tensor another node saved: its backward sees the version change.
  auto a = random({kCols}, at::kDouble).requires_grad_();
  auto b = random({kCols}, at::kDouble);
  const auto product = a * b;  // saves b
  custom::weighted_sum_(b, random({kCols}, at::kDouble));
  EXPECT_C10_ERROR(product.sum().backward(), "modified by an inplace operation");
}

// weighted_sum_backward itself, per output_mask, on the fused path (same shapes and dtypes) and
// on the separate path (broadcast weight, mixed dtypes).
TEST_F(WeightedSumAutograd, BackwardOpReturnsExactlyTheRequestedGradients) {
  struct Case {
    const char* name;
    at::Tensor grad, input, weight;
  };
  const std::vector<Case> cases = {
      {"same shape", random({kRows, kCols}, at::kDouble), random({kRows, kCols}, at::kDouble),
       random({kRows, kCols}, at::kDouble)},
      {"broadcast weight", random({kRows, kCols}, at::kDouble), random({kRows, kCols}, at::kDouble),
       random({kCols}, at::kDouble)},
      {"broadcast input", random({kRows, kCols}, at::kFloat), random({kRows, 1}, at::kFloat),
       random({kRows, kCols}, at::kFloat)},
      {"mixed dtypes", random({kRows, kCols}, at::kDouble), random({kRows, kCols}, at::kFloat),
       random({kRows, kCols}, at::kDouble)},
      {"half", random({kRows, kCols}, at::kHalf), random({kRows, kCols}, at::kHalf), random({kCols}, at::kHalf)},
  };
  for (const auto& c : cases) {
    for (const std::array<bool, 2> mask :
         {std::array{true, true}, std::array{true, false}, std::array{false, true}, std::array{false, false}}) {
      SCOPED_TRACE(
          std::string(c.name) + ", mask {" + (mask[0] ? "true" : "false") + ", " + (mask[1] ? "true" : "false") + "}");
      const auto [grad_input, grad_weight] = custom::weighted_sum_backward(c.grad, c.input, c.weight, mask);
      ASSERT_EQ(grad_input.defined(), mask[0]);
      ASSERT_EQ(grad_weight.defined(), mask[1]);
      const auto compute = at::result_type(c.input, c.weight);
      if (mask[0]) {
        EXPECT_TRUE(IsGradient(grad_input, c.input, input_grad_terms(c.grad, c.input, c.weight), compute));
      }
      if (mask[1]) {
        EXPECT_TRUE(IsGradient(grad_weight, c.weight, weight_grad_terms(c.grad, c.input, c.weight), compute));
      }
    }
  }
  const auto [empty_gi, empty_gw] = custom::weighted_sum_backward(
      torch::empty({0, kCols}), torch::empty({0, kCols}), random({kCols}, at::kFloat), {true, true});
  EXPECT_EQ(empty_gi.sizes(), (std::vector<int64_t>{0, kCols}));
  EXPECT_TRUE(torch::equal(empty_gw, torch::zeros({kCols}))) << "an empty sum is zero";
}

}  // namespace
