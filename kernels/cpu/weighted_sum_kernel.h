// The CPU loops, one set per instruction set that weighted_sum_kernel.cpp is compiled for.
#pragma once

#include "ops/weighted_sum_frontend.h"

namespace custom::cpu {
namespace DEFAULT {
extern const detail::WeightedSumLoops weighted_sum_loops;
}
#if defined(__x86_64__)
namespace AVX2 {
extern const detail::WeightedSumLoops weighted_sum_loops;
}
#endif
}  // namespace custom::cpu
