// SPDX-License-Identifier: BSD-3-Clause
// Registers the CPU kernels of the reductions with the loops of the instruction set ATen's own
// kernels run with (cpu_loops.h: AVX512's where torch.sum runs them), for every term.
#include "kernels/cpu/cpu_loops.h"
#include "ops/reduction_frontend.h"

namespace custom::cpu {
namespace {

template <class Term>
struct CpuReductionLoops {
  static constexpr detail::ReductionLoops value{
      .reduce = call_selected<&selected_reduction_loops<Term>, &detail::ReductionLoops::reduce>,
      .reduce_pairs = call_selected<&selected_reduction_loops<Term>, &detail::ReductionLoops::reduce_pairs>,
  };
};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CPU, m) {
  detail::register_reduction_kernels<CpuReductionLoops>(m);
}

}  // namespace custom::cpu
