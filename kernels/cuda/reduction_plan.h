// SPDX-License-Identifier: BSD-3-Clause
// How the CUDA reduction (reduction_kernel.cu) splits an [outer, reduce, inner] problem over the
// GPU, for every term alike. Host-only and header-only, so that CPU tests check the choice without
// a GPU. Two kernels:
//  - Rows: inner == 1 and the reduced dim contiguous in both operands (a full reduction, a
//    last-dim reduction): one warp sums one segment of a row, with 16-byte loads along it.
//  - Tiles: everything else. A block sums a tile [rows of reduce] x [columns of inner]: threads
//    along inner (16-byte loads where inner is contiguous: a column reduction), the rest of the
//    block along reduce, added through shared memory. With strided operands, the generic path.
// When the outputs are too few to fill the GPU, or a reduction too long for one thread's serial
// sum, the reduced dim is cut into chunks: stage 1 writes one partial per (output, chunk), and
// stage 2, the Tiles kernel on the partials, adds each output's chunks.
// A total (one output, the sum over outer, reduce and inner) takes the same kernels' work items
// (Rows: segments, Tiles: tiles) in runs of consecutive ones: each block adds its runs into one
// partial, and the last block to finish adds all partials (one kernel); with too many partials
// for one block, stage 2 passes add them instead.
//
// Determinism: the cut and the order of every addition follow from the sizes and strides only,
// never from the device (no SM count) nor from alignment (the element-wise fallback loads what
// the vector path loads and adds in the same order), and no float atomics (a total's one integer
// counter picks which block adds the partials, never their order): the same bits on every run.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace custom::cuda::reduction {

inline constexpr int kThreads = 256;  // per block, both kernels
inline constexpr int kWarp = 32;
inline constexpr int kWarpsPerBlock = kThreads / kWarp;
// Terms one thread adds serially, at most, before the adds become trees (warp shuffles, shared
// memory, stage 2): the error of a serial sum stays bounded for any length.
inline constexpr int64_t kMaxSerial = 1024;
// Rows: segments are multiples of this (32 lanes x 8 halfs), so every segment starts 16-byte
// aligned when its row does.
inline constexpr int64_t kSegmentGranule = 256;  // elements
// Rows: enough warps that the loads in flight cover HBM latency (H100/H200: 132 SMs); with fewer
// rows, rows are cut towards kTargetWarps segments of at least kMinSegment and at most
// kMaxSegment elements: longer segments leave too few warps streaming (docs/benchmarks.md).
inline constexpr int64_t kEnoughWarps = 4096;
inline constexpr int64_t kTargetWarps = 4096;
inline constexpr int64_t kMinSegment = 2048;  // elements
inline constexpr int64_t kMaxSegment = 16384;  // elements
// A total's warps take runs of segments, about kTotalWarps warps in all: its partials (one a
// block) are added by its last block, so the finer grain costs little.
inline constexpr int64_t kTotalWarps = 16384;
// Rows of a total that share one weight row (w [C] over x [R, C]) of at most kWarp * (vector) *
// kWeightRegisterGroups elements: each lane keeps its weight groups in registers for every row
// it adds, and loads only x (all its groups of a row in flight at once). 16-byte loads only (the
// element-wise loads' registers spill).
inline constexpr int kWeightRegisterGroups = 4;  // 16-byte groups a lane
// Such a total (any alignment: the cut must not depend on it) takes runs for about this many
// warps, each of which loads its weight groups once a run: fewer, longer runs amortize those
// loads (docs/benchmarks.md).
inline constexpr int64_t kSharedWeightTotalWarps = 4096;
// Tiles: the same for blocks. Chunks of at least kMinChunkRows rows keep the partials' traffic
// under 1% of the operands' and each block's loop long enough to stream (docs/benchmarks.md).
inline constexpr int64_t kEnoughBlocks = 512;
inline constexpr int64_t kTargetBlocks = 1024;
inline constexpr int64_t kMinChunkRows = 512;  // rows of the reduced dim
// Total: the most partials the last block adds, kMaxSerial per thread.
inline constexpr int64_t kMaxFinalPartials = kThreads * kMaxSerial;
// The most blocks a CUDA grid has along y (and z).
inline constexpr int64_t kMaxGridY = 65535;

// Strides in elements, along {outer, reduce, inner}.
using Strides = std::array<int64_t, 3>;

struct Problem {
  int64_t outer = 1;
  int64_t reduce = 1;  // the dim summed over, for each (outer, inner)
  int64_t inner = 1;
  Strides input_strides{};
  Strides weight_strides{};
  int64_t vector = 1;  // elements of the operands' dtype in one 16-byte load
  bool input_aligned = false;  // data pointers on a 16-byte boundary
  bool weight_aligned = false;
  bool total = false;  // one output: the sum over outer, reduce and inner
};

enum class Layout { Rows, Tiles };

// out[row] = sum of the row; segment s = row * splits + split, one warp each.
struct RowsPlan {
  int64_t rows = 1;
  int64_t length = 1;
  int64_t input_row_stride = 0;
  int64_t weight_row_stride = 0;
  int64_t splits = 1;
  int64_t segment = 0;  // elements per split, a multiple of kSegmentGranule
};

// out[o, i] = sum over r of [outer, reduce, inner]; tile t = (o * chunks + chunk) * column_tiles
// + column tile, one block each. A thread sums a column group (`vector` consecutive elements of
// inner) over every row_threads-th row of its chunk; the row threads' sums are then added in a
// fixed tree. Partials are [outer, chunks, inner].
struct TilesPlan {
  int64_t outer = 1;
  int64_t reduce = 1;
  int64_t inner = 1;
  Strides input_strides{};
  Strides weight_strides{};
  int64_t vector = 1;
  int64_t columns = 1;  // column groups: ceil(inner / vector)
  int col_threads = 1;  // col_threads * row_threads == kThreads
  int row_threads = kThreads;
  int64_t column_tiles = 1;
  int64_t chunks = 1;
  int64_t rows_per_chunk = 1;
  // An inner == 1 problem run as [1, reduce, outer] (threads along outer): short rows, or
  // rows whose outer stride is the smaller one (a transposed input).
  bool transposed = false;

  int64_t tiles() const { return outer * chunks * column_tiles; }
};

struct Plan {
  Layout layout = Layout::Tiles;
  bool vectorized = false;  // 16-byte loads; changes how loads happen, not what is added when
  bool weight_fixed = false;  // the weight is constant along reduce: read once per output
  // Rows total: one short weight row for all rows (kWeightRegisterGroups), from the shape alone.
  bool shared_weight_row = false;
  RowsPlan rows;
  TilesPlan tiles;
  TilesPlan second;  // stage 2 over the partials, when chunks() > 1 (not total)

  // Total: block work item p (one partial each) takes, Rows: kWarpsPerBlock consecutive runs of
  // `run` segments, one per warp; Tiles: `run` consecutive tiles.
  bool total = false;
  int64_t run = 1;
  int64_t partials = 1;
  // Empty: the last block of stage 1 adds the partials. Else stage 2 passes over [1, partials, 1],
  // each over the previous one's chunks; the last (one chunk) writes out.
  std::vector<TilesPlan> passes;

  int64_t chunks() const { return layout == Layout::Rows ? rows.splits : tiles.chunks; }
  // The shared row's kernel that holds it in registers: with 16-byte loads only.
  bool weight_in_registers() const { return shared_weight_row && vectorized; }
};

namespace plan_detail {

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The smallest power of two >= n, at most `cap` (a power of two).
inline int pow2_at_least(int64_t n, int cap) {
  int p = 1;
  while (p < cap && p < n) {
    p *= 2;
  }
  return p;
}

// How many pieces to cut each of `outputs` reductions of `length` into: enough for each thread's
// serial sum (min_pieces); more when the outputs alone do not fill the GPU, but never pieces
// shorter than min_piece.
inline int64_t pieces(
    int64_t outputs, int64_t length, int64_t min_pieces, int64_t enough, int64_t target, int64_t min_piece) {
  if (outputs * min_pieces >= enough) {
    return min_pieces;
  }
  const int64_t fill = ceil_div(target, outputs);
  return std::max(min_pieces, std::min(fill, std::max<int64_t>(1, length / min_piece)));
}

inline bool multiple(int64_t stride, int64_t vector) {
  return stride % vector == 0;
}

}  // namespace plan_detail

// The Tiles geometry of [outer, reduce, inner]; `split`: whether reduce may be cut into chunks
// (stage 1), or summed whole (stage 2).
inline TilesPlan plan_tiles(
    int64_t outer,
    int64_t reduce,
    int64_t inner,
    Strides input_strides,
    Strides weight_strides,
    int64_t vector,
    bool split) {
  using namespace plan_detail;
  TilesPlan t;
  if (inner == 1 && outer > 1 && (reduce < kWarp * vector || input_strides[0] < input_strides[1])) {
    t.transposed = true;
    std::swap(outer, inner);
    std::swap(input_strides[0], input_strides[2]);
    std::swap(weight_strides[0], weight_strides[2]);
  }
  t.outer = outer;
  t.reduce = reduce;
  t.inner = inner;
  t.input_strides = input_strides;
  t.weight_strides = weight_strides;
  t.vector = vector;
  t.columns = ceil_div(inner, vector);
  // Up to a warp along inner (512 contiguous bytes per load instruction); the rest along reduce,
  // but no more row threads than rows.
  t.row_threads = std::min(kThreads / pow2_at_least(t.columns, kWarp), pow2_at_least(reduce, kThreads));
  t.col_threads = kThreads / t.row_threads;
  t.column_tiles = ceil_div(t.columns, t.col_threads);
  if (split) {
    const int64_t min_chunks = ceil_div(reduce, t.row_threads * kMaxSerial);
    t.chunks = pieces(outer * t.column_tiles, reduce, min_chunks, kEnoughBlocks, kTargetBlocks, kMinChunkRows);
  }
  t.rows_per_chunk = ceil_div(reduce, t.chunks);
  t.chunks = ceil_div(reduce, t.rows_per_chunk);  // no empty chunk
  return t;
}

// Total: runs long enough that the partials are about as many as the blocks that fill the GPU
// (fewer for the last block to add), short enough for kMaxSerial terms a thread in series.
inline void plan_total(Plan& plan) {
  using namespace plan_detail;
  plan.total = true;
  if (plan.layout == Layout::Rows) {
    const int64_t segments = plan.rows.rows * plan.rows.splits;
    const int64_t cap = std::max<int64_t>(1, kMaxSerial / ceil_div(plan.rows.segment, kWarp));
    const int64_t warps = plan.shared_weight_row ? kSharedWeightTotalWarps : kTotalWarps;
    plan.run = std::clamp<int64_t>(segments / warps, 1, cap);
    plan.partials = ceil_div(ceil_div(segments, plan.run), kWarpsPerBlock);
  } else {
    const auto& t = plan.tiles;
    const int64_t cap = std::max<int64_t>(1, kMaxSerial / ceil_div(t.rows_per_chunk, t.row_threads));
    plan.run = std::clamp<int64_t>(t.tiles() / kTargetBlocks, 1, cap);
    plan.partials = ceil_div(t.tiles(), plan.run);
  }
  for (int64_t n = plan.partials; n > kMaxFinalPartials; n = plan.passes.back().chunks) {
    plan.passes.push_back(plan_tiles(1, n, 1, {n, 1, 0}, {}, 1, true));
  }
  if (!plan.passes.empty()) {
    const int64_t n = plan.passes.back().chunks;
    plan.passes.push_back(plan_tiles(1, n, 1, {n, 1, 0}, {}, 1, false));
  }
}

inline Plan plan_reduction(Problem p) {
  using namespace plan_detail;
  // A dim of size 1 is never stepped along: its stride must not spoil the layout or alignment tests.
  const std::array<int64_t, 3> sizes{p.outer, p.reduce, p.inner};
  for (int d = 0; d < 3; ++d) {
    if (sizes[d] == 1) {
      p.input_strides[d] = 0;
      p.weight_strides[d] = 0;
    }
  }
  Plan plan;
  plan.weight_fixed = p.weight_strides[1] == 0;
  const auto& xs = p.input_strides;
  const auto& ws = p.weight_strides;
  const int64_t v = p.vector;

  // Rows shorter than a warp's loads run across outer on Tiles, a thread a column group, unless
  // those are too few for the blocks that fill the GPU (x [2048, 128] of bfloat16: 8 blocks): then
  // a warp a row, part of its lanes idle, is the faster.
  const bool rows_layout = p.inner == 1 && xs[1] == 1 && (plan.weight_fixed || ws[1] == 1);
  if (rows_layout &&
      (p.reduce >= kWarp * v || plan_tiles(p.outer, p.reduce, 1, xs, ws, v, true).tiles() < kEnoughBlocks)) {
    plan.layout = Layout::Rows;
    auto& r = plan.rows;
    r = {p.outer, p.reduce, xs[0], ws[0]};
    const int64_t min_splits = ceil_div(r.length, kWarp * kMaxSerial);
    int64_t splits = pieces(r.rows, r.length, min_splits, kEnoughWarps, kTargetWarps, kMinSegment);
    if (r.rows * min_splits < kEnoughWarps) {
      splits = std::max(splits, ceil_div(r.length, kMaxSegment));
    }
    r.segment = ceil_div(ceil_div(r.length, splits), kSegmentGranule) * kSegmentGranule;
    r.splits = ceil_div(r.length, r.segment);
    // Segments start at multiples of kSegmentGranule elements of their row; a fixed weight is
    // read one element per row.
    plan.vectorized =
        p.input_aligned && multiple(xs[0], v) && (plan.weight_fixed || (p.weight_aligned && multiple(ws[0], v)));
    if (p.total) {
      plan.shared_weight_row = r.rows > 1 && r.splits == 1 && r.weight_row_stride == 0 && !plan.weight_fixed &&
          r.length <= kWarp * v * kWeightRegisterGroups;
      plan_total(plan);
    } else if (r.splits > 1) {
      plan.second = plan_tiles(r.rows, r.splits, 1, {r.splits, 1, 0}, {}, 1, false);
    }
    return plan;
  }

  plan.layout = Layout::Tiles;
  auto& t = plan.tiles;
  t = plan_tiles(p.outer, p.reduce, p.inner, xs, ws, v, true);
  auto vector_loads = [&](const Strides& s, bool aligned) {
    return aligned && s[2] == 1 && multiple(s[1], v) && multiple(s[0], v);
  };
  // A fixed weight is read element by element, once per column group and tile.
  plan.vectorized = t.inner % v == 0 && vector_loads(t.input_strides, p.input_aligned) &&
      (plan.weight_fixed || vector_loads(t.weight_strides, p.weight_aligned));
  if (p.total) {
    plan_total(plan);
  } else if (t.chunks > 1) {
    plan.second = plan_tiles(t.outer, t.chunks, t.inner, {t.chunks * t.inner, t.inner, 1}, {}, 1, false);
  }
  return plan;
}

// ---- Pairs: out[i, j] = sum over k of a term of row i of one operand and row j of the other ----
// (x [N, 1, D] with w [1, M, D] summed over D.) Every row is read by a whole dim of outputs, so a
// block stages kPairsStep terms of kPairsTile rows of each operand in shared memory (two stages,
// the next one loading while the block sums the current one) and each thread sums kPairsPer x
// kPairsPer outputs from them, as a GEMM without tensor cores does. The reduced dim is cut into
// chunks of at most kMaxSerial terms, a multiple of kPairsStep: each output adds a chunk's terms
// in k order, in series; with more than one chunk, a second kernel adds an output's chunk
// partials in chunk order. Chunks also fill the GPU when the outputs' tiles are too few.
inline constexpr int64_t kPairsTile = 128;  // outputs of a block along i and along j
inline constexpr int64_t kPairsPer = 8;  // outputs of a thread along i and along j
inline constexpr int64_t kPairsStep = 8;  // terms of each row a stage holds
// Chunks shorter than this only for reductions that are shorter: a chunk's partials cost a
// write and a read of every output. Chunks fill the GPU to kEnoughBlocks, not more: a block's
// tile is a large share of an SM's work.
inline constexpr int64_t kPairsMinChunk = 64;
static_assert((kPairsTile / kPairsPer) * (kPairsTile / kPairsPer) == kThreads);
static_assert(kMaxSerial % kPairsStep == 0);

struct PairsPlan {
  bool fits = false;  // else the frontend's loop over i, one [j, k] reduction a launch
  int64_t tiles_i = 0;  // grid x
  int64_t tiles_j = 0;  // grid y
  int64_t chunks = 1;  // grid z
  int64_t chunk_length = 0;  // terms, a multiple of kPairsStep (the last chunk may be shorter)
};

inline PairsPlan plan_pairs(int64_t rows_i, int64_t rows_j, int64_t length) {
  using namespace plan_detail;
  PairsPlan plan;
  plan.tiles_i = ceil_div(rows_i, kPairsTile);
  plan.tiles_j = ceil_div(rows_j, kPairsTile);
  const int64_t min_chunks = ceil_div(length, kMaxSerial);
  const int64_t chunks =
      pieces(plan.tiles_i * plan.tiles_j, length, min_chunks, kEnoughBlocks, kEnoughBlocks, kPairsMinChunk);
  plan.chunk_length = ceil_div(ceil_div(length, chunks), kPairsStep) * kPairsStep;
  plan.chunks = ceil_div(length, plan.chunk_length);  // no empty chunk
  // The second kernel adds at most kMaxSerial partials in series.
  plan.fits = plan.tiles_j <= kMaxGridY && plan.chunks <= std::min(kMaxGridY, kMaxSerial);
  return plan;
}

}  // namespace custom::cuda::reduction
