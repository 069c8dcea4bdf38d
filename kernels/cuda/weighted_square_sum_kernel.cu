// The CUDA reduction of weighted_square_sum: out[o, i] = sum over r of w * x**2 on the frontend's
// [outer, reduce, inner] views. The frontend has checked the arguments and chosen the views;
// this file only reduces. One pass over the operands, in two deterministic stages: stage 1 writes
// partial sums to a buffer in a layout fixed by the shape, stage 2 adds them in a fixed tree
// (no atomics), so every run gives the same bits. weighted_square_sum_plan.h picks the kernel
// (Rows or Tiles) and the cut of the reduced dim; each term is math::WeightedSquareSumTerm, summed
// in its accumulation type (float32 for float16/bfloat16/float32, float64 for float64).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <ATen/Dispatch.h>
#include <ATen/ceil_div.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/DeviceUtils.cuh>
#include <ATen/native/cuda/MemoryAccess.cuh>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include "kernels/cuda/cuda_device_guard.h"
#include "kernels/cuda/weighted_square_sum_plan.h"
#include "ops/floating_types.h"
#include "ops/weighted_square_sum_math.h"
#include "ops/weighted_square_sum_registration.h"

namespace custom {
namespace {

namespace square_sum = cuda::square_sum;
using square_sum::kThreads;
using square_sum::kWarp;
constexpr int kWarpsPerBlock = kThreads / kWarp;
// At most 64 registers a thread: 32 warps an SM, enough loads in flight to cover HBM latency.
constexpr int kMinBlocksPerSm = 4;
// A grid-stride loop covers the rest: every kernel's work item writes its own partial, so the
// grid size never changes the result.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

template <typename scalar_t>
using acc_t = math::weighted_square_sum_acc_t<scalar_t>;

template <typename scalar_t>
constexpr int kVec = static_cast<int>(square_sum::kVectorBytes / sizeof(scalar_t));

// 16-byte loads each thread has in flight before it adds them, over both operands (one when the
// weight is fixed): fewer for 16-bit types, whose 8 floats a load become would otherwise spill
// under 64 registers. Only a schedule: the order of the additions does not depend on it.
template <typename scalar_t, bool kWeightFixed>
constexpr int kUnroll = (sizeof(scalar_t) == 2 ? 4 : 8) / (kWeightFixed ? 1 : 2);

// Partials stage 2 has in flight per thread: its few loads a thread are otherwise one latency each.
constexpr int kChunkLoads = 8;

template <typename scalar_t, int kN>
using Group = at::native::memory::aligned_vector<scalar_t, kN>;

// kN consecutive (stride 1) or strided elements: one 16-byte load when kVectorized (the
// caller checked alignment), else element by element, zeros past `valid`.
template <bool kVectorized, int kN, typename scalar_t>
__device__ __forceinline__ Group<scalar_t, kN> load_group(const scalar_t* p, int64_t stride = 1, int valid = kN) {
  if constexpr (kVectorized) {
    return *reinterpret_cast<const Group<scalar_t, kN>*>(p);
  } else {
    Group<scalar_t, kN> g;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      g.val[j] = j < valid ? p[j * stride] : scalar_t(0);
    }
    return g;
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

// ---- Rows: one warp per segment of a contiguous row --------------------------------------------

template <typename scalar_t>
struct RowsArgs {
  const scalar_t* input;
  const scalar_t* weight;
  acc_t<scalar_t>* partial;  // [rows, splits]: out itself when splits == 1
  int64_t length;
  int64_t input_row_stride;
  int64_t weight_row_stride;
  int64_t splits;
  int64_t segment;
  int64_t segments;  // rows * splits
};

// kWeightFixed: one weight per row (a weight broadcast along the reduced dim).
template <typename scalar_t, bool kVectorized, bool kWeightFixed>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) rows_kernel(RowsArgs<scalar_t> a) {
  constexpr int kN = kVec<scalar_t>;
  using acc = acc_t<scalar_t>;
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; s < a.segments;
       s += warps) {
    const int64_t row = s / a.splits;
    const int64_t begin = (s % a.splits) * a.segment;
    const int64_t count = std::min(a.segment, a.length - begin);
    const scalar_t* x = a.input + row * a.input_row_stride + begin;
    const scalar_t* w = a.weight + row * a.weight_row_stride + (kWeightFixed ? 0 : begin);
    const scalar_t fixed_w = kWeightFixed ? *w : scalar_t(0);

    // Lane l adds element j of groups l, l + 32, ... into sums[j]: kN chains of count / (32 kN).
    acc sums[kN] = {};
    const int64_t groups = count / kN;
#pragma unroll 1  // the batch below is the unrolling
    for (int64_t g0 = lane; g0 < groups; g0 += kWarp * kUnroll<scalar_t, kWeightFixed>) {
      Group<scalar_t, kN> xg[kUnroll<scalar_t, kWeightFixed>];
      Group<scalar_t, kN> wg[kUnroll<scalar_t, kWeightFixed>];
#pragma unroll
      for (int u = 0; u < kUnroll<scalar_t, kWeightFixed>; ++u) {
        const int64_t g = g0 + u * kWarp;
        if (g < groups) {
          xg[u] = load_group<kVectorized, kN>(x + g * kN);
          if constexpr (!kWeightFixed) {
            wg[u] = load_group<kVectorized, kN>(w + g * kN);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll<scalar_t, kWeightFixed>; ++u) {
        if (g0 + u * kWarp < groups) {
#pragma unroll
          for (int j = 0; j < kN; ++j) {
            sums[j] += math::WeightedSquareSumTerm{}(xg[u].val[j], kWeightFixed ? fixed_w : wg[u].val[j]);
          }
        }
      }
    }
    // The last count % kN elements of a row whose length is not a multiple of kN.
    const int64_t tail = groups * kN + lane;
    if (tail < count) {
      sums[0] += math::WeightedSquareSumTerm{}(x[tail], kWeightFixed ? fixed_w : w[tail]);
    }
    const acc total = warp_sum(group_sum(sums));
    if (lane == 0) {
      a.partial[s] = total;
    }
  }
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

Tiles tiles_argument(const square_sum::TilesPlan& p) {
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

// The loop both tile kernels share. For each tile, thread (row thread tr, column thread tc) has
// sum_rows(o, i, valid, r, r_end, sums) add rows r, r + row_threads, ... < r_end of the column
// group at inner index i (`valid` elements of it) into sums[0..kN); the row threads' sums are then
// added in a fixed shared-memory tree and row thread 0 writes them to dst[o, chunk, i..].
template <int kN, typename acc, typename SumRows>
__device__ __forceinline__ void for_each_tile(const Tiles& t, acc* dst, const SumRows& sum_rows) {
  __shared__ acc scratch[kN][kThreads];
  const int tc = threadIdx.x % t.col_threads;
  const int tr = threadIdx.x / t.col_threads;
  for (int64_t tile = blockIdx.x; tile < t.tiles; tile += gridDim.x) {
    const int64_t column = (tile % t.column_tiles) * t.col_threads + tc;
    const int64_t chunk = (tile / t.column_tiles) % t.chunks;
    const int64_t o = tile / t.column_tiles / t.chunks;
    const int64_t i = column * kN;
    const int valid = column < t.columns ? static_cast<int>(std::min<int64_t>(kN, t.inner - i)) : 0;
    acc sums[kN] = {};
    if (valid > 0) {
      const int64_t first = chunk * t.rows_per_chunk;
      sum_rows(o, i, valid, first + tr, std::min(t.reduce, first + t.rows_per_chunk), sums);
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
      for (int j = 0; j < valid; ++j) {
        dst[(o * t.chunks + chunk) * t.inner + i + j] = scratch[j][threadIdx.x];
      }
    }
  }
}

// Stage 1 on Tiles. kVectorized: inner contiguous, every group 16-byte aligned. kWeightFixed: the
// weight is constant along reduce, so each thread reads its group's weights once per tile.
template <typename scalar_t, bool kVectorized, bool kWeightFixed>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) tiles_kernel(
    Tiles t, const scalar_t* input, const scalar_t* weight, acc_t<scalar_t>* partial) {
  constexpr int kN = kVec<scalar_t>;
  using acc = acc_t<scalar_t>;
  for_each_tile<kN>(t, partial, [&](int64_t o, int64_t i, int valid, int64_t r, int64_t r_end, acc(&sums)[kN]) {
    const int64_t* xs = t.input_strides;
    const int64_t* ws = t.weight_strides;
    const scalar_t* x = input + o * xs[0] + i * xs[2];
    const scalar_t* w = weight + o * ws[0] + i * ws[2];
    Group<scalar_t, kN> fixed_w;
    if constexpr (kWeightFixed) {
      fixed_w = load_group<false, kN>(w, ws[2], valid);
    }
    const int64_t step = t.row_threads;
#pragma unroll 1  // the batch below is the unrolling
    for (; r < r_end; r += step * kUnroll<scalar_t, kWeightFixed>) {
      Group<scalar_t, kN> xg[kUnroll<scalar_t, kWeightFixed>];
      Group<scalar_t, kN> wg[kUnroll<scalar_t, kWeightFixed>];
#pragma unroll
      for (int u = 0; u < kUnroll<scalar_t, kWeightFixed>; ++u) {
        const int64_t row = r + u * step;
        if (row < r_end) {
          xg[u] = load_group<kVectorized, kN>(x + row * xs[1], xs[2], valid);
          if constexpr (!kWeightFixed) {
            wg[u] = load_group<kVectorized, kN>(w + row * ws[1], ws[2], valid);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll<scalar_t, kWeightFixed>; ++u) {
        if (r + u * step < r_end) {
#pragma unroll
          for (int j = 0; j < kN; ++j) {
            // Skip the padding of a partial group: w * 0 is not 0 for an infinite w.
            if (kVectorized || j < valid) {
              sums[j] += math::WeightedSquareSumTerm{}(xg[u].val[j], kWeightFixed ? fixed_w.val[j] : wg[u].val[j]);
            }
          }
        }
      }
    }
  });
}

// Stage 2: out[o, i] = the sum over chunks of partial[o, chunk, i] (any strides).
template <typename acc>
__global__ void __launch_bounds__(kThreads) sum_chunks_kernel(Tiles t, const acc* partial, acc* out) {
  for_each_tile<1>(t, out, [&](int64_t o, int64_t i, int /*valid*/, int64_t r, int64_t r_end, acc(&sums)[1]) {
    const int64_t* s = t.input_strides;
    const acc* p = partial + o * s[0] + i * s[2];
    const int64_t step = t.row_threads;
#pragma unroll 1
    for (; r < r_end; r += step * kChunkLoads) {
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
void launch_rows(const square_sum::Plan& plan, const scalar_t* x, const scalar_t* w, acc_t<scalar_t>* dst) {
  const auto& r = plan.rows;
  const RowsArgs<scalar_t> args{
      x, w, dst, r.length, r.input_row_stride, r.weight_row_stride, r.splits, r.segment, r.rows * r.splits};
  const auto grid = grid_for(at::ceil_div<int64_t>(args.segments, kWarpsPerBlock));
  with_flags(plan.vectorized, plan.weight_fixed, [&](auto vectorized, auto weight_fixed) {
    rows_kernel<scalar_t, decltype(vectorized)::value, decltype(weight_fixed)::value>
        <<<grid, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(args);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

template <typename scalar_t>
void launch_tiles(const square_sum::Plan& plan, const scalar_t* x, const scalar_t* w, acc_t<scalar_t>* dst) {
  const auto t = tiles_argument(plan.tiles);
  with_flags(plan.vectorized, plan.weight_fixed, [&](auto vectorized, auto weight_fixed) {
    tiles_kernel<scalar_t, decltype(vectorized)::value, decltype(weight_fixed)::value>
        <<<grid_for(t.tiles), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(t, x, w, dst);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

template <typename acc>
void launch_sum_chunks(const square_sum::TilesPlan& second, const acc* partial, acc* out) {
  const auto t = tiles_argument(second);
  sum_chunks_kernel<acc><<<grid_for(t.tiles), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(t, partial, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

bool vector_aligned(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % square_sum::kVectorBytes == 0;
}

void reduce(const detail::WeightedSquareSumReduction& args) {
  const auto& x = args.input;
  const auto& w = args.weight;
  const auto& out = args.out;
  TORCH_INTERNAL_ASSERT(x.dim() == 3 && x.sizes() == w.sizes() && x.scalar_type() == w.scalar_type());
  TORCH_INTERNAL_ASSERT(out.is_contiguous() && out.numel() == x.size(0) * x.size(2) && x.size(1) >= 1);
  CUSTOM_OPS_DISPATCH_FLOATING_TYPES(x.scalar_type(), "weighted_square_sum_cuda", [&] {
    using acc = acc_t<scalar_t>;
    TORCH_INTERNAL_ASSERT(out.scalar_type() == c10::CppTypeToScalarType<acc>::value);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    const scalar_t* w_data = w.const_data_ptr<scalar_t>();
    const auto plan = square_sum::plan_reduction({
        .outer = x.size(0),
        .reduce = x.size(1),
        .inner = x.size(2),
        .input_strides = {x.stride(0), x.stride(1), x.stride(2)},
        .weight_strides = {w.stride(0), w.stride(1), w.stride(2)},
        .vector = kVec<scalar_t>,
        .input_aligned = vector_aligned(x_data),
        .weight_aligned = vector_aligned(w_data),
    });
    // Stage 1 writes straight into out when it does not cut the reduction.
    const bool two_stages = plan.chunks() > 1;
    const auto partial = two_stages ? at::empty({out.numel() * plan.chunks()}, out.options()) : out;
    acc* stage1 = partial.mutable_data_ptr<acc>();
    if (plan.layout == square_sum::Layout::Rows) {
      launch_rows<scalar_t>(plan, x_data, w_data, stage1);
    } else {
      launch_tiles<scalar_t>(plan, x_data, w_data, stage1);
    }
    if (two_stages) {
      launch_sum_chunks<acc>(plan.second, stage1, out.mutable_data_ptr<acc>());
    }
  });
}

constexpr detail::WeightedSquareSumLoops kCudaLoops{.reduce = reduce};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CUDA, m) {
  detail::register_weighted_square_sum_kernels<kCudaLoops, cuda::CudaDeviceGuard>(m);
}

}  // namespace custom
