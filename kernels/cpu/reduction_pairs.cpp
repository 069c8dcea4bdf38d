// SPDX-License-Identifier: BSD-3-Clause
// The CPU reduction over operands that broadcast against each other: out[i, j] = the sum over k
// of Term::value(x, w), one operand's row depending on i alone and the other's on j alone (x [N, 1,
// D] with w [1, M, D] summed over D). Each row is read by a whole dim of outputs, so the loop is
// a GEMM without products: a work item takes a tile of outputs, packs kRun terms of its rows of
// both operands (in the accumulation type, converted once, from any strides), and a micro-kernel
// sums kRows x kVectors vectors of outputs in registers, one vector lane per output: the value of
// a row of one operand broadcast, the other's loaded along its rows. The longer dim of outputs
// runs along the lanes.
//
// Order: each output adds its terms in k order, in runs of kRun summed from zero, each then added
// to the output's sum, so no sum adds more than kRun terms in series (the frontend's loop takes
// longer reductions). Threads pick the tiles, never the order: the same bits for any count.
#include "kernels/cpu/reduction_pairs.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <vector>

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/Unroll.h>

#include <custom_ops/operators.h>

#include "kernels/cpu/vectorized_term_functions.h"
#include "ops/floating_types.h"

namespace custom::cpu::CPU_CAPABILITY {
namespace {

// Terms of each output in series, at most (reduction_kernel.cpp's kSerialTerms): also the terms
// of a row one packing holds.
constexpr int64_t kRun = 128;
// Outputs of a work item, at most: rows, and lanes. The packing of a term costs about as much as
// summing dozens: each packed value is used by every output of the other dim of the tile.
constexpr int64_t kTileRows = 128;
constexpr int64_t kTileLanes = 256;
// Register block of the micro-kernel: kRows broadcast rows x kVectors vectors of lanes, whose
// accumulators and loads fit the vector registers (16 with AVX2, 32 with AVX-512).
constexpr int kRows = 4;
#if defined(CPU_CAPABILITY_AVX512)
constexpr int kVectors = 4;
#else
constexpr int kVectors = 2;
#endif

template <typename acc>
using Vec = at::vec::Vectorized<acc>;

// The operands as the loop sees them: `lanes` the operand whose rows run along the vector lanes,
// `rows` the one whose values are broadcast; out[r * out_row_stride + l * out_lane_stride].
template <typename scalar_t>
struct Operands {
  const scalar_t* rows;
  const scalar_t* lanes;
  int64_t row_count, row_stride, row_k_stride;
  int64_t lane_count, lane_stride, lane_k_stride;
  int64_t length;
  int64_t out_row_stride, out_lane_stride;
};

// packed[k * pitch + r] = row r's term k0 + k, for r < count; zero beyond (lanes the tile pads).
template <typename acc, typename scalar_t>
void pack(
    const scalar_t* src,
    int64_t stride,
    int64_t k_stride,
    int64_t count,
    int64_t k0,
    int64_t run,
    int64_t pitch,
    acc* packed) {
  for (int64_t r = 0; r < count; ++r) {
    const scalar_t* const row = src + r * stride + k0 * k_stride;
    for (int64_t k = 0; k < run; ++k) {
      packed[k * pitch + r] = static_cast<acc>(row[k * k_stride]);
    }
  }
  for (int64_t r = count; r < pitch; ++r) {
    for (int64_t k = 0; k < run; ++k) {
      packed[k * pitch + r] = acc(0);
    }
  }
}

// sums[p * pitch + v * lanes + lane] += the run's terms of row p of `rows` and lane of `lanes`,
// for kRows rows and kVectors vectors; each output's terms in k order from zero, then added.
template <class Term, bool kInputIsRows, typename acc>
C10_ALWAYS_INLINE void micro_kernel(
    const acc* rows,
    int64_t rows_pitch,
    const acc* lanes,
    int64_t lanes_pitch,
    int64_t run,
    acc* sums,
    int64_t sums_pitch) {
  using V = Vec<acc>;
  std::array<V, static_cast<size_t>(kRows) * kVectors> partial;
  partial.fill(V(acc(0)));
  for (int64_t k = 0; k < run; ++k) {
    const acc* const lane_values = lanes + k * lanes_pitch;
    std::array<V, kVectors> l;
    c10::ForcedUnroll<kVectors>{}([&](auto v) { l[v] = V::loadu(lane_values + v * V::size()); });
    c10::ForcedUnroll<kRows>{}([&](auto p) {
      const V r(rows[k * rows_pitch + p]);
      c10::ForcedUnroll<kVectors>{}(
          [&](auto v) { partial[p * kVectors + v] += kInputIsRows ? Term::value(r, l[v]) : Term::value(l[v], r); });
    });
  }
  c10::ForcedUnroll<kRows>{}([&](auto p) {
    c10::ForcedUnroll<kVectors>{}([&](auto v) {
      acc* const sum = sums + p * sums_pitch + v * V::size();
      (V::loadu(sum) + partial[p * kVectors + v]).store(sum);
    });
  });
}

template <class Term, typename scalar_t, typename out_t, bool kInputIsRows>
void pairs_typed(const Operands<scalar_t>& a, out_t* out) {
  using acc = at::opmath_type<scalar_t>;
  constexpr int64_t kLaneBlock = kVectors * Vec<acc>::size();
  const auto round_up = [](int64_t n, int64_t m) { return (n + m - 1) / m * m; };
  const int64_t tile_rows = std::min(kTileRows, round_up(a.row_count, kRows));
  const int64_t tile_lanes = std::min(round_up(kTileLanes, kLaneBlock), round_up(a.lane_count, kLaneBlock));
  const int64_t row_tiles = at::divup(a.row_count, tile_rows);
  const int64_t lane_tiles = at::divup(a.lane_count, tile_lanes);
  const int64_t tile_terms = tile_rows * tile_lanes * a.length;
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / tile_terms);

  at::parallel_for(0, row_tiles * lane_tiles, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc> packed_rows(kRun * tile_rows);
    std::vector<acc> packed_lanes(kRun * tile_lanes);
    std::vector<acc> sums(tile_rows * tile_lanes);
    for (int64_t tile = begin; tile < end; ++tile) {
      const int64_t r0 = tile / lane_tiles * tile_rows;
      const int64_t l0 = tile % lane_tiles * tile_lanes;
      const int64_t rows = std::min(tile_rows, a.row_count - r0);
      const int64_t lanes = std::min(tile_lanes, a.lane_count - l0);
      std::fill(sums.begin(), sums.end(), acc(0));
      for (int64_t k0 = 0; k0 < a.length; k0 += kRun) {
        const int64_t run = std::min(kRun, a.length - k0);
        pack(a.rows + r0 * a.row_stride, a.row_stride, a.row_k_stride, rows, k0, run, tile_rows, packed_rows.data());
        pack(
            a.lanes + l0 * a.lane_stride, a.lane_stride, a.lane_k_stride, lanes, k0, run, tile_lanes,
            packed_lanes.data());
        for (int64_t p = 0; p < tile_rows; p += kRows) {
          for (int64_t l = 0; l < tile_lanes; l += kLaneBlock) {
            micro_kernel<Term, kInputIsRows>(
                packed_rows.data() + p, tile_rows, packed_lanes.data() + l, tile_lanes, run,
                sums.data() + p * tile_lanes + l, tile_lanes);
          }
        }
      }
      for (int64_t p = 0; p < rows; ++p) {
        for (int64_t l = 0; l < lanes; ++l) {
          out[(r0 + p) * a.out_row_stride + (l0 + l) * a.out_lane_stride] =
              static_cast<out_t>(sums[p * tile_lanes + l]);
        }
      }
    }
  });
}

}  // namespace

template <class Term>
bool reduce_pairs(const detail::Reduction& args) {
  const auto& x = args.input;
  const auto& w = args.weight;
  TORCH_INTERNAL_ASSERT(x.dim() == 3 && x.sizes() == w.sizes() && x.scalar_type() == w.scalar_type());
  TORCH_INTERNAL_ASSERT(args.out.is_contiguous() && args.out.numel() == x.size(0) * x.size(1));
  const bool input_by_i = x.stride(1) == 0 && w.stride(0) == 0;
  TORCH_INTERNAL_ASSERT(input_by_i || (x.stride(0) == 0 && w.stride(1) == 0));
  if (x.size(2) > kRun * kRun) {
    return false;
  }
  const auto& by_i = input_by_i ? x : w;
  const auto& by_j = input_by_i ? w : x;
  // The longer dim of outputs along the lanes: fewer of them padded.
  const bool lanes_are_j = x.size(1) >= x.size(0);
  const bool input_is_rows = input_by_i == lanes_are_j;
  CUSTOM_OPS_DISPATCH_FLOATING_TYPES(x.scalar_type(), "reduction_pairs_cpu", [&] {
    using acc = at::opmath_type<scalar_t>;
    const auto i_side = std::tuple{by_i.const_data_ptr<scalar_t>(), x.size(0), by_i.stride(0), by_i.stride(2)};
    const auto j_side = std::tuple{by_j.const_data_ptr<scalar_t>(), x.size(1), by_j.stride(1), by_j.stride(2)};
    const auto& [rows, row_count, row_stride, row_k_stride] = lanes_are_j ? i_side : j_side;
    const auto& [lanes, lane_count, lane_stride, lane_k_stride] = lanes_are_j ? j_side : i_side;
    const Operands<scalar_t> a{
        rows,
        lanes,
        row_count,
        row_stride,
        row_k_stride,
        lane_count,
        lane_stride,
        lane_k_stride,
        x.size(2),
        lanes_are_j ? x.size(1) : 1,
        lanes_are_j ? 1 : x.size(1)};
    const auto run = [&]<typename out_t>() {
      out_t* const out = args.out.mutable_data_ptr<out_t>();
      input_is_rows ? pairs_typed<Term, scalar_t, out_t, true>(a, out)
                    : pairs_typed<Term, scalar_t, out_t, false>(a, out);
    };
    if (args.out.scalar_type() == c10::CppTypeToScalarType<acc>::value) {
      run.template operator()<acc>();
    } else {
      TORCH_INTERNAL_ASSERT(args.out.scalar_type() == x.scalar_type());
      run.template operator()<scalar_t>();
    }
  });
  return true;
}

#define CUSTOM_OPS_INSTANTIATE(Term_, backward_) \
  template bool reduce_pairs<terms::Term_>(const detail::Reduction& args);
CUSTOM_OPS_TERMS(CUSTOM_OPS_INSTANTIATE)
#undef CUSTOM_OPS_INSTANTIATE

}  // namespace custom::cpu::CPU_CAPABILITY
