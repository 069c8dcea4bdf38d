// SPDX-License-Identifier: BSD-3-Clause
// CUDA loops of the elementwise engine, for every term: its value and its backward. The frontend
// has checked the arguments and built the TensorIterator; these loops only do the arithmetic,
// through the term. ATen's gpu_kernel supplies what a hand-written launch would have to get right:
// 16-byte vectorized loads on aligned contiguous operands (with a fallback for misaligned ones
// such as x[1:]), strided and broadcast indexing, splitting of tensors past 2^31 elements, the
// current stream and the launch check. The forward leaves it for two layouts where its strided
// loop is far from the bandwidth limit: a broadcast row or column, and a transposed input
// (elementwise_forward_layout.h).
#include <ATen/OpMathType.h>
#include <ATen/native/cuda/Loops.cuh>
#include <thrust/tuple.h>

#include "kernels/cuda/backward_per_channel.h"
#include "kernels/cuda/cuda_device_guard.h"
#include "kernels/cuda/elementwise_forward_layout.h"
#include "ops/elementwise_frontend.h"
#include "ops/floating_types.h"

namespace custom {
namespace {

// Half and bfloat16 compute in float (opmath) and round once.
template <class Term>
void forward_loop(at::TensorIteratorBase& iter) {
  const auto plan = cuda::plan_forward(iter);
  switch (plan.layout) {
    case cuda::ForwardLayout::Broadcast:
      return cuda::launch_forward_broadcast<Term>(iter, plan.broadcast);
    case cuda::ForwardLayout::Transposed:
      return cuda::launch_forward_transposed<Term>(iter, plan.transposed);
    case cuda::ForwardLayout::Generic:
      break;
  }
  CUSTOM_OPS_DISPATCH_ITER_FLOATING(iter, "elementwise_cuda", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    at::native::gpu_kernel(iter, [] GPU_LAMBDA(scalar_t x, scalar_t w) -> scalar_t {
      return Term::value(static_cast<opmath_t>(x), static_cast<opmath_t>(w));
    });
  });
}

template <class Term>
void backward_input_loop(at::TensorIteratorBase& iter) {
  CUSTOM_OPS_DISPATCH_ITER_FLOATING(iter, "elementwise_backward_input_cuda", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    at::native::gpu_kernel(iter, [] GPU_LAMBDA(scalar_t grad, scalar_t x, scalar_t w) -> scalar_t {
      return Term::dx(static_cast<opmath_t>(x), static_cast<opmath_t>(w)) * static_cast<opmath_t>(grad);
    });
  });
}

// Without a weight operand (dw does not read it), dw gets a zero.
template <class Term>
void backward_weight_loop(at::TensorIteratorBase& iter) {
  CUSTOM_OPS_DISPATCH_ITER_FLOATING(iter, "elementwise_backward_weight_cuda", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    if constexpr (Term::dw_reads_weight) {
      at::native::gpu_kernel(iter, [] GPU_LAMBDA(scalar_t grad, scalar_t x, scalar_t w) -> scalar_t {
        return Term::dw(static_cast<opmath_t>(x), static_cast<opmath_t>(w)) * static_cast<opmath_t>(grad);
      });
    } else {
      at::native::gpu_kernel(iter, [] GPU_LAMBDA(scalar_t grad, scalar_t x) -> scalar_t {
        return Term::dw(static_cast<opmath_t>(x), opmath_t(0)) * static_cast<opmath_t>(grad);
      });
    }
  });
}

// Both gradients from one read of grad, input and weight.
template <class Term>
void backward_fused_loop(at::TensorIteratorBase& iter) {
  CUSTOM_OPS_DISPATCH_ITER_FLOATING(iter, "elementwise_backward_cuda", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    at::native::gpu_kernel_multiple_outputs(
        iter, [] GPU_LAMBDA(scalar_t grad, scalar_t x, scalar_t w) -> thrust::tuple<scalar_t, scalar_t> {
          const opmath_t xf = x;
          const opmath_t wf = w;
          const opmath_t gf = grad;
          return {Term::dx(xf, wf) * gf, Term::dw(xf, wf) * gf};
        });
  });
}

template <class Term>
struct CudaLoops {
  static constexpr detail::ElementwiseLoops value{
      .forward = forward_loop<Term>,
      .backward_fused = backward_fused_loop<Term>,
      .backward_input = backward_input_loop<Term>,
      .backward_weight = backward_weight_loop<Term>,
      .backward_per_channel = cuda::backward_per_channel<Term>,
  };
};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CUDA, m) {
  detail::register_elementwise_kernels<CudaLoops, cuda::CudaDeviceGuard>(m);
}

}  // namespace custom
