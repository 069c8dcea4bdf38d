// SPDX-License-Identifier: BSD-3-Clause
// A TorchScript module saved from Python for each operator of the table, calling
// torch.ops.custom.NAME, loads and runs in a C++ program that only links libcustom_ops (static
// operator registration, no Python), and gives what the C++ API gives for the same call.
// The modules are written at test time by make_scripted_module.py (a ctest fixture), one file
// NAME.pt per operator in the directory CUSTOM_OPS_SCRIPTED_MODULES; a missing variable or file is
// a failure, not a skip. The tests are typed over the rows (ops/operator_rows.h), named for the
// operator: ScriptedElementwise/weighted_sum.*, ScriptedReduction/weighted_square_sum.*.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <custom_ops/custom_ops.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "reference.h"
#include "row_api.h"

namespace {

using custom_ops_test::random;
using Shape = std::vector<int64_t>;

constexpr const char* kModulesVariable = "CUSTOM_OPS_SCRIPTED_MODULES";

// Each row's C++ API (row_api.h): what the scripted call must equal, bit for bit (the same kernel).
using custom_ops_test::Api;
using custom_ops_test::ElementwiseRows;
using custom_ops_test::ReductionRows;
using custom_ops_test::RowName;

template <class Row>
class ScriptedModule : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* directory = std::getenv(kModulesVariable);
    ASSERT_NE(directory, nullptr) << kModulesVariable << " is not set: run this test through ctest, whose "
                                  << "make_scripted_module fixture writes the modules and sets it";
    const auto path = std::filesystem::path(directory) / (std::string(Row::schema_name) + ".pt");
    ASSERT_TRUE(std::filesystem::is_regular_file(path)) << path << " is not a file";
    module_ = torch::jit::load(path.string());
    weight_ = module_.attr("weight").toTensor();
    torch::manual_seed(0);
  }

  void ExpectGraphCallsTheOperator() {
    const auto graph = module_.get_method("forward").graph()->toString();
    EXPECT_NE(graph.find(std::string(Row::name) + "("), std::string::npos) << graph;
    ASSERT_EQ(weight_.sizes(), (Shape{4}));
  }

  // The weight parameter's gradient from the module's loss is the C++ API's for the same loss
  // (direct_loss of a copy of the weight).
  template <class DirectLoss>
  void ExpectTheApisWeightGradient(const at::Tensor& scripted_loss, const DirectLoss& direct_loss) {
    scripted_loss.backward();
    ASSERT_TRUE(weight_.grad().defined());
    const auto w = weight_.detach().clone().requires_grad_();
    direct_loss(w).backward();
    EXPECT_TRUE(torch::allclose(weight_.grad(), w.grad()));
  }

  // Moves the module to the GPU (weight_: its weight there), or says why a CUDA test cannot run.
  std::optional<std::string> MoveToCuda() {
    if (!torch::cuda::is_available()) {
      return "no CUDA device is visible (torch::cuda::is_available() is false)";
    }
    const auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName(Row::name, ""));
    if (!op.has_value() || !op->hasKernelForDispatchKey(c10::DispatchKey::CUDA)) {
      return "libcustom_ops was built without CUDA kernels";
    }
    module_.to(at::kCUDA);
    weight_ = module_.attr("weight").toTensor();
    EXPECT_TRUE(weight_.is_cuda());
    return std::nullopt;
  }

  torch::jit::Module module_;
  at::Tensor weight_;
};

template <class Row>
using ScriptedElementwise = ScriptedModule<Row>;
template <class Row>
using ScriptedReduction = ScriptedModule<Row>;
TYPED_TEST_SUITE(ScriptedElementwise, ElementwiseRows, RowName);
TYPED_TEST_SUITE(ScriptedReduction, ReductionRows, RowName);

// ------------------------------------------------------------------------------------ elementwise

TYPED_TEST(ScriptedElementwise, ForwardCallsTheOperatorAndMatchesTheApi) {
  using Row = TypeParam;
  this->ExpectGraphCallsTheOperator();
  torch::NoGradGuard no_grad;
  // A float64 input: promotion through the script gives a float64 result.
  for (const auto& x :
       {random({3, 4}, at::kFloat), random({2, 5, 4}, at::kFloat), random({4}, at::kFloat),
        random({3, 4}, at::kDouble)}) {
    SCOPED_TRACE("input " + c10::str(x.sizes()) + " " + c10::toString(x.scalar_type()));
    const auto y = this->module_.forward({x}).toTensor();
    const auto expected = Api<Row>::forward(x, this->weight_);
    EXPECT_EQ(y.scalar_type(), expected.scalar_type());
    EXPECT_TRUE(torch::equal(y, expected));
  }
}

TYPED_TEST(ScriptedElementwise, BackwardReachesTheWeightParameter) {
  using Row = TypeParam;
  const auto x = random({3, 4}, at::kFloat);
  this->ExpectTheApisWeightGradient(
      this->module_.forward({x}).toTensor().sum(), [&](const at::Tensor& w) { return Api<Row>::forward(x, w).sum(); });
}

TYPED_TEST(ScriptedElementwise, RunsOnCudaWhenAvailable) {
  using Row = TypeParam;
  if (const auto why = this->MoveToCuda()) {
    GTEST_SKIP() << *why;
  }
  torch::NoGradGuard no_grad;
  const auto x = random({3, 4}, at::kFloat, at::kCUDA);
  const auto y = this->module_.forward({x}).toTensor();
  EXPECT_TRUE(y.is_cuda());
  EXPECT_TRUE(torch::equal(y, Api<Row>::forward(x, this->weight_)));
}

// -------------------------------------------------------------------------------------- reduction

struct Reduction {
  std::optional<Shape> dim;
  bool keepdim = false;
  std::optional<at::ScalarType> dtype = std::nullopt;
};

// module.forward(x, dim, keepdim, dtype), each argument as an IValue (None for std::nullopt), and
// the C++ API's result for the same call.
at::Tensor scripted(torch::jit::Module& module, const at::Tensor& x, const Reduction& r) {
  return module
      .forward(
          {x, r.dim.has_value() ? c10::IValue(*r.dim) : c10::IValue(), r.keepdim,
           r.dtype.has_value() ? c10::IValue(*r.dtype) : c10::IValue()})
      .toTensor();
}

template <class Row>
at::Tensor direct(const at::Tensor& x, const at::Tensor& w, const Reduction& r) {
  const at::OptionalIntArrayRef dim = r.dim ? at::OptionalIntArrayRef(*r.dim) : std::nullopt;
  return Api<Row>::forward(x, w, dim, r.keepdim, r.dtype);
}

TYPED_TEST(ScriptedReduction, ForwardPassesEveryArgumentAndMatchesTheApi) {
  using Row = TypeParam;
  this->ExpectGraphCallsTheOperator();
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
      SCOPED_TRACE("input " + c10::str(x.sizes()) + " " + c10::toString(x.scalar_type()));
      const auto y = scripted(this->module_, x, r);
      const auto expected = direct<Row>(x, this->weight_, r);
      EXPECT_EQ(y.scalar_type(), expected.scalar_type());
      EXPECT_EQ(y.sizes(), expected.sizes());
      EXPECT_TRUE(torch::equal(y, expected));
    }
  }
}

TYPED_TEST(ScriptedReduction, BackwardReachesTheWeightParameter) {
  using Row = TypeParam;
  const auto x = random({3, 4}, at::kFloat);
  const Reduction total{std::nullopt};
  this->ExpectTheApisWeightGradient(
      scripted(this->module_, x, total), [&](const at::Tensor& w) { return direct<Row>(x, w, total); });
}

TYPED_TEST(ScriptedReduction, RunsOnCudaWhenAvailable) {
  using Row = TypeParam;
  if (const auto why = this->MoveToCuda()) {
    GTEST_SKIP() << *why;
  }
  const Reduction r{Shape{1}, true};
  torch::NoGradGuard no_grad;
  const auto x = random({3, 4}, at::kFloat, at::kCUDA);
  const auto sums = scripted(this->module_, x, r);
  EXPECT_TRUE(sums.is_cuda());
  EXPECT_TRUE(torch::equal(sums, direct<Row>(x, this->weight_, r)));
}

}  // namespace
