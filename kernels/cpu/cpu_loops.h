// SPDX-License-Identifier: BSD-3-Clause
// Which instruction set's CPU loops run. Each kernels/cpu/*_kernel.cpp is compiled once per set
// (cmake/CustomOpsCpuKernels.cmake: DEFAULT, AVX2 and AVX512) into namespace custom::cpu::<set>,
// where it defines its engine's loop table for every term (the templates below, explicitly
// instantiated over CUSTOM_OPS_TERMS). The engine's *_cpu_dispatch.cpp picks one set's table at
// run time and registers trampolines into it.
#pragma once

#include <string>

#include <ATen/Version.h>

#include <custom_ops/term.h>

namespace custom::detail {
struct ElementwiseLoops;  // ops/elementwise_frontend.h
struct ReductionLoops;  // ops/reduction_frontend.h
}  // namespace custom::detail

namespace custom::cpu {

// Each set's tables, one per term.
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
CUSTOM_OPS_DECLARE_LOOP_TABLE(AVX512, ElementwiseLoops, elementwise_loops)
CUSTOM_OPS_DECLARE_LOOP_TABLE(AVX512, ReductionLoops, reduction_loops)
#endif
#undef CUSTOM_OPS_DECLARE_LOOP_TABLE

// Whether a term calls a function of custom_ops/term_functions.h, read off its formulas: value,
// dx and dw evaluated once on a type whose arithmetic carries a flag and whose functions set it.
class FunctionCallProbe {
 public:
  FunctionCallProbe() = default;
  explicit FunctionCallProbe(double /*constant*/) {}
  static FunctionCallProbe call() {
    FunctionCallProbe called;
    called.calls_ = true;
    return called;
  }
  bool calls() const { return calls_; }
  friend FunctionCallProbe operator-(const FunctionCallProbe& a) { return a; }
#define CUSTOM_OPS_PROBE_OPERATOR(op)                                                            \
  friend FunctionCallProbe operator op(const FunctionCallProbe& a, const FunctionCallProbe& b) { \
    return a.calls_ ? a : b;                                                                     \
  }
  CUSTOM_OPS_PROBE_OPERATOR(+)
  CUSTOM_OPS_PROBE_OPERATOR(-)
  CUSTOM_OPS_PROBE_OPERATOR(*)
  CUSTOM_OPS_PROBE_OPERATOR(/)
#undef CUSTOM_OPS_PROBE_OPERATOR

 private:
  bool calls_ = false;
};

}  // namespace custom::cpu

template <>
struct custom::Functions<custom::cpu::FunctionCallProbe> {
  using Probe = cpu::FunctionCallProbe;
#define CUSTOM_OPS_PROBE_FUNCTION(name, ...) \
  static Probe name(const Probe& /*v*/) { return Probe::call(); }
#define CUSTOM_OPS_PROBE_FUNCTION_OF_A_CONSTANT(name, ...) \
  static Probe name(const Probe& /*v*/, double /*constant*/) { return Probe::call(); }
  CUSTOM_OPS_TERM_FUNCTIONS(CUSTOM_OPS_PROBE_FUNCTION)
  CUSTOM_OPS_TERM_FUNCTIONS_OF_A_CONSTANT(CUSTOM_OPS_PROBE_FUNCTION_OF_A_CONSTANT)
#undef CUSTOM_OPS_PROBE_FUNCTION
#undef CUSTOM_OPS_PROBE_FUNCTION_OF_A_CONSTANT
};

namespace custom::cpu {

template <class Term>
bool calls_functions() {
  const FunctionCallProbe x, w;
  return Term::value(x, w).calls() || Term::dx(x, w).calls() || Term::dw(x, w).calls();
}

// Which set runs a term's loops, from ATen's instruction set (at::get_cpu_capability(), which
// ATEN_CPU_CAPABILITY can lower): DEFAULT below AVX2; AVX512 where ATen runs AVX512 and the
// term's loops are bound by its functions' arithmetic (twice the lanes, about twice the speed:
// docs/benchmarks.md), as for the reductions, which torch.sum runs with AVX512 there; else AVX2,
// as ATen's REGISTER_DISPATCH elementwise kernels (add, mul, ...) run on AVX512 CPUs too.
enum class CpuSet { Default, Avx2, Avx512 };

inline CpuSet cpu_set_for(const std::string& capability, bool compute_bound) {
  if (capability == "AVX512") {
    return compute_bound ? CpuSet::Avx512 : CpuSet::Avx2;
  }
  return capability == "AVX2" ? CpuSet::Avx2 : CpuSet::Default;
}

// One set's table of a term. Pointers to the tables, which live as long as the library.
template <typename Loops>
const Loops* loops_of_set(CpuSet set, const Loops* avx512, const Loops* avx2, const Loops* fallback) {
  return set == CpuSet::Avx512 ? avx512 : set == CpuSet::Avx2 ? avx2 : fallback;
}

// The term's tables of every set, chosen once, at the first call.
template <class Term>
const detail::ElementwiseLoops& selected_elementwise_loops() {
#if defined(__x86_64__)
  static const detail::ElementwiseLoops* const loops = loops_of_set(
      cpu_set_for(at::get_cpu_capability(), calls_functions<Term>()), &AVX512::elementwise_loops<Term>(),
      &AVX2::elementwise_loops<Term>(), &DEFAULT::elementwise_loops<Term>());
#else
  static const detail::ElementwiseLoops* const loops = &DEFAULT::elementwise_loops<Term>();
#endif
  return *loops;
}

template <class Term>
const detail::ReductionLoops& selected_reduction_loops() {
#if defined(__x86_64__)
  static const detail::ReductionLoops* const loops = loops_of_set(
      cpu_set_for(at::get_cpu_capability(), /*compute_bound=*/true), &AVX512::reduction_loops<Term>(),
      &AVX2::reduction_loops<Term>(), &DEFAULT::reduction_loops<Term>());
#else
  static const detail::ReductionLoops* const loops = &DEFAULT::reduction_loops<Term>();
#endif
  return *loops;
}

// A registered table's entry: calls the entry kLoop (a member pointer, as
// &detail::ElementwiseLoops::forward) of the table kSelected() returns, with the entry's own
// arguments (deduced from the pointer it initializes), e.g.
//   .forward = call_selected<&selected_elementwise_loops<Term>, &detail::ElementwiseLoops::forward>
template <auto kSelected, auto kLoop, typename Result, typename... Args>
Result call_selected(Args... args) {
  return (kSelected().*kLoop)(args...);
}

}  // namespace custom::cpu
