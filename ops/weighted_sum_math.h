// The weighted square's arithmetic: the one place where its formulas and their operation order
// are written. Every loop (CPU scalar and at::vec::Vectorized, CUDA gpu_kernel and the layout
// kernels) calls these functors, in the op-math type (float for float16/bfloat16, rounded once).
//
// The forward keeps the operation order of the composite `w * x.square()` (square first, then
// the product): that is what makes float32 and float64 results equal to it bit for bit.
#pragma once

#include <ATen/OpMathType.h>
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

// weighted_square_sum's terms: the weighted square in the accumulation type, added in it;
// float16 and bfloat16 results are rounded once, at the end. One exception, exact in real
// arithmetic: the CPU total over one weight row shared by many rows sums each column's squares
// first, then weights it (w[j] * sum_r x[r, j]**2: a load and an FMA a term, as torch.sum's load
// and add), and falls back to these terms where that overflows.

// float for float16, bfloat16 and float32; double for double.
template <typename scalar_t>
using weighted_square_sum_acc_t = at::opmath_type<scalar_t>;

// One term of sum(w * x**2), from operands in their storage type.
struct WeightedSquareSumTerm {
  template <typename scalar_t>
  C10_HOST_DEVICE weighted_square_sum_acc_t<scalar_t> operator()(scalar_t x, scalar_t w) const {
    using acc_t = weighted_square_sum_acc_t<scalar_t>;
    return WeightedSquare{}(static_cast<acc_t>(x), static_cast<acc_t>(w));
  }
};

}  // namespace custom::math
