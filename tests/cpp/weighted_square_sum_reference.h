// SPDX-License-Identifier: BSD-3-Clause
// The C++ tests' reference for custom::weighted_square_sum: its arguments after input and weight
// as one value, the composite (weight * input.square()).sum(dim, keepdim, dtype=dtype) it stands
// for, a check of a result against that composite's shape and dtype and a float64 sum, and the
// checks that the CPU and the CUDA tests both run.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <custom_ops/custom_ops.h>

#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference.h"

namespace custom_ops_test {

// The arguments after input and weight.
struct Reduction {
  std::optional<std::vector<int64_t>> dim;
  bool keepdim = false;
  std::optional<at::ScalarType> dtype = std::nullopt;

  at::OptionalIntArrayRef dim_ref() const {
    return dim.has_value() ? at::OptionalIntArrayRef(*dim) : at::OptionalIntArrayRef(std::nullopt);
  }
  std::string str() const {
    return std::string("dim=") + (dim.has_value() ? c10::str(at::IntArrayRef(*dim)) : std::string("None")) +
        ", keepdim=" + (keepdim ? "true" : "false") +
        ", dtype=" + (dtype.has_value() ? std::string(c10::toString(*dtype)) : std::string("None"));
  }
};

// The op, called with a Reduction.
inline at::Tensor weighted_square_sum(const at::Tensor& x, const at::Tensor& w, const Reduction& r) {
  return custom::weighted_square_sum(x, w, r.dim_ref(), r.keepdim, r.dtype);
}

// What the op stands for, in ATen.
inline at::Tensor weighted_square_sum_composite(const at::Tensor& x, const at::Tensor& w, const Reduction& r) {
  return at::sum(w * x.square(), r.dim_ref(), r.keepdim, r.dtype);
}

// The result of the composite's shape, dtype and device, contiguous, within a bound of the float64
// sum: the rounding of the result to its dtype (relative to the sum), plus the accumulation in
// float32, or float64 when the operands or the result are float64 (relative to the sum of |terms|,
// which cancellation does not shrink).
inline ::testing::AssertionResult IsWeightedSquareSumOf(
    const at::Tensor& result, const at::Tensor& x, const at::Tensor& w, const Reduction& r) {
  const auto expected = weighted_square_sum_composite(x, w, r);
  if (result.scalar_type() != expected.scalar_type()) {
    return ::testing::AssertionFailure() << "dtype " << result.scalar_type() << ", expected " << expected.scalar_type();
  }
  if (result.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure() << "shape " << result.sizes() << ", expected " << expected.sizes();
  }
  if (result.device() != x.device()) {
    return ::testing::AssertionFailure() << "device " << result.device() << ", expected " << x.device();
  }
  if (!result.is_contiguous()) {
    return ::testing::AssertionFailure() << "strides " << result.strides() << " are not contiguous";
  }
  const auto terms = reference(x, w);
  const auto sum = at::sum(terms, r.dim_ref(), r.keepdim);
  const auto magnitude = at::sum(terms.abs(), r.dim_ref(), r.keepdim);
  const bool in_double = result.scalar_type() == at::kDouble || at::result_type(x, w) == at::kDouble;
  const double accumulation = in_double ? 1e-13 : 1e-5;
  const auto stored = tolerance(result.scalar_type());
  return WithinBound(
      result, sum, stored.atol + stored.rtol * sum.abs() + accumulation * magnitude,
      "float64 sum of weight * input**2, stored rtol " + std::to_string(stored.rtol));
}

using Shape = std::vector<int64_t>;

// 37 x 259: rows and columns that are no multiple of any vector width or block size.
inline constexpr int64_t kRows = 37;
inline constexpr int64_t kCols = 259;

// Every dim list of a rank-2 shape, with and without keepdim.
inline std::vector<Reduction> rank2_reductions() {
  std::vector<Reduction> reductions;
  for (const bool keepdim : {false, true}) {
    for (const auto& dim : std::vector<std::optional<Shape>>{
             std::nullopt, Shape{}, Shape{0}, Shape{1}, Shape{-1}, Shape{-2}, Shape{0, 1}, Shape{1, 0}, Shape{-1, 0}}) {
      reductions.push_back({dim, keepdim});
    }
  }
  return reductions;
}

// Layouts whose float16/bfloat16 results the loops write themselves (last-dim, first-dim and full
// reductions, with weights broadcast along the rows or down them) and one the frontend finishes (a
// weight broadcast between the reduced dims), each with its dims.
struct RoundingCase {
  Shape x;
  Shape w;
  std::optional<Shape> dim;
};

inline std::vector<RoundingCase> rounding_cases() {
  return {
      {{37, 1031}, {1031}, Shape{-1}},     {{1031, 37}, {1031, 1}, Shape{0}},     {{70001}, {70001}, std::nullopt},
      {{513, 1024}, {1024}, std::nullopt}, {{513, 1024}, {513, 1}, std::nullopt}, {{6, 7, 300}, {7, 1}, Shape{0, 2}},
  };
}

// A low-precision result is the float32 result (the same sums in the same order) rounded once.
inline void expect_rounded_once(at::Device device) {
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    for (const auto& c : rounding_cases()) {
      const auto x = random(c.x, dtype, device);
      const auto w = random(c.w, dtype, device);
      for (const bool keepdim : {false, true}) {
        const Reduction r{c.dim, keepdim};
        SCOPED_TRACE(std::string(c10::toString(dtype)) + ", input " + c10::str(x.sizes()) + ", " + r.str());
        const auto y = weighted_square_sum(x, w, r);
        EXPECT_EQ(y.scalar_type(), dtype);
        EXPECT_TRUE(torch::equal(y, weighted_square_sum(x, w, {c.dim, keepdim, at::kFloat}).to(dtype)));
        EXPECT_TRUE(IsWeightedSquareSumOf(y, x, w, r));
      }
    }
  }
}

// Full reductions with a weight broadcast along a dim, and the same reduction spelled with every
// dim: within the reference, the same bits each time.
inline void expect_totals_match(at::Device device) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{4099, 1024}, {1024}}, {{4099, 1024}, {4099, 1}}, {{4099, 1024}, {}}, {{33, 129, 65}, {129, 1}}};
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& [x_shape, w_shape] : shapes) {
      SCOPED_TRACE(
          std::string(c10::toString(dtype)) + ", input " + c10::str(at::IntArrayRef(x_shape)) + ", weight " +
          c10::str(at::IntArrayRef(w_shape)));
      // A weight shared by many terms cancels less: sums small enough for float16 to hold (x / 16
      // is exact).
      const auto x = random(x_shape, dtype, device) / 16;
      const auto w =
          w_shape.empty() ? torch::full({}, 0.01, torch::dtype(dtype).device(device)) : random(w_shape, dtype, device);
      const auto y = custom::weighted_square_sum(x, w);
      EXPECT_TRUE(IsWeightedSquareSumOf(y, x, w, {std::nullopt}));
      Shape every(x_shape.size());
      std::iota(every.begin(), every.end(), 0);
      EXPECT_TRUE(torch::equal(custom::weighted_square_sum(x, w, every), y));
      for (int run = 0; run < 3; ++run) {
        EXPECT_TRUE(torch::equal(custom::weighted_square_sum(x, w), y));
      }
    }
  }
}

// d/d(input, weight) of sum(f(input, weight) * grad), by reverse mode.
inline std::vector<at::Tensor> gradients(
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f,
    const at::Tensor& x0,
    const at::Tensor& w0,
    const at::Tensor& grad) {
  auto x = x0.detach().clone().requires_grad_();
  auto w = w0.detach().clone().requires_grad_();
  return torch::autograd::grad({f(x, w)}, {x, w}, {grad});
}

}  // namespace custom_ops_test
