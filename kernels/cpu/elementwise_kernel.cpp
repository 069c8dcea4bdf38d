// SPDX-License-Identifier: BSD-3-Clause
// CPU loops of the elementwise engine, for every term: its value and its backward. The frontend
// has already checked the arguments and built a TensorIterator (broadcasting, strides,
// promotion); these loops only do the arithmetic, through the term, with at::vec::Vectorized SIMD
// and at::parallel_for threads via cpu_kernel_vec.
//
// Like ATen's native/cpu kernels, this file is compiled once per instruction set (DEFAULT, AVX2,
// AVX512; CMake sets CPU_CAPABILITY) and cpu_loops.h picks one per term at run time.
// When the operands are larger than the last-level cache, the outputs are written with streaming
// stores (streaming_store.h): ATen's loops do not, and it saves a quarter of the memory traffic
// of the forward and two sevenths of the fused backward's (no read of each output line).
#include <algorithm>
#include <tuple>

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/cpu/Loops.h>

#include "kernels/cpu/backward_per_channel.h"
#include "kernels/cpu/cpu_loops.h"
#include "kernels/cpu/streaming_store.h"
#include "kernels/cpu/streaming_threshold.h"
#include "kernels/cpu/vectorized_term_functions.h"
#include "ops/elementwise_frontend.h"
#include "ops/floating_types.h"

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
    // Each argument converted once: its (low, high) float halves.
    const std::tuple halves{at::vec::convert_to_float<scalar_t>(args)...};
    const auto low = std::apply([&](const auto&... half) { return op(std::get<0>(half)...); }, halves);
    const auto high = std::apply([&](const auto&... half) { return op(std::get<1>(half)...); }, halves);
    return at::vec::convert_from_float<scalar_t>(low, high);
  }
}

// The term's value and gradients, for scalar_opmath and vector_opmath: T is the op-math type or
// a Vectorized of it. Without a weight operand (dw does not read it), dw gets a zero.
template <class Term>
struct Value {
  template <typename T>
  T operator()(T x, T w) const {
    return Term::value(x, w);
  }
};

template <class Term>
struct InputGradient {
  template <typename T>
  T operator()(T grad, T x, T w) const {
    return Term::dx(x, w) * grad;
  }
};

template <class Term>
struct WeightGradient {
  template <typename T>
  T operator()(T grad, T x, T w) const {
    return Term::dw(x, w) * grad;
  }
  template <typename T>
  T operator()(T grad, T x) const {
    static_assert(!Term::dw_reads_weight);
    return Term::dw(x, number<T>(0)) * grad;
  }
};

// The operand pointers of a 2-D TensorIterator loop (for_each), one row at a time.
template <typename scalar_t, int kOperands>
class Rows {
 public:
  Rows(char** base, const int64_t* strides) : strides_(strides) { std::copy(base, base + kOperands, data_); }
  char* row(int operand) const { return data_[operand]; }
  scalar_t& at(int operand, int64_t i) const {
    return *reinterpret_cast<scalar_t*>(data_[operand] + i * strides_[operand]);
  }
  void next() {
    for (int operand = 0; operand < kOperands; ++operand) {
      data_[operand] += strides_[kOperands + operand];
    }
  }

 private:
  char* data_[kOperands];
  const int64_t* strides_;
};

// Whether `iter`'s outputs should bypass the cache: its operands (each at its own size, so a
// broadcast weight counts once) are larger than the last-level cache, so cannot stay there.
bool streams(const at::TensorIteratorBase& iter) {
  if constexpr (!kCanStream) {
    return false;
  }
  int64_t bytes = 0;
  for (int operand = 0; operand < iter.ntensors(); ++operand) {
    bytes += iter.tensor_base(operand).numel() * iter.element_size(operand);
  }
  return bytes >= cpu::streaming_min_bytes();
}

// The forward as a 2-D TensorIterator loop whose vector rows (output and input contiguous, weight
// contiguous or one value) end in streaming stores from the first vector-aligned output element.
template <class Term, typename scalar_t>
void forward_streaming_rows(char** base, const int64_t* strides, int64_t size0, int64_t size1) {
  enum { kOut, kInput, kWeight, kOperands };
  constexpr int64_t width = sizeof(scalar_t);
  using V = Vec<scalar_t>;
  const bool vector_rows =
      strides[kOut] == width && strides[kInput] == width && (strides[kWeight] == width || strides[kWeight] == 0);
  Rows<scalar_t, kOperands> rows(base, strides);
  const auto scalar_range = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      rows.at(kOut, i) = scalar_opmath<scalar_t>(Value<Term>{}, rows.at(kInput, i), rows.at(kWeight, i));
    }
  };
  for (int64_t row = 0; row < size1; ++row, rows.next()) {
    const int64_t head = vector_rows ? elements_to_vector_alignment<scalar_t>(rows.row(kOut)) : -1;
    int64_t i = 0;
    if (head >= 0 && head < size0) {
      scalar_range(0, head);
      const V one_weight(rows.at(kWeight, 0));
      for (i = head; i + V::size() <= size0; i += V::size()) {
        const auto x = V::loadu(rows.row(kInput) + i * width);
        const auto w = strides[kWeight] == 0 ? one_weight : V::loadu(rows.row(kWeight) + i * width);
        stream_store(vector_opmath<scalar_t>(Value<Term>{}, x, w), rows.row(kOut) + i * width);
      }
    }
    scalar_range(i, size0);
  }
  stream_fence();
}

// An input that runs down the output's columns (x.t() against a row-major out), from its byte
// strides in a 2-D loop: unit stride from row to row (outer), any other along a row (inner) but
// 0: one value per row (x [N, 1] over [N, C]) is a broadcast the vector loops take as it is.
bool runs_across(int64_t inner, int64_t outer, int64_t width) {
  return outer == width && inner != width && inner != 0;
}

// The forward for iterators with such an input. Row by row, each of its elements would sit on
// another cache line and, past a few columns, another page (ATen's loop runs far below its
// contiguous speed there, docs/benchmarks.md). Here the output is done in tiles: an across input's tile is first
// copied into a buffer down its columns (reading memory in order), transposed, and the tile's
// rows then run the contiguous vector loop.
template <class Term, typename scalar_t>
void forward_tiled_rows(char** base, const int64_t* strides, int64_t size0, int64_t size1) {
  enum { kOut, kInput, kWeight, kOperands };
  constexpr int64_t width = sizeof(scalar_t);
  // A tile's buffer fills 16 KiB, half an L1 data cache: 64 x 64 floats, 128 x 64 halves; larger
  // tiles spill L1, smaller ones pay more per tile (docs/benchmarks.md).
  constexpr int64_t kTileCols = 64;  // columns
  constexpr int64_t kTileRows = int64_t{16} * 1024 / (kTileCols * width);
  using V = Vec<scalar_t>;
  const int64_t* outer = strides + kOperands;
  const bool across[kOperands] = {
      false, runs_across(strides[kInput], outer[kInput], width), runs_across(strides[kWeight], outer[kWeight], width)};
  scalar_t buffers[kOperands][kTileRows * kTileCols];  // used for the across inputs only
  for (int64_t r0 = 0; r0 < size1; r0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, size1 - r0);
    for (int64_t c0 = 0; c0 < size0; c0 += kTileCols) {
      const int64_t cols = std::min(kTileCols, size0 - c0);
      for (int operand : {kInput, kWeight}) {
        if (!across[operand]) {
          continue;
        }
        const char* tile = base[operand] + r0 * outer[operand] + c0 * strides[operand];
        for (int64_t c = 0; c < cols; ++c) {
          const auto* column = reinterpret_cast<const scalar_t*>(tile + c * strides[operand]);
          for (int64_t r = 0; r < rows; ++r) {
            buffers[operand][r * kTileCols + c] = column[r];
          }
        }
      }
      // Row r of the tile, element c, of an input: from its buffer, its row, or its one value.
      const auto element = [&](int operand, int64_t r, int64_t c) -> const scalar_t& {
        if (across[operand]) {
          return buffers[operand][r * kTileCols + c];
        }
        return *reinterpret_cast<const scalar_t*>(
            base[operand] + (r0 + r) * outer[operand] + (c0 + c) * strides[operand]);
      };
      // The same as a vector: an input along the rows with stride 0 holds one value per row.
      const auto vector = [&](int operand, int64_t r, int64_t c) {
        return !across[operand] && strides[operand] == 0 ? V(element(operand, r, c))
                                                         : V::loadu(&element(operand, r, c));
      };
      for (int64_t r = 0; r < rows; ++r) {
        auto* out = reinterpret_cast<scalar_t*>(base[kOut] + (r0 + r) * outer[kOut] + c0 * width);
        int64_t c = 0;
        for (; c + V::size() <= cols; c += V::size()) {
          const auto x = vector(kInput, r, c);
          const auto w = vector(kWeight, r, c);
          vector_opmath<scalar_t>(Value<Term>{}, x, w).store(out + c);
        }
        for (; c < cols; ++c) {
          out[c] = scalar_opmath<scalar_t>(Value<Term>{}, element(kInput, r, c), element(kWeight, r, c));
        }
      }
    }
  }
}

// Whether forward_tiled_rows applies: a 2-D iterator whose output rows are contiguous, with an
// input across them, and every other input contiguous along the rows or one value per row.
bool has_input_across(const at::TensorIteratorBase& iter) {
  if (iter.ndim() != 2 || iter.ntensors() != 3) {
    return false;
  }
  const int64_t width = iter.element_size(0);
  bool any_across = false;
  for (int operand = 0; operand < 3; ++operand) {
    const auto s = iter.strides(operand);
    if (iter.element_size(operand) != width) {
      return false;
    }
    const bool across = operand > 0 && runs_across(s[0], s[1], width);
    const bool along = s[0] == width || (operand > 0 && s[0] == 0);
    if (!across && !along) {
      return false;
    }
    any_across = any_across || across;
  }
  return any_across;
}

// cpu_kernel_vec reads the arity and argument types off the lambdas, so they are spelled out.
template <class Term>
void forward_loop(at::TensorIteratorBase& iter) {
  CUSTOM_OPS_DISPATCH_ITER_FLOATING(iter, "elementwise_cpu", [&] {
    if (has_input_across(iter)) {
      iter.for_each(forward_tiled_rows<Term, scalar_t>);
      iter.cast_outputs();
      return;
    }
    if (streams(iter)) {
      iter.for_each(forward_streaming_rows<Term, scalar_t>);
      iter.cast_outputs();  // an out= of another dtype got a common-dtype buffer (as cpu_kernel_vec)
      return;
    }
    at::native::cpu_kernel_vec(
        iter, [](scalar_t x, scalar_t w) { return scalar_opmath<scalar_t>(Value<Term>{}, x, w); },
        [](Vec<scalar_t> x, Vec<scalar_t> w) { return vector_opmath<scalar_t>(Value<Term>{}, x, w); });
  });
}

// grad times a partial of (x, w) (InputGradient or WeightGradient), over (grad, x, w).
template <class Gradient, typename scalar_t>
void gradient_loop(at::TensorIteratorBase& iter) {
  at::native::cpu_kernel_vec(
      iter, [](scalar_t grad, scalar_t x, scalar_t w) { return scalar_opmath<scalar_t>(Gradient{}, grad, x, w); },
      [](Vec<scalar_t> grad, Vec<scalar_t> x, Vec<scalar_t> w) {
        return vector_opmath<scalar_t>(Gradient{}, grad, x, w);
      });
}

template <class Term>
void backward_input_loop(at::TensorIteratorBase& iter) {
  CUSTOM_OPS_DISPATCH_ITER_FLOATING(
      iter, "elementwise_backward_input_cpu", [&] { gradient_loop<InputGradient<Term>, scalar_t>(iter); });
}

template <class Term>
void backward_weight_loop(at::TensorIteratorBase& iter) {
  CUSTOM_OPS_DISPATCH_ITER_FLOATING(iter, "elementwise_backward_weight_cpu", [&] {
    if constexpr (Term::dw_reads_weight) {
      gradient_loop<WeightGradient<Term>, scalar_t>(iter);
    } else {  // over (grad, x)
      at::native::cpu_kernel_vec(
          iter, [](scalar_t grad, scalar_t x) { return scalar_opmath<scalar_t>(WeightGradient<Term>{}, grad, x); },
          [](Vec<scalar_t> grad, Vec<scalar_t> x) { return vector_opmath<scalar_t>(WeightGradient<Term>{}, grad, x); });
    }
  });
}

// Both gradients from one read of grad, input and weight. ATen has no vectorized loop with two
// outputs (cpu_kernel_multiple_outputs is scalar, far off the bandwidth in half precision),
// so this is the 2-D TensorIterator loop with a Vectorized path for contiguous rows; with
// `kStream`, rows whose two outputs reach vector alignment together end in streaming stores.
template <class Term, typename scalar_t, bool kStream>
void backward_fused_rows(char** base, const int64_t* strides, int64_t size0, int64_t size1) {
  enum { kGradInput, kGradWeight, kGrad, kInput, kWeight, kOperands };
  constexpr int64_t width = sizeof(scalar_t);
  using V = Vec<scalar_t>;
  const bool contiguous = std::all_of(strides, strides + kOperands, [](int64_t s) { return s == width; });
  Rows<scalar_t, kOperands> rows(base, strides);
  const auto scalar_range = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const scalar_t grad = rows.at(kGrad, i), x = rows.at(kInput, i), w = rows.at(kWeight, i);
      rows.at(kGradInput, i) = scalar_opmath<scalar_t>(InputGradient<Term>{}, grad, x, w);
      rows.at(kGradWeight, i) = scalar_opmath<scalar_t>(WeightGradient<Term>{}, grad, x, w);
    }
  };
  const auto vector_range = [&](int64_t begin, int64_t end, auto store) {
    int64_t i = begin;
    for (; i + V::size() <= end; i += V::size()) {
      const auto grad = V::loadu(rows.row(kGrad) + i * width);
      const auto x = V::loadu(rows.row(kInput) + i * width);
      const auto w = V::loadu(rows.row(kWeight) + i * width);
      store(vector_opmath<scalar_t>(InputGradient<Term>{}, grad, x, w), rows.row(kGradInput) + i * width);
      store(vector_opmath<scalar_t>(WeightGradient<Term>{}, grad, x, w), rows.row(kGradWeight) + i * width);
    }
    return i;
  };
  for (int64_t row = 0; row < size1; ++row, rows.next()) {
    int64_t i = 0;
    const int64_t head = kStream && contiguous ? elements_to_vector_alignment<scalar_t>(rows.row(kGradInput)) : -1;
    if (head >= 0 && head < size0 && elements_to_vector_alignment<scalar_t>(rows.row(kGradWeight)) == head) {
      scalar_range(0, head);
      i = vector_range(head, size0, [](const V& value, char* out) { stream_store(value, out); });
    } else if (contiguous) {
      i = vector_range(0, size0, [](const V& value, char* out) { value.store(out); });
    }
    scalar_range(i, size0);
  }
  if constexpr (kStream) {
    stream_fence();
  }
}

template <class Term>
void backward_fused_loop(at::TensorIteratorBase& iter) {
  CUSTOM_OPS_DISPATCH_ITER_FLOATING(iter, "elementwise_backward_cpu", [&] {
    if (streams(iter)) {
      iter.for_each(backward_fused_rows<Term, scalar_t, true>);
    } else {
      iter.for_each(backward_fused_rows<Term, scalar_t, false>);
    }
    iter.cast_outputs();
  });
}

}  // namespace

template <class Term>
const detail::ElementwiseLoops& elementwise_loops() {
  static constexpr detail::ElementwiseLoops loops{
      .forward = forward_loop<Term>,
      .backward_fused = backward_fused_loop<Term>,
      .backward_input = backward_input_loop<Term>,
      .backward_weight = backward_weight_loop<Term>,
      .backward_per_channel = backward_per_channel<Term>,
  };
  return loops;
}

#define CUSTOM_OPS_INSTANTIATE(Term_, backward_) \
  template const detail::ElementwiseLoops& elementwise_loops<terms::Term_>();
CUSTOM_OPS_TERMS(CUSTOM_OPS_INSTANTIATE)
#undef CUSTOM_OPS_INSTANTIATE

}  // namespace custom::cpu::CPU_CAPABILITY
