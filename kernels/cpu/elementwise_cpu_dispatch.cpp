// Registers the CPU kernels with the loops of the instruction set ATen's own elementwise kernels
// run with (cpu_loops.h).
#include "kernels/cpu/cpu_loops.h"
#include "ops/weighted_sum_frontend.h"

namespace custom::cpu {

CUSTOM_OPS_DECLARE_ELEMENTWISE_CPU_LOOPS(detail::WeightedSumLoops, weighted_sum_loops)

namespace {

const detail::WeightedSumLoops& selected_loops() {
  static const detail::WeightedSumLoops* const loops =
      loops_for_cpu_capability(&widest::weighted_sum_loops, &DEFAULT::weighted_sum_loops);
  return *loops;
}

void forward(at::TensorIteratorBase& iter) {
  selected_loops().forward(iter);
}
void backward_fused(at::TensorIteratorBase& iter) {
  selected_loops().backward_fused(iter);
}
void backward_input(at::TensorIteratorBase& iter) {
  selected_loops().backward_input(iter);
}
void backward_weight(at::TensorIteratorBase& iter) {
  selected_loops().backward_weight(iter);
}
void backward_per_channel(const detail::PerChannelBackward& args) {
  selected_loops().backward_per_channel(args);
}

constexpr detail::WeightedSumLoops kCpuLoops{
    .forward = forward,
    .backward_fused = backward_fused,
    .backward_input = backward_input,
    .backward_weight = backward_weight,
    .backward_per_channel = backward_per_channel,
};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CPU, m) {
  detail::register_weighted_sum_kernels<kCpuLoops>(m);
}

}  // namespace custom::cpu
