// SPDX-License-Identifier: BSD-3-Clause
// Non-temporal ("streaming") stores of at::vec::Vectorized values, for outputs too large to stay
// in cache. A normal store first reads the cache line it writes (read-for-ownership), so an
// elementwise op with two inputs moves four streams through memory; a streaming store writes the
// line without reading it. at::vec has no such store, so this header adds one per instruction
// set; where the set has none, kCanStream is false and the callers keep their normal stores.
#pragma once

#include <cstdint>
#include <type_traits>

#include <ATen/cpu/vec/vec.h>

#if defined(CPU_CAPABILITY_AVX2)
#include <immintrin.h>
#endif

namespace custom::cpu::CPU_CAPABILITY {

#if defined(CPU_CAPABILITY_AVX2)
inline constexpr bool kCanStream = true;

// `aligned` must be aligned to the vector's size (32 bytes).
template <typename scalar_t>
inline void stream_store(const at::vec::Vectorized<scalar_t>& value, char* aligned) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    _mm256_stream_ps(reinterpret_cast<float*>(aligned), value);
  } else if constexpr (std::is_same_v<scalar_t, double>) {
    _mm256_stream_pd(reinterpret_cast<double*>(aligned), value);
  } else {  // Half, BFloat16: 16 lanes in one __m256i
    _mm256_stream_si256(reinterpret_cast<__m256i*>(aligned), value);
  }
}

// Streaming stores are weakly ordered: fence them before another thread may read the output.
inline void stream_fence() {
  _mm_sfence();
}
#else
inline constexpr bool kCanStream = false;

template <typename scalar_t>
inline void stream_store(const at::vec::Vectorized<scalar_t>& value, char* aligned) {
  value.store(aligned);
}

inline void stream_fence() {}
#endif

// Elements before `pointer` reaches the vector alignment of Vectorized<scalar_t>, or -1 when it
// never does (a pointer not aligned to the element itself).
template <typename scalar_t>
inline int64_t elements_to_vector_alignment(const char* pointer) {
  constexpr auto alignment = static_cast<uintptr_t>(sizeof(at::vec::Vectorized<scalar_t>));
  const auto offset = reinterpret_cast<uintptr_t>(pointer) % alignment;
  if (offset % sizeof(scalar_t) != 0) {
    return -1;
  }
  return offset == 0 ? 0 : static_cast<int64_t>((alignment - offset) / sizeof(scalar_t));
}

}  // namespace custom::cpu::CPU_CAPABILITY
