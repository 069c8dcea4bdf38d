// A TorchScript module saved from Python, calling torch.ops.custom.weighted_sum (forward) and
// torch.ops.custom.weighted_square_sum (method square_sum), loads and runs in a C++ program that
// only links libcustom_ops (static operator registration, no Python).
// The module file is written at test time by make_scripted_module.py (a ctest fixture) and
// passed in CUSTOM_OPS_SCRIPTED_MODULE; a missing variable or file is a failure, not a skip.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "reference.h"
#include "weighted_square_sum_reference.h"

namespace {

using custom_ops_test::AllClose;
using custom_ops_test::IsWeightedSquareSumOf;
using custom_ops_test::IsWeightedSumOf;
using custom_ops_test::random;
using custom_ops_test::Reduction;
using Shape = std::vector<int64_t>;

constexpr const char* kModuleVariable = "CUSTOM_OPS_SCRIPTED_MODULE";

class ScriptedModule : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv(kModuleVariable);
    ASSERT_NE(path, nullptr) << kModuleVariable << " is not set: run this test through ctest, whose "
                             << "make_scripted_module fixture writes the module and sets it";
    ASSERT_TRUE(std::filesystem::is_regular_file(path)) << kModuleVariable << "=" << path << " is not a file";
    module_ = torch::jit::load(path);
    weight_ = module_.attr("weight").toTensor();
    torch::manual_seed(0);
  }

  torch::jit::Module module_;
  at::Tensor weight_;
};

TEST_F(ScriptedModule, ForwardCallsCustomWeightedSumAndMatchesReference) {
  const auto graph = module_.get_method("forward").graph()->toString();
  EXPECT_NE(graph.find("custom::weighted_sum"), std::string::npos) << graph;
  ASSERT_EQ(weight_.sizes(), (std::vector<int64_t>{4}));
  torch::NoGradGuard no_grad;
  for (const auto& x : {random({3, 4}, at::kFloat), random({2, 5, 4}, at::kFloat), random({4}, at::kFloat)}) {
    SCOPED_TRACE("input shape " + c10::str(x.sizes()));
    const auto y = module_.forward({x}).toTensor();
    EXPECT_TRUE(IsWeightedSumOf(y, x, weight_));
  }
  // Promotion through the script: a float64 input gives a float64 result.
  const auto xd = random({3, 4}, at::kDouble);
  const auto yd = module_.forward({xd}).toTensor();
  EXPECT_EQ(yd.scalar_type(), at::kDouble);
  EXPECT_TRUE(IsWeightedSumOf(yd, xd, weight_));
}

TEST_F(ScriptedModule, BackwardReachesTheWeightParameter) {
  const auto x = random({3, 4}, at::kFloat);
  module_.forward({x}).toTensor().sum().backward();
  ASSERT_TRUE(weight_.grad().defined());
  EXPECT_TRUE(AllClose(weight_.grad(), x.to(at::kDouble).square().sum(0), at::kFloat));
}

// module.square_sum(x, dim, keepdim, dtype): each argument as an IValue (None for std::nullopt).
at::Tensor square_sum(torch::jit::Module& module, const at::Tensor& x, const Reduction& r) {
  return module
      .get_method("square_sum")(
          {x, r.dim.has_value() ? c10::IValue(*r.dim) : c10::IValue(), r.keepdim,
           r.dtype.has_value() ? c10::IValue(*r.dtype) : c10::IValue()})
      .toTensor();
}

TEST_F(ScriptedModule, SquareSumCallsCustomWeightedSquareSumAndMatchesComposite) {
  const auto graph = module_.get_method("square_sum").graph()->toString();
  EXPECT_NE(graph.find("custom::weighted_square_sum"), std::string::npos) << graph;
  torch::NoGradGuard no_grad;
  const std::vector<Reduction> reductions = {
      {std::nullopt},
      {Shape{}, true},
      {Shape{-1}},
      {Shape{0}, true},
      {Shape{-1, 0}, false, at::kDouble},
      {Shape{-1}, true, at::kHalf}};
  for (const auto& x : {random({3, 4}, at::kFloat), random({2, 5, 4}, at::kFloat), random({3, 4}, at::kDouble)}) {
    for (const auto& r : reductions) {
      SCOPED_TRACE("input shape " + c10::str(x.sizes()) + " " + c10::toString(x.scalar_type()) + ", " + r.str());
      EXPECT_TRUE(IsWeightedSquareSumOf(square_sum(module_, x, r), x, weight_, r));
    }
  }
}

TEST_F(ScriptedModule, SquareSumBackwardReachesTheWeightParameter) {
  const auto x = random({3, 4}, at::kFloat);
  square_sum(module_, x, {std::nullopt}).backward();
  ASSERT_TRUE(weight_.grad().defined());
  EXPECT_TRUE(AllClose(weight_.grad(), x.to(at::kDouble).square().sum(0), at::kFloat));
}

TEST_F(ScriptedModule, RunsOnCudaWhenAvailable) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device is visible (torch::cuda::is_available() is false)";
  }
  const auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName("custom::weighted_sum", ""));
  if (!op.has_value() || !op->hasKernelForDispatchKey(c10::DispatchKey::CUDA)) {
    GTEST_SKIP() << "libcustom_ops was built without CUDA kernels";
  }
  module_.to(at::kCUDA);
  const auto weight = module_.attr("weight").toTensor();
  ASSERT_TRUE(weight.is_cuda());
  torch::NoGradGuard no_grad;
  const auto x = random({3, 4}, at::kFloat, at::kCUDA);
  const auto y = module_.forward({x}).toTensor();
  EXPECT_TRUE(y.is_cuda());
  EXPECT_TRUE(IsWeightedSumOf(y, x, weight));
  const Reduction r{Shape{1}, true};
  const auto sums = square_sum(module_, x, r);
  EXPECT_TRUE(sums.is_cuda());
  EXPECT_TRUE(IsWeightedSquareSumOf(sums, x, weight, r));
}

}  // namespace
