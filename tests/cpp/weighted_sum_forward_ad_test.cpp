// SPDX-License-Identifier: BSD-3-Clause
// Both modes of differentiation from C++ alone (no Python in the process): backward, double
// backward and forward-mode AD (dual tensors) of every overload, each against the same
// derivative of the composite weight * input.square().
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <custom_ops/custom_ops.h>

#include "dual_level.h"
#include "expect_error.h"

namespace {

using custom_ops_test::DualLevel;

at::Tensor composite(const at::Tensor& x, const at::Tensor& w) {
  return w * x.square();
}

at::Tensor random(at::IntArrayRef shape) {
  return torch::randn(shape, torch::kDouble);
}

class WeightedSumForwardAd : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_F(WeightedSumForwardAd, TangentOfTheOpMatchesComposite) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{3, 4}, {3, 4}}, {{2, 3, 4}, {4}}, {{3, 1, 4}, {2, 1}}, {{3, 4}, {}}, {{}, {3, 4}}};
  for (const auto& [x_shape, w_shape] : shapes) {
    SCOPED_TRACE("input " + c10::str(at::IntArrayRef(x_shape)) + ", weight " + c10::str(at::IntArrayRef(w_shape)));
    const auto x = random(x_shape);
    const auto w = random(w_shape);
    const auto tx = random(x_shape);
    const auto tw = random(w_shape);
    for (const auto& [with_x, with_w] : {std::pair{true, false}, {false, true}, {true, true}}) {
      const DualLevel level;
      const auto dx = with_x ? level.dual(x, tx) : x;
      const auto dw = with_w ? level.dual(w, tw) : w;
      const auto tangent = level.tangent(custom::weighted_sum(dx, dw));
      ASSERT_TRUE(tangent.defined()) << "the result lost its tangent";
      EXPECT_TRUE(torch::allclose(tangent, level.tangent(composite(dx, dw))));
    }
  }
}

TEST_F(WeightedSumForwardAd, InplaceUpdatesTheExistingTangentInPlace) {
  const auto x = random({3, 4});
  const auto w = random({4});
  const auto tx = random({3, 4});
  const auto tw = random({4});
  const DualLevel level;
  auto self = level.dual(x.clone(), tx.clone());
  const auto existing = level.tangent(self);
  custom::weighted_sum_(self, level.dual(w, tw));
  const auto tangent = level.tangent(self);
  EXPECT_EQ(tangent.data_ptr(), existing.data_ptr());
  EXPECT_TRUE(torch::allclose(tangent, 2 * w * x * tx + x.square() * tw));
  EXPECT_TRUE(torch::allclose(self, composite(x, w)));
}

TEST_F(WeightedSumForwardAd, OutRefusesTangents) {
  const auto x = random({3, 4});
  auto out = torch::zeros({3, 4}, torch::kDouble);
  const DualLevel level;
  EXPECT_THROW(custom::weighted_sum_out(out, level.dual(x, random({3, 4})), random({4})), c10::NotImplementedError);
  EXPECT_C10_ERROR(
      custom::weighted_sum_out(out, level.dual(x, random({3, 4})), random({4})),
      "Trying to use forward AD with custom::weighted_sum.out", "out= function");
  EXPECT_TRUE(out.eq(0).all().item<bool>());
}

TEST_F(WeightedSumForwardAd, BackwardOpTangentsMatchComposite) {
  const auto g = random({3, 4});
  const auto x = random({3, 4});
  const auto w = random({4});
  const DualLevel level;
  const auto dg = level.dual(g, random({3, 4}));
  const auto dx = level.dual(x, random({3, 4}));
  const auto dw = level.dual(w, random({4}));
  const auto [grad_input, grad_weight] = custom::weighted_sum_backward(dg, dx, dw, {true, true});
  EXPECT_TRUE(torch::allclose(level.tangent(grad_input), level.tangent(2 * dw * dx * dg)));
  EXPECT_TRUE(torch::allclose(level.tangent(grad_weight), level.tangent((dx.square() * dg).sum(0))));
}

TEST_F(WeightedSumForwardAd, MixedDtypeBackwardOpTangentsComputeInThePromotedDtype) {
  // A float32 input with a float64 weight and grad: grad_weight's tangent 2 x x_t g + x^2 g_t is
  // computed in float64, not from float32 products, so it keeps float64 precision.
  const auto g = random({3, 4});
  const auto tg = random({3, 4});
  const auto x = random({3, 4}).to(torch::kFloat);
  const auto tx = random({3, 4}).to(torch::kFloat);
  const DualLevel level;
  const auto grad_weight =
      std::get<1>(custom::weighted_sum_backward(level.dual(g, tg), level.dual(x, tx), random({4}), {true, true}));
  const auto terms = 2 * x.to(torch::kDouble) * tx.to(torch::kDouble) * g + x.to(torch::kDouble).square() * tg;
  const auto error = (level.tangent(grad_weight) - terms.sum(0)).abs();
  EXPECT_TRUE(torch::all(error <= 1e-13 * terms.abs().sum(0)).item<bool>()) << error;
}

TEST_F(WeightedSumForwardAd, BackwardDoubleBackwardAndForwardOverReverseMatchComposite) {
  const auto x0 = random({3, 4});
  const auto w0 = random({4});
  const auto direction = random({3, 4});
  // Gradients, the Hessian-vector product by double backward, and the same product by forward
  // mode over reverse mode.
  const auto derivatives = [&](auto f) {
    auto x = x0.clone().requires_grad_();
    auto w = w0.clone().requires_grad_();
    const auto grads = torch::autograd::grad({f(x, w).sin().sum()}, {x, w}, {}, true, true);
    const auto hvp = torch::autograd::grad({(grads[0] * direction).sum()}, {x, w});
    at::Tensor forward_over_reverse;
    {
      const DualLevel level;
      auto dx = level.dual(x0, direction).requires_grad_();
      const auto g = torch::autograd::grad({f(dx, w0).sin().sum()}, {dx}, {}, true, true);
      forward_over_reverse = level.tangent(g[0]);
    }
    return std::vector<at::Tensor>{grads[0], grads[1], hvp[0], hvp[1], forward_over_reverse};
  };
  const auto got = derivatives([](const at::Tensor& x, const at::Tensor& w) { return custom::weighted_sum(x, w); });
  const auto expected = derivatives(composite);
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(got[i].defined());
    EXPECT_TRUE(torch::allclose(got[i], expected[i]));
  }
}

}  // namespace
