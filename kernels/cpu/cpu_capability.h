// Which instruction set's build of the CPU loops runs: the one ATen's own elementwise kernels run
// with. at::get_cpu_capability() is ATen's choice (ATEN_CPU_CAPABILITY can lower it), and on an
// AVX512 CPU ATen's REGISTER_DISPATCH kernels (add, mul, ...) still run their AVX2 build.
#pragma once

#include <string>

#include <ATen/Version.h>

namespace custom::cpu {

// `avx2` where ATen runs AVX2 (or AVX512) kernels on an x86-64 build, else `fallback`.
template <typename Loops>
const Loops& loops_for_cpu_capability([[maybe_unused]] const Loops& avx2, const Loops& fallback) {
#if defined(__x86_64__)
  const std::string capability = at::get_cpu_capability();
  if (capability == "AVX2" || capability == "AVX512") {
    return avx2;
  }
#endif
  return fallback;
}

}  // namespace custom::cpu
