// The CPU reduction loop of weighted_square_sum, one per instruction set that
// weighted_square_sum_kernel.cpp is compiled for.
#pragma once

#include "ops/weighted_square_sum_frontend.h"

namespace custom::cpu {
namespace DEFAULT {
extern const detail::WeightedSquareSumLoops weighted_square_sum_loops;
}
#if defined(__x86_64__)
namespace AVX2 {
extern const detail::WeightedSquareSumLoops weighted_square_sum_loops;
}
#endif
}  // namespace custom::cpu
