// SPDX-License-Identifier: BSD-3-Clause
// CUDA loop of the per-channel backward (ops/backward_per_channel_plan.h), for every term: grad
// and input a contiguous [outer, channels, inner] block, the weight [channels]. One pass writes
// grad_input = dx(x, w) g with 16-byte loads and stores (element by element where rows or
// pointers do not allow them) and sums grad_weight's terms dw(x, w) g per block into a float32
// (float64 for double) workspace; a second, small kernel adds each channel's partials in float64
// in a fixed order. Every block's share of the work depends on the shape only, and every sum has
// a fixed order, so the result is the same bits on every run.
//
// Two first-pass kernels:
//  - down_rows: the block as a matrix [outer, channels * inner] whose column j has weight
//    w[j / inner]; a block of threads takes a tile of columns over a block of rows, each thread
//    one 16-byte vector of columns down its rows, and writes one partial per column and row block.
//    About per_channel::kTargetBlocks blocks whatever the rows (backward_per_channel.h), so the
//    rows per block grow with them. For a weight along the rows (inner == 1) and for NCHW with
//    short planes.
//  - along_runs: each of the outer * channels runs of `inner` elements (one weight each) in
//    chunks; a block reduces a chunk to one partial. For a column weight and large planes.
#include "kernels/cuda/backward_per_channel.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>

#include "kernels/cuda/vectorized_access.cuh"
#include "ops/floating_types.h"
#include "ops/operator_rows.h"

namespace custom::cuda {
namespace {

using per_channel::kSumBatch;
using per_channel::kSumLanes;
using per_channel::kSumSlices;
using per_channel::kThreads;
using per_channel::kUnroll;
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridY = 65535;

template <typename scalar_t>
using Pointers = detail::PerChannelPointers<scalar_t>;
using detail::per_channel_reads_weight;

// The body of both first-pass kernels, for one vector of kVec elements (x, g) with weights w[l]:
// stores grad_input's vector at `grad_input` (when kInput) and hands each lane's grad_weight term
// to add_term(l, term) (when kWeight).
template <class Term, bool kInput, bool kWeight, int kVec, typename scalar_t, typename acc_t, typename AddTerm>
__device__ __forceinline__ void gradients(
    const Vector<scalar_t, kVec>& x,
    const Vector<scalar_t, kVec>& g,
    const acc_t (&w)[kVec],
    scalar_t* grad_input,
    const AddTerm& add_term) {
  Vector<scalar_t, kVec> out;
#pragma unroll
  for (int l = 0; l < kVec; ++l) {
    const acc_t xf = x.val[l];
    const acc_t gf = g.val[l];
    if constexpr (kInput) {
      out.val[l] = static_cast<scalar_t>(Term::dx(xf, w[l]) * gf);
    }
    if constexpr (kWeight) {
      add_term(l, Term::dw(xf, w[l]) * gf);
    }
  }
  if constexpr (kInput) {
    store_vector<kVec>(grad_input, out);
  }
}

// A thread's kUnroll vectors in both first-pass kernels: positions first + k * step (those before
// end), each at element position * pitch + offset.
struct Unrolled {
  int64_t first, step, end, pitch, offset;
  __device__ bool has(int k) const { return first + k * step < end; }
  __device__ int64_t at(int k) const { return (first + k * step) * pitch + offset; }
};

// Loads the vectors of input and grad, all issued before any is used.
template <int kVec, typename scalar_t>
__device__ __forceinline__ void load_unrolled(
    const Pointers<scalar_t>& p,
    const Unrolled& u,
    Vector<scalar_t, kVec> (&x)[kUnroll],
    Vector<scalar_t, kVec> (&g)[kUnroll]) {
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    if (u.has(k)) {
      x[k] = load_vector<kVec>(p.input + u.at(k));
      g[k] = load_vector<kVec>(p.grad + u.at(k));
    }
  }
}

// gradients() of each loaded vector, in order.
template <class Term, bool kInput, bool kWeight, int kVec, typename scalar_t, typename acc_t, typename AddTerm>
__device__ __forceinline__ void gradients_unrolled(
    const Pointers<scalar_t>& p,
    const Unrolled& u,
    const Vector<scalar_t, kVec> (&x)[kUnroll],
    const Vector<scalar_t, kVec> (&g)[kUnroll],
    const acc_t (&w)[kVec],
    const AddTerm& add_term) {
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    if (u.has(k)) {
      gradients<Term, kInput, kWeight>(x[k], g[k], w, p.grad_input + u.at(k), add_term);
    }
  }
}

struct DownRowsShape {
  int64_t rows;
  int64_t width;  // channels * inner
  int64_t inner;
  int64_t rows_per_block;
  int64_t row_blocks;
  int64_t column_tiles;
};

// blockDim = (tile columns in vectors, rows at a time); grid-stride over row blocks (x) and
// column tiles (y). partials[row_block, column] (when kWeight), in acc_t. A lane walks up to
// rows_per_block / lanes rows, so it sums in double: for a float acc_t, the acc_t sum of each
// unrolled group of kUnroll terms is added to it (grouped); for double, every term. The lanes'
// tree is in double too: each partial is one rounding to acc_t off its lanes' sum.
template <class Term, typename scalar_t, int kVec, bool kInput, bool kWeight>
__global__ void __launch_bounds__(kThreads) down_rows_kernel(
    Pointers<scalar_t> p, at::opmath_type<scalar_t>* partials, DownRowsShape s) {
  using acc_t = at::opmath_type<scalar_t>;
  using lane_t = double;
  using vec_t = Vector<scalar_t, kVec>;
  constexpr bool kGrouped = !std::is_same_v<lane_t, acc_t>;
  __shared__ lane_t shared[kWeight ? kThreads * kVec : 1];
  const int64_t vectors_per_row = s.width / kVec;
  const int64_t row_step = blockDim.y;
  for (int64_t tile = blockIdx.y; tile < s.column_tiles; tile += gridDim.y) {
    const int64_t vector = tile * blockDim.x + threadIdx.x;
    const bool active = vector < vectors_per_row;
    const int64_t column = vector * kVec;
    acc_t w[kVec];
#pragma unroll
    for (int l = 0; l < kVec; ++l) {
      w[l] = per_channel_reads_weight<Term, kInput> && active ? static_cast<acc_t>(p.weight[(column + l) / s.inner])
                                                              : acc_t(0);
    }
    for (int64_t block = blockIdx.x; block < s.row_blocks; block += gridDim.x) {
      const int64_t row_end = std::min(s.rows, (block + 1) * s.rows_per_block);
      lane_t sum[kVec];
#pragma unroll
      for (int l = 0; l < kVec; ++l) {
        sum[l] = 0;
      }
      for (int64_t row = block * s.rows_per_block + threadIdx.y; active && row < row_end; row += kUnroll * row_step) {
        const Unrolled u{row, row_step, row_end, s.width, column};
        vec_t x[kUnroll];
        vec_t g[kUnroll];
        load_unrolled(p, u, x, g);
        if constexpr (kGrouped) {
          acc_t group[kVec];
#pragma unroll
          for (int l = 0; l < kVec; ++l) {
            group[l] = 0;
          }
          gradients_unrolled<Term, kInput, kWeight>(p, u, x, g, w, [&](int l, acc_t term) { group[l] += term; });
#pragma unroll
          for (int l = 0; l < kVec; ++l) {
            sum[l] += static_cast<lane_t>(group[l]);
          }
        } else {
          gradients_unrolled<Term, kInput, kWeight>(p, u, x, g, w, [&](int l, acc_t term) { sum[l] += term; });
        }
      }
      if constexpr (kWeight) {
        // The row lanes (threadIdx.y, a power of two) of each column, added by a fixed tree.
        const auto slot = [&](int64_t y, int l) { return (y * blockDim.x + threadIdx.x) * kVec + l; };
        __syncthreads();  // the previous row block's reads of `shared` are done
#pragma unroll
        for (int l = 0; l < kVec; ++l) {
          shared[slot(threadIdx.y, l)] = sum[l];
        }
        __syncthreads();
        for (int half = blockDim.y / 2; half > 0; half /= 2) {
          if (threadIdx.y < half) {
#pragma unroll
            for (int l = 0; l < kVec; ++l) {
              shared[slot(threadIdx.y, l)] += shared[slot(threadIdx.y + half, l)];
            }
          }
          __syncthreads();
        }
        if (threadIdx.y == 0 && active) {
#pragma unroll
          for (int l = 0; l < kVec; ++l) {
            partials[block * s.width + column + l] = static_cast<acc_t>(shared[slot(0, l)]);
          }
        }
      }
    }
  }
}

struct AlongRunsShape {
  int64_t runs;  // outer * channels
  int64_t channels;
  int64_t inner;
  int64_t chunk;  // elements, a multiple of kThreads * kVec * kUnroll
  int64_t chunks;  // per run
};

// One block per (run, chunk), grid-stride; partials[run * chunks + chunk] (when kWeight).
template <class Term, typename scalar_t, int kVec, bool kInput, bool kWeight>
__global__ void __launch_bounds__(kThreads) along_runs_kernel(
    Pointers<scalar_t> p, at::opmath_type<scalar_t>* partials, AlongRunsShape s) {
  using acc_t = at::opmath_type<scalar_t>;
  using vec_t = Vector<scalar_t, kVec>;
  __shared__ acc_t shared[kThreads];
  constexpr int64_t kStride = int64_t{kThreads} * kVec;
  for (int64_t unit = blockIdx.x; unit < s.runs * s.chunks; unit += gridDim.x) {
    const int64_t run = unit / s.chunks;
    const int64_t base = run * s.inner;
    const int64_t begin = (unit % s.chunks) * s.chunk;
    const int64_t end = std::min(s.inner, begin + s.chunk);  // inner is a multiple of kVec
    const acc_t weight =
        per_channel_reads_weight<Term, kInput> ? static_cast<acc_t>(p.weight[run % s.channels]) : acc_t(0);
    acc_t w[kVec];
#pragma unroll
    for (int l = 0; l < kVec; ++l) {
      w[l] = weight;
    }
    acc_t sum = 0;
    for (int64_t i = begin + threadIdx.x * kVec; i < end; i += kUnroll * kStride) {
      const Unrolled u{i, kStride, end, 1, base};
      vec_t x[kUnroll];
      vec_t g[kUnroll];
      load_unrolled(p, u, x, g);
      gradients_unrolled<Term, kInput, kWeight>(p, u, x, g, w, [&](int, acc_t term) { sum += term; });
    }
    if constexpr (kWeight) {
      shared[threadIdx.x] = sum;
      __syncthreads();
      for (int half = kThreads / 2; half > 0; half /= 2) {  // a fixed tree
        if (threadIdx.x < half) {
          shared[threadIdx.x] += shared[threadIdx.x + half];
        }
        __syncthreads();
      }
      if (threadIdx.x == 0) {
        partials[unit] = shared[0];
      }
      __syncthreads();  // shared[0] read before the next unit overwrites it
    }
  }
}

// grad_weight[c] = the sum over o < groups and i < per_group of partials[(o * channels + c) *
// per_group + i], in float64, in a fixed order. One thread per channel when per_group == 1
// (reads coalesced across channels), else one block per channel with a fixed tree.
template <typename scalar_t, typename acc_t>
__global__ void sum_channels_per_thread_kernel(
    const acc_t* partials, int64_t groups, int64_t channels, scalar_t* grad_weight) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < channels; c += int64_t{blockDim.x} * gridDim.x) {
    double sum = 0;
    for (int64_t o = 0; o < groups; ++o) {
      sum += static_cast<double>(partials[o * channels + c]);
    }
    grad_weight[c] = static_cast<scalar_t>(sum);
  }
}

template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) sum_channels_per_block_kernel(
    const acc_t* partials, int64_t groups, int64_t channels, int64_t per_group, scalar_t* grad_weight) {
  __shared__ double shared[kThreads];
  const int64_t count = groups * per_group;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    double sum = 0;
    for (int64_t k = threadIdx.x; k < count; k += kThreads) {
      sum += static_cast<double>(partials[((k / per_group) * channels + c) * per_group + k % per_group]);
    }
    shared[threadIdx.x] = sum;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) {
        shared[threadIdx.x] += shared[threadIdx.x + half];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      grad_weight[c] = static_cast<scalar_t>(shared[0]);
    }
    __syncthreads();
  }
}

// The same sum for per_group == 1 over kWideMinGroups groups or more: blockDim = (kSumLanes
// channels, kSumSlices slices); slice y adds groups y, y + kSumSlices, ... in that order, kSumBatch
// loads in flight before the first add, then a fixed tree over the slices. Every channel's order
// depends on `groups` only.
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kSumLanes* kSumSlices) sum_channels_wide_kernel(
    const acc_t* partials, int64_t groups, int64_t channels, scalar_t* grad_weight) {
  __shared__ double shared[kSumSlices][kSumLanes + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kSumLanes + threadIdx.x;
  double sum = 0;
  if (c < channels) {
    for (int64_t first = threadIdx.y; first < groups; first += int64_t{kSumSlices} * kSumBatch) {
      acc_t values[kSumBatch];
#pragma unroll
      for (int b = 0; b < kSumBatch; ++b) {
        const int64_t o = first + int64_t{b} * kSumSlices;
        values[b] = o < groups ? partials[o * channels + c] : acc_t(0);
      }
#pragma unroll
      for (int b = 0; b < kSumBatch; ++b) {
        sum += static_cast<double>(values[b]);
      }
    }
  }
  shared[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  for (int half = kSumSlices / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
      shared[threadIdx.y][threadIdx.x] += shared[threadIdx.y + half][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < channels) {
    grad_weight[c] = static_cast<scalar_t>(shared[0][threadIdx.x]);
  }
}

template <typename scalar_t, typename acc_t>
void launch_sum_channels(const acc_t* partials, int64_t groups, int64_t channels, int64_t per_group, scalar_t* out) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  if (per_group == 1 && groups >= per_channel::kWideMinGroups) {
    const auto blocks = static_cast<unsigned>((channels + kSumLanes - 1) / kSumLanes);  // channels < 2^31
    sum_channels_wide_kernel<<<blocks, dim3(kSumLanes, kSumSlices), 0, stream>>>(partials, groups, channels, out);
  } else if (per_group == 1) {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((channels + kThreads - 1) / kThreads, kMaxGridX));
    sum_channels_per_thread_kernel<<<blocks, kThreads, 0, stream>>>(partials, groups, channels, out);
  } else {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(channels, kMaxGridX));
    sum_channels_per_block_kernel<<<blocks, kThreads, 0, stream>>>(partials, groups, channels, per_group, out);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class Term, typename scalar_t, int kVec, bool kInput, bool kWeight>
void launch_down_rows(const detail::PerChannelBackward& args, const Pointers<scalar_t>& p) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto [outer, channels, inner] = args.shape;
  const auto g = per_channel::down_rows_geometry(outer, channels * inner, kVec);
  const DownRowsShape s{outer, channels * inner, inner, g.rows_per_block, g.row_blocks, g.column_tiles};
  at::Tensor partials;
  if (kWeight) {
    partials = at::empty({s.row_blocks * s.width}, args.grad.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
  }
  acc_t* workspace = kWeight ? partials.mutable_data_ptr<acc_t>() : nullptr;
  const dim3 grid(
      static_cast<unsigned>(std::min(s.row_blocks, kMaxGridX)),
      static_cast<unsigned>(std::min(s.column_tiles, kMaxGridY)));
  down_rows_kernel<Term, scalar_t, kVec, kInput, kWeight>
      <<<grid, dim3(g.tile, g.lanes), 0, at::cuda::getCurrentCUDAStream()>>>(p, workspace, s);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (kWeight) {
    launch_sum_channels(workspace, s.row_blocks, channels, inner, args.grad_weight.mutable_data_ptr<scalar_t>());
  }
}

template <class Term, typename scalar_t, int kVec, bool kInput, bool kWeight>
void launch_along_runs(const detail::PerChannelBackward& args, const Pointers<scalar_t>& p) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto [outer, channels, inner] = args.shape;
  AlongRunsShape s{outer * channels, channels, inner, int64_t{kThreads} * kVec * kUnroll * 2, 0};
  s.chunks = (inner + s.chunk - 1) / s.chunk;
  const int64_t units = s.runs * s.chunks;
  at::Tensor partials;
  if (kWeight) {
    partials = at::empty({units}, args.grad.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
  }
  acc_t* workspace = kWeight ? partials.mutable_data_ptr<acc_t>() : nullptr;
  const auto blocks = static_cast<unsigned>(std::min(units, kMaxGridX));
  along_runs_kernel<Term, scalar_t, kVec, kInput, kWeight>
      <<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(p, workspace, s);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (kWeight) {
    launch_sum_channels(workspace, outer, channels, s.chunks, args.grad_weight.mutable_data_ptr<scalar_t>());
  }
}

}  // namespace

// Along runs when they are long enough to fill a block's chunk, or too few rows to share a
// column's work; else down rows. 16-byte accesses where every pointer and run allows them.
template <class Term>
void backward_per_channel(const detail::PerChannelBackward& args) {
  const auto& shape = args.shape;
  const bool along_runs = shape.inner > 1 && (shape.inner >= 2048 || shape.outer < 8);
  detail::dispatch_per_channel(args, [&]<typename scalar_t, bool kInput, bool kWeight>() {
    constexpr int kVec = kVectorSize<scalar_t>;
    const auto p = detail::per_channel_pointers<Term, scalar_t, kInput>(args);
    const bool aligned = vector_aligned(p.grad_input) && vector_aligned(p.grad) && vector_aligned(p.input);
    if (along_runs) {
      if (aligned && shape.inner % kVec == 0) {
        launch_along_runs<Term, scalar_t, kVec, kInput, kWeight>(args, p);
      } else {
        launch_along_runs<Term, scalar_t, 1, kInput, kWeight>(args, p);
      }
    } else if (aligned && (shape.channels * shape.inner) % kVec == 0) {
      launch_down_rows<Term, scalar_t, kVec, kInput, kWeight>(args, p);
    } else {
      launch_down_rows<Term, scalar_t, 1, kInput, kWeight>(args, p);
    }
  });
}

#define CUSTOM_OPS_INSTANTIATE(Term_, backward_) \
  template void backward_per_channel<terms::Term_>(const detail::PerChannelBackward& args);
CUSTOM_OPS_TERMS(CUSTOM_OPS_INSTANTIATE)
#undef CUSTOM_OPS_INSTANTIATE

}  // namespace custom::cuda
