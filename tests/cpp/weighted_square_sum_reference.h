// The C++ tests' reference for custom::weighted_square_sum: its arguments after input and weight
// as one value, the composite (weight * input.square()).sum(dim, keepdim, dtype=dtype) it stands
// for, and a check of a result against that composite's shape and dtype and a float64 sum.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <custom_ops/weighted_square_sum.h>

#include <optional>
#include <string>
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

}  // namespace custom_ops_test
