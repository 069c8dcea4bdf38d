// The weighted square's arithmetic: the one place where its formulas and their operation order
// are written. Every loop (CPU scalar and at::vec::Vectorized, CUDA gpu_kernel and the layout
// kernels) calls these functors, in the op-math type (float for float16/bfloat16, rounded once).
//
// The forward keeps the operation order of the composite `w * x.square()` (square first, then
// the product): that is what makes float32 and float64 results equal to it bit for bit.
#pragma once

#include <c10/macros/Macros.h>

namespace custom::math {

// y = w * x**2
struct WeightedSquare {
  template <typename T>
  C10_HOST_DEVICE T operator()(T x, T w) const {
    return w * (x * x);
  }
};

// dy/dx * grad = 2 w x grad
struct WeightedSquareInputGradient {
  template <typename T>
  C10_HOST_DEVICE T operator()(T grad, T x, T w) const {
    return (x + x) * w * grad;
  }
};

// dy/dw * grad = x**2 grad (summed over w's broadcast dimensions by the caller)
struct WeightedSquareWeightGradient {
  template <typename T>
  C10_HOST_DEVICE T operator()(T grad, T x) const {
    return (x * x) * grad;
  }
};

}  // namespace custom::math
