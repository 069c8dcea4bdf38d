// CUDA kernels of the weighted square and its backward. The frontend has checked the arguments
// and built the TensorIterator; these loops only do the arithmetic. ATen's gpu_kernel supplies
// what a hand-written launch would have to get right: 16-byte vectorized loads on aligned
// contiguous operands (with a fallback for misaligned ones such as x[1:]), strided and broadcast
// indexing, splitting of tensors past 2^31 elements, the current stream and the launch check.
// The forward leaves it for two layouts where its strided loop is far from the bandwidth limit:
// a broadcast row or column, and a transposed input (weighted_sum_forward_layout.h).
#include <ATen/OpMathType.h>
#include <ATen/native/cuda/Loops.cuh>
#include <thrust/tuple.h>

#include "kernels/cuda/cuda_device_guard.h"
#include "kernels/cuda/weighted_sum_backward_per_channel.h"
#include "kernels/cuda/weighted_sum_forward_layout.h"
#include "ops/floating_types.h"
#include "ops/weighted_sum_frontend.h"
#include "ops/weighted_sum_math.h"

namespace custom {
namespace {

#define DISPATCH_FLOATING(iter, name, ...) CUSTOM_OPS_DISPATCH_FLOATING_TYPES((iter).common_dtype(), name, __VA_ARGS__)

// Half and bfloat16 compute in float (opmath) and round once (weighted_sum_math.h).
void forward_loop(at::TensorIteratorBase& iter) {
  const auto plan = cuda::plan_forward(iter);
  switch (plan.layout) {
    case cuda::ForwardLayout::Broadcast:
      return cuda::launch_forward_broadcast(iter, plan.broadcast);
    case cuda::ForwardLayout::Transposed:
      return cuda::launch_forward_transposed(iter, plan.transposed);
    case cuda::ForwardLayout::Generic:
      break;
  }
  DISPATCH_FLOATING(iter, "weighted_sum_cuda", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    at::native::gpu_kernel(iter, [] GPU_LAMBDA(scalar_t x, scalar_t w) -> scalar_t {
      return math::WeightedSquare{}(static_cast<opmath_t>(x), static_cast<opmath_t>(w));
    });
  });
}

void backward_input_loop(at::TensorIteratorBase& iter) {
  DISPATCH_FLOATING(iter, "weighted_sum_backward_input_cuda", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    at::native::gpu_kernel(iter, [] GPU_LAMBDA(scalar_t grad, scalar_t x, scalar_t w) -> scalar_t {
      return math::WeightedSquareInputGradient{}(
          static_cast<opmath_t>(grad), static_cast<opmath_t>(x), static_cast<opmath_t>(w));
    });
  });
}

void backward_weight_loop(at::TensorIteratorBase& iter) {
  DISPATCH_FLOATING(iter, "weighted_sum_backward_weight_cuda", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    at::native::gpu_kernel(iter, [] GPU_LAMBDA(scalar_t grad, scalar_t x) -> scalar_t {
      return math::WeightedSquareWeightGradient{}(static_cast<opmath_t>(grad), static_cast<opmath_t>(x));
    });
  });
}

// Both gradients from one read of grad, input and weight.
void backward_fused_loop(at::TensorIteratorBase& iter) {
  DISPATCH_FLOATING(iter, "weighted_sum_backward_cuda", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    at::native::gpu_kernel_multiple_outputs(
        iter, [] GPU_LAMBDA(scalar_t grad, scalar_t x, scalar_t w) -> thrust::tuple<scalar_t, scalar_t> {
          const opmath_t xf = x;
          const opmath_t gf = grad;
          return {
              math::WeightedSquareInputGradient{}(gf, xf, static_cast<opmath_t>(w)),
              math::WeightedSquareWeightGradient{}(gf, xf)};
        });
  });
}

constexpr detail::WeightedSumLoops kCudaLoops{
    .forward = forward_loop,
    .backward_fused = backward_fused_loop,
    .backward_input = backward_input_loop,
    .backward_weight = backward_weight_loop,
    .backward_per_channel = cuda::backward_per_channel,
};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CUDA, m) {
  detail::register_weighted_sum_kernels<kCudaLoops, cuda::CudaDeviceGuard>(m);
}

}  // namespace custom
