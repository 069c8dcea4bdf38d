// SPDX-License-Identifier: BSD-3-Clause
// The 16-byte loads and stores of the CUDA kernels, for both engines (elementwise and reduction).
// The size and the alignment test are host code too: the host-only plans that choose between a
// vectorized kernel and an element-by-element one (elementwise_forward_layout.h, reduction_plan.h)
// use them, and the CPU tests include those plans.
#pragma once

#include <cstdint>

#include <c10/macros/Macros.h>

#if defined(__CUDACC__)
#include <ATen/native/cuda/MemoryAccess.cuh>
#endif

namespace custom::cuda {

// Bytes of one vectorized load or store: the widest one instruction moves.
inline constexpr int64_t kVectorBytes = 16;

// Elements of scalar_t in one vector.
template <typename scalar_t>
inline constexpr int kVectorSize = static_cast<int>(kVectorBytes / sizeof(scalar_t));

// Whether a vector may be loaded from or stored to `pointer` (null passes: an unused operand).
C10_HOST_DEVICE inline bool vector_aligned(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % kVectorBytes == 0;
}

#if defined(__CUDACC__)

// kN consecutive elements, aligned to their size: one load or store instruction when kN fills
// kVectorBytes, one per element when kN is 1.
template <typename scalar_t, int kN = kVectorSize<scalar_t>>
using Vector = at::native::memory::aligned_vector<scalar_t, kN>;

// The caller has checked the alignment (vector_aligned, or offsets that are multiples of kN).
template <int kN, typename scalar_t>
__device__ __forceinline__ Vector<scalar_t, kN> load_vector(const scalar_t* pointer) {
  return *reinterpret_cast<const Vector<scalar_t, kN>*>(pointer);
}

template <int kN, typename scalar_t>
__device__ __forceinline__ void store_vector(scalar_t* pointer, const Vector<scalar_t, kN>& value) {
  *reinterpret_cast<Vector<scalar_t, kN>*>(pointer) = value;
}

#endif  // __CUDACC__

}  // namespace custom::cuda
