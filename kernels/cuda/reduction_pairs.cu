// SPDX-License-Identifier: BSD-3-Clause
// The reduction over operands that broadcast against each other: out[i, j] = the sum over k of
// Term::value(x, w), one operand's row depending on i alone and the other's on j alone (x [N, 1, D]
// with w [1, M, D] summed over D). Each row is read by a whole dim of outputs, so a block stages
// tiles of both operands' rows in shared memory, in the accumulation type, and each thread sums a
// block of outputs from them, as a GEMM without tensor cores does: a term need not separate into
// products. The order of every addition follows from K alone (reduction_plan.h, plan_pairs): the
// same bits on every run.
#include <cstdint>

#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include "kernels/cuda/reduction_pairs.h"
#include "kernels/cuda/reduction_plan.h"
#include "ops/floating_types.h"
#include "ops/operator_rows.h"

namespace custom::cuda {
namespace {

namespace reduction = cuda::reduction;
constexpr int kTile = reduction::kPairsTile;
constexpr int kPer = reduction::kPairsPer;
constexpr int kStep = reduction::kPairsStep;
constexpr int kRun = reduction::kPairsRun;
constexpr int kLanes = kTile / kPer;  // threads along i, and along j
// Row pitch of a stage: kPer accumulators of a thread are one aligned load; the 4 extra ones
// spread a stage's stores (k-major within a row) over the banks.
constexpr int kPitch = kTile + 4;

template <typename scalar_t>
struct PairsArgs {
  const scalar_t* by_i;  // the operand whose row is i's
  const scalar_t* by_j;
  int64_t i_stride;
  int64_t i_k_stride;
  int64_t j_stride;
  int64_t j_k_stride;
  int64_t rows_i;
  int64_t rows_j;
  int64_t length;
};

template <typename acc>
struct alignas(kPer * sizeof(acc)) Group {
  acc v[kPer];
};

template <class Term, typename scalar_t, typename out_t, bool kInputByI>
__global__ void __launch_bounds__(reduction::kThreads) pairs_kernel(PairsArgs<scalar_t> a, out_t* out) {
  using acc = at::opmath_type<scalar_t>;
  __shared__ Group<acc> stage_i_groups[kStep][kPitch / kPer];
  __shared__ Group<acc> stage_j_groups[kStep][kPitch / kPer];
  auto* const stage_i = reinterpret_cast<acc(*)[kPitch]>(stage_i_groups);
  auto* const stage_j = reinterpret_cast<acc(*)[kPitch]>(stage_j_groups);
  const int lane_j = static_cast<int>(threadIdx.x) % kLanes;
  const int lane_i = static_cast<int>(threadIdx.x) / kLanes;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kTile;

  acc sum[kPer][kPer];
  acc run[kPer][kPer];
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      sum[p][q] = acc(0);
      run[p][q] = acc(0);
    }
  }
  for (int64_t k0 = 0; k0 < a.length; k0 += kStep) {
    // Consecutive threads load consecutive k of one row: contiguous rows load in 64-byte runs.
    for (int e = static_cast<int>(threadIdx.x); e < kStep * kTile; e += reduction::kThreads) {
      const int k = e % kStep;
      const int r = e / kStep;
      const bool in_k = k0 + k < a.length;
      stage_i[k][r] = in_k && i0 + r < a.rows_i
          ? static_cast<acc>(a.by_i[(i0 + r) * a.i_stride + (k0 + k) * a.i_k_stride])
          : acc(0);
      stage_j[k][r] = in_k && j0 + r < a.rows_j
          ? static_cast<acc>(a.by_j[(j0 + r) * a.j_stride + (k0 + k) * a.j_k_stride])
          : acc(0);
    }
    __syncthreads();
    // The same count for the whole block: only the last stage is short.
    const int terms = static_cast<int>(a.length - k0 < kStep ? a.length - k0 : kStep);
    for (int k = 0; k < terms; ++k) {
      const Group<acc> vi = stage_i_groups[k][lane_i];
      const Group<acc> vj = stage_j_groups[k][lane_j];
#pragma unroll
      for (int p = 0; p < kPer; ++p) {
#pragma unroll
        for (int q = 0; q < kPer; ++q) {
          run[p][q] += kInputByI ? Term::value(vi.v[p], vj.v[q]) : Term::value(vj.v[q], vi.v[p]);
        }
      }
    }
    __syncthreads();
    if ((k0 + kStep) % kRun == 0 || k0 + kStep >= a.length) {
#pragma unroll
      for (int p = 0; p < kPer; ++p) {
#pragma unroll
        for (int q = 0; q < kPer; ++q) {
          sum[p][q] += run[p][q];
          run[p][q] = acc(0);
        }
      }
    }
  }
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    const int64_t i = i0 + lane_i * kPer + p;
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int64_t j = j0 + lane_j * kPer + q;
      if (i < a.rows_i && j < a.rows_j) {
        out[i * a.rows_j + j] = static_cast<out_t>(sum[p][q]);
      }
    }
  }
}

}  // namespace

template <class Term>
bool reduce_pairs(const detail::Reduction& args) {
  const auto& x = args.input;
  const auto& w = args.weight;
  const auto& out = args.out;
  TORCH_INTERNAL_ASSERT(x.dim() == 3 && x.sizes() == w.sizes() && x.scalar_type() == w.scalar_type());
  TORCH_INTERNAL_ASSERT(out.is_contiguous() && out.numel() == x.size(0) * x.size(1) && x.size(2) >= 1);
  const bool input_by_i = x.stride(1) == 0 && w.stride(0) == 0;
  TORCH_INTERNAL_ASSERT(input_by_i || (x.stride(0) == 0 && w.stride(1) == 0));
  const auto plan = reduction::plan_pairs(x.size(0), x.size(1), x.size(2));
  if (!plan.fits) {
    return false;
  }
  const auto& by_i = input_by_i ? x : w;
  const auto& by_j = input_by_i ? w : x;
  const dim3 grid(static_cast<unsigned int>(plan.tiles_i), static_cast<unsigned int>(plan.tiles_j));
  const auto stream = at::cuda::getCurrentCUDAStream();
  CUSTOM_OPS_DISPATCH_FLOATING_TYPES(x.scalar_type(), "reduction_pairs_cuda", [&] {
    using acc = at::opmath_type<scalar_t>;
    const PairsArgs<scalar_t> a{
        by_i.const_data_ptr<scalar_t>(),
        by_j.const_data_ptr<scalar_t>(),
        by_i.stride(0),
        by_i.stride(2),
        by_j.stride(1),
        by_j.stride(2),
        x.size(0),
        x.size(1),
        x.size(2)};
    const auto launch = [&]<typename out_t, bool kInputByI>() {
      pairs_kernel<Term, scalar_t, out_t, kInputByI>
          <<<grid, reduction::kThreads, 0, stream>>>(a, out.mutable_data_ptr<out_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    const bool out_acc = out.scalar_type() == c10::CppTypeToScalarType<acc>::value;
    TORCH_INTERNAL_ASSERT(out_acc || out.scalar_type() == x.scalar_type());
    if (out_acc) {
      input_by_i ? launch.template operator()<acc, true>() : launch.template operator()<acc, false>();
    } else {
      input_by_i ? launch.template operator()<scalar_t, true>() : launch.template operator()<scalar_t, false>();
    }
  });
  return true;
}

#define CUSTOM_OPS_INSTANTIATE(Term_, backward_) \
  template bool reduce_pairs<terms::Term_>(const detail::Reduction& args);
CUSTOM_OPS_TERMS(CUSTOM_OPS_INSTANTIATE)
#undef CUSTOM_OPS_INSTANTIATE

}  // namespace custom::cuda
