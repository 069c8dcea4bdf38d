// Registers the CPU kernel of weighted_square_sum with the loop of the instruction set ATen's own
// kernels run with (cpu_loops.h).
#include "kernels/cpu/cpu_loops.h"
#include "ops/weighted_square_sum_frontend.h"

namespace custom::cpu {

// The tables weighted_square_sum_kernel.cpp defines, one per instruction set it is built for.
namespace DEFAULT {
extern const detail::WeightedSquareSumLoops weighted_square_sum_loops;
}  // namespace DEFAULT
#if defined(__x86_64__)
namespace AVX2 {
extern const detail::WeightedSquareSumLoops weighted_square_sum_loops;
}  // namespace AVX2
namespace AVX512 {
extern const detail::WeightedSquareSumLoops weighted_square_sum_loops;
}  // namespace AVX512
#endif

namespace {

void reduce(const detail::WeightedSquareSumReduction& args) {
  static const detail::WeightedSquareSumLoops* const loops =
#if defined(__x86_64__)
      reduction_loops_for_cpu_capability(
          &AVX512::weighted_square_sum_loops, &widest::weighted_square_sum_loops, &DEFAULT::weighted_square_sum_loops);
#else
      loops_for_cpu_capability(&widest::weighted_square_sum_loops, &DEFAULT::weighted_square_sum_loops);
#endif
  loops->reduce(args);
}

constexpr detail::WeightedSquareSumLoops kCpuLoops{.reduce = reduce};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CPU, m) {
  detail::register_weighted_square_sum_kernels<kCpuLoops>(m);
}

}  // namespace custom::cpu
