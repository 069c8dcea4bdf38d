// SPDX-License-Identifier: BSD-3-Clause
// CPU loops of the reductions: out[o, i] = sum over r of Term::value(x[o, r, i], w[o, r, i]), on
// the [outer, reduce, inner] views the frontend built (ops/reduction_frontend.h), or with `total`
// the sum of them all, for every term. `out` is of the accumulation dtype or the operands': the
// last write rounds to it.
//
// Like elementwise_kernel.cpp, this file is compiled once per instruction set (DEFAULT, AVX2 and,
// as torch.sum is, AVX512; CMake sets CPU_CAPABILITY) and cpu_loops.h picks the one ATen runs.
//
// Order and accuracy. The reduce dimension is cut into chunks whose bounds depend on the shape
// alone. Each chunk is summed into a partial, in series per accumulator lane (at most
// kSerialTerms terms in series), and the partials of one output are then added in a fixed
// pairwise tree. A total then adds the [outer, inner] sums in one more pairwise tree. The threads
// only decide who computes which partial, never the order of the additions, so every thread count
// gives the same bits; and the error stays that of a pairwise sum, like torch.sum's cascade.
//
// Layouts, by the strides of the views (one path per call, chosen from the strides):
// - Rows: the reduce dimension is contiguous in the input (the weight's is too, or broadcast):
//   full reductions and last-dimension sums. Vectorized along the reduce dimension. In a total
//   whose weight is one row for all of x's rows (w [C] over x [R, C]), several rows to one
//   accumulation; for a term that is the weight times a function of the input (its
//   input_factor), the weight factored out of each column's sum (shared_weight_total).
// - Columns: the inner dimension is contiguous (the weight's is too, or broadcast): first-
//   dimension sums, and x.t() summed over its last dimension (see reduce_typed). Vectorized
//   across inner, a chunk's rows added one after the other into sums that stay in the L1 cache.
//   A weight broadcast over the rows (w of shape [C] over x of [R, C]) is one row, read from cache.
// - Anything else: contiguous copies of both views, which take one of the two.
//
// Threads: at::parallel_for is inline and parallel only where this file is compiled with OpenMP
// (-fopenmp, as ATen is: cmake/CustomOpsCpuKernels.cmake adds it); any thread count, same bits.
#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <memory>
#include <type_traits>
#include <vector>

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE, the work ATen gives one task at least
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/Unroll.h>
#include <c10/util/irange.h>

#include <custom_ops/operators.h>

#include "kernels/cpu/cpu_loops.h"
#include "kernels/cpu/reduction_pairs.h"
#include "kernels/cpu/vectorized_term_functions.h"
#include "ops/floating_types.h"
#include "ops/reduction_frontend.h"

namespace custom::cpu::CPU_CAPABILITY {
namespace {

// The accuracy bound: no accumulator adds more than this many terms in series before its sum
// joins the pairwise tree. Serial error grows with it, the partials' memory shrinks with it.
constexpr int64_t kSerialTerms = 128;

// Independent vector accumulators of the vectorized paths: enough to hide the add latency.
constexpr int kAccumulators = 4;

// Terms per parallel work item (at least): amortizes a task's start.
constexpr int64_t kItemTerms = 16384;

// Columns summed together by the columns path: long sequential reads of each row, and sums that
// stay in the L1 cache.
constexpr int64_t kColumnBlock = 1024;

template <typename scalar_t>
using Vec = at::vec::Vectorized<scalar_t>;
template <typename scalar_t>
using acc_t = at::opmath_type<scalar_t>;
template <typename scalar_t>
using AccVec = Vec<acc_t<scalar_t>>;

// A Vec<scalar_t> holds kParts accumulation vectors: two float vectors for float16/bfloat16.
template <typename scalar_t>
constexpr int64_t kParts = Vec<scalar_t>::size() / AccVec<scalar_t>::size();
template <typename scalar_t>
using AccParts = std::array<AccVec<scalar_t>, kParts<scalar_t>>;

// One term, from operands in their storage type, in the accumulation type.
template <class Term, typename scalar_t>
C10_ALWAYS_INLINE acc_t<scalar_t> term(scalar_t x, scalar_t w) {
  using acc = acc_t<scalar_t>;
  return Term::value(static_cast<acc>(x), static_cast<acc>(w));
}

// A term that is the weight times a function of the input alone: value(x, w) == w *
// input_factor(x) in real arithmetic, so a sum over a shared weight row may add input_factor(x)
// down each column first and weight the column's sum once.
template <class Term>
concept FactorsWeight = requires(float x) {
  { Term::input_factor(x) } -> std::same_as<float>;
};

template <typename scalar_t>
AccParts<scalar_t> to_acc(const Vec<scalar_t>& v) {
  if constexpr (kParts<scalar_t> == 1) {
    return {v};
  } else {
    const auto halves = at::vec::convert_to_float<scalar_t>(v);
    return {std::get<0>(halves), std::get<1>(halves)};
  }
}

// The Vec<scalar_t> at p as accumulation vectors in some lane order: for bfloat16 the even and
// the odd elements, each widened by one shift or mask (a bfloat16 is a float's upper half), half
// the instructions of to_acc's in-order widening. For sums whose lanes are added together, with
// x and w loaded alike (their lanes then pair up).
template <typename scalar_t>
AccParts<scalar_t> load_any_order(const scalar_t* p) {
  if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
    using Bits = Vec<int32_t>;
    static_assert(Vec<scalar_t>::size() * sizeof(scalar_t) == Bits::size() * sizeof(int32_t));
    const Bits bits = Bits::loadu(p);
    return {at::vec::cast<float>(bits << Bits(16)), at::vec::cast<float>(bits & Bits(-65536))};
  } else if constexpr (std::is_same_v<scalar_t, at::Half>) {
    // One half-width load per float vector (vcvtph2ps from memory), no extract of a full one's half.
    AccParts<scalar_t> parts;
    c10::ForcedUnroll<kParts<scalar_t>>{}(
        [&](auto part) { at::vec::load_to_float(p + part * AccVec<scalar_t>::size(), parts[part]); });
    return parts;
  } else {
    return to_acc(Vec<scalar_t>::loadu(p));
  }
}

template <typename scalar_t>
AccParts<scalar_t> broadcast(scalar_t value) {
  AccParts<scalar_t> parts;
  parts.fill(AccVec<scalar_t>(static_cast<acc_t<scalar_t>>(value)));
  return parts;
}

// kLoads Vec<scalar_t> of terms summed into kLoads * kParts accumulators. Unrolled at compile
// time: with constant indices the accumulators stay in registers (a loop over them spills them).
template <typename scalar_t, int kLoads>
using Accumulators = std::array<AccVec<scalar_t>, kLoads * kParts<scalar_t>>;

// acc += Term::value(x, w) in the accumulation type. load_x(l) and load_w(l) give the l-th
// Vec<scalar_t> of the input and of the weight as AccParts.
template <class Term, typename scalar_t, int kLoads, typename LoadX, typename LoadW>
C10_ALWAYS_INLINE void accumulate(Accumulators<scalar_t, kLoads>& acc, const LoadX& load_x, const LoadW& load_w) {
  c10::ForcedUnroll<kLoads>{}([&](auto load) {
    const AccParts<scalar_t> x = load_x(load);
    const AccParts<scalar_t> w = load_w(load);
    c10::ForcedUnroll<kParts<scalar_t>>{}(
        [&](auto part) { acc[load * kParts<scalar_t> + part] += Term::value(x[part], w[part]); });
  });
}

// The sum of every lane of the accumulators: a fixed tree over them, then over their lanes.
template <typename scalar_t, int kLoads>
acc_t<scalar_t> sum_lanes(const Accumulators<scalar_t, kLoads>& acc) {
  static_assert(kAccumulators == 4, "the tree below adds four accumulators");
  const auto lanes = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  return at::vec::vec_reduce_all([](const auto& a, const auto& b) { return a + b; }, lanes);
}

// Sums `rows` rows of n terms whose input is contiguous (rows * n <= kSerialTerms * (lanes of the
// accumulators)), one row after the other into the same accumulators; the weight is contiguous
// too (kWeightContiguous) or is w[0] throughout, and steps by w_row_stride from row to row.
// Several rows a call: those of a total (summed together anyway) that share one weight row, where
// a row's own lanes' sum and call would cost as much as its terms (w [1024] over x [R, 1024]).
template <class Term, typename scalar_t, bool kWeightContiguous>
C10_NOINLINE acc_t<scalar_t> row_sum(
    const scalar_t* x, int64_t x_row_stride, const scalar_t* w, int64_t w_row_stride, int64_t n, int64_t rows) {
  using acc = acc_t<scalar_t>;
  using V = Vec<scalar_t>;
  constexpr int kLoads = kAccumulators / kParts<scalar_t>;
  constexpr int64_t kStep = kLoads * V::size();
  const int64_t vector_end = n / kStep * kStep;
  acc sum = 0;
  if (vector_end > 0) {  // short rows (many of them, as a rule) skip the vectors' setup and lanes' sum
    Accumulators<scalar_t, kLoads> acc;
    acc.fill(AccVec<scalar_t>(0));
    for (int64_t row = 0; row < rows; ++row) {
      const scalar_t* const x_row = x + row * x_row_stride;
      const scalar_t* const w_row = w + row * w_row_stride;
      const AccParts<scalar_t> w_broadcast = broadcast(static_cast<scalar_t>(*w_row));
      for (int64_t i = 0; i < vector_end; i += kStep) {
        accumulate<Term, scalar_t, kLoads>(
            acc, [&](int load) { return load_any_order(x_row + i + load * V::size()); },
            [&](int load) { return kWeightContiguous ? load_any_order(w_row + i + load * V::size()) : w_broadcast; });
      }
    }
    sum = sum_lanes<scalar_t, kLoads>(acc);
  }
  // Fewer than kStep terms a row: not worth a masked vector.
  acc tail = 0;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t i = vector_end; i < n; ++i) {
      tail += term<Term>(x[row * x_row_stride + i], w[row * w_row_stride + (kWeightContiguous ? i : 0)]);
    }
  }
  return sum + tail;
}

// The total of `rows` rows of `length` terms (input contiguous along them, rows * length <= kSerialTerms
// * (lanes of the accumulators)) weighted by one shared row w, factored: per column the input
// factors down the rows first, then each column's sum times its weight, w[j] * sum_r
// input_factor(x[r, j]). For w * x**2, one load and one FMA a term, as torch.sum's load and add,
// where the term costs a weight load and a multiply more. Exact in real arithmetic; the caller
// redoes a non-finite result term by term (the column sums may overflow where the weighted terms
// would not).
template <FactorsWeight Term, typename scalar_t>
C10_NOINLINE acc_t<scalar_t> shared_row_sum(
    const scalar_t* x, int64_t x_row_stride, const scalar_t* w, int64_t length, int64_t rows) {
  using acc = acc_t<scalar_t>;
  using V = Vec<scalar_t>;
  constexpr int kLoads = kAccumulators / kParts<scalar_t>;
  constexpr int64_t kStep = kLoads * V::size();
  const int64_t vector_end = length / kStep * kStep;
  // A column's sum adds `rows` terms in series: more than kSerialTerms only in rows without a step.
  TORCH_INTERNAL_ASSERT_DEBUG_ONLY(vector_end == 0 || rows <= kSerialTerms);
  acc sum = 0;
  if (vector_end > 0) {
    Accumulators<scalar_t, kLoads> total;
    total.fill(AccVec<scalar_t>(0));
    for (int64_t j = 0; j < vector_end; j += kStep) {
      Accumulators<scalar_t, kLoads> factors;
      factors.fill(AccVec<scalar_t>(0));
      for (int64_t row = 0; row < rows; ++row) {
        const scalar_t* const x_row = x + row * x_row_stride + j;
        c10::ForcedUnroll<kLoads>{}([&](auto load) {
          const AccParts<scalar_t> v = load_any_order(x_row + load * V::size());
          c10::ForcedUnroll<kParts<scalar_t>>{}(
              [&](auto part) { factors[load * kParts<scalar_t> + part] += Term::input_factor(v[part]); });
        });
      }
      c10::ForcedUnroll<kLoads>{}([&](auto load) {
        const AccParts<scalar_t> weights = load_any_order(w + j + load * V::size());
        c10::ForcedUnroll<kParts<scalar_t>>{}([&](auto part) {
          const int k = load * kParts<scalar_t> + part;
          total[k] = at::vec::fmadd(weights[part], factors[k], total[k]);
        });
      });
    }
    sum = sum_lanes<scalar_t, kLoads>(total);
  }
  // Rows shorter than a step come many to a call: their columns' factors are added in blocks of
  // kSerialTerms rows.
  acc tail = 0;
  for (int64_t j = vector_end; j < length; ++j) {
    for (int64_t r0 = 0; r0 < rows; r0 += kSerialTerms) {
      acc factors = 0;
      for (int64_t row = r0; row < std::min(rows, r0 + kSerialTerms); ++row) {
        factors += Term::input_factor(static_cast<acc>(x[row * x_row_stride + j]));
      }
      tail += static_cast<acc>(w[j]) * factors;
    }
  }
  return sum + tail;
}

// Rows the columns path adds together before their sum joins dst: one load and store of dst per
// kColumnRows rows' terms instead of per row.
constexpr int kColumnRows = 4;

// Sums `rows` rows (at most kSerialTerms) of `width` columns into dst[0, width): the input's
// columns are contiguous, the weight's too (kWeightContiguous) or one value per row. kColumnRows
// rows at a time (then row by row), with the sums in dst: each row is one sequential read, which
// the hardware prefetches (a tile of columns held in registers down all the rows would jump a
// row's stride, and often a page, per load). The rows of a group are added pairwise, then to dst.
template <class Term, typename scalar_t, bool kWeightContiguous>
C10_NOINLINE void column_sums(
    const scalar_t* x,
    int64_t x_row_stride,
    const scalar_t* w,
    int64_t w_row_stride,
    int64_t rows,
    int64_t width,
    acc_t<scalar_t>* dst) {
  using V = Vec<scalar_t>;
  using A = AccVec<scalar_t>;
  using acc = acc_t<scalar_t>;
  std::fill_n(dst, width, acc(0));
  const auto terms = [&](const scalar_t* x_row, const scalar_t* w_row, const AccParts<scalar_t>& w_broadcast,
                         int64_t i) {
    AccParts<scalar_t> t = to_acc(V::loadu(x_row + i));
    const AccParts<scalar_t> w_parts = kWeightContiguous ? to_acc(V::loadu(w_row + i)) : w_broadcast;
    c10::ForcedUnroll<kParts<scalar_t>>{}([&](auto part) { t[part] = Term::value(t[part], w_parts[part]); });
    return t;
  };
  int64_t r = 0;
  for (; r + kColumnRows <= rows; r += kColumnRows) {
    static_assert(kColumnRows == 4, "the tree below adds four rows");
    std::array<const scalar_t*, kColumnRows> xr{};
    std::array<const scalar_t*, kColumnRows> wr{};
    std::array<AccParts<scalar_t>, kColumnRows> wb{};
    for (int k = 0; k < kColumnRows; ++k) {
      xr[k] = x + (r + k) * x_row_stride;
      wr[k] = w + (r + k) * w_row_stride;
      wb[k] = broadcast(*wr[k]);
    }
    int64_t i = 0;
    for (; i + V::size() <= width; i += V::size()) {
      const auto t0 = terms(xr[0], wr[0], wb[0], i);
      const auto t1 = terms(xr[1], wr[1], wb[1], i);
      const auto t2 = terms(xr[2], wr[2], wb[2], i);
      const auto t3 = terms(xr[3], wr[3], wb[3], i);
      c10::ForcedUnroll<kParts<scalar_t>>{}([&](auto part) {
        acc* const sum = dst + i + part * A::size();
        (A::loadu(sum) + ((t0[part] + t1[part]) + (t2[part] + t3[part]))).store(sum);
      });
    }
    for (; i < width; ++i) {
      const auto at = [&](int k) { return term<Term>(xr[k][i], wr[k][kWeightContiguous ? i : 0]); };
      dst[i] += (at(0) + at(1)) + (at(2) + at(3));
    }
  }
  for (; r < rows; ++r) {
    const scalar_t* const x_row = x + r * x_row_stride;
    const scalar_t* const w_row = w + r * w_row_stride;
    const AccParts<scalar_t> w_broadcast = broadcast(*w_row);
    int64_t i = 0;
    for (; i + V::size() <= width; i += V::size()) {
      const auto t = terms(x_row, w_row, w_broadcast, i);
      c10::ForcedUnroll<kParts<scalar_t>>{}([&](auto part) {
        acc* const sum = dst + i + part * A::size();
        (A::loadu(sum) + t[part]).store(sum);
      });
    }
    for (; i < width; ++i) {
      dst[i] += term<Term>(x_row[i], w_row[kWeightContiguous ? i : 0]);
    }
  }
}

// dst[j] += src[j] for j < n, vectorized where long enough to pay.
template <typename acc_t>
void add_into(acc_t* dst, const acc_t* src, int64_t n) {
  if (n < Vec<acc_t>::size()) {
    for (const auto j : c10::irange(n)) {
      dst[j] += src[j];
    }
  } else {
    at::vec::map2([](const Vec<acc_t>& a, const Vec<acc_t>& b) { return a + b; }, dst, dst, src, n);
  }
}

// dst[j] = src[j], rounded once where out_t is float16/bfloat16.
template <typename out_t, typename acc_t>
void store(out_t* dst, const acc_t* src, int64_t n) {
  if constexpr (std::is_same_v<out_t, acc_t>) {
    std::copy_n(src, n, dst);
  } else {
    at::vec::convert(src, dst, n);
  }
}

// The schedule shared by every path. The reduce dimension is cut into chunks of chunk_rows rows,
// the inner one into blocks of at least min_block_cols columns, both fixed by the shape;
// sum_chunk(o, r0, r1, i0, i1, dst) writes the sums over rows [r0, r1) of columns [i0, i1) to
// dst[0, i1 - i0). The work items (outer x chunks x blocks) run on all threads, each
// into its own partials, which are then added in a fixed pairwise tree over the chunks; the
// roots go to out [outer, inner].
template <typename acc_t, typename out_t, typename SumChunk>
void reduce_in_chunks(
    int64_t outer,
    int64_t reduce,
    int64_t inner,
    int64_t chunk_rows,
    int64_t min_block_cols,
    out_t* out,
    const SumChunk& sum_chunk) {
  const int64_t rows_per_item = std::min(reduce, chunk_rows);
  const int64_t chunks = at::divup(reduce, chunk_rows);
  const int64_t block_cols = std::min(std::max(min_block_cols, at::divup(kItemTerms, rows_per_item)), inner);
  const int64_t blocks = at::divup(inner, block_cols);
  const int64_t item_terms = rows_per_item * block_cols;
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / item_terms);

  // One chunk: no partials, the items write the output (through a per-task buffer where out is
  // narrower). Else partials [outer, chunks, inner].
  // Host buffers here and below, not at::empty: a dispatcher call per buffer shows in a small sum.
  std::unique_ptr<acc_t[]> partials;
  acc_t* sums = nullptr;
  if (chunks > 1) {
    partials = std::unique_ptr<acc_t[]>(new acc_t[outer * chunks * inner]);
    sums = partials.get();
  } else if constexpr (std::is_same_v<acc_t, out_t>) {
    sums = out;
  }

  at::parallel_for(0, outer * chunks * blocks, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> staged(sums == nullptr ? block_cols : 0);
    // Item = (o, chunk, block), block fastest; counted up rather than divided out per item,
    // which would cost more than a short row's sum.
    int64_t block = begin % blocks;
    int64_t chunk = begin / blocks % chunks;
    int64_t o = begin / blocks / chunks;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r0 = chunk * chunk_rows;
      const int64_t i0 = block * block_cols;
      const int64_t i1 = std::min(i0 + block_cols, inner);
      const int64_t r1 = std::min(r0 + chunk_rows, reduce);
      if (sums == nullptr) {
        sum_chunk(o, r0, r1, i0, i1, staged.data());
        store(out + o * inner + i0, staged.data(), i1 - i0);
      } else {
        sum_chunk(o, r0, r1, i0, i1, sums + (o * chunks + chunk) * inner + i0);
      }
      if (++block == blocks) {
        block = 0;
        if (++chunk == chunks) {
          chunk = 0;
          ++o;
        }
      }
    }
  });
  if (chunks == 1) {
    return;
  }

  // Pairwise over the chunks: sizes 1, 2, 4, ... merged in place, then the root stored.
  at::parallel_for(0, outer * blocks, std::max<int64_t>(1, grain / chunks), [&](int64_t begin, int64_t end) {
    for (const auto item : c10::irange(begin, end)) {
      const int64_t o = item / blocks;
      const int64_t i0 = item % blocks * block_cols;
      const int64_t width = std::min(block_cols, inner - i0);
      acc_t* const column = sums + o * chunks * inner + i0;
      for (int64_t step = 1; step < chunks; step *= 2) {
        for (int64_t c = 0; c + step < chunks; c += 2 * step) {
          add_into(column + c * inner, column + (c + step) * inner, width);
        }
      }
      store(out + o * inner + i0, column, width);
    }
  });
}

// The sum of v[0, n), pairwise, overwriting v: each level adds v[j + half] into v[j] (an odd last
// value into v[0]). The tree follows n alone and a level's adds are independent, so the threads
// that share them do not change the bits.
template <typename acc_t>
acc_t tree_sum(acc_t* v, int64_t n) {
  while (n > 1) {
    const int64_t half = n / 2;
    at::parallel_for(0, half, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
      add_into(v + begin, v + half + begin, end - begin);
    });
    if (n % 2 == 1) {
      v[0] += v[2 * half];
    }
    n = half;
  }
  return v[0];
}

// Strides, in elements, of an [outer, reduce, inner] view.
struct Strides {
  int64_t outer, reduce, inner;
  explicit Strides(const at::Tensor& t) : outer(t.stride(0)), reduce(t.stride(1)), inner(t.stride(2)) {}
  int64_t at(int64_t o, int64_t r, int64_t i) const { return o * outer + r * reduce + i * inner; }
};

bool contiguous_or_broadcast(int64_t stride) {
  return stride == 1 || stride == 0;
}

// out[o, i] = the sum over r, into out [outer, inner] (of out_t: acc or scalar_t), by the layout's path.
template <class Term, typename scalar_t, typename out_t>
void reduce_layout(at::Tensor input, at::Tensor weight, out_t* out) {
  using acc = acc_t<scalar_t>;
  // With one inner column, out [outer, 1] is also [1, outer]: an outer dimension that is
  // contiguous (x.t() summed over its last dimension) then becomes a vectorizable inner one.
  if (input.size(2) == 1 && input.stride(1) != 1 && input.stride(0) == 1) {
    input = input.permute({2, 1, 0});
    weight = weight.permute({2, 1, 0});
  }
  const int64_t outer = input.size(0);
  const int64_t reduce = input.size(1);
  const int64_t inner = input.size(2);
  const Strides xs(input);
  const Strides ws(weight);
  const scalar_t* const x = input.const_data_ptr<scalar_t>();
  const scalar_t* const w = weight.const_data_ptr<scalar_t>();

  if (inner > 1 && xs.inner == 1 && contiguous_or_broadcast(ws.inner)) {
    const auto sum_columns = [&](auto weight_contiguous) {
      constexpr bool kWeightContiguous = decltype(weight_contiguous)::value;
      const auto sum_chunk = [&](int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t i1, acc* dst) {
        column_sums<Term, scalar_t, kWeightContiguous>(
            x + xs.at(o, r0, i0), xs.reduce, w + ws.at(o, r0, i0), ws.reduce, r1 - r0, i1 - i0, dst);
      };
      reduce_in_chunks<acc>(outer, reduce, inner, kSerialTerms, kColumnBlock, out, sum_chunk);
    };
    ws.inner == 1 ? sum_columns(std::true_type{}) : sum_columns(std::false_type{});
  } else if (xs.reduce == 1 && contiguous_or_broadcast(ws.reduce)) {
    // A chunk fills every lane of the accumulators kSerialTerms times.
    constexpr int64_t kChunk = kSerialTerms * kAccumulators * AccVec<scalar_t>::size();
    const auto sum_rows = [&](auto weight_contiguous) {
      constexpr bool kWeightContiguous = decltype(weight_contiguous)::value;
      const auto sum_chunk = [&](int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t i1, acc* dst) {
        for (int64_t i = i0; i < i1; ++i) {
          dst[i - i0] =
              row_sum<Term, scalar_t, kWeightContiguous>(x + xs.at(o, r0, i), 0, w + ws.at(o, r0, i), 0, r1 - r0, 1);
        }
      };
      reduce_in_chunks<acc>(outer, reduce, inner, kChunk, 1, out, sum_chunk);
    };
    ws.reduce == 1 ? sum_rows(std::true_type{}) : sum_rows(std::false_type{});
  } else {
    // No vectorized path for these strides: contiguous copies take one (a copy costs a few scalar
    // terms' time per element).
    reduce_layout<Term, scalar_t>(input.contiguous(), weight.contiguous(), out);
  }
}

// A total of x [R, C] (rows contiguous along C) weighted by one row w [C] for all of them: rows
// taken whole, as many to one accumulation as the serial bound allows, so that the reads run
// through x in order; rows longer than that chunked along C. Then one pairwise tree. Each group's
// weight factored out of its columns (shared_row_sum); where that overflows, term by term (row_sum).
template <FactorsWeight Term, typename scalar_t>
acc_t<scalar_t> shared_weight_total(const at::Tensor& input, const at::Tensor& weight) {
  using acc = acc_t<scalar_t>;
  // The terms of one accumulation: every accumulator lane adds kSerialTerms of them.
  constexpr int64_t kChunk = kSerialTerms * kAccumulators * AccVec<scalar_t>::size();
  const int64_t rows = input.size(0);
  const int64_t length = input.size(1);
  const int64_t group_rows = std::max<int64_t>(1, kChunk / length);
  const int64_t groups = at::divup(rows, group_rows);
  const scalar_t* const x = input.const_data_ptr<scalar_t>();
  const scalar_t* const w = weight.const_data_ptr<scalar_t>();
  const int64_t x_row_stride = input.stride(0);
  const auto sums = std::unique_ptr<acc[]>(new acc[groups]);
  acc* const values = sums.get();
  const auto total = [&](auto factored) {
    const auto sum_chunk = [&](int64_t group, int64_t r0, int64_t r1, int64_t /*i0*/, int64_t /*i1*/, acc* dst) {
      const int64_t first = group * group_rows;
      const scalar_t* const x_group = x + first * x_row_stride + r0;
      const int64_t group_size = std::min(group_rows, rows - first);
      *dst = decltype(factored)::value
          ? shared_row_sum<Term, scalar_t>(x_group, x_row_stride, w + r0, r1 - r0, group_size)
          : row_sum<Term, scalar_t, true>(x_group, x_row_stride, w + r0, 0, r1 - r0, group_size);
    };
    reduce_in_chunks<acc>(groups, length, 1, kChunk, 1, values, sum_chunk);
    return tree_sum(values, groups);
  };
  const acc factored = total(std::true_type{});
  // Factors summed before their weights can overflow where the weighted terms would not (factors
  // near the type's limit, small weights; or a zero weight times an overflowed column: NaN).
  return std::isfinite(factored) ? factored : total(std::false_type{});
}

template <class Term, typename scalar_t, typename out_t>
void reduce_typed(const detail::Reduction& args) {
  using acc = acc_t<scalar_t>;
  out_t* const out = args.out.mutable_data_ptr<out_t>();
  if (!args.total) {
    reduce_layout<Term, scalar_t>(args.input, args.weight, out);
    return;
  }
  if constexpr (FactorsWeight<Term>) {
    const auto& x = args.input;
    const auto& w = args.weight;
    if (x.size(2) == 1 && x.size(0) > 1 && x.stride(1) == 1 && w.stride(1) == 1 && w.stride(0) == 0) {
      *out = static_cast<out_t>(shared_weight_total<Term, scalar_t>(x, w));
      return;
    }
  }
  // The [outer, inner] sums, then one pairwise tree over them all.
  const int64_t n = args.input.size(0) * args.input.size(2);
  const auto sums = std::unique_ptr<acc[]>(new acc[n]);
  reduce_layout<Term, scalar_t>(args.input, args.weight, sums.get());
  *out = static_cast<out_t>(tree_sum(sums.get(), n));
}

template <class Term>
void reduce(const detail::Reduction& args) {
  TORCH_INTERNAL_ASSERT(args.input.dim() == 3 && args.weight.sizes() == args.input.sizes());
  TORCH_INTERNAL_ASSERT(args.input.scalar_type() == args.weight.scalar_type() && args.out.is_contiguous());
  TORCH_INTERNAL_ASSERT(args.out.numel() == (args.total ? 1 : args.input.size(0) * args.input.size(2)));
  CUSTOM_OPS_DISPATCH_FLOATING_TYPES(args.input.scalar_type(), "reduction_cpu", [&] {
    using acc = acc_t<scalar_t>;
    if (args.out.scalar_type() == c10::CppTypeToScalarType<acc>::value) {
      reduce_typed<Term, scalar_t, acc>(args);
    } else {
      TORCH_INTERNAL_ASSERT(args.out.scalar_type() == args.input.scalar_type());
      reduce_typed<Term, scalar_t, scalar_t>(args);
    }
  });
}

}  // namespace

template <class Term>
const detail::ReductionLoops& reduction_loops() {
  static constexpr detail::ReductionLoops loops{.reduce = reduce<Term>, .reduce_pairs = reduce_pairs<Term>};
  return loops;
}

#define CUSTOM_OPS_INSTANTIATE(Term_, backward_) template const detail::ReductionLoops& reduction_loops<terms::Term_>();
CUSTOM_OPS_TERMS(CUSTOM_OPS_INSTANTIATE)
#undef CUSTOM_OPS_INSTANTIATE

}  // namespace custom::cpu::CPU_CAPABILITY
