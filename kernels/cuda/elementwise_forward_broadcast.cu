// SPDX-License-Identifier: BSD-3-Clause
// out[r, c] = value(x, w) where out and one input are contiguous [R, C] and the other input is a
// row [C] repeated down the rows or a column [R, 1] repeated along them; or out and one input are
// contiguous [N, C, P] and the other is [C, 1] repeated over each plane of P (elementwise_forward_
// layout.h). gpu_kernel sees a stride-0 operand and takes its strided, one-element-per-load loop;
// here every load and store of the full operands is 16 bytes, and the repeated operand's index
// comes from multiply-shift dividers.
#include <algorithm>

#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/detail/IntegerDivider.cuh>
#include <c10/cuda/CUDAException.h>

#include "kernels/cuda/elementwise_forward_layout.h"
#include "kernels/cuda/vectorized_access.cuh"
#include "ops/floating_types.h"
#include "ops/operator_rows.h"

namespace custom::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVectorsPerThread = 4;  // all loads of a thread in flight before the first store

template <typename scalar_t>
struct BroadcastArgs {
  scalar_t* out;
  const scalar_t* full;  // contiguous [R, C]
  const scalar_t* repeated;  // a row [C] or a column [R]
  uint32_t vectors;  // R * C / kVectorSize
  at::cuda::detail::IntDivider<uint32_t> vectors_per_row;
  at::cuda::detail::IntDivider<uint32_t> plane;  // Repeated::Plane's P and C
  at::cuda::detail::IntDivider<uint32_t> channels;
};

// The repeated element of flat element e in a plane plan: (e / P) mod C.
template <typename scalar_t>
__device__ __forceinline__ scalar_t plane_element(const BroadcastArgs<scalar_t>& args, uint32_t e) {
  return args.repeated[args.channels.mod(args.plane.div(e))];
}

// Repeated::Row: the repeated operand's vector is vector mod vectors_per_row. Column: one element
// per vector, vector div vectors_per_row (a vector never straddles rows). Plane: one element per
// vector, and the next plane's for a vector that straddles planes (each element its own where a
// plane is shorter than a vector).
template <class Term, typename scalar_t, Repeated kRepeated, bool kInputIsRepeated>
__global__ void __launch_bounds__(kThreads) forward_broadcast_kernel(BroadcastArgs<scalar_t> args) {
  constexpr int kVec = kVectorSize<scalar_t>;
  using vec_t = Vector<scalar_t>;
  using opmath_t = at::opmath_type<scalar_t>;
  const auto* full = reinterpret_cast<const vec_t*>(args.full);
  const auto* repeated_rows = reinterpret_cast<const vec_t*>(args.repeated);
  auto* out = reinterpret_cast<vec_t*>(args.out);

  const uint32_t first = blockIdx.x * (kThreads * kVectorsPerThread) + threadIdx.x;
  vec_t full_values[kVectorsPerThread];
  vec_t repeated_values[kVectorsPerThread];
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const uint32_t v = first + k * kThreads;
    if (v < args.vectors) {
      full_values[k] = full[v];
      if constexpr (kRepeated == Repeated::Row) {
        repeated_values[k] = repeated_rows[args.vectors_per_row.mod(v)];
      } else if constexpr (kRepeated == Repeated::Plane) {
        const uint32_t e = v * kVec;
        const uint32_t plane = args.plane.div(e);
        const scalar_t value = args.repeated[args.channels.mod(plane)];
        if (args.plane.divisor >= kVec) {
          // At most one plane boundary in a vector: the elements past it take the next plane's
          // value, with no division per element (16-bit vectors hold 8).
          const uint32_t left_in_plane = args.plane.divisor - (e - plane * args.plane.divisor);
          const scalar_t next = left_in_plane < kVec ? args.repeated[args.channels.mod(plane + 1)] : value;
#pragma unroll
          for (int i = 0; i < kVec; ++i) {
            repeated_values[k].val[i] = static_cast<uint32_t>(i) < left_in_plane ? value : next;
          }
        } else {
          // Planes shorter than a vector (the same branch for the whole grid): each element its own.
          repeated_values[k].val[0] = value;
#pragma unroll
          for (int i = 1; i < kVec; ++i) {
            repeated_values[k].val[i] = plane_element(args, e + i);
          }
        }
      } else {
        const scalar_t value = args.repeated[args.vectors_per_row.div(v)];
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          repeated_values[k].val[i] = value;
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const uint32_t v = first + k * kThreads;
    if (v < args.vectors) {
      vec_t result;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const opmath_t x = kInputIsRepeated ? repeated_values[k].val[i] : full_values[k].val[i];
        const opmath_t w = kInputIsRepeated ? full_values[k].val[i] : repeated_values[k].val[i];
        result.val[i] = Term::value(x, w);
      }
      out[v] = result;
    }
  }
}

template <class Term, typename scalar_t, Repeated kRepeated, bool kInputIsRepeated>
void launch(const BroadcastArgs<scalar_t>& args) {
  const uint32_t per_block = kThreads * kVectorsPerThread;
  const uint32_t blocks = (args.vectors + per_block - 1) / per_block;
  forward_broadcast_kernel<Term, scalar_t, kRepeated, kInputIsRepeated>
      <<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

template <class Term>
void launch_forward_broadcast(at::TensorIteratorBase& iter, const BroadcastPlan& plan) {
  CUSTOM_OPS_DISPATCH_ITER_FLOATING(iter, "elementwise_broadcast_cuda", [&] {
    constexpr int64_t kVec = kVectorSize<scalar_t>;
    const auto input = static_cast<const scalar_t*>(iter.data_ptr(kInput));
    const auto weight = static_cast<const scalar_t*>(iter.data_ptr(kWeight));
    BroadcastArgs<scalar_t> args{
        static_cast<scalar_t*>(iter.data_ptr(kOut)),
        plan.input_is_repeated ? weight : input,
        plan.input_is_repeated ? input : weight,
        static_cast<uint32_t>(plan.rows * plan.cols / kVec),
        at::cuda::detail::IntDivider<uint32_t>(static_cast<uint32_t>(std::max<int64_t>(plan.cols / kVec, 1))),
        at::cuda::detail::IntDivider<uint32_t>(static_cast<uint32_t>(std::max<int64_t>(plan.plane, 1))),
        at::cuda::detail::IntDivider<uint32_t>(static_cast<uint32_t>(std::max<int64_t>(plan.channels, 1))),
    };
    const auto with = [&]<Repeated kRepeated>() {
      plan.input_is_repeated ? launch<Term, scalar_t, kRepeated, true>(args)
                             : launch<Term, scalar_t, kRepeated, false>(args);
    };
    switch (plan.repeated) {
      case Repeated::Row:
        return with.template operator()<Repeated::Row>();
      case Repeated::Column:
        return with.template operator()<Repeated::Column>();
      case Repeated::Plane:
        return with.template operator()<Repeated::Plane>();
    }
  });
}

#define CUSTOM_OPS_INSTANTIATE(Term_, backward_) \
  template void launch_forward_broadcast<terms::Term_>(at::TensorIteratorBase & iter, const BroadcastPlan& plan);
CUSTOM_OPS_TERMS(CUSTOM_OPS_INSTANTIATE)
#undef CUSTOM_OPS_INSTANTIATE

}  // namespace custom::cuda
