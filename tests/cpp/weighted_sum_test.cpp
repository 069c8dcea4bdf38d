#include <gtest/gtest.h>
#include <torch/torch.h>
#include <custom_ops/weighted_sum.h>

TEST(WeightedSum, Smoke) {
  auto x = torch::randn({3, 4}, torch::kDouble);
  auto w = torch::randn({4}, torch::kDouble);
  EXPECT_TRUE(torch::allclose(custom::weighted_sum(x, w), w * x * x));
}
