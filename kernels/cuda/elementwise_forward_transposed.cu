// SPDX-License-Identifier: BSD-3-Clause
// out[r, c] = value(x, w) where out is row-major and an input is column-major (x.t(), or a weight
// of shape [R, 1]). Walking out's rows, gpu_kernel reads such an input one element per 32-byte
// sector. Here a block takes a T x T tile: it reads the column-major inputs down their columns
// (coalesced) into shared memory, the row-major ones straight into registers, and writes out
// along its rows (coalesced). A warp moves 128 bytes per access: 32 floats, or 64 halves as
// 32 pairs (the element rate, not the bytes, limits a tile kernel of 2-byte types).
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <type_traits>

#include "kernels/cuda/elementwise_forward_layout.h"
#include "kernels/cuda/vectorized_access.cuh"
#include "ops/floating_types.h"
#include "ops/operator_rows.h"

namespace custom::cuda {
namespace {

constexpr int kThreadsX = 32;  // a warp along the tile's unit-stride dimension
constexpr int kThreadsY = 8;

// Elements per access along the unit-stride dimension, and the tile size that makes a warp's
// access 128 bytes (one per lane and pack).
template <typename scalar_t>
constexpr int kPack = sizeof(scalar_t) == 2 ? 2 : 1;
template <typename scalar_t>
constexpr int kTile = kThreadsX * kPack<scalar_t>;

template <typename scalar_t>
struct TransposedArgs {
  scalar_t* out;
  const scalar_t* input;
  const scalar_t* weight;
  int64_t rows, cols, col_tiles;
  int64_t out_row_stride;
  int64_t input_col_stride, input_row_stride;
  int64_t weight_col_stride, weight_row_stride;
  bool packed;  // every pack of a whole tile is aligned: pointers and strides fit kPack
};

template <typename scalar_t>
using Pack = Vector<scalar_t, kPack<scalar_t>>;

template <typename scalar_t, typename opmath_t, bool kAcross>
using Tile = opmath_t[kAcross ? kTile<scalar_t> : 1][kTile<scalar_t> + 1];

// One input's share of a whole tile: one pack per lane and step. A column-major input goes to
// shared memory as tile[c][r] (lanes read consecutive rows); a row-major one to registers, in
// the order the writes use (lanes read consecutive columns).
template <bool kAcross, typename scalar_t, typename opmath_t, int kSteps>
__device__ void load_whole(
    const scalar_t* data,
    int64_t col_stride,
    int64_t row_stride,
    int64_t row0,
    int64_t col0,
    Tile<scalar_t, opmath_t, kAcross>& tile,
    Pack<scalar_t> (&rows)[kSteps]) {
  constexpr int P = kPack<scalar_t>;
  const int lane = threadIdx.x * P;
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int k = threadIdx.y + i * kThreadsY;  // a column of an across tile, else a row
    if constexpr (kAcross) {
      const auto pack = *reinterpret_cast<const Pack<scalar_t>*>(data + (col0 + k) * col_stride + row0 + lane);
#pragma unroll
      for (int p = 0; p < P; ++p) {
        tile[k][lane + p] = static_cast<opmath_t>(pack.val[p]);
      }
    } else {
      rows[i] = *reinterpret_cast<const Pack<scalar_t>*>(data + (row0 + k) * row_stride + col0 + lane);
    }
  }
}

template <bool kAcross, typename scalar_t, typename opmath_t>
__device__ opmath_t
element(const Tile<scalar_t, opmath_t, kAcross>& tile, const Pack<scalar_t>& row, int r, int c, int p) {
  if constexpr (kAcross) {
    return tile[c][r];
  } else {
    return static_cast<opmath_t>(row.val[p]);
  }
}

// A whole tile (the common case): no bounds checks; the odd pitch (T + 1) of the shared tiles
// spreads the transposed reads over the banks.
template <class Term, typename scalar_t, typename opmath_t, bool kInputAcross, bool kWeightAcross>
__device__ void whole_tile(
    const TransposedArgs<scalar_t>& args,
    int64_t row0,  // the tile's first row of out
    int64_t col0,  // and its first column
    Tile<scalar_t, opmath_t, kInputAcross>& input_tile,
    Tile<scalar_t, opmath_t, kWeightAcross>& weight_tile) {
  constexpr int P = kPack<scalar_t>;
  constexpr int kSteps = kTile<scalar_t> / kThreadsY;
  const int lane = threadIdx.x * P;
  Pack<scalar_t> input_rows[kSteps];
  Pack<scalar_t> weight_rows[kSteps];
  // Every load of the tile is issued before the first wait.
  load_whole<kInputAcross, scalar_t, opmath_t, kSteps>(
      args.input, args.input_col_stride, args.input_row_stride, row0, col0, input_tile, input_rows);
  load_whole<kWeightAcross, scalar_t, opmath_t, kSteps>(
      args.weight, args.weight_col_stride, args.weight_row_stride, row0, col0, weight_tile, weight_rows);
  __syncthreads();

#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int r = threadIdx.y + i * kThreadsY;
    Pack<scalar_t> result;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const opmath_t x = element<kInputAcross, scalar_t, opmath_t>(input_tile, input_rows[i], r, lane + p, p);
      const opmath_t w = element<kWeightAcross, scalar_t, opmath_t>(weight_tile, weight_rows[i], r, lane + p, p);
      result.val[p] = Term::value(x, w);
    }
    *reinterpret_cast<Pack<scalar_t>*>(args.out + (row0 + r) * args.out_row_stride + col0 + lane) = result;
  }
}

// A tile at the bottom or right edge (or any tile when packs are misaligned): element by
// element, each checked against the bounds.
template <class Term, typename scalar_t, typename opmath_t, bool kInputAcross, bool kWeightAcross>
__device__ void edge_tile(
    const TransposedArgs<scalar_t>& args,
    int64_t row0,
    int64_t col0,
    Tile<scalar_t, opmath_t, kInputAcross>& input_tile,
    Tile<scalar_t, opmath_t, kWeightAcross>& weight_tile) {
  constexpr int T = kTile<scalar_t>;
  const int64_t rows = args.rows - row0;  // of this tile
  const int64_t cols = args.cols - col0;
  auto stage = [&](const scalar_t* data, int64_t col_stride, auto& tile) {
    for (int c = threadIdx.y; c < T; c += kThreadsY) {
      for (int r = threadIdx.x; r < T; r += kThreadsX) {
        if (r < rows && c < cols) {
          tile[c][r] = static_cast<opmath_t>(data[(col0 + c) * col_stride + row0 + r]);
        }
      }
    }
  };
  if constexpr (kInputAcross) {
    stage(args.input, args.input_col_stride, input_tile);
  }
  if constexpr (kWeightAcross) {
    stage(args.weight, args.weight_col_stride, weight_tile);
  }
  __syncthreads();
  auto operand = [&](auto across, const auto& tile, const scalar_t* data, int64_t row_stride, int64_t r, int64_t c) {
    if constexpr (decltype(across)::value) {
      return tile[c][r];
    } else {
      return static_cast<opmath_t>(data[(row0 + r) * row_stride + col0 + c]);
    }
  };
  for (int r = threadIdx.y; r < T; r += kThreadsY) {
    for (int c = threadIdx.x; c < T; c += kThreadsX) {
      if (r < rows && c < cols) {
        const opmath_t x =
            operand(std::bool_constant<kInputAcross>{}, input_tile, args.input, args.input_row_stride, r, c);
        const opmath_t w =
            operand(std::bool_constant<kWeightAcross>{}, weight_tile, args.weight, args.weight_row_stride, r, c);
        args.out[(row0 + r) * args.out_row_stride + col0 + c] = Term::value(x, w);
      }
    }
  }
}

template <class Term, typename scalar_t, bool kInputAcross, bool kWeightAcross>
__global__ void __launch_bounds__(kThreadsX* kThreadsY) forward_transposed_kernel(TransposedArgs<scalar_t> args) {
  constexpr int T = kTile<scalar_t>;
  using opmath_t = at::opmath_type<scalar_t>;
  // Unused tiles collapse to one row, so an instantiation holds only the shared memory it uses.
  __shared__ Tile<scalar_t, opmath_t, kInputAcross> input_tile;
  __shared__ Tile<scalar_t, opmath_t, kWeightAcross> weight_tile;
  const int64_t row0 = blockIdx.x / args.col_tiles * T;
  const int64_t col0 = blockIdx.x % args.col_tiles * T;
  if (args.packed && row0 + T <= args.rows && col0 + T <= args.cols) {
    whole_tile<Term, scalar_t, opmath_t, kInputAcross, kWeightAcross>(args, row0, col0, input_tile, weight_tile);
  } else {
    edge_tile<Term, scalar_t, opmath_t, kInputAcross, kWeightAcross>(args, row0, col0, input_tile, weight_tile);
  }
}

template <class Term, typename scalar_t, bool kInputAcross, bool kWeightAcross>
void launch(const TransposedArgs<scalar_t>& args) {
  constexpr int T = kTile<scalar_t>;
  const int64_t blocks = args.col_tiles * ((args.rows + T - 1) / T);
  forward_transposed_kernel<Term, scalar_t, kInputAcross, kWeightAcross>
      <<<static_cast<unsigned int>(blocks), dim3(kThreadsX, kThreadsY), 0, at::cuda::getCurrentCUDAStream()>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Whether every pack a whole tile touches is aligned: each pointer, and each stride that steps
// between packs (the row stride of row-major operands, the column stride of column-major ones).
bool packs_aligned(at::TensorIteratorBase& iter, const TransposedPlan& plan, int64_t pack) {
  const int64_t bytes = pack * iter.element_size(kOut);
  auto aligned = [&](int operand) { return reinterpret_cast<std::uintptr_t>(iter.data_ptr(operand)) % bytes == 0; };
  auto stride_of = [](const std::array<int64_t, 2>& strides, bool across) { return across ? strides[0] : strides[1]; };
  return aligned(kOut) && aligned(kInput) && aligned(kWeight) && plan.out_row_stride % pack == 0 &&
      stride_of(plan.input_strides, plan.input_across) % pack == 0 &&
      stride_of(plan.weight_strides, plan.weight_across) % pack == 0;
}

}  // namespace

template <class Term>
void launch_forward_transposed(at::TensorIteratorBase& iter, const TransposedPlan& plan) {
  CUSTOM_OPS_DISPATCH_ITER_FLOATING(iter, "elementwise_transposed_cuda", [&] {
    constexpr int T = kTile<scalar_t>;
    const TransposedArgs<scalar_t> args{
        static_cast<scalar_t*>(iter.data_ptr(kOut)),
        static_cast<const scalar_t*>(iter.data_ptr(kInput)),
        static_cast<const scalar_t*>(iter.data_ptr(kWeight)),
        plan.rows,
        plan.cols,
        (plan.cols + T - 1) / T,
        plan.out_row_stride,
        plan.input_strides[0],
        plan.input_strides[1],
        plan.weight_strides[0],
        plan.weight_strides[1],
        packs_aligned(iter, plan, kPack<scalar_t>),
    };
    if (plan.input_across) {
      plan.weight_across ? launch<Term, scalar_t, true, true>(args) : launch<Term, scalar_t, true, false>(args);
    } else {
      launch<Term, scalar_t, false, true>(args);
    }
  });
}

#define CUSTOM_OPS_INSTANTIATE(Term_, backward_) \
  template void launch_forward_transposed<terms::Term_>(at::TensorIteratorBase & iter, const TransposedPlan& plan);
CUSTOM_OPS_TERMS(CUSTOM_OPS_INSTANTIATE)
#undef CUSTOM_OPS_INSTANTIATE

}  // namespace custom::cuda
