// SPDX-License-Identifier: BSD-3-Clause
// custom_ops/term_functions.h, every column of every row: the float and double scalars (what the
// kernels compute per element), at::vec::Vectorized (the CPU's SIMD loops) and at::Tensor (the
// derivatives), each against ATen's own function of the same name on a float64 tensor, at points
// across each function's domain and outside it, zeros, infinities and nan included.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "autograd/term_derivatives.h"
#include "kernels/cpu/vectorized_term_functions.h"

namespace {

using custom::Functions;

// A function's every column as callables, with ATen's function to compare them with.
struct Row {
  std::string name;
  float (*f32)(float, double);
  double (*f64)(double, double);
  at::vec::Vectorized<float> (*vec32)(const at::vec::Vectorized<float>&, double);
  at::vec::Vectorized<double> (*vec64)(const at::vec::Vectorized<double>&, double);
  at::Tensor (*tensor)(const at::Tensor&, double);
};

#define CUSTOM_OPS_TEST_ROW(name, ...)                                                                  \
  Row{#name,                                                                                            \
      [](float v, double) { return Functions<float>::name(v); },                                        \
      [](double v, double) { return Functions<double>::name(v); },                                      \
      [](const at::vec::Vectorized<float>& v, double) { return Functions<decltype(v + v)>::name(v); },  \
      [](const at::vec::Vectorized<double>& v, double) { return Functions<decltype(v + v)>::name(v); }, \
      [](const at::Tensor& v, double) { return custom::fn::name(v); }},
#define CUSTOM_OPS_TEST_ROW_OF_A_CONSTANT(name, ...)                                                         \
  Row{#name,                                                                                                 \
      [](float v, double c) { return Functions<float>::name(v, c); },                                        \
      [](double v, double c) { return Functions<double>::name(v, c); },                                      \
      [](const at::vec::Vectorized<float>& v, double c) { return Functions<decltype(v + v)>::name(v, c); },  \
      [](const at::vec::Vectorized<double>& v, double c) { return Functions<decltype(v + v)>::name(v, c); }, \
      [](const at::Tensor& v, double c) { return custom::fn::name(v, c); }},

const std::vector<Row>& rows() {
  static const std::vector<Row> all = {CUSTOM_OPS_TERM_FUNCTIONS(CUSTOM_OPS_TEST_ROW)
                                           CUSTOM_OPS_TERM_FUNCTIONS_OF_A_CONSTANT(CUSTOM_OPS_TEST_ROW_OF_A_CONSTANT)};
  return all;
}

// ATen's function of each name, on float64: the reference (step, relu's derivative, as relu's
// backward computes it: the gradient passes where the input is not <= 0).
at::Tensor aten(const std::string& name, const at::Tensor& v, double c) {
  if (name == "step") {
    return at::threshold_backward(at::ones_like(v), v, 0);
  }
  if (name == "pow") {
    return at::pow(v, c);
  }
  if (name == "sigmoid") {
    return at::sigmoid(v);
  }
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(("aten::" + name).c_str(), "");
  return op.typed<at::Tensor(const at::Tensor&)>().call(v);
}

std::vector<double> points() {
  std::vector<double> result = {0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.5,   -0.5,   1.0,  -1.0,
                                3.0, -3.0, 20.0,  -20.0,  88.0, -88.0, 100.0, -100.0, 1e30, -1e30};
  for (int i = -40; i <= 40; ++i) {
    result.push_back(i * 0.173);
  }
  result.push_back(std::numeric_limits<double>::infinity());
  result.push_back(-std::numeric_limits<double>::infinity());
  result.push_back(std::numeric_limits<double>::quiet_NaN());
  return result;
}

// |got - want| within `ulps` units in the last place of `want` in the type of `got` (eps), or
// both nan, or both the same infinity (past T's range, `want` is T's infinity of its sign).
template <typename T>
::testing::AssertionResult Near(T got, double want, double ulps, const std::string& where) {
  if (std::abs(want) > static_cast<double>(std::numeric_limits<T>::max()) * (1 + std::numeric_limits<T>::epsilon())) {
    want = std::copysign(std::numeric_limits<double>::infinity(), want);
  }
  if (std::isnan(want) ? std::isnan(got) : (std::isinf(want) ? got == want : true)) {
    if (std::isnan(want) || std::isinf(want)) {
      return ::testing::AssertionSuccess();
    }
    const double eps = std::numeric_limits<T>::epsilon();
    const double tiny = std::numeric_limits<T>::min();
    if (std::abs(static_cast<double>(got) - want) <= ulps * eps * std::abs(want) + tiny) {
      return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure() << where << ": got " << got << ", ATen " << want;
}

TEST(TermFunctions, EveryColumnAgreesWithAtenOnEveryType) {
  const auto xs = points();
  const auto x64 = torch::tensor(xs, torch::kDouble);
  const auto x32 = x64.to(torch::kFloat);
  for (const auto& row : rows()) {
    for (const double c : row.name == "pow" ? std::vector<double>{2.0, 0.5, -1.5, 3.0} : std::vector<double>{0.0}) {
      // The reference of a float point is ATen's float64 function of that float.
      const auto want32 = aten(row.name, x32.to(torch::kDouble), c);
      const auto want64 = aten(row.name, x64, c);
      const auto tensor64 = row.tensor(x64, c);
      EXPECT_TRUE(torch::allclose(tensor64, want64, 0, 0, /*equal_nan=*/true)) << row.name << " on at::Tensor";
      for (size_t i = 0; i < xs.size(); ++i) {
        const auto where = row.name + "(" + std::to_string(xs[i]) + ", c=" + std::to_string(c) + ")";
        const float v32 = x32[i].item<float>();
        const double ref32 = want32[i].item<double>(), ref64 = want64[i].item<double>();
        // 4 ulps: the CPU's C library and Sleef are documented within 1 to 3.
        EXPECT_TRUE(Near(row.f32(v32, c), ref32, 4, where + " float"));
        EXPECT_TRUE(Near(row.f64(xs[i], c), ref64, 4, where + " double"));
        const auto vec32 = row.vec32(at::vec::Vectorized<float>(v32), c);
        const auto vec64 = row.vec64(at::vec::Vectorized<double>(xs[i]), c);
        EXPECT_TRUE(Near(vec32[0], ref32, 4, where + " Vectorized<float>"));
        EXPECT_TRUE(Near(vec64[0], ref64, 4, where + " Vectorized<double>"));
      }
    }
  }
}

// The conventions ATen's derivatives take where a function is not differentiable.
TEST(TermFunctions, NonDifferentiablePointsTakeAtensConventions) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(Functions<float>::sign(0.0f), 0.0f);  // abs'(0) = 0
  EXPECT_EQ(Functions<double>::step(0.0), 0.0);  // relu'(0) = 0
  EXPECT_EQ(Functions<double>::step(nan), 1.0);  // relu's backward passes a nan input's gradient
  EXPECT_TRUE(std::isnan(Functions<double>::relu(nan)));
  EXPECT_EQ(Functions<at::vec::Vectorized<float>>::step(at::vec::Vectorized<float>(0.0f))[0], 0.0f);
  EXPECT_EQ(Functions<at::vec::Vectorized<float>>::step(at::vec::Vectorized<float>(NAN))[0], 1.0f);
  EXPECT_TRUE(std::isnan(Functions<at::vec::Vectorized<float>>::relu(at::vec::Vectorized<float>(NAN))[0]));
}

}  // namespace
