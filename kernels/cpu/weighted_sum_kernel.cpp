// CPU loops of the weighted square and its backward. The frontend has already checked the
// arguments and built a TensorIterator (broadcasting, strides, promotion); these loops only do
// the arithmetic, with at::vec::Vectorized SIMD and at::parallel_for threads via cpu_kernel_vec.
//
// Like ATen's native/cpu kernels, this file is compiled once per instruction set (DEFAULT and
// AVX2; CMake sets CPU_CAPABILITY) and weighted_sum_cpu_dispatch.cpp picks one at run time.
#include <algorithm>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/cpu/Loops.h>

#include "kernels/cpu/weighted_sum_cpu_loops.h"

namespace custom::cpu::CPU_CAPABILITY {
namespace {

template <typename scalar_t>
using Vec = at::vec::Vectorized<scalar_t>;

// Runs `op` in the op-math type: float for Half/BFloat16 (one rounding at the end), else itself.
template <typename scalar_t, typename Op, typename... Args>
scalar_t scalar_opmath(const Op& op, Args... args) {
  using opmath_t = at::opmath_type<scalar_t>;
  return static_cast<scalar_t>(op(static_cast<opmath_t>(args)...));
}

template <typename scalar_t, typename Op, typename... Vecs>
Vec<scalar_t> vector_opmath(const Op& op, const Vecs&... args) {
  if constexpr (std::is_same_v<at::opmath_type<scalar_t>, scalar_t>) {
    return op(args...);
  } else {
    const auto low = op(std::get<0>(at::vec::convert_to_float<scalar_t>(args))...);
    const auto high = op(std::get<1>(at::vec::convert_to_float<scalar_t>(args))...);
    return at::vec::convert_from_float<scalar_t>(low, high);
  }
}

// The same operation order as `w * x.square()`, so float32/float64 results match it bitwise.
constexpr auto weighted_square = [](auto x, auto w) { return w * (x * x); };
constexpr auto input_gradient = [](auto grad, auto x, auto w) { return (x + x) * w * grad; };
constexpr auto weight_gradient = [](auto grad, auto x) { return (x * x) * grad; };

// cpu_kernel_vec reads the arity and argument types off the lambdas, so they are spelled out.
#define DISPATCH_FLOATING(iter, name, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, (iter).common_dtype(), name, __VA_ARGS__)

void forward_loop(at::TensorIteratorBase& iter) {
  DISPATCH_FLOATING(iter, "weighted_sum_cpu", [&] {
    at::native::cpu_kernel_vec(
        iter,
        [](scalar_t x, scalar_t w) { return scalar_opmath<scalar_t>(weighted_square, x, w); },
        [](Vec<scalar_t> x, Vec<scalar_t> w) { return vector_opmath<scalar_t>(weighted_square, x, w); });
  });
}

void backward_input_loop(at::TensorIteratorBase& iter) {
  DISPATCH_FLOATING(iter, "weighted_sum_backward_input_cpu", [&] {
    at::native::cpu_kernel_vec(
        iter,
        [](scalar_t grad, scalar_t x, scalar_t w) { return scalar_opmath<scalar_t>(input_gradient, grad, x, w); },
        [](Vec<scalar_t> grad, Vec<scalar_t> x, Vec<scalar_t> w) {
          return vector_opmath<scalar_t>(input_gradient, grad, x, w);
        });
  });
}

void backward_weight_loop(at::TensorIteratorBase& iter) {
  DISPATCH_FLOATING(iter, "weighted_sum_backward_weight_cpu", [&] {
    at::native::cpu_kernel_vec(
        iter,
        [](scalar_t grad, scalar_t x) { return scalar_opmath<scalar_t>(weight_gradient, grad, x); },
        [](Vec<scalar_t> grad, Vec<scalar_t> x) { return vector_opmath<scalar_t>(weight_gradient, grad, x); });
  });
}

// Both gradients from one read of grad, input and weight. ATen has no vectorized loop with two
// outputs (cpu_kernel_multiple_outputs is scalar, and 10x off the bandwidth in half precision),
// so this is the 2-D TensorIterator loop with a Vectorized path for contiguous rows.
template <typename scalar_t>
void backward_fused_rows(char** base, const int64_t* strides, int64_t size0, int64_t size1) {
  enum { kGradInput, kGradWeight, kGrad, kInput, kWeight, kOperands };
  constexpr int64_t width = sizeof(scalar_t);
  using V = Vec<scalar_t>;
  const bool contiguous = std::all_of(strides, strides + kOperands, [](int64_t s) { return s == width; });
  char* data[kOperands];
  std::copy(base, base + kOperands, data);
  for (int64_t row = 0; row < size1; ++row) {
    int64_t i = 0;
    if (contiguous) {
      for (; i + V::size() <= size0; i += V::size()) {
        const auto grad = V::loadu(data[kGrad] + i * width);
        const auto x = V::loadu(data[kInput] + i * width);
        const auto w = V::loadu(data[kWeight] + i * width);
        vector_opmath<scalar_t>(input_gradient, grad, x, w).store(data[kGradInput] + i * width);
        vector_opmath<scalar_t>(weight_gradient, grad, x).store(data[kGradWeight] + i * width);
      }
    }
    const auto at = [&](int operand) { return reinterpret_cast<scalar_t*>(data[operand] + i * strides[operand]); };
    for (; i < size0; ++i) {
      *at(kGradInput) = scalar_opmath<scalar_t>(input_gradient, *at(kGrad), *at(kInput), *at(kWeight));
      *at(kGradWeight) = scalar_opmath<scalar_t>(weight_gradient, *at(kGrad), *at(kInput));
    }
    for (int operand = 0; operand < kOperands; ++operand) {
      data[operand] += strides[kOperands + operand];
    }
  }
}

void backward_fused_loop(at::TensorIteratorBase& iter) {
  DISPATCH_FLOATING(iter, "weighted_sum_backward_cpu", [&] {
    iter.for_each(backward_fused_rows<scalar_t>);
  });
}

}  // namespace

const detail::WeightedSumLoops weighted_sum_loops{
    .forward = forward_loop,
    .backward_fused = backward_fused_loop,
    .backward_input = backward_input_loop,
    .backward_weight = backward_weight_loop,
};

}  // namespace custom::cpu::CPU_CAPABILITY
