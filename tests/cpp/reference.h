// SPDX-License-Identifier: BSD-3-Clause
// Shared by the C++ tests: the float64 reference of weight * input**2, per-dtype tolerances, a
// closeness check that reports where it fails, and the tensor layouts every device is tested on.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/ExpandUtils.h>

#include <array>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

namespace custom_ops_test {

inline constexpr std::array<at::ScalarType, 4> kFloatingDtypes = {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};

// weight * input**2 in float64, on the CPU, broadcast as the op broadcasts.
inline at::Tensor reference(const at::Tensor& input, const at::Tensor& weight) {
  const auto x = input.detach().to(at::kCPU, at::kDouble);
  const auto w = weight.detach().to(at::kCPU, at::kDouble);
  return w * (x * x);
}

struct Tolerance {
  double rtol;
  double atol;
};

// A result computed in float32 (half and bfloat16 too) and rounded once to `dtype`.
inline Tolerance tolerance(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
      return {2e-3, 1e-5};
    case at::kBFloat16:
      return {1.6e-2, 1e-5};
    case at::kFloat:
      return {1e-6, 1e-7};
    default:
      return {1e-13, 1e-15};
  }
}

// The looser of the two: a value computed in `compute` and stored in `stored`.
inline Tolerance tolerance(at::ScalarType compute, at::ScalarType stored) {
  const auto a = tolerance(compute);
  const auto b = tolerance(stored);
  return {std::max(a.rtol, b.rtol), std::max(a.atol, b.atol)};
}

// Passes where |actual - expected| <= bound elementwise; a NaN in `actual` (a poisoned element
// left unwritten) never passes.
inline ::testing::AssertionResult WithinBound(
    const at::Tensor& actual, const at::Tensor& expected, const at::Tensor& bound, const std::string& what) {
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure() << "shape " << actual.sizes() << ", expected " << expected.sizes();
  }
  const auto a = actual.detach().to(at::kCPU, at::kDouble);
  const auto bad = torch::logical_not((a - expected).abs() <= bound);  // NaN compares false
  const auto n_bad = bad.sum().item<int64_t>();
  if (n_bad == 0) {
    return ::testing::AssertionSuccess();
  }
  const auto first = bad.reshape(-1).nonzero()[0].item<int64_t>();
  std::ostringstream msg;
  msg << n_bad << " of " << a.numel() << " elements differ (" << what << "); first at flat index " << first << ": "
      << a.reshape(-1)[first].item<double>() << " vs expected " << expected.reshape(-1)[first].item<double>();
  return ::testing::AssertionFailure() << msg.str();
}

// Elementwise |actual - expected| <= atol + rtol * |expected|.
inline ::testing::AssertionResult AllClose(const at::Tensor& actual, const at::Tensor& expected, Tolerance tol) {
  const auto e = expected.detach().to(at::kCPU, at::kDouble);
  return WithinBound(
      actual, e, tol.atol + tol.rtol * e.abs(),
      "rtol " + std::to_string(tol.rtol) + ", atol " + std::to_string(tol.atol));
}

inline ::testing::AssertionResult AllClose(const at::Tensor& actual, const at::Tensor& expected, at::ScalarType dtype) {
  return AllClose(actual, expected, tolerance(dtype));
}

// `actual` against sum_to(terms, shape), for gradients reduced over broadcast dimensions: the
// rounding of each term and of the sum is bounded by a few rtol of the sum of |terms|, not of
// the (possibly cancelling) sum itself.
inline ::testing::AssertionResult AllCloseToSumOf(
    const at::Tensor& actual, const at::Tensor& terms, at::IntArrayRef shape, Tolerance tol) {
  const auto t = terms.detach().to(at::kCPU, at::kDouble);
  const auto expected = at::sum_to(t, shape);
  const auto bound = tol.atol + 4 * tol.rtol * at::sum_to(t.abs(), shape);
  return WithinBound(actual, expected, bound, "sum of terms, rtol " + std::to_string(tol.rtol));
}

// What custom::weighted_sum(input, weight) must return: a new contiguous tensor of the broadcast
// shape, of dtype at::result_type(input, weight), on the inputs' device, equal to the reference.
inline ::testing::AssertionResult IsWeightedSumOf(
    const at::Tensor& result, const at::Tensor& input, const at::Tensor& weight) {
  const auto dtype = at::result_type(input, weight);
  if (result.scalar_type() != dtype) {
    return ::testing::AssertionFailure() << "dtype " << result.scalar_type() << ", expected " << dtype;
  }
  if (result.device() != input.device()) {
    return ::testing::AssertionFailure() << "device " << result.device() << ", expected " << input.device();
  }
  // The layout of the composite: channels_last stays channels_last, a transposed input gives a
  // transposed result (TensorIterator's rules).
  // Keep the composite alive: strides() is a view into its TensorImpl.
  const at::Tensor composite = weight * input.square();
  if (result.strides() != composite.strides()) {
    return ::testing::AssertionFailure() << "strides " << result.strides() << ", expected those of "
                                         << "weight * input.square(): " << composite.strides();
  }
  return AllClose(result, reference(input, weight), dtype);
}

// Random values of `dtype`, drawn in float64 and rounded, so the reference sees exactly the
// values the op reads.
inline at::Tensor random(at::IntArrayRef shape, at::ScalarType dtype, at::Device device = at::kCPU) {
  return torch::randn(shape, torch::dtype(at::kDouble)).to(device, dtype);
}

inline at::Tensor nan_filled(at::IntArrayRef shape, at::ScalarType dtype, at::Device device = at::kCPU) {
  return torch::full(shape, std::numeric_limits<double>::quiet_NaN(), torch::dtype(dtype).device(device));
}

// Non-contiguous and misaligned views of the shape {rows, cols}.
inline at::Tensor transposed(int64_t rows, int64_t cols, at::ScalarType dtype, at::Device device = at::kCPU) {
  return random({cols, rows}, dtype, device).t();
}

inline at::Tensor sliced_with_step(int64_t rows, int64_t cols, at::ScalarType dtype, at::Device device = at::kCPU) {
  return random({rows, 2 * cols}, dtype, device).slice(/*dim=*/1, 0, 2 * cols, /*step=*/2);
}

// Contiguous, but starting one element into its storage, so its data pointer is misaligned for
// vector loads.
inline at::Tensor offset_by_one(int64_t rows, int64_t cols, at::ScalarType dtype, at::Device device = at::kCPU) {
  return random({rows * cols + 1}, dtype, device).slice(0, 1).view({rows, cols});
}

}  // namespace custom_ops_test
