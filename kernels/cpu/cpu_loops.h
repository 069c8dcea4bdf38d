// Which instruction set's CPU loops run. Each kernels/cpu/*_kernel.cpp is compiled once per set
// (cmake/CustomOpsCpuKernels.cmake: elementwise loops for DEFAULT and AVX2, reductions for AVX512
// too) into namespace custom::cpu::<set>, where it defines its op's loop table; the op's
// *_cpu_dispatch.cpp declares the tables with the macros below and picks one with these
// functions: the set ATen's own kernels of the kind run with.
#pragma once

#include <string>

#include <ATen/Version.h>

namespace custom::cpu {

namespace DEFAULT {}
#if defined(__x86_64__)
namespace AVX2 {}
namespace AVX512 {}
namespace widest = AVX2;  // the widest set every loop is built for on this architecture
#else
namespace widest = DEFAULT;
#endif

// Declare, at namespace custom::cpu scope, an op's loop table `name` of type `Loops` in each set
// its kernel file is built for, as CMakeLists.txt lists the file: under ELEMENTWISE or REDUCTIONS.
// Its kernel file declares it too, before defining it: a const needs that for external linkage.
#define CUSTOM_OPS_DECLARE_CPU_LOOPS_IN(set, Loops, name) \
  namespace set {                                         \
  extern const Loops name;                                \
  }
#if defined(__x86_64__)
#define CUSTOM_OPS_DECLARE_ELEMENTWISE_CPU_LOOPS(Loops, name) \
  CUSTOM_OPS_DECLARE_CPU_LOOPS_IN(DEFAULT, Loops, name)       \
  CUSTOM_OPS_DECLARE_CPU_LOOPS_IN(AVX2, Loops, name)
#define CUSTOM_OPS_DECLARE_REDUCTION_CPU_LOOPS(Loops, name) \
  CUSTOM_OPS_DECLARE_ELEMENTWISE_CPU_LOOPS(Loops, name)     \
  CUSTOM_OPS_DECLARE_CPU_LOOPS_IN(AVX512, Loops, name)
#else
#define CUSTOM_OPS_DECLARE_ELEMENTWISE_CPU_LOOPS(Loops, name) CUSTOM_OPS_DECLARE_CPU_LOOPS_IN(DEFAULT, Loops, name)
#define CUSTOM_OPS_DECLARE_REDUCTION_CPU_LOOPS(Loops, name) CUSTOM_OPS_DECLARE_CPU_LOOPS_IN(DEFAULT, Loops, name)
#endif

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

}  // namespace custom::cpu
