// SPDX-License-Identifier: BSD-3-Clause
// y = w * x**2: weighted_sum elementwise, weighted_square_sum summed.
//
// value keeps the composite's operation order, `w * (x * x)` for `weight * input.square()`: that
// is what makes float32 and float64 results equal to it bit for bit.
#pragma once

#include <custom_ops/term.h>

namespace custom::terms {

struct WeightedSquare {
  static constexpr bool dw_reads_weight = false;

  template <typename T>
  C10_HOST_DEVICE static T value(const T& x, const T& w) {
    return w * (x * x);
  }
  // Optional: value(x, w) == w * input_factor(x), which lets a reduction weight a column's sum once.
  template <typename T>
  C10_HOST_DEVICE static T input_factor(const T& x) {
    return x * x;
  }
  template <typename T>
  C10_HOST_DEVICE static T dx(const T& x, const T& w) {
    return (x + x) * w;
  }
  template <typename T>
  C10_HOST_DEVICE static T dw(const T& x, [[maybe_unused]] const T& w) {
    return x * x;
  }
  template <typename T>
  C10_HOST_DEVICE static T dxx([[maybe_unused]] const T& x, const T& w) {
    return w + w;
  }
  template <typename T>
  C10_HOST_DEVICE static T dxw(const T& x, [[maybe_unused]] const T& w) {
    return x + x;
  }
  template <typename T>
  C10_HOST_DEVICE static T dww([[maybe_unused]] const T& x, [[maybe_unused]] const T& w) {
    return number<T>(0);
  }
};

}  // namespace custom::terms
