// SPDX-License-Identifier: BSD-3-Clause
// The CUDA loops of the reductions: out[o, i] = sum over r of Term::value(x, w) on the frontend's
// [outer, reduce, inner] views, or with `total` the one sum of them all, for every reduction's
// term. The frontend has checked the arguments and chosen the views; this file only reduces. One
// pass over the operands, in at most two deterministic stages: stage 1 writes partial sums to a
// buffer in a layout fixed by the shape, stage 2 adds them in a fixed tree, so every run gives the
// same bits. A total fuses stage 2 into stage 1: the last block to finish (found with an atomic
// counter, the only atomic: it decides who adds, never in which order) adds every partial in a
// fixed order.
// reduction_plan.h picks the kernel (Rows or Tiles) and the cut of the reduced dim; each term is
// Term::value in the accumulation type (at::opmath_type: float32 for float16/bfloat16/float32,
// float64 for float64), summed in it. The last write rounds to out's dtype, the accumulation one
// or the operands' (float16/bfloat16), once.
#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ceil_div.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/DeviceUtils.cuh>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAMacros.h>
#include <c10/util/Exception.h>

#include "kernels/cuda/cuda_device_guard.h"
#include "kernels/cuda/reduction_pairs.h"
#include "kernels/cuda/reduction_plan.h"
#include "kernels/cuda/vectorized_access.cuh"
#include "ops/floating_types.h"
#include "ops/reduction_frontend.h"

namespace custom {
namespace {

namespace reduction = cuda::reduction;
using cuda::kVectorSize;
using cuda::Vector;
using reduction::kThreads;
using reduction::kWarp;
using reduction::kWarpsPerBlock;
// At most 64 registers a thread: 32 warps an SM, enough loads in flight to cover HBM latency.
constexpr int kMinBlocksPerSm = 4;
// A grid-stride loop covers the rest: every kernel's work item writes its own partial, so the
// grid size never changes the result.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

template <typename scalar_t>
using acc_t = at::opmath_type<scalar_t>;

// One term, from operands in their storage type, in the accumulation type.
template <class Term, typename scalar_t>
__device__ __forceinline__ acc_t<scalar_t> term(scalar_t x, scalar_t w) {
  using acc = acc_t<scalar_t>;
  return Term::value(static_cast<acc>(x), static_cast<acc>(w));
}

// 16-byte loads each thread has in flight before it adds them, over both operands (one when the
// weight is fixed): fewer for 16-bit types, whose 8 floats a load become would otherwise spill
// under 64 registers. Only a schedule: the order of the additions does not depend on it.
template <typename scalar_t, bool kWeightFixed>
constexpr int kUnroll = (sizeof(scalar_t) == 2 ? 4 : 8) / (kWeightFixed ? 1 : 2);

// Partials stage 2 has in flight per thread: its few loads a thread are otherwise one latency each.
constexpr int kChunkLoads = 8;

// kN consecutive (stride 1) or strided elements: one 16-byte load when kVectorized (the
// caller checked alignment), else element by element, zeros past `valid`.
template <bool kVectorized, int kN, typename scalar_t>
__device__ __forceinline__ Vector<scalar_t, kN> load_group(const scalar_t* p, int64_t stride = 1, int valid = kN) {
  if constexpr (kVectorized) {
    return cuda::load_vector<kN>(p);
  } else {
    Vector<scalar_t, kN> g;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      g.val[j] = j < valid ? p[j * stride] : scalar_t(0);
    }
    return g;
  }
}

// An operand's groups in a batch: group p (a position) starts at data + p * pitch, its kN
// elements stride apart.
template <typename scalar_t>
struct Groups {
  const scalar_t* data;
  int64_t pitch;
  int64_t stride;
};

// One batch of kU groups, at positions first + u * step: every load first (x, and w unless
// kWeightFixed: then fixed_weight(j)), then the adds in position order. kChecked: the last batch,
// whose positions may reach end; the others have no per-load branch, which keeps all their loads
// in flight together (ptxas serializes the checked ones). Only the first `valid` elements of a
// group are added (w * 0 is not 0 for an infinite w).
template <
    class Term,
    int kU,
    bool kChecked,
    bool kVectorized,
    bool kWeightFixed,
    int kN,
    typename scalar_t,
    typename acc,
    typename FixedWeight>
__device__ __forceinline__ void add_batch(
    const Groups<scalar_t>& x,
    const Groups<scalar_t>& w,
    int64_t first,
    int64_t step,
    int64_t end,
    int valid,
    const FixedWeight& fixed_weight,
    acc (&sums)[kN]) {
  Vector<scalar_t, kN> xg[kU];
  Vector<scalar_t, kN> wg[kU];
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int64_t p = first + u * step;
    if (!kChecked || p < end) {
      xg[u] = load_group<kVectorized, kN>(x.data + p * x.pitch, x.stride, valid);
      if constexpr (!kWeightFixed) {
        wg[u] = load_group<kVectorized, kN>(w.data + p * w.pitch, w.stride, valid);
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    if (!kChecked || first + u * step < end) {
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        if (kVectorized || j < valid) {
          sums[j] += term<Term>(xg[u].val[j], kWeightFixed ? fixed_weight(j) : wg[u].val[j]);
        }
      }
    }
  }
}

// acc[0] = the sum of acc[0..kN), pairwise.
template <int kN, typename T>
__device__ __forceinline__ T group_sum(T (&acc)[kN]) {
#pragma unroll
  for (int step = 1; step < kN; step *= 2) {
#pragma unroll
    for (int j = 0; j + step < kN; j += 2 * step) {
      acc[j] += acc[j + step];
    }
  }
  return acc[0];
}

// Lane 0 gets the warp's sum, in a fixed shuffle tree.
template <typename T>
__device__ __forceinline__ T warp_sum(T value) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value += WARP_SHFL_DOWN(value, offset);
  }
  return value;
}

// Thread 0 gets the block's sum: each warp's by shuffles, then the warps' sums. Every thread of
// the block calls it; `shared` [kWarpsPerBlock] is free again on return.
template <typename T>
__device__ __forceinline__ T block_sum(T value, T* shared) {
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  value = warp_sum(value);
  if (lane == 0) {
    shared[warp] = value;
  }
  __syncthreads();
  if (warp == 0) {
    value = warp_sum(lane < kWarpsPerBlock ? shared[lane] : T(0));
  }
  __syncthreads();
  return value;
}

// ---- Totals: partials, and the last block done -------------------------------------------------

template <typename acc, typename out_t>
struct TotalArgs {
  acc* partial;  // [partials]; nullptr: a single work item, which writes out itself
  // Zero at launch, and zero again once the last block has taken it (atomicInc wraps), so that a
  // counter slot serves every launch ordered after the previous one; nullptr: stage 2 passes add
  // the partials.
  unsigned int* counter;
  out_t* out;  // one element
  int64_t partials;
};

// A total's kernels run one block per work item (no grid-stride loop: fewer registers live across
// the loads), on a 2-D grid past kMaxBlocks items; blocks past the last item only count.
__device__ __forceinline__ int64_t total_item() {
  return static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
}

// Thread 0, with block work item p's sum.
template <typename acc, typename out_t>
__device__ __forceinline__ void store_partial(const TotalArgs<acc, out_t>& a, int64_t p, acc sum) {
  if (a.partial == nullptr) {
    *a.out = static_cast<out_t>(sum);
  } else {
    a.partial[p] = sum;
  }
}

// After a block's last store_partial: the last block to get here adds every partial, in an order
// that does not depend on which block that is (thread t: partials t, t + kThreads, ... in series,
// then block_sum), and writes out[0].
template <typename acc, typename out_t>
__device__ __forceinline__ void finish_total(const TotalArgs<acc, out_t>& a, acc* shared) {
  if (a.counter == nullptr) {
    return;
  }
  __shared__ bool last;
  if (threadIdx.x == 0) {
    // Thread 0 stored this block's partials: they reach device scope before the count does.
    __threadfence();
    const unsigned int blocks = gridDim.x * gridDim.y;
    last = atomicInc(a.counter, blocks - 1) == blocks - 1;
  }
  __syncthreads();
  if (!last) {
    return;
  }
  // Every other block counted after its fence: its partials are visible. The loads go to L2
  // (__ldcg), never to an L1 line this SM might hold from before.
  __threadfence();
  acc sum = 0;
#pragma unroll 1
  for (int64_t p = threadIdx.x; p < a.partials; p += int64_t{kThreads} * kChunkLoads) {
    acc values[kChunkLoads];
#pragma unroll
    for (int u = 0; u < kChunkLoads; ++u) {
      values[u] = p + u * kThreads < a.partials ? __ldcg(a.partial + p + u * kThreads) : acc(0);
    }
#pragma unroll
    for (int u = 0; u < kChunkLoads; ++u) {
      if (p + u * kThreads < a.partials) {
        sum += values[u];
      }
    }
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    *a.out = static_cast<out_t>(sum);
  }
}

// ---- Rows: one warp per segment of a contiguous row --------------------------------------------

template <typename scalar_t>
struct RowsArgs {
  const scalar_t* input;
  const scalar_t* weight;
  int64_t length;
  int64_t input_row_stride;
  int64_t weight_row_stride;
  int64_t splits;
  int64_t segment;
  int64_t segments;  // rows * splits
};

// Lane `lane` of a warp adds its terms of segment s into sums: element j of groups lane, lane +
// 32, ... into sums[j] (kN chains of count / (32 kN)), a tail element into sums[0].
// kWeightFixed: one weight per row (a weight broadcast along the reduced dim).
template <class Term, typename scalar_t, bool kVectorized, bool kWeightFixed>
__device__ __forceinline__ void add_segment(
    const RowsArgs<scalar_t>& a, int64_t s, int lane, acc_t<scalar_t> (&sums)[kVectorSize<scalar_t>]) {
  constexpr int kN = kVectorSize<scalar_t>;
  const int64_t row = s / a.splits;
  const int64_t begin = (s % a.splits) * a.segment;
  const int64_t count = std::min(a.segment, a.length - begin);
  const scalar_t* x = a.input + row * a.input_row_stride + begin;
  const scalar_t* w = a.weight + row * a.weight_row_stride + (kWeightFixed ? 0 : begin);
  const scalar_t fixed_w = kWeightFixed ? *w : scalar_t(0);
  const int64_t groups = count / kN;
  constexpr int kU = kUnroll<scalar_t, kWeightFixed>;
  // kU groups a lane, 32 apart.
  const auto batch = [&](int64_t g0, auto checked) {
    add_batch<Term, kU, decltype(checked)::value, kVectorized, kWeightFixed>(
        Groups<scalar_t>{x, kN, 1}, Groups<scalar_t>{w, kN, 1}, g0, kWarp, groups, kN, [&](int) { return fixed_w; },
        sums);
  };
  int64_t g0 = lane;
#pragma unroll 1
  for (; g0 + (kU - 1) * kWarp < groups; g0 += kWarp * kU) {
    batch(g0, std::false_type{});
  }
  if (g0 < groups) {
    batch(g0, std::true_type{});
  }
  // The last count % kN elements of a row whose length is not a multiple of kN.
  const int64_t tail = groups * kN + lane;
  if (tail < count) {
    sums[0] += term<Term>(x[tail], kWeightFixed ? fixed_w : w[tail]);
  }
}

// out[s] = the sum of segment s, one warp each (out: the partials [rows, splits], or the result
// itself when splits == 1).
template <class Term, typename scalar_t, typename out_t, bool kVectorized, bool kWeightFixed>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) rows_kernel(RowsArgs<scalar_t> a, out_t* out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; s < a.segments;
       s += warps) {
    acc_t<scalar_t> sums[kVectorSize<scalar_t>] = {};
    add_segment<Term, scalar_t, kVectorized, kWeightFixed>(a, s, lane, sums);
    const auto sum = warp_sum(group_sum(sums));
    if (lane == 0) {
      out[s] = static_cast<out_t>(sum);
    }
  }
}

// A total on Rows: block work item p's warp k adds segments [(p * kWarpsPerBlock + k) * run, ...
// + run) into its lanes' sums; the block's sum is partial p.
template <class Term, typename scalar_t, typename out_t, bool kVectorized, bool kWeightFixed>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) rows_total_kernel(
    RowsArgs<scalar_t> a, int64_t run, TotalArgs<acc_t<scalar_t>, out_t> total) {
  using acc = acc_t<scalar_t>;
  __shared__ acc shared[kWarpsPerBlock];
  const int64_t p = total_item();
  if (p < total.partials) {
    acc sums[kVectorSize<scalar_t>] = {};
    const int64_t first = (p * kWarpsPerBlock + threadIdx.x / kWarp) * run;
    // run <= kMaxSerial: a 32-bit count.
    const int count = static_cast<int>(std::clamp<int64_t>(a.segments - first, 0, run));
#pragma unroll 1
    for (int k = 0; k < count; ++k) {
      add_segment<Term, scalar_t, kVectorized, kWeightFixed>(a, first + k, threadIdx.x % kWarp, sums);
    }
    const acc sum = block_sum(group_sum(sums), shared);
    if (threadIdx.x == 0) {
      store_partial(total, p, sum);
    }
  }
  finish_total(total, shared);
}

// Two consecutive 16-bit values of a 32-bit word (the first in the low half), widened exactly as
// their scalar conversions: bfloat16 by a shift and a mask, float16 by one paired conversion.
template <typename scalar_t>
__device__ __forceinline__ float2 widen_pair(uint32_t word) {
  if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
    return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
  } else {
    static_assert(std::is_same_v<scalar_t, c10::Half>);
    __half2 pair;
    memcpy(&pair, &word, sizeof(word));
    return __half22float2(pair);
  }
}

// sums[j] += the term of element j of a group of x and a group of held weights (registers kept
// across rows). A 16-bit weight word passes an empty asm right before use, which makes the
// compiler forget its value: left to itself, it widens the held weights once, ahead of the row
// loop, and their 32 floats a lane spill under 64 registers (ptxas, sm_90). So each word is
// widened where used, its pair at a time.
template <class Term, typename scalar_t, int kN>
__device__ __forceinline__ void add_held_weight_terms(
    const Vector<scalar_t, kN>& x, const Vector<scalar_t, kN>& w, acc_t<scalar_t> (&sums)[kN]) {
  if constexpr (sizeof(scalar_t) == 2) {
    uint32_t x_words[kN / 2];
    uint32_t w_words[kN / 2];
    memcpy(x_words, &x, sizeof(x_words));
    memcpy(w_words, &w, sizeof(w_words));
#pragma unroll
    for (int k = 0; k < kN / 2; ++k) {
      uint32_t w_word = w_words[k];
      asm volatile("" : "+r"(w_word));
      const float2 xs = widen_pair<scalar_t>(x_words[k]);
      const float2 ws = widen_pair<scalar_t>(w_word);
      // term() on the widened pair.
      sums[2 * k] += Term::value(xs.x, ws.x);
      sums[2 * k + 1] += Term::value(xs.y, ws.y);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      sums[j] += term<Term>(x.val[j], w.val[j]);
    }
  }
}

// A total on Rows whose rows share one weight row of at most kWarp * kN * kWeightRegisterGroups
// elements (plan.weight_in_registers(): x [R, C], w [C], rows not cut). Each lane loads its groups of
// the weight row once, then for every row of its warp's run loads only its groups of x, all in
// flight together: twice the bytes of x in flight of add_segment, which also loads w each row.
template <class Term, typename scalar_t, typename out_t>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) shared_weight_rows_total_kernel(
    RowsArgs<scalar_t> a, int64_t run, TotalArgs<acc_t<scalar_t>, out_t> total) {
  using acc = acc_t<scalar_t>;
  constexpr int kN = kVectorSize<scalar_t>;
  constexpr int kG = reduction::kWeightRegisterGroups;
  __shared__ acc shared[kWarpsPerBlock];
  const int64_t p = total_item();
  if (p < total.partials) {
    const int lane = threadIdx.x % kWarp;
    const int64_t groups = a.length / kN;
    Vector<scalar_t, kN> wg[kG];
#pragma unroll
    for (int u = 0; u < kG; ++u) {
      if (lane + u * kWarp < groups) {
        wg[u] = load_group<true, kN>(a.weight + (lane + u * kWarp) * kN);
      }
    }
    // The last length % kN elements of a row, one a lane.
    const int64_t tail = groups * kN + lane;
    const scalar_t w_tail = tail < a.length ? a.weight[tail] : scalar_t(0);
    acc sums[kN] = {};
    const int64_t first = (p * kWarpsPerBlock + threadIdx.x / kWarp) * run;
    // run <= kMaxSerial: a 32-bit count.
    const int count = static_cast<int>(std::clamp<int64_t>(a.segments - first, 0, run));
#pragma unroll 1
    for (int k = 0; k < count; ++k) {
      const scalar_t* x = a.input + (first + k) * a.input_row_stride;
      Vector<scalar_t, kN> xg[kG];
#pragma unroll
      for (int u = 0; u < kG; ++u) {
        if (lane + u * kWarp < groups) {
          xg[u] = load_group<true, kN>(x + (lane + u * kWarp) * kN);
        }
      }
#pragma unroll
      for (int u = 0; u < kG; ++u) {
        if (lane + u * kWarp < groups) {
          add_held_weight_terms<Term>(xg[u], wg[u], sums);
        }
      }
      if (tail < a.length) {
        sums[0] += term<Term>(x[tail], w_tail);
      }
    }
    const acc sum = block_sum(group_sum(sums), shared);
    if (threadIdx.x == 0) {
      store_partial(total, p, sum);
    }
  }
  finish_total(total, shared);
}

// ---- Tiles: a block per [rows of a chunk] x [column groups] tile -------------------------------

// TilesPlan, as a kernel argument.
struct Tiles {
  int64_t reduce;
  int64_t inner;
  int64_t columns;
  int64_t column_tiles;
  int64_t chunks;
  int64_t rows_per_chunk;
  int64_t tiles;
  int64_t input_strides[3];
  int64_t weight_strides[3];
  int col_threads;
  int row_threads;
};

Tiles tiles_argument(const reduction::TilesPlan& p) {
  return {
      p.reduce,
      p.inner,
      p.columns,
      p.column_tiles,
      p.chunks,
      p.rows_per_chunk,
      p.tiles(),
      {p.input_strides[0], p.input_strides[1], p.input_strides[2]},
      {p.weight_strides[0], p.weight_strides[1], p.weight_strides[2]},
      p.col_threads,
      p.row_threads,
  };
}

// Where thread (row thread tr, column thread tc) works in a tile: the column group at inner index
// i (`valid` elements of it, 0 past the last group) of outer index o, over rows r, r +
// row_threads, ... < r_end of chunk `chunk`.
struct TileSpan {
  int64_t o;
  int64_t chunk;
  int64_t i;
  int64_t r;
  int64_t r_end;
  int valid;
};

template <int kN>
__device__ __forceinline__ TileSpan tile_span(const Tiles& t, int64_t tile, int tc, int tr) {
  const int64_t column = (tile % t.column_tiles) * t.col_threads + tc;
  const int64_t chunk = (tile / t.column_tiles) % t.chunks;
  const int64_t i = column * kN;
  const int64_t first = chunk * t.rows_per_chunk;
  return {
      tile / t.column_tiles / t.chunks,
      chunk,
      i,
      first + tr,
      std::min(t.reduce, first + t.rows_per_chunk),
      column < t.columns ? static_cast<int>(std::min<int64_t>(kN, t.inner - i)) : 0,
  };
}

// The loop the non-total tile kernels share. For each tile, each thread has
// sum_rows(span, sums) add its rows of its column group into sums[0..kN); the row threads' sums
// are then added in a fixed shared-memory tree and row thread 0 writes them to dst[o, chunk, i..],
// in dst's type.
template <int kN, typename acc, typename out_t, typename SumRows>
__device__ __forceinline__ void for_each_tile(const Tiles& t, out_t* dst, const SumRows& sum_rows) {
  __shared__ acc scratch[kN][kThreads];
  const int tc = threadIdx.x % t.col_threads;
  const int tr = threadIdx.x / t.col_threads;
  for (int64_t tile = blockIdx.x; tile < t.tiles; tile += gridDim.x) {
    const TileSpan span = tile_span<kN>(t, tile, tc, tr);
    acc sums[kN] = {};
    if (span.valid > 0) {
      sum_rows(span, sums);
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      scratch[j][threadIdx.x] = sums[j];
    }
    __syncthreads();
    for (int half = t.row_threads / 2; half > 0; half /= 2) {
      if (tr < half) {
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          scratch[j][threadIdx.x] += scratch[j][threadIdx.x + half * t.col_threads];
        }
      }
      __syncthreads();
    }
    // Each thread reads back only its own slot, so the next tile may overwrite the others.
    if (tr == 0) {
      for (int j = 0; j < span.valid; ++j) {
        dst[(span.o * t.chunks + span.chunk) * t.inner + span.i + j] = static_cast<out_t>(scratch[j][threadIdx.x]);
      }
    }
  }
}

// A thread's terms of a tile (its span) added into sums. kVectorized: inner contiguous, every
// group 16-byte aligned. kWeightFixed: the weight is constant along reduce, so the group's weights
// are read once per tile.
template <class Term, typename scalar_t, bool kVectorized, bool kWeightFixed>
__device__ __forceinline__ void add_tile_rows(
    const Tiles& t,
    const scalar_t* input,
    const scalar_t* weight,
    const TileSpan& span,
    acc_t<scalar_t> (&sums)[kVectorSize<scalar_t>]) {
  constexpr int kN = kVectorSize<scalar_t>;
  const int64_t* xs = t.input_strides;
  const int64_t* ws = t.weight_strides;
  const scalar_t* x = input + span.o * xs[0] + span.i * xs[2];
  const scalar_t* w = weight + span.o * ws[0] + span.i * ws[2];
  const int valid = span.valid;
  Vector<scalar_t, kN> fixed_w;
  if constexpr (kWeightFixed) {
    fixed_w = load_group<false, kN>(w, ws[2], valid);
  }
  const int64_t step = t.row_threads;
  const int64_t r_end = span.r_end;
  constexpr int kU = kUnroll<scalar_t, kWeightFixed>;
  // kU rows, step apart.
  const auto batch = [&](int64_t r, auto checked) {
    add_batch<Term, kU, decltype(checked)::value, kVectorized, kWeightFixed>(
        Groups<scalar_t>{x, xs[1], xs[2]}, Groups<scalar_t>{w, ws[1], ws[2]}, r, step, r_end, valid,
        [&](int j) { return fixed_w.val[j]; }, sums);
  };
  int64_t r = span.r;
  // Unchecked batches first for 16-bit types only: ptxas serializes their checked loads; for the
  // others it keeps those in flight, and the split only adds registers across the tile loop.
  if constexpr (sizeof(scalar_t) == 2) {
#pragma unroll 1
    for (; r + (kU - 1) * step < r_end; r += step * kU) {
      batch(r, std::false_type{});
    }
  }
#pragma unroll 1
  for (; r < r_end; r += step * kU) {
    batch(r, std::true_type{});
  }
}

// Stage 1 on Tiles: out [outer, chunks, inner] (the result itself when chunks == 1).
template <class Term, typename scalar_t, typename out_t, bool kVectorized, bool kWeightFixed>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) tiles_kernel(
    Tiles t, const scalar_t* input, const scalar_t* weight, out_t* out) {
  for_each_tile<kVectorSize<scalar_t>, acc_t<scalar_t>>(t, out, [&](const TileSpan& span, auto& sums) {
    add_tile_rows<Term, scalar_t, kVectorized, kWeightFixed>(t, input, weight, span, sums);
  });
}

// A total on Tiles: block work item p adds tiles [p * run, (p + 1) * run) into its threads' sums;
// the block's sum is partial p.
template <class Term, typename scalar_t, typename out_t, bool kVectorized, bool kWeightFixed>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) tiles_total_kernel(
    Tiles t, const scalar_t* input, const scalar_t* weight, int64_t run, TotalArgs<acc_t<scalar_t>, out_t> total) {
  using acc = acc_t<scalar_t>;
  constexpr int kN = kVectorSize<scalar_t>;
  __shared__ acc shared[kWarpsPerBlock];
  const int64_t p = total_item();
  if (p < total.partials) {
    acc sums[kN] = {};
    const int count = static_cast<int>(std::min(run, t.tiles - p * run));  // run <= kMaxSerial
#pragma unroll 1
    for (int k = 0; k < count; ++k) {
      const TileSpan span = tile_span<kN>(t, p * run + k, threadIdx.x % t.col_threads, threadIdx.x / t.col_threads);
      if (span.valid > 0) {
        add_tile_rows<Term, scalar_t, kVectorized, kWeightFixed>(t, input, weight, span, sums);
      }
    }
    const acc sum = block_sum(group_sum(sums), shared);
    if (threadIdx.x == 0) {
      store_partial(total, p, sum);
    }
  }
  finish_total(total, shared);
}

// Stage 2: out[o, i] = the sum over chunks of partial[o, chunk, i] (any strides), in out's type.
template <typename acc, typename out_t>
__global__ void __launch_bounds__(kThreads) sum_chunks_kernel(Tiles t, const acc* partial, out_t* out) {
  for_each_tile<1, acc>(t, out, [&](const TileSpan& span, acc(&sums)[1]) {
    const int64_t* s = t.input_strides;
    const acc* p = partial + span.o * s[0] + span.i * s[2];
    const int64_t step = t.row_threads;
    const int64_t r_end = span.r_end;
#pragma unroll 1
    for (int64_t r = span.r; r < r_end; r += step * kChunkLoads) {
      acc values[kChunkLoads];
#pragma unroll
      for (int u = 0; u < kChunkLoads; ++u) {
        values[u] = r + u * step < r_end ? p[(r + u * step) * s[1]] : acc(0);
      }
#pragma unroll
      for (int u = 0; u < kChunkLoads; ++u) {
        if (r + u * step < r_end) {
          sums[0] += values[u];
        }
      }
    }
  });
}

// ---- Launches ----------------------------------------------------------------------------------

unsigned int grid_for(int64_t blocks) {
  return static_cast<unsigned int>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

// f(std::bool_constant<a>{}, std::bool_constant<b>{}): runtime flags to template arguments.
template <typename F>
void with_flags(bool a, bool b, const F& f) {
  if (a) {
    b ? f(std::true_type{}, std::true_type{}) : f(std::true_type{}, std::false_type{});
  } else {
    b ? f(std::false_type{}, std::true_type{}) : f(std::false_type{}, std::false_type{});
  }
}

template <typename scalar_t>
RowsArgs<scalar_t> rows_argument(const reduction::RowsPlan& r, const scalar_t* x, const scalar_t* w) {
  return {x, w, r.length, r.input_row_stride, r.weight_row_stride, r.splits, r.segment, r.rows * r.splits};
}

// Stage 1, not total: out gets one value per (output, chunk).
template <class Term, typename scalar_t, typename out_t>
void launch_stage1(const reduction::Plan& plan, const scalar_t* x, const scalar_t* w, out_t* out) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_flags(plan.vectorized, plan.weight_fixed, [&](auto vectorized, auto weight_fixed) {
    constexpr bool kVectorized = decltype(vectorized)::value;
    constexpr bool kWeightFixed = decltype(weight_fixed)::value;
    if (plan.layout == reduction::Layout::Rows) {
      const auto args = rows_argument(plan.rows, x, w);
      const auto grid = grid_for(at::ceil_div<int64_t>(args.segments, kWarpsPerBlock));
      rows_kernel<Term, scalar_t, out_t, kVectorized, kWeightFixed><<<grid, kThreads, 0, stream>>>(args, out);
    } else {
      const auto t = tiles_argument(plan.tiles);
      tiles_kernel<Term, scalar_t, out_t, kVectorized, kWeightFixed>
          <<<grid_for(t.tiles), kThreads, 0, stream>>>(t, x, w, out);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// Stage 1 of a total: one partial per block work item, added by the last block when `total` has
// a counter.
template <class Term, typename scalar_t, typename out_t>
void launch_total_stage1(
    const reduction::Plan& plan,
    const scalar_t* x,
    const scalar_t* w,
    const TotalArgs<acc_t<scalar_t>, out_t>& total,
    const char* name) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto x_blocks = std::min(plan.partials, kMaxBlocks);
  const auto y_blocks = at::ceil_div(plan.partials, x_blocks);
  TORCH_CHECK(y_blocks <= reduction::kMaxGridY, name, ": a reduction too large for one CUDA grid");
  const dim3 grid(static_cast<unsigned int>(x_blocks), static_cast<unsigned int>(y_blocks));
  with_flags(plan.vectorized, plan.weight_fixed, [&](auto vectorized, auto weight_fixed) {
    constexpr bool kVectorized = decltype(vectorized)::value;
    constexpr bool kWeightFixed = decltype(weight_fixed)::value;
    if (plan.layout == reduction::Layout::Rows && plan.weight_in_registers()) {
      TORCH_INTERNAL_ASSERT(plan.vectorized && !plan.weight_fixed);
      if constexpr (kVectorized && !kWeightFixed) {
        shared_weight_rows_total_kernel<Term, scalar_t, out_t>
            <<<grid, kThreads, 0, stream>>>(rows_argument(plan.rows, x, w), plan.run, total);
      }
    } else if (plan.layout == reduction::Layout::Rows) {
      rows_total_kernel<Term, scalar_t, out_t, kVectorized, kWeightFixed>
          <<<grid, kThreads, 0, stream>>>(rows_argument(plan.rows, x, w), plan.run, total);
    } else {
      tiles_total_kernel<Term, scalar_t, out_t, kVectorized, kWeightFixed>
          <<<grid, kThreads, 0, stream>>>(tiles_argument(plan.tiles), x, w, plan.run, total);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

template <typename acc, typename out_t>
void launch_sum_chunks(const reduction::TilesPlan& second, const acc* partial, out_t* out) {
  const auto t = tiles_argument(second);
  sum_chunks_kernel<acc, out_t><<<grid_for(t.tiles), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(t, partial, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---- Counter slots: a total's last block found with no memset per call ------------------------
//
// A slot is one unsigned int of an arena per device: one caching-allocator block, taken once and
// kept for the life of the process (bounded: kCounterSlots a device, never one per call or
// stream), zeroed once. The kernel's atomicInc wraps the count back to zero as the last block
// takes it, so a slot is zero between launches, and any launch ordered after the previous one on
// the same slot may use it without a memset: a total is one launch. Ordered, so:
//  - an eager launch takes its stream's slot (a stream runs its kernels in order; other streams
//    have slots of their own, so concurrent streams never share one);
//  - a launch being captured into a CUDA graph takes a slot of its own for the graph's life: its
//    replays are ordered among themselves (launches of one graph exec are), and a cudaUserObject
//    owned by the graph gives the slot back once the graph, its execs and their launches are gone
//    (the callback only returns an index: no CUDA call).
// No slot to give (all taken, or a capture before any eager total made the arena, which takes a
// synchronizing zero-fill): nullptr, and the caller zeroes a counter of its own with a memset.
// A graph instantiated twice and replayed on two streams at once would share its slot: torch's
// CUDAGraph instantiates once.
constexpr int64_t kCounterSlots = 4096;

struct DeviceSlots {
  std::mutex mutex;
  at::Tensor* arena = nullptr;  // kept for the process: never destroyed (no teardown order issue)
  std::vector<int64_t> free;
  std::unordered_map<int64_t, int64_t> by_stream;  // CUDAStream::id() -> slot
};

DeviceSlots& device_slots(c10::DeviceIndex device) {
  static auto* const slots = new std::array<DeviceSlots, C10_COMPILE_TIME_MAX_GPUS>();
  return (*slots)[static_cast<size_t>(device)];
}

struct SlotOwner {
  c10::DeviceIndex device;
  int64_t slot;
};

void give_back_slot(void* owner_pointer) {
  auto* owner = static_cast<SlotOwner*>(owner_pointer);
  auto& slots = device_slots(owner->device);
  {
    const std::lock_guard<std::mutex> lock(slots.mutex);
    slots.free.push_back(owner->slot);
  }
  delete owner;
}

unsigned int* counter_slot(const c10::cuda::CUDAStream& stream) {
  const auto device = stream.device_index();
  auto& slots = device_slots(device);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
#if CUDART_VERSION >= 13000
  C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream.stream(), &status, nullptr, &graph));
#else
  C10_CUDA_CHECK(cudaStreamGetCaptureInfo_v2(stream.stream(), &status, nullptr, &graph, nullptr, nullptr));
#endif
  const std::lock_guard<std::mutex> lock(slots.mutex);
  if (slots.arena == nullptr) {
    if (status != cudaStreamCaptureStatusNone) {
      return nullptr;
    }
    // Zeroed on this stream, then waited for: every stream's first launch on a slot sees zero.
    auto arena = at::zeros({kCounterSlots}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA, device));
    stream.synchronize();
    slots.arena = new at::Tensor(std::move(arena));
    slots.free.reserve(kCounterSlots);
    for (int64_t slot = kCounterSlots; slot-- > 0;) {
      slots.free.push_back(slot);
    }
  }
  auto* const base = reinterpret_cast<unsigned int*>(slots.arena->mutable_data_ptr<int>());
  if (status == cudaStreamCaptureStatusActive) {
    if (slots.free.empty()) {
      return nullptr;
    }
    const int64_t slot = slots.free.back();
    auto* owner = new SlotOwner{device, slot};
    cudaUserObject_t object = nullptr;
    if (cudaUserObjectCreate(&object, owner, give_back_slot, 1, cudaUserObjectNoDestructorSync) != cudaSuccess) {
      delete owner;
      (void)cudaGetLastError();  // cleared: the caller's memset instead
      return nullptr;
    }
    slots.free.pop_back();
    // The graph takes the one reference: the slot returns when the graph lets it go.
    C10_CUDA_CHECK(cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove));
    return base + slot;
  }
  if (status != cudaStreamCaptureStatusNone) {
    return nullptr;  // an invalidated capture: it fails anyway
  }
  const auto found = slots.by_stream.find(stream.id());
  if (found != slots.by_stream.end()) {
    return base + found->second;
  }
  if (slots.free.empty()) {
    return nullptr;
  }
  const int64_t slot = slots.free.back();
  slots.free.pop_back();
  slots.by_stream.emplace(stream.id(), slot);
  return base + slot;
}

// The buffers below come from the caching allocator on the current stream: freed at return, they
// are reused only by work queued after these kernels.
template <class Term, typename scalar_t, typename out_t>
void reduce_typed(
    const reduction::Plan& plan, const scalar_t* x, const scalar_t* w, const at::Tensor& out, const char* name) {
  using acc = acc_t<scalar_t>;
  out_t* const result = out.mutable_data_ptr<out_t>();
  const at::TensorOptions acc_options = out.options().dtype(c10::CppTypeToScalarType<acc>::value);
  if (!plan.total) {
    if (plan.chunks() == 1) {  // stage 1 writes the result
      launch_stage1<Term>(plan, x, w, result);
      return;
    }
    const at::Tensor partial = at::empty({out.numel() * plan.chunks()}, acc_options);
    launch_stage1<Term>(plan, x, w, partial.mutable_data_ptr<acc>());
    launch_sum_chunks(plan.second, partial.const_data_ptr<acc>(), result);
    return;
  }
  TotalArgs<acc, out_t> total{nullptr, nullptr, result, plan.partials};
  at::Tensor partials;
  if (plan.partials > 1) {
    const bool last_block_adds = plan.passes.empty();
    const auto stream = at::cuda::getCurrentCUDAStream();
    if (last_block_adds) {
      total.counter = counter_slot(stream);
    }
    // No slot to give: the counter is one more slot of the partials (any acc slot fits and aligns
    // an unsigned int), zeroed on the stream as ATen's Reduce.cuh zeroes its semaphores (a graph
    // captures the memset with the kernel).
    const bool own_counter = last_block_adds && total.counter == nullptr;
    partials = at::empty({plan.partials + (own_counter ? 1 : 0)}, acc_options);
    total.partial = partials.mutable_data_ptr<acc>();
    if (own_counter) {
      total.counter = reinterpret_cast<unsigned int*>(total.partial + plan.partials);
      C10_CUDA_CHECK(cudaMemsetAsync(total.counter, 0, sizeof(unsigned int), stream));
    }
  }
  launch_total_stage1<Term>(plan, x, w, total, name);
  // Too many partials for the last block: stage 2 passes, each adding the previous one's chunks.
  at::Tensor previous = partials;
  for (size_t k = 0; k < plan.passes.size(); ++k) {
    const auto& pass = plan.passes[k];
    if (k + 1 == plan.passes.size()) {
      launch_sum_chunks(pass, previous.const_data_ptr<acc>(), result);
    } else {
      at::Tensor next = at::empty({pass.chunks}, acc_options);
      launch_sum_chunks(pass, previous.const_data_ptr<acc>(), next.mutable_data_ptr<acc>());
      previous = std::move(next);
    }
  }
}

template <class Term>
void reduce(const detail::Reduction& args) {
  const auto& x = args.input;
  const auto& w = args.weight;
  const auto& out = args.out;
  TORCH_INTERNAL_ASSERT(x.dim() == 3 && x.sizes() == w.sizes() && x.scalar_type() == w.scalar_type());
  TORCH_INTERNAL_ASSERT(out.is_contiguous() && x.size(1) >= 1);
  TORCH_INTERNAL_ASSERT(out.numel() == (args.total ? 1 : x.size(0) * x.size(2)));
  CUSTOM_OPS_DISPATCH_FLOATING_TYPES(x.scalar_type(), "reduction_cuda", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    const scalar_t* w_data = w.const_data_ptr<scalar_t>();
    const auto plan = reduction::plan_reduction({
        .outer = x.size(0),
        .reduce = x.size(1),
        .inner = x.size(2),
        .input_strides = {x.stride(0), x.stride(1), x.stride(2)},
        .weight_strides = {w.stride(0), w.stride(1), w.stride(2)},
        .vector = kVectorSize<scalar_t>,
        .input_aligned = cuda::vector_aligned(x_data),
        .weight_aligned = cuda::vector_aligned(w_data),
        .total = args.total,
    });
    if (out.scalar_type() == c10::CppTypeToScalarType<acc>::value) {
      reduce_typed<Term, scalar_t, acc>(plan, x_data, w_data, out, args.name);
    } else {
      TORCH_INTERNAL_ASSERT(out.scalar_type() == x.scalar_type());
      reduce_typed<Term, scalar_t, scalar_t>(plan, x_data, w_data, out, args.name);
    }
  });
}

template <class Term>
struct CudaReductionLoops {
  static constexpr detail::ReductionLoops value{.reduce = reduce<Term>, .reduce_pairs = cuda::reduce_pairs<Term>};
};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CUDA, m) {
  detail::register_reduction_kernels<CudaReductionLoops, cuda::CudaDeviceGuard>(m);
}

}  // namespace custom
