// The weighted square sum's arithmetic: the one place of its formula and accumulation type. Every
// loop (CPU, CUDA) computes each term with the weighted square's functor (weighted_sum_math.h,
// the composite's operation order w * (x * x)) in the accumulation type and adds the terms in it;
// float16 and bfloat16 results are rounded once, at the end. One exception, exact in real
// arithmetic: the CPU total over one weight row shared by many rows sums each column's squares
// first, then weights it (w[j] * sum_r x[r, j]**2: a load and an FMA a term, as torch.sum's load
// and add), and falls back to these terms where that overflows.
#pragma once

#include <ATen/OpMathType.h>
#include <c10/macros/Macros.h>

#include "weighted_sum_math.h"

namespace custom::math {

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
