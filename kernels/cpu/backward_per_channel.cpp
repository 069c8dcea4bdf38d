// CPU loop of the per-channel backward (ops/weighted_sum_backward_plan.h): grad and input a
// contiguous [outer, channels, inner] block, the weight [channels]. One pass writes
// grad_input = 2 w x g and sums grad_weight's terms x^2 g into partial sums; a second, small pass
// adds the partials of each channel. Compiled per instruction set like weighted_sum_kernel.cpp.
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

#include "kernels/cpu/weighted_sum_backward_per_channel.h"
#include "ops/floating_types.h"
#include "ops/weighted_sum_math.h"

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

// The generic loops' arithmetic (weighted_sum_math.h): grad_input bitwise as theirs.
constexpr math::WeightedSquareInputGradient input_gradient;
constexpr math::WeightedSquareWeightGradient weight_term;

template <typename scalar_t>
struct Pointers {
  scalar_t* grad_input;  // null when not requested
  const scalar_t* grad;
  const scalar_t* input;
  const scalar_t* weight;  // null when grad_input is not requested: only it reads the weight
};

// inner == 1: rows [begin, end) of the [outer, channels] matrix; adds each column's terms into
// acc[channels] (when kWeight).
template <typename scalar_t, bool kInput, bool kWeight>
void rows_block(const Pointers<scalar_t>& p, int64_t channels, int64_t begin, int64_t end, acc_t<scalar_t>* acc) {
  using V = Vec<scalar_t>;
  using A = AccVec<scalar_t>;
  using opmath_t = acc_t<scalar_t>;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t offset = row * channels;
    const scalar_t* x = p.input + offset;
    const scalar_t* g = p.grad + offset;
    int64_t c = 0;
    for (; c + V::size() <= channels; c += V::size()) {
      const auto xs = widen<scalar_t>(V::loadu(x + c));
      const auto gs = widen<scalar_t>(V::loadu(g + c));
      if constexpr (kInput) {
        const auto ws = widen<scalar_t>(V::loadu(p.weight + c));
        Wide<scalar_t> out;
        for (int part = 0; part < kParts<scalar_t>; ++part) {
          out[part] = input_gradient(gs[part], xs[part], ws[part]);
        }
        narrow<scalar_t>(out).store(p.grad_input + offset + c);
      }
      if constexpr (kWeight) {
        for (int part = 0; part < kParts<scalar_t>; ++part) {
          opmath_t* sum = acc + c + part * A::size();
          (A::loadu(sum) + weight_term(gs[part], xs[part])).store(sum);
        }
      }
    }
    for (; c < channels; ++c) {
      const opmath_t xf = x[c];
      const opmath_t gf = g[c];
      if constexpr (kInput) {
        p.grad_input[offset + c] = static_cast<scalar_t>(input_gradient(gf, xf, static_cast<opmath_t>(p.weight[c])));
      }
      if constexpr (kWeight) {
        acc[c] += weight_term(gf, xf);
      }
    }
  }
}

// inner > 1: `length` elements of one run, all with one weight; returns the sum of their terms
// (when kWeight): vector lanes, then the lanes and the tail in order.
template <typename scalar_t, bool kInput, bool kWeight>
acc_t<scalar_t> run_chunk(const Pointers<scalar_t>& p, int64_t offset, int64_t length, scalar_t weight) {
  using V = Vec<scalar_t>;
  using A = AccVec<scalar_t>;
  using opmath_t = acc_t<scalar_t>;
  const scalar_t* x = p.input + offset;
  const scalar_t* g = p.grad + offset;
  const A w(static_cast<opmath_t>(weight));
  Wide<scalar_t> sums;
  sums.fill(A(opmath_t(0)));
  int64_t i = 0;
  for (; i + V::size() <= length; i += V::size()) {
    const auto xs = widen<scalar_t>(V::loadu(x + i));
    const auto gs = widen<scalar_t>(V::loadu(g + i));
    if constexpr (kInput) {
      Wide<scalar_t> out;
      for (int part = 0; part < kParts<scalar_t>; ++part) {
        out[part] = input_gradient(gs[part], xs[part], w);
      }
      narrow<scalar_t>(out).store(p.grad_input + offset + i);
    }
    if constexpr (kWeight) {
      for (int part = 0; part < kParts<scalar_t>; ++part) {
        sums[part] = sums[part] + weight_term(gs[part], xs[part]);
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
    const opmath_t xf = x[i];
    const opmath_t gf = g[i];
    if constexpr (kInput) {
      p.grad_input[offset + i] = static_cast<scalar_t>(input_gradient(gf, xf, static_cast<opmath_t>(weight)));
    }
    if constexpr (kWeight) {
      total += weight_term(gf, xf);
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

template <typename scalar_t, bool kInput, bool kWeight>
void per_channel(const detail::PerChannelBackward& args) {
  using opmath_t = acc_t<scalar_t>;
  const auto [outer, channels, inner] = args.shape;
  const Pointers<scalar_t> p{
      kInput ? args.grad_input.data_ptr<scalar_t>() : nullptr,
      args.grad.const_data_ptr<scalar_t>(),
      args.input.const_data_ptr<scalar_t>(),
      kInput ? args.weight.const_data_ptr<scalar_t>() : nullptr,
  };
  const auto acc_options = args.grad.options().dtype(c10::CppTypeToScalarType<opmath_t>::value);
  if (inner == 1) {
    const int64_t blocks = (outer + kRowsPerBlock - 1) / kRowsPerBlock;
    at::Tensor partials = kWeight ? at::zeros({blocks, channels}, acc_options) : at::Tensor();
    opmath_t* acc = kWeight ? partials.mutable_data_ptr<opmath_t>() : nullptr;
    const int64_t grain = std::max<int64_t>(1, kGrainElements / (kRowsPerBlock * channels));
    at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        rows_block<scalar_t, kInput, kWeight>(
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
      const opmath_t sum = run_chunk<scalar_t, kInput, kWeight>(
          p, run * inner + start, std::min(kRunChunk, inner - start), kInput ? p.weight[run % channels] : scalar_t(0));
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

void backward_per_channel(const detail::PerChannelBackward& args) {
  CUSTOM_OPS_DISPATCH_FLOATING_TYPES(args.input.scalar_type(), "weighted_sum_backward_per_channel_cpu", [&] {
    detail::with_requested_gradients(args, [&](auto input, auto weight) {
      per_channel<scalar_t, decltype(input)::value, decltype(weight)::value>(args);
    });
  });
}

}  // namespace custom::cpu::CPU_CAPABILITY
