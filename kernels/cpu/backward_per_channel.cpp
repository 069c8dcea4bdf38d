// SPDX-License-Identifier: BSD-3-Clause
// CPU loop of the per-channel backward (ops/backward_per_channel_plan.h), for every term: grad and
// input a contiguous [outer, channels, inner] block, the weight [channels]. One pass writes
// grad_input = dx(x, w) g and sums grad_weight's terms dw(x, w) g into partial sums; a second,
// small pass adds the partials of each channel. Compiled per instruction set like
// elementwise_kernel.cpp.
//
// Determinism: the partials belong to work units whose size depends on the shape alone (a block
// of rows, or a chunk of a run), never on the thread count, and every sum runs in a fixed order,
// so any number of threads gives the same bits. Accuracy: the terms are computed and summed in
// float32 (float64 for double) within a unit of at most a few hundred terms per lane, and the
// units are added in float64, so the result is at least as close to the exact sum as at::sum_to
// over a full-size temporary of the input's dtype.
#include <algorithm>
#include <array>
#include <vector>

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "kernels/cpu/backward_per_channel.h"
#include "kernels/cpu/vectorized_term_functions.h"
#include "ops/floating_types.h"
#include "ops/operator_rows.h"

namespace custom::cpu::CPU_CAPABILITY {
namespace {

template <typename scalar_t>
using Vec = at::vec::Vectorized<scalar_t>;
template <typename scalar_t>
using acc_t = at::opmath_type<scalar_t>;  // float for Half/BFloat16/float, double for double
template <typename scalar_t>
using AccVec = Vec<acc_t<scalar_t>>;
// A Vec<scalar_t> widens to this many AccVecs: two for half precision, else one.
template <typename scalar_t>
constexpr int kParts = std::is_same_v<acc_t<scalar_t>, scalar_t> ? 1 : 2;
template <typename scalar_t>
using Wide = std::array<AccVec<scalar_t>, kParts<scalar_t>>;

// Work units, fixed by the shape: rows per block for a weight along the rows (inner == 1), and
// elements per chunk of a run otherwise. Each sums at most 32 terms per accumulator lane (and
// the 8-16 lanes of a chunk) before the float64 combine: as accurate as ATen's cascade sum,
// with partials of 1/32 (rows) or 1/256 (runs) of the elements, in float32.
constexpr int64_t kRowsPerBlock = 32;
constexpr int64_t kRunChunk = 256;
// Elements per at::parallel_for task, at least: enough to amortize a task's start.
constexpr int64_t kGrainElements = 32768;

template <typename scalar_t>
Wide<scalar_t> widen(const Vec<scalar_t>& v) {
  if constexpr (kParts<scalar_t> == 1) {
    return {v};
  } else {
    const auto [low, high] = at::vec::convert_to_float<scalar_t>(v);
    return {low, high};
  }
}

template <typename scalar_t>
Vec<scalar_t> narrow(const Wide<scalar_t>& parts) {
  if constexpr (kParts<scalar_t> == 1) {
    return parts[0];
  } else {
    return at::vec::convert_from_float<scalar_t>(parts[0], parts[1]);
  }
}

template <typename scalar_t>
using Pointers = detail::PerChannelPointers<scalar_t>;
using detail::per_channel_reads_weight;

// The body of both loops, for T the op-math type or an AccVec: writes grad_input's value to
// `grad_input` (when kInput) and returns grad_weight's term (when kWeight, else 0).
template <class Term, bool kInput, bool kWeight, typename T>
T gradients(T x, T g, T w, T& grad_input) {
  if constexpr (kInput) {
    grad_input = Term::dx(x, w) * g;
  }
  if constexpr (kWeight) {
    return Term::dw(x, w) * g;
  } else {
    return T(0);
  }
}

// The same for the Vec of elements at `offset`: grad_input's stored, grad_weight's terms
// returned in the op-math type.
template <class Term, bool kInput, bool kWeight, typename scalar_t>
Wide<scalar_t> vector_gradients(const Pointers<scalar_t>& p, int64_t offset, const Wide<scalar_t>& w) {
  using V = Vec<scalar_t>;
  const auto xs = widen<scalar_t>(V::loadu(p.input + offset));
  const auto gs = widen<scalar_t>(V::loadu(p.grad + offset));
  Wide<scalar_t> out;
  Wide<scalar_t> terms;
  for (int part = 0; part < kParts<scalar_t>; ++part) {
    terms[part] = gradients<Term, kInput, kWeight>(xs[part], gs[part], w[part], out[part]);
  }
  if constexpr (kInput) {
    narrow<scalar_t>(out).store(p.grad_input + offset);
  }
  return terms;
}

// The same for the element at `offset`.
template <class Term, bool kInput, bool kWeight, typename scalar_t>
acc_t<scalar_t> scalar_gradients(const Pointers<scalar_t>& p, int64_t offset, acc_t<scalar_t> w) {
  using opmath_t = acc_t<scalar_t>;
  opmath_t out = 0;
  const opmath_t term = gradients<Term, kInput, kWeight>(
      static_cast<opmath_t>(p.input[offset]), static_cast<opmath_t>(p.grad[offset]), w, out);
  if constexpr (kInput) {
    p.grad_input[offset] = static_cast<scalar_t>(out);
  }
  return term;
}

// inner == 1: rows [begin, end) of the [outer, channels] matrix; adds each column's terms into
// acc[channels] (when kWeight).
template <class Term, typename scalar_t, bool kInput, bool kWeight>
void rows_block(const Pointers<scalar_t>& p, int64_t channels, int64_t begin, int64_t end, acc_t<scalar_t>* acc) {
  using V = Vec<scalar_t>;
  using A = AccVec<scalar_t>;
  using opmath_t = acc_t<scalar_t>;
  constexpr bool kReadsWeight = per_channel_reads_weight<Term, kInput>;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t offset = row * channels;
    int64_t c = 0;
    for (; c + V::size() <= channels; c += V::size()) {
      Wide<scalar_t> ws;
      if constexpr (kReadsWeight) {
        ws = widen<scalar_t>(V::loadu(p.weight + c));
      } else {
        ws.fill(A(opmath_t(0)));
      }
      const auto terms = vector_gradients<Term, kInput, kWeight>(p, offset + c, ws);
      if constexpr (kWeight) {
        for (int part = 0; part < kParts<scalar_t>; ++part) {
          opmath_t* sum = acc + c + part * A::size();
          (A::loadu(sum) + terms[part]).store(sum);
        }
      }
    }
    for (; c < channels; ++c) {
      const opmath_t w = kReadsWeight ? static_cast<opmath_t>(p.weight[c]) : opmath_t(0);
      const opmath_t term = scalar_gradients<Term, kInput, kWeight>(p, offset + c, w);
      if constexpr (kWeight) {
        acc[c] += term;
      }
    }
  }
}

// inner > 1: `length` elements of one run, all with one weight; returns the sum of their terms
// (when kWeight): vector lanes, then the lanes and the tail in order.
template <class Term, typename scalar_t, bool kInput, bool kWeight>
acc_t<scalar_t> run_chunk(const Pointers<scalar_t>& p, int64_t offset, int64_t length, scalar_t weight) {
  using V = Vec<scalar_t>;
  using A = AccVec<scalar_t>;
  using opmath_t = acc_t<scalar_t>;
  const opmath_t w = static_cast<opmath_t>(weight);
  Wide<scalar_t> ws;
  ws.fill(A(w));
  Wide<scalar_t> sums;
  sums.fill(A(opmath_t(0)));
  int64_t i = 0;
  for (; i + V::size() <= length; i += V::size()) {
    const auto terms = vector_gradients<Term, kInput, kWeight>(p, offset + i, ws);
    if constexpr (kWeight) {
      for (int part = 0; part < kParts<scalar_t>; ++part) {
        sums[part] = sums[part] + terms[part];
      }
    }
  }
  opmath_t total = 0;
  if constexpr (kWeight) {
    for (int part = 0; part < kParts<scalar_t>; ++part) {
      std::array<opmath_t, A::size()> lanes;
      sums[part].store(lanes.data());
      for (const opmath_t lane : lanes) {
        total += lane;
      }
    }
  }
  for (; i < length; ++i) {
    const opmath_t term = scalar_gradients<Term, kInput, kWeight>(p, offset + i, w);
    if constexpr (kWeight) {
      total += term;
    }
  }
  return total;
}

// grad_weight[c] = the sum over o < groups and i < per_group of partials[(o * channels + c) *
// per_group + i], in float64, in that order.
template <typename scalar_t>
void sum_partials(
    const acc_t<scalar_t>* partials, int64_t groups, int64_t channels, int64_t per_group, scalar_t* grad_weight) {
  const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, groups * per_group));
  at::parallel_for(0, channels, grain, [&](int64_t begin, int64_t end) {
    std::vector<double> sums(end - begin, 0.0);
    for (int64_t o = 0; o < groups; ++o) {
      for (int64_t c = begin; c < end; ++c) {
        const acc_t<scalar_t>* unit = partials + (o * channels + c) * per_group;
        for (int64_t i = 0; i < per_group; ++i) {
          sums[c - begin] += static_cast<double>(unit[i]);
        }
      }
    }
    for (int64_t c = begin; c < end; ++c) {
      grad_weight[c] = static_cast<scalar_t>(sums[c - begin]);
    }
  });
}

template <class Term, typename scalar_t, bool kInput, bool kWeight>
void per_channel(const detail::PerChannelBackward& args) {
  using opmath_t = acc_t<scalar_t>;
  constexpr bool kReadsWeight = per_channel_reads_weight<Term, kInput>;
  const auto [outer, channels, inner] = args.shape;
  const auto p = detail::per_channel_pointers<Term, scalar_t, kInput>(args);
  const auto acc_options = args.grad.options().dtype(c10::CppTypeToScalarType<opmath_t>::value);
  if (inner == 1) {
    const int64_t blocks = (outer + kRowsPerBlock - 1) / kRowsPerBlock;
    at::Tensor partials = kWeight ? at::zeros({blocks, channels}, acc_options) : at::Tensor();
    opmath_t* acc = kWeight ? partials.mutable_data_ptr<opmath_t>() : nullptr;
    const int64_t grain = std::max<int64_t>(1, kGrainElements / (kRowsPerBlock * channels));
    at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        rows_block<Term, scalar_t, kInput, kWeight>(
            p, channels, block * kRowsPerBlock, std::min(outer, (block + 1) * kRowsPerBlock),
            kWeight ? acc + block * channels : nullptr);
      }
    });
    if constexpr (kWeight) {
      sum_partials<scalar_t>(acc, blocks, channels, 1, args.grad_weight.mutable_data_ptr<scalar_t>());
    }
    return;
  }
  const int64_t chunks = (inner + kRunChunk - 1) / kRunChunk;
  const int64_t units = outer * channels * chunks;
  at::Tensor partials = kWeight ? at::empty({units}, acc_options) : at::Tensor();
  opmath_t* acc = kWeight ? partials.mutable_data_ptr<opmath_t>() : nullptr;
  const int64_t grain = std::max<int64_t>(1, kGrainElements / std::min(inner, kRunChunk));
  at::parallel_for(0, units, grain, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t run = unit / chunks;
      const int64_t start = (unit % chunks) * kRunChunk;
      const opmath_t sum = run_chunk<Term, scalar_t, kInput, kWeight>(
          p, run * inner + start, std::min(kRunChunk, inner - start),
          kReadsWeight ? p.weight[run % channels] : scalar_t(0));
      if constexpr (kWeight) {
        acc[unit] = sum;
      }
    }
  });
  if constexpr (kWeight) {
    sum_partials<scalar_t>(acc, outer, channels, chunks, args.grad_weight.mutable_data_ptr<scalar_t>());
  }
}

}  // namespace

template <class Term>
void backward_per_channel(const detail::PerChannelBackward& args) {
  detail::dispatch_per_channel(args, [&]<typename scalar_t, bool kInput, bool kWeight>() {
    per_channel<Term, scalar_t, kInput, kWeight>(args);
  });
}

#define CUSTOM_OPS_INSTANTIATE(Term_, backward_) \
  template void backward_per_channel<terms::Term_>(const detail::PerChannelBackward& args);
CUSTOM_OPS_TERMS(CUSTOM_OPS_INSTANTIATE)
#undef CUSTOM_OPS_INSTANTIATE

}  // namespace custom::cpu::CPU_CAPABILITY
