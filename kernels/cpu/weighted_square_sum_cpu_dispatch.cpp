// Registers the CPU kernel of weighted_square_sum with the loop of the instruction set ATen's own
// kernels run with (cpu_capability.h).
#include "kernels/cpu/cpu_capability.h"
#include "kernels/cpu/weighted_square_sum_kernel.h"
#include "ops/weighted_square_sum_registration.h"

namespace custom::cpu {
namespace {

void reduce(const detail::WeightedSquareSumReduction& args) {
  static const detail::WeightedSquareSumLoops* const loops = &loops_for_cpu_capability(
#if defined(__x86_64__)
      AVX2::weighted_square_sum_loops,
#else
      DEFAULT::weighted_square_sum_loops,
#endif
      DEFAULT::weighted_square_sum_loops);
  loops->reduce(args);
}

constexpr detail::WeightedSquareSumLoops kCpuLoops{.reduce = reduce};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CPU, m) {
  detail::register_weighted_square_sum_kernels<kCpuLoops>(m);
}

}  // namespace custom::cpu
