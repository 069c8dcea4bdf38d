// SPDX-License-Identifier: BSD-3-Clause
// Registers the CPU kernels with the loops of the instruction set cpu_loops.h picks for each term:
// the one ATen's own elementwise kernels run with, AVX512 for terms that call functions.
#include "kernels/cpu/cpu_loops.h"
#include "ops/elementwise_frontend.h"

namespace custom::cpu {
namespace {

template <class Term>
struct CpuLoops {
  static constexpr auto selected = &selected_elementwise_loops<Term>;
  static constexpr detail::ElementwiseLoops value{
      .forward = call_selected<selected, &detail::ElementwiseLoops::forward>,
      .backward_fused = call_selected<selected, &detail::ElementwiseLoops::backward_fused>,
      .backward_input = call_selected<selected, &detail::ElementwiseLoops::backward_input>,
      .backward_weight = call_selected<selected, &detail::ElementwiseLoops::backward_weight>,
      .backward_per_channel = call_selected<selected, &detail::ElementwiseLoops::backward_per_channel>,
  };
};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CPU, m) {
  detail::register_elementwise_kernels<CpuLoops>(m);
}

}  // namespace custom::cpu
