// out[r, c] = w * x**2 where out is row-major and an input is column-major (x.t(), or a weight
// of shape [R, 1]). Walking out's rows, gpu_kernel reads such an input one element per 32-byte
// sector. Here a block takes a T x T tile: it reads the column-major inputs down their columns
// (coalesced) into shared memory, the row-major ones straight into registers, and writes out
// along its rows (coalesced). T spans 128 bytes of a row: 32 floats, 64 halves.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "kernels/cuda/forward_kernels.h"

namespace custom::cuda {
namespace {

constexpr int kThreadsX = 32;  // a warp along the tile's unit-stride dimension
constexpr int kThreadsY = 8;

template <typename scalar_t>
constexpr int kTile = sizeof(scalar_t) == 2 ? 64 : 32;

template <typename scalar_t>
struct TransposedArgs {
  scalar_t* out;
  const scalar_t* input;
  const scalar_t* weight;
  int64_t rows, cols, col_tiles;
  int64_t out_row_stride;
  int64_t input_col_stride, input_row_stride;
  int64_t weight_col_stride, weight_row_stride;
};

// A column-major operand's tile into shared memory, as tile[c][r]: lanes read consecutive rows.
// The odd row pitch (T + 1) keeps the transposed reads free of bank conflicts.
template <typename scalar_t, typename opmath_t, int T>
__device__ void stage_across(
    opmath_t (&tile)[T][T + 1], const scalar_t* data, int64_t col_stride, int64_t rows, int64_t cols,
    int64_t row0, int64_t col0) {
#pragma unroll
  for (int i = 0; i < T / kThreadsY; ++i) {
    const int c = threadIdx.y + i * kThreadsY;
#pragma unroll
    for (int j = 0; j < T / kThreadsX; ++j) {
      const int r = threadIdx.x + j * kThreadsX;
      if (row0 + r < rows && col0 + c < cols) {
        tile[c][r] = static_cast<opmath_t>(data[(col0 + c) * col_stride + row0 + r]);
      }
    }
  }
}

// A row-major operand's elements of this thread, in the order of the writes: lanes read
// consecutive columns.
template <typename scalar_t, typename opmath_t, int T>
__device__ void load_along(
    opmath_t (&values)[T / kThreadsY][T / kThreadsX], const scalar_t* data, int64_t row_stride, int64_t rows,
    int64_t cols, int64_t row0, int64_t col0) {
#pragma unroll
  for (int i = 0; i < T / kThreadsY; ++i) {
    const int64_t r = row0 + threadIdx.y + i * kThreadsY;
#pragma unroll
    for (int j = 0; j < T / kThreadsX; ++j) {
      const int64_t c = col0 + threadIdx.x + j * kThreadsX;
      if (r < rows && c < cols) {
        values[i][j] = static_cast<opmath_t>(data[r * row_stride + c]);
      }
    }
  }
}

// One input: a column-major one into its shared tile, a row-major one into registers.
template <bool kAcross, typename scalar_t, typename opmath_t, int T>
__device__ void load_operand(
    opmath_t (&tile)[kAcross ? T : 1][T + 1], opmath_t (&values)[T / kThreadsY][T / kThreadsX],
    const scalar_t* data, int64_t col_stride, int64_t row_stride, int64_t rows, int64_t cols, int64_t row0,
    int64_t col0) {
  if constexpr (kAcross) {
    stage_across<scalar_t, opmath_t, T>(tile, data, col_stride, rows, cols, row0, col0);
  } else {
    load_along<scalar_t, opmath_t, T>(values, data, row_stride, rows, cols, row0, col0);
  }
}

// Element (r, c) of the tile (i, j: its place in this thread's registers).
template <bool kAcross, typename opmath_t, int T>
__device__ opmath_t operand_at(
    const opmath_t (&tile)[kAcross ? T : 1][T + 1], const opmath_t (&values)[T / kThreadsY][T / kThreadsX], int r,
    int c, int i, int j) {
  if constexpr (kAcross) {
    return tile[c][r];
  } else {
    return values[i][j];
  }
}

template <typename scalar_t, bool kInputAcross, bool kWeightAcross>
__global__ void __launch_bounds__(kThreadsX * kThreadsY) forward_transposed_kernel(TransposedArgs<scalar_t> args) {
  constexpr int T = kTile<scalar_t>;
  using opmath_t = at::opmath_type<scalar_t>;
  // Unused tiles collapse to one row, so an instantiation holds only the shared memory it uses.
  __shared__ opmath_t input_tile[kInputAcross ? T : 1][T + 1];
  __shared__ opmath_t weight_tile[kWeightAcross ? T : 1][T + 1];
  opmath_t input_values[T / kThreadsY][T / kThreadsX];
  opmath_t weight_values[T / kThreadsY][T / kThreadsX];

  const int64_t row0 = blockIdx.x / args.col_tiles * T;
  const int64_t col0 = blockIdx.x % args.col_tiles * T;
  // Every load is issued before the first wait.
  load_operand<kInputAcross, scalar_t, opmath_t, T>(
      input_tile, input_values, args.input, args.input_col_stride, args.input_row_stride, args.rows, args.cols,
      row0, col0);
  load_operand<kWeightAcross, scalar_t, opmath_t, T>(
      weight_tile, weight_values, args.weight, args.weight_col_stride, args.weight_row_stride, args.rows,
      args.cols, row0, col0);
  __syncthreads();

#pragma unroll
  for (int i = 0; i < T / kThreadsY; ++i) {
    const int r = threadIdx.y + i * kThreadsY;
#pragma unroll
    for (int j = 0; j < T / kThreadsX; ++j) {
      const int c = threadIdx.x + j * kThreadsX;
      if (row0 + r < args.rows && col0 + c < args.cols) {
        const opmath_t x = operand_at<kInputAcross, opmath_t, T>(input_tile, input_values, r, c, i, j);
        const opmath_t w = operand_at<kWeightAcross, opmath_t, T>(weight_tile, weight_values, r, c, i, j);
        args.out[(row0 + r) * args.out_row_stride + col0 + c] = w * (x * x);  // as w * x.square()
      }
    }
  }
}

template <typename scalar_t, bool kInputAcross, bool kWeightAcross>
void launch(const TransposedArgs<scalar_t>& args) {
  constexpr int T = kTile<scalar_t>;
  const int64_t blocks = args.col_tiles * ((args.rows + T - 1) / T);
  forward_transposed_kernel<scalar_t, kInputAcross, kWeightAcross>
      <<<static_cast<unsigned int>(blocks), dim3(kThreadsX, kThreadsY), 0, at::cuda::getCurrentCUDAStream()>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void launch_forward_transposed(at::TensorIteratorBase& iter, const TransposedPlan& plan) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, iter.common_dtype(), "weighted_sum_transposed_cuda", [&] {
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
    };
    if (plan.input_across) {
      plan.weight_across ? launch<scalar_t, true, true>(args) : launch<scalar_t, true, false>(args);
    } else {
      launch<scalar_t, false, true>(args);
    }
  });
}

}  // namespace custom::cuda
