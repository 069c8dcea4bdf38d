// SPDX-License-Identifier: BSD-3-Clause
// custom::weighted_square_sum under autograd from C++ alone: backward, double backward,
// forward-mode AD and forward over reverse, against the same derivatives of the composite
// (weight * input.square()).sum(dim, keepdim, dtype=dtype), for every dim list and broadcast.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <custom_ops/custom_ops.h>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dual_level.h"
#include "reference.h"
#include "weighted_square_sum_reference.h"

namespace {

using custom_ops_test::DualLevel;
using custom_ops_test::gradients;
using custom_ops_test::kCols;
using custom_ops_test::kFloatingDtypes;
using custom_ops_test::kRows;
using custom_ops_test::random;
using custom_ops_test::Reduction;
using custom_ops_test::Shape;
using custom_ops_test::weighted_square_sum;
using custom_ops_test::weighted_square_sum_composite;

struct AutogradCase {
  Shape x;
  Shape w;
  Reduction r;
};

std::vector<AutogradCase> autograd_cases() {
  return {
      {{5, 7}, {5, 7}, {std::nullopt}},
      {{5, 7}, {5, 7}, {Shape{}, true}},
      {{5, 7}, {7}, {Shape{0}}},
      {{5, 7}, {7}, {Shape{1}, true}},
      {{5, 7}, {5, 1}, {Shape{-1}}},
      {{3, 4, 5}, {4, 1}, {Shape{0, 2}}},
      {{3, 4, 5}, {}, {Shape{-1}, true}},
      {{3, 4, 5}, {5}, {Shape{2, 0, 1}}},
      {{4, 1}, {1, 6}, {Shape{1}}},
      {{7}, {3, 1, 7}, {Shape{0}, true}},
      {{}, {3}, {Shape{0}}},
      {{}, {}, {std::nullopt, true}},
      {{0, 3}, {3}, {Shape{0}}},
  };
}

class WeightedSquareSumAutograd : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_F(WeightedSquareSumAutograd, BackwardMatchesCompositeForEachDimAndBroadcast) {
  for (const auto& c : autograd_cases()) {
    SCOPED_TRACE(
        "input " + c10::str(at::IntArrayRef(c.x)) + ", weight " + c10::str(at::IntArrayRef(c.w)) + ", " + c.r.str());
    const auto x = random(c.x, at::kDouble);
    const auto w = random(c.w, at::kDouble);
    const auto result = weighted_square_sum(x.clone().requires_grad_(), w, c.r);
    ASSERT_TRUE(result.requires_grad());
    ASSERT_NE(result.grad_fn(), nullptr);
    const auto g = random(result.sizes(), at::kDouble);
    const auto r = c.r;
    const auto got = gradients([&](const auto& a, const auto& b) { return weighted_square_sum(a, b, r); }, x, w, g);
    const auto expected =
        gradients([&](const auto& a, const auto& b) { return weighted_square_sum_composite(a, b, r); }, x, w, g);
    for (size_t i = 0; i < 2; ++i) {
      SCOPED_TRACE(i == 0 ? "grad of input" : "grad of weight");
      ASSERT_TRUE(got[i].defined());
      EXPECT_EQ(got[i].sizes(), expected[i].sizes());
      EXPECT_EQ(got[i].scalar_type(), at::kDouble);
      EXPECT_TRUE(torch::allclose(got[i], expected[i], 1e-12, 1e-12));
    }
  }
}

TEST_F(WeightedSquareSumAutograd, BackwardForEachDtypeAndDtypeArgument) {
  // (operand dtype, dtype=): gradients have the operands' dtypes; values against the composite's
  // gradients in float64. Same shapes, so each gradient element is one product, no sum.
  std::vector<std::pair<at::ScalarType, std::optional<at::ScalarType>>> cases;
  for (const auto dtype : kFloatingDtypes) {
    cases.emplace_back(dtype, std::nullopt);
  }
  cases.emplace_back(at::kFloat, at::kDouble);
  cases.emplace_back(at::kHalf, at::kFloat);
  cases.emplace_back(at::kDouble, at::kFloat);
  for (const auto& [dtype, result_dtype] : cases) {
    for (const auto& dim : std::vector<std::optional<Shape>>{std::nullopt, Shape{1}}) {
      const Reduction r{dim, false, result_dtype};
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " operands, " + r.str());
      const auto x = random({kRows, kCols}, dtype);
      const auto w = random({kRows, kCols}, dtype);
      const auto g = random(weighted_square_sum_composite(x, w, r).sizes(), r.dtype.value_or(dtype));
      const auto got = gradients([&](const auto& a, const auto& b) { return weighted_square_sum(a, b, r); }, x, w, g);
      const auto as_double = [](const at::Tensor& t) { return t.to(at::kDouble); };
      const Reduction r64{dim, false};
      const auto expected = gradients(
          [&](const auto& a, const auto& b) { return weighted_square_sum_composite(a, b, r64); }, as_double(x),
          as_double(w), as_double(g));
      for (size_t i = 0; i < 2; ++i) {
        SCOPED_TRACE(i == 0 ? "grad of input" : "grad of weight");
        EXPECT_EQ(got[i].scalar_type(), dtype);
        EXPECT_TRUE(
            custom_ops_test::AllClose(got[i], expected[i], custom_ops_test::tolerance(dtype, r.dtype.value_or(dtype))));
      }
    }
  }
}

TEST_F(WeightedSquareSumAutograd, OnlyArgumentsThatRequireGradReceiveOneAndNoGradRecordsNothing) {
  auto x = random({kRows, kCols}, at::kDouble).requires_grad_();
  auto w = random({kCols}, at::kDouble);
  custom::weighted_square_sum(x, w, Shape{1}).sum().backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_TRUE(torch::allclose(x.grad(), 2 * w * x.detach()));

  auto x2 = random({kRows, kCols}, at::kDouble);
  auto w2 = random({kCols}, at::kDouble).requires_grad_();
  custom::weighted_square_sum(x2, w2).backward();
  EXPECT_FALSE(x2.grad().defined());
  EXPECT_TRUE(torch::allclose(w2.grad(), x2.square().sum(0)));

  EXPECT_FALSE(custom::weighted_square_sum(x2, w.detach()).requires_grad());
  torch::NoGradGuard no_grad;
  const auto y = custom::weighted_square_sum(x, w2);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

constexpr std::array<const char*, 5> kSecondOrderNames = {
    "grad of input", "grad of weight", "hvp of input", "hvp of weight", "forward over reverse of input"};

// Gradients of f(x, w).sin().sum(), their Hessian-vector products by double backward, and the
// same product for the input by forward mode over reverse mode.
std::vector<at::Tensor> second_order(
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f,
    const at::Tensor& x0,
    const at::Tensor& w0,
    const at::Tensor& direction) {
  auto x = x0.clone().requires_grad_();
  auto w = w0.clone().requires_grad_();
  const auto grads = torch::autograd::grad({f(x, w).sin().sum()}, {x, w}, {}, true, true);
  const auto hvp = torch::autograd::grad({(grads[0] * direction).sum() + grads[1].sum()}, {x, w});
  at::Tensor forward_over_reverse;
  {
    const DualLevel level;
    auto dx = level.dual(x0, direction).requires_grad_();
    const auto g = torch::autograd::grad({f(dx, w0).sin().sum()}, {dx}, {}, true, true);
    forward_over_reverse = level.tangent(g[0]);
  }
  return {grads[0], grads[1], hvp[0], hvp[1], forward_over_reverse};
}

TEST_F(WeightedSquareSumAutograd, DoubleBackwardAndForwardOverReverseMatchComposite) {
  for (const auto& c : autograd_cases()) {
    SCOPED_TRACE(
        "input " + c10::str(at::IntArrayRef(c.x)) + ", weight " + c10::str(at::IntArrayRef(c.w)) + ", " + c.r.str());
    const auto x = random(c.x, at::kDouble);
    const auto w = random(c.w, at::kDouble);
    const auto direction = random(c.x, at::kDouble);
    const auto r = c.r;
    const auto got =
        second_order([&](const auto& a, const auto& b) { return weighted_square_sum(a, b, r); }, x, w, direction);
    const auto expected = second_order(
        [&](const auto& a, const auto& b) { return weighted_square_sum_composite(a, b, r); }, x, w, direction);
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(kSecondOrderNames[i]);
      ASSERT_TRUE(got[i].defined());
      EXPECT_EQ(got[i].sizes(), expected[i].sizes());
      EXPECT_TRUE(torch::allclose(got[i], expected[i], 1e-12, 1e-12));
    }
  }
}

TEST_F(WeightedSquareSumAutograd, ForwardAdTangentMatchesComposite) {
  for (const auto& c : autograd_cases()) {
    SCOPED_TRACE(
        "input " + c10::str(at::IntArrayRef(c.x)) + ", weight " + c10::str(at::IntArrayRef(c.w)) + ", " + c.r.str());
    const auto x = random(c.x, at::kDouble);
    const auto w = random(c.w, at::kDouble);
    const auto tx = random(c.x, at::kDouble);
    const auto tw = random(c.w, at::kDouble);
    for (const auto& [with_x, with_w] : {std::pair{true, false}, {false, true}, {true, true}}) {
      SCOPED_TRACE(std::string("tangent of ") + (with_x ? "input " : "") + (with_w ? "weight" : ""));
      const DualLevel level;
      const auto dx = with_x ? level.dual(x, tx) : x;
      const auto dw = with_w ? level.dual(w, tw) : w;
      const auto result = weighted_square_sum(dx, dw, c.r);
      const auto tangent = level.tangent(result);
      ASSERT_TRUE(tangent.defined()) << "the result lost its tangent";
      const auto expected = level.tangent(weighted_square_sum_composite(dx, dw, c.r));
      EXPECT_EQ(tangent.sizes(), result.sizes());
      EXPECT_EQ(tangent.sizes(), expected.sizes());
      EXPECT_TRUE(torch::allclose(tangent, expected, 1e-12, 1e-12));
    }
  }
  // dtype=: the tangent has the result's dtype.
  const auto x = random({3, 4}, at::kFloat);
  const auto w = random({4}, at::kFloat);
  const auto tx = random({3, 4}, at::kFloat);
  const DualLevel level;
  const Reduction r{Shape{1}, true, at::kDouble};
  const auto tangent = level.tangent(weighted_square_sum(level.dual(x, tx), w, r));
  ASSERT_TRUE(tangent.defined());
  EXPECT_EQ(tangent.scalar_type(), at::kDouble);
  EXPECT_TRUE(torch::allclose(tangent, level.tangent(weighted_square_sum_composite(level.dual(x, tx), w, r))));
}

}  // namespace
