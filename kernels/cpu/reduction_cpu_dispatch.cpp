// Registers the CPU kernel of weighted_square_sum with the loop of the instruction set ATen's own
// kernels run with (cpu_loops.h).
#include "kernels/cpu/cpu_loops.h"
#include "ops/weighted_square_sum_frontend.h"

namespace custom::cpu {

CUSTOM_OPS_DECLARE_REDUCTION_CPU_LOOPS(detail::WeightedSquareSumLoops, weighted_square_sum_loops)

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
