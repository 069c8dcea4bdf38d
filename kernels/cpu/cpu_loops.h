// SPDX-License-Identifier: BSD-3-Clause
// Which instruction set's CPU loops run. Each kernels/cpu/*_kernel.cpp is compiled once per set
// (cmake/CustomOpsCpuKernels.cmake: elementwise loops for DEFAULT and AVX2, reductions for AVX512
// too) into namespace custom::cpu::<set>, where it defines its engine's loop table for every term
// (the templates below, explicitly instantiated over CUSTOM_OPS_TERMS). The engine's
// *_cpu_dispatch.cpp picks one set's table at run time and registers trampolines into it.
#pragma once

#include <string>

#include <ATen/Version.h>

namespace custom::detail {
struct ElementwiseLoops;  // ops/elementwise_frontend.h
struct ReductionLoops;  // ops/reduction_frontend.h
}  // namespace custom::detail

namespace custom::cpu {

// Each set's tables, one per term, as CMakeLists.txt lists the kernel files: under ELEMENTWISE
// (no AVX512 build) or REDUCTIONS.
#define CUSTOM_OPS_DECLARE_LOOP_TABLE(set, Loops, table) \
  namespace set {                                        \
  template <class Term>                                  \
  const detail::Loops& table();                          \
  }
CUSTOM_OPS_DECLARE_LOOP_TABLE(DEFAULT, ElementwiseLoops, elementwise_loops)
CUSTOM_OPS_DECLARE_LOOP_TABLE(DEFAULT, ReductionLoops, reduction_loops)
#if defined(__x86_64__)
CUSTOM_OPS_DECLARE_LOOP_TABLE(AVX2, ElementwiseLoops, elementwise_loops)
CUSTOM_OPS_DECLARE_LOOP_TABLE(AVX2, ReductionLoops, reduction_loops)
CUSTOM_OPS_DECLARE_LOOP_TABLE(AVX512, ReductionLoops, reduction_loops)
namespace widest = AVX2;  // the widest set every loop is built for on this architecture
#else
namespace widest = DEFAULT;
#endif
#undef CUSTOM_OPS_DECLARE_LOOP_TABLE

// The widest set's table where ATen runs AVX2 (or AVX512) kernels, else DEFAULT's.
// at::get_cpu_capability() is ATen's choice (ATEN_CPU_CAPABILITY can lower it); on an AVX512 CPU
// ATen's REGISTER_DISPATCH kernels (add, mul, ...) still run their AVX2 build. Pointers to the
// tables, which live as long as the library.
template <typename Loops>
const Loops* loops_for_cpu_capability([[maybe_unused]] const Loops* widest_loops, const Loops* default_loops) {
#if defined(__x86_64__)
  const std::string capability = at::get_cpu_capability();
  if (capability == "AVX2" || capability == "AVX512") {
    return widest_loops;
  }
#endif
  return default_loops;
}

// The reductions' table: AVX512's where ATen runs AVX512, as torch.sum does on such a CPU.
template <typename Loops>
const Loops* reduction_loops_for_cpu_capability(
    [[maybe_unused]] const Loops* avx512_loops, const Loops* widest_loops, const Loops* default_loops) {
#if defined(__x86_64__)
  if (at::get_cpu_capability() == "AVX512") {
    return avx512_loops;
  }
#endif
  return loops_for_cpu_capability(widest_loops, default_loops);
}

// The term's tables of every set, chosen once, at the first call.
template <class Term>
const detail::ElementwiseLoops& selected_elementwise_loops() {
  static const detail::ElementwiseLoops* const loops =
      loops_for_cpu_capability(&widest::elementwise_loops<Term>(), &DEFAULT::elementwise_loops<Term>());
  return *loops;
}

template <class Term>
const detail::ReductionLoops& selected_reduction_loops() {
#if defined(__x86_64__)
  static const detail::ReductionLoops* const loops = reduction_loops_for_cpu_capability(
      &AVX512::reduction_loops<Term>(), &widest::reduction_loops<Term>(), &DEFAULT::reduction_loops<Term>());
#else
  static const detail::ReductionLoops* const loops = &DEFAULT::reduction_loops<Term>();
#endif
  return *loops;
}

// A registered table's entry: calls the entry kLoop (a member pointer, as
// &detail::ElementwiseLoops::forward) of the table kSelected() returns, with the entry's own
// arguments (deduced from the pointer it initializes), e.g.
//   .forward = call_selected<&selected_elementwise_loops<Term>, &detail::ElementwiseLoops::forward>
template <auto kSelected, auto kLoop, typename... Args>
void call_selected(Args... args) {
  (kSelected().*kLoop)(args...);
}

}  // namespace custom::cpu
