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
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include "kernels/cuda/reduction_pairs.h"
#include "kernels/cuda/reduction_plan.h"
#include "kernels/cuda/vectorized_access.cuh"
#include "ops/floating_types.h"
#include "ops/operator_rows.h"

namespace custom::cuda {
namespace {

namespace reduction = cuda::reduction;
constexpr int kTile = reduction::kPairsTile;
constexpr int kPer = reduction::kPairsPer;
constexpr int kStep = reduction::kPairsStep;
constexpr int kLanes = kTile / kPer;  // threads along i, and along j
// A thread's kPer rows of a dim are two groups of kGroup consecutive ones, kTile / 2 apart: each
// group one 16-byte shared load, and a warp's loads of one stage row conflict-free.
constexpr int kGroup = kPer / 2;
// Elements of each operand a thread loads a stage.
constexpr int kLoads = kStep * kTile / reduction::kThreads;
// Row pitch of a stage: the stores (consecutive threads along k) fall in distinct banks.
constexpr int kPitch = kTile + 4;
static_assert(kGroup == 4 && kTile % (reduction::kThreads / kStep) == 0);

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
  int64_t chunk_length;
};

template <typename acc>
struct alignas(kGroup * sizeof(acc)) Group {
  acc v[kGroup];
};

// One stage: the kStep terms from k0 of the tile's rows of one operand, kLoads a thread: row
// r = threadIdx / kStep + l * (kThreads / kStep), term threadIdx % kStep, so a row's terms come
// from consecutive threads. Zero past the rows or the chunk's end (never summed).
template <typename acc, typename scalar_t>
struct StageLoader {
  const scalar_t* rows;  // the tile's first row
  int64_t stride;
  int64_t k_stride;
  int valid_rows;

  __device__ void load(int64_t k0, int64_t k_end, acc (&values)[kLoads]) const {
    const int k = static_cast<int>(threadIdx.x) % kStep;
    const int r = static_cast<int>(threadIdx.x) / kStep;
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int row = r + l * (reduction::kThreads / kStep);
      values[l] =
          row < valid_rows && k0 + k < k_end ? static_cast<acc>(rows[row * stride + (k0 + k) * k_stride]) : acc(0);
    }
  }
  __device__ static void store(const acc (&values)[kLoads], acc (*stage)[kPitch]) {
    const int k = static_cast<int>(threadIdx.x) % kStep;
    const int r = static_cast<int>(threadIdx.x) / kStep;
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      stage[k][r + l * (reduction::kThreads / kStep)] = values[l];
    }
  }
};

// A thread's kPer values of one stage row: its two groups.
template <typename acc>
__device__ __forceinline__ void load_row(const acc* stage_row, int lane, acc (&v)[kPer]) {
  const auto* groups = reinterpret_cast<const Group<acc>*>(stage_row);
  const Group<acc> low = groups[lane];
  const Group<acc> high = groups[kLanes + lane];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    v[g] = low.v[g];
    v[kGroup + g] = high.v[g];
  }
}

// Two blocks an SM: the registers a thread (at most 128) hold its float sums and a stage's loads,
// and the other block computes while one waits at its barrier (docs/benchmarks.md). float64 sums
// take twice the registers: one block.
template <typename acc>
constexpr int kBlocksPerSm = sizeof(acc) == 4 ? 2 : 1;

// out (or the chunk's partials) [rows_i, rows_j] = the sums over the block's chunk (blockIdx.z).
template <class Term, typename scalar_t, typename out_t, bool kInputByI>
__global__ void __launch_bounds__(reduction::kThreads, kBlocksPerSm<at::opmath_type<scalar_t>>) pairs_kernel(
    PairsArgs<scalar_t> a, out_t* out) {
  using acc = at::opmath_type<scalar_t>;
  // Two buffers of a stage of each operand: [kStep][kPitch] accumulation-type values each.
  __shared__ Group<acc> stage_i_groups[2][kStep][kPitch / kGroup];
  __shared__ Group<acc> stage_j_groups[2][kStep][kPitch / kGroup];
  const int lane_j = static_cast<int>(threadIdx.x) % kLanes;
  const int lane_i = static_cast<int>(threadIdx.x) / kLanes;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * a.chunk_length;
  const int64_t k_end = k_begin + a.chunk_length < a.length ? k_begin + a.chunk_length : a.length;
  const auto rows_left = [](int64_t rows, int64_t first) {
    return static_cast<int>(rows - first < kTile ? rows - first : kTile);
  };
  const StageLoader<acc, scalar_t> loader_i{
      a.by_i + i0 * a.i_stride, a.i_stride, a.i_k_stride, rows_left(a.rows_i, i0)};
  const StageLoader<acc, scalar_t> loader_j{
      a.by_j + j0 * a.j_stride, a.j_stride, a.j_k_stride, rows_left(a.rows_j, j0)};
  const auto stage_i = [&](int b) { return reinterpret_cast<acc(*)[kPitch]>(stage_i_groups[b]); };
  const auto stage_j = [&](int b) { return reinterpret_cast<acc(*)[kPitch]>(stage_j_groups[b]); };

  acc sum[kPer][kPer];
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      sum[p][q] = acc(0);
    }
  }
  acc next_i[kLoads];
  acc next_j[kLoads];
  loader_i.load(k_begin, k_end, next_i);
  loader_j.load(k_begin, k_end, next_j);
  StageLoader<acc, scalar_t>::store(next_i, stage_i(0));
  StageLoader<acc, scalar_t>::store(next_j, stage_j(0));
  __syncthreads();
  const auto add_terms = [&](int b, int k) {
    acc vi[kPer];
    acc vj[kPer];
    load_row(stage_i(b)[k], lane_i, vi);
    load_row(stage_j(b)[k], lane_j, vj);
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
#pragma unroll
      for (int q = 0; q < kPer; ++q) {
        sum[p][q] += kInputByI ? Term::value(vi[p], vj[q]) : Term::value(vj[q], vi[p]);
      }
    }
  };
  int b = 0;
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kStep, b ^= 1) {
    const bool more = k0 + kStep < k_end;
    if (more) {  // the next stage's loads in flight while this one is summed
      loader_i.load(k0 + kStep, k_end, next_i);
      loader_j.load(k0 + kStep, k_end, next_j);
    }
    if (k0 + kStep <= k_end) {
#pragma unroll
      for (int k = 0; k < kStep; ++k) {
        add_terms(b, k);
      }
    } else {  // the chunk's last, short stage: the same count for the whole block
      for (int k = 0; k < static_cast<int>(k_end - k0); ++k) {
        add_terms(b, k);
      }
    }
    if (more) {
      StageLoader<acc, scalar_t>::store(next_i, stage_i(b ^ 1));
      StageLoader<acc, scalar_t>::store(next_j, stage_j(b ^ 1));
    }
    __syncthreads();
  }

  out += static_cast<int64_t>(blockIdx.z) * a.rows_i * a.rows_j;
  // Four consecutive outputs a store where every row starts on a multiple of four.
  const bool vectors =
      a.rows_j % kGroup == 0 && reinterpret_cast<std::uintptr_t>(out) % sizeof(Vector<out_t, kGroup>) == 0;
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    const int64_t i = i0 + (p / kGroup) * (kTile / 2) + lane_i * kGroup + p % kGroup;
    if (i >= a.rows_i) {
      continue;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t j = j0 + h * (kTile / 2) + lane_j * kGroup;
      out_t* const row = out + i * a.rows_j;
      if (vectors && j + kGroup <= a.rows_j) {
        Vector<out_t, kGroup> v;
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          v.val[g] = static_cast<out_t>(sum[p][h * kGroup + g]);
        }
        store_vector<kGroup>(row + j, v);
      } else {
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          if (j + g < a.rows_j) {
            row[j + g] = static_cast<out_t>(sum[p][h * kGroup + g]);
          }
        }
      }
    }
  }
}

// out[e] = the sum of partials[c][e] over the chunks c, in chunk order.
template <typename acc, typename out_t>
__global__ void __launch_bounds__(reduction::kThreads) add_chunks_kernel(
    const acc* partials, int64_t chunks, int64_t outputs, out_t* out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * reduction::kThreads + threadIdx.x;
  if (e >= outputs) {
    return;
  }
  acc sum = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    sum += partials[c * outputs + e];
  }
  out[e] = static_cast<out_t>(sum);
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
  const dim3 grid(
      static_cast<unsigned int>(plan.tiles_i), static_cast<unsigned int>(plan.tiles_j),
      static_cast<unsigned int>(plan.chunks));
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
        x.size(2),
        plan.chunk_length};
    const auto launch = [&]<typename out_t>(out_t* result) {
      input_by_i ? pairs_kernel<Term, scalar_t, out_t, true><<<grid, reduction::kThreads, 0, stream>>>(a, result)
                 : pairs_kernel<Term, scalar_t, out_t, false><<<grid, reduction::kThreads, 0, stream>>>(a, result);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    const auto add_chunks = [&]<typename out_t>(const acc* partials, out_t* result) {
      const int64_t outputs = out.numel();
      const auto blocks = static_cast<unsigned int>((outputs + reduction::kThreads - 1) / reduction::kThreads);
      add_chunks_kernel<<<blocks, reduction::kThreads, 0, stream>>>(partials, plan.chunks, outputs, result);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    const bool out_acc = out.scalar_type() == c10::CppTypeToScalarType<acc>::value;
    TORCH_INTERNAL_ASSERT(out_acc || out.scalar_type() == x.scalar_type());
    if (plan.chunks == 1) {
      out_acc ? launch(out.mutable_data_ptr<acc>()) : launch(out.mutable_data_ptr<scalar_t>());
      return;
    }
    const auto partials =
        at::empty({plan.chunks, out.numel()}, out.options().dtype(c10::CppTypeToScalarType<acc>::value));
    launch(partials.mutable_data_ptr<acc>());
    out_acc ? add_chunks(partials.const_data_ptr<acc>(), out.mutable_data_ptr<acc>())
            : add_chunks(partials.const_data_ptr<acc>(), out.mutable_data_ptr<scalar_t>());
  });
  return true;
}

#define CUSTOM_OPS_INSTANTIATE(Term_, backward_) \
  template bool reduce_pairs<terms::Term_>(const detail::Reduction& args);
CUSTOM_OPS_TERMS(CUSTOM_OPS_INSTANTIATE)
#undef CUSTOM_OPS_INSTANTIATE

}  // namespace custom::cuda
