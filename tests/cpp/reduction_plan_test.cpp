// SPDX-License-Identifier: BSD-3-Clause
// How the CUDA reduction splits its work (kernels/cuda/reduction_plan.h,
// host code, checked without a GPU): each layout gets its kernel, the chunks cover the reduced dim
// exactly, no thread adds more than kMaxSerial terms in series, and the order of the additions
// (everything but `vectorized`) does not depend on the operands' alignment: the same bits
// whichever allocation the operands got. A total (one output) is one kernel whose last block adds
// a few hundred partials, with stage 2 passes only past what one block may add in series. The
// values themselves are checked on a GPU by tests/python/test_weighted_square_sum_values.py.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/cuda/reduction_plan.h"

namespace {

namespace sq = custom::cuda::reduction;

// A contiguous [outer, reduce, inner] problem; `weight_row`: a weight of shape [inner] broadcast
// over outer and reduce, else a weight laid out like the input.
sq::Problem contiguous(int64_t outer, int64_t reduce, int64_t inner, int64_t vector, bool weight_row = false) {
  sq::Problem p;
  p.outer = outer;
  p.reduce = reduce;
  p.inner = inner;
  p.input_strides = {reduce * inner, inner, 1};
  p.weight_strides = weight_row ? sq::Strides{0, 0, 1} : p.input_strides;
  p.vector = vector;
  p.input_aligned = true;
  p.weight_aligned = true;
  return p;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Chunks of `per_chunk` rows cover `reduce` rows, none of them empty.
void expect_cover(int64_t reduce, int64_t chunks, int64_t per_chunk) {
  EXPECT_GE(chunks * per_chunk, reduce);
  EXPECT_LT((chunks - 1) * per_chunk, reduce);
}

void expect_tiles_sound(const sq::TilesPlan& t) {
  EXPECT_EQ(t.col_threads * t.row_threads, sq::kThreads);
  EXPECT_GE(t.column_tiles * t.col_threads, t.columns);
  expect_cover(t.reduce, t.chunks, t.rows_per_chunk);
}

// A total's block work items cover stage 1's work items exactly, no thread adds more than
// kMaxSerial terms in series (stage 1, the last block, each pass), and the passes chain down to
// one value.
void expect_total_sound(const sq::Plan& plan) {
  ASSERT_TRUE(plan.total);
  EXPECT_GE(plan.run, 1);
  if (plan.layout == sq::Layout::Rows) {
    const int64_t segments = plan.rows.rows * plan.rows.splits;
    expect_cover(segments, plan.partials, sq::kWarpsPerBlock * plan.run);
    EXPECT_LE(plan.run * ceil_div(plan.rows.segment, sq::kWarp), sq::kMaxSerial);
  } else {
    expect_tiles_sound(plan.tiles);
    expect_cover(plan.tiles.tiles(), plan.partials, plan.run);
    EXPECT_LE(plan.run * ceil_div(plan.tiles.rows_per_chunk, plan.tiles.row_threads), sq::kMaxSerial);
  }
  if (plan.passes.empty()) {
    EXPECT_LE(plan.partials, sq::kMaxFinalPartials);
    EXPECT_LE(ceil_div(plan.partials, sq::kThreads), sq::kMaxSerial);
    return;
  }
  EXPECT_GT(plan.partials, sq::kMaxFinalPartials);
  int64_t n = plan.partials;
  for (const auto& pass : plan.passes) {
    EXPECT_EQ(pass.outer * pass.inner, 1);
    EXPECT_EQ(pass.reduce, n);
    expect_tiles_sound(pass);
    EXPECT_LE(ceil_div(pass.rows_per_chunk, pass.row_threads), sq::kMaxSerial);
    EXPECT_LT(pass.chunks, n);
    n = pass.chunks;
  }
  EXPECT_EQ(n, 1);  // the last pass writes the result
}

sq::Problem total(sq::Problem p) {
  p.total = true;
  return p;
}

// What each thread adds, in which order: everything but how the loads happen.
void expect_same_order(const sq::Plan& a, const sq::Plan& b) {
  ASSERT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.chunks(), b.chunks());
  EXPECT_EQ(a.total, b.total);
  EXPECT_EQ(a.run, b.run);
  EXPECT_EQ(a.partials, b.partials);
  EXPECT_EQ(a.passes.size(), b.passes.size());
  if (a.layout == sq::Layout::Rows) {
    EXPECT_EQ(a.rows.splits, b.rows.splits);
    EXPECT_EQ(a.rows.segment, b.rows.segment);
  } else {
    EXPECT_EQ(a.tiles.transposed, b.tiles.transposed);
    EXPECT_EQ(a.tiles.row_threads, b.tiles.row_threads);
    EXPECT_EQ(a.tiles.rows_per_chunk, b.tiles.rows_per_chunk);
    EXPECT_EQ(a.tiles.column_tiles, b.tiles.column_tiles);
  }
}

TEST(WeightedSquareSumPlan, FullAndLastDimReductionsAreRowsCutIntoAlignedSegments) {
  for (const int64_t vector : {2, 4, 8}) {  // float64, float32, float16/bfloat16
    SCOPED_TRACE(vector);
    // A full reduction of 2^26 elements: one row, cut into segments, then summed by stage 2.
    const auto full = sq::plan_reduction(contiguous(1, int64_t{1} << 26, 1, vector));
    ASSERT_EQ(full.layout, sq::Layout::Rows);
    EXPECT_TRUE(full.vectorized);
    EXPECT_GT(full.rows.splits, 1);
    EXPECT_EQ(full.rows.segment % sq::kSegmentGranule, 0);
    expect_cover(full.rows.length, full.rows.splits, full.rows.segment);
    EXPECT_LE(ceil_div(full.rows.segment, sq::kWarp), sq::kMaxSerial);
    EXPECT_EQ(full.second.reduce, full.rows.splits);
    expect_tiles_sound(full.second);
    EXPECT_EQ(full.second.chunks, 1);  // stage 2 sums each output whole
    // Rows of 1024..16384: a warp per row once there are enough rows, split when there are few.
    for (const int64_t length : {1024, 16384}) {
      const auto many = sq::plan_reduction(contiguous((int64_t{1} << 26) / length, length, 1, vector));
      ASSERT_EQ(many.layout, sq::Layout::Rows);
      EXPECT_EQ(many.rows.splits, 1);
      EXPECT_TRUE(many.vectorized);
    }
    const auto few = sq::plan_reduction(contiguous(4, 1 << 20, 1, vector));
    ASSERT_EQ(few.layout, sq::Layout::Rows);
    EXPECT_GT(few.rows.splits, 1);
    EXPECT_EQ(few.second.outer * few.second.inner, 4);
  }
}

TEST(WeightedSquareSumPlan, ColumnReductionsAreVectorizedTiles) {
  // x [R, C] summed over dim 0: inner contiguous, loads along inner.
  const auto columns = sq::plan_reduction(contiguous(1, 1 << 16, 1024, 4));
  ASSERT_EQ(columns.layout, sq::Layout::Tiles);
  EXPECT_TRUE(columns.vectorized);
  EXPECT_FALSE(columns.tiles.transposed);
  expect_tiles_sound(columns.tiles);
  EXPECT_GT(columns.tiles.chunks, 1);  // 256 column groups alone do not fill the GPU
  EXPECT_LE(ceil_div(columns.tiles.rows_per_chunk, columns.tiles.row_threads), sq::kMaxSerial);
  expect_tiles_sound(columns.second);
  EXPECT_EQ(columns.second.reduce, columns.tiles.chunks);

  // w of shape [C] over x [R, C]: constant along reduce, so read once per output.
  const auto broadcast = sq::plan_reduction(contiguous(1, 1 << 16, 1024, 4, /*weight_row=*/true));
  EXPECT_TRUE(broadcast.weight_fixed);
  EXPECT_TRUE(broadcast.vectorized);
  EXPECT_FALSE(columns.weight_fixed);
}

TEST(WeightedSquareSumPlan, ShortOrTransposedRowsRunAcrossOuter) {
  // Rows shorter than a warp's vector loads.
  const auto short_rows = sq::plan_reduction(contiguous(1 << 20, 16, 1, 4));
  ASSERT_EQ(short_rows.layout, sq::Layout::Tiles);
  EXPECT_TRUE(short_rows.tiles.transposed);
  EXPECT_EQ(short_rows.tiles.inner, 1 << 20);
  expect_tiles_sound(short_rows.tiles);
  // Too few of them for the transposed tiles to fill the GPU: a warp a row.
  for (const int64_t vector : {2, 4, 8}) {
    const auto few = sq::plan_reduction(contiguous(2048, 128, 1, vector));
    ASSERT_EQ(few.layout, sq::Layout::Rows) << vector;
    EXPECT_EQ(few.rows.rows, 2048);
    EXPECT_EQ(few.rows.splits, 1);
    EXPECT_GE(few.rows.segment, few.rows.length);
  }
  // x.t() of a contiguous [16, 2^17] summed over its last dim: the reduced dim is the strided one.
  sq::Problem transposed = contiguous(1 << 17, 16, 1, 4);
  transposed.input_strides = {1, 1 << 17, 0};
  transposed.weight_strides = transposed.input_strides;
  const auto plan = sq::plan_reduction(transposed);
  ASSERT_EQ(plan.layout, sq::Layout::Tiles);
  EXPECT_TRUE(plan.tiles.transposed);
  EXPECT_EQ(plan.tiles.input_strides[2], 1);  // threads walk the contiguous dim
  expect_tiles_sound(plan.tiles);
}

TEST(WeightedSquareSumPlan, AlignmentChangesHowLoadsHappenNotTheOrderOfAdditions) {
  const sq::Problem problems[] = {
      contiguous(1, (int64_t{1} << 24) + 3, 1, 8),
      contiguous(1000, 4097, 1, 4),
      contiguous(1, 5000, 1027, 2),
      contiguous(3, 70000, 8, 8, /*weight_row=*/true),
      total(contiguous(1, (int64_t{1} << 24) + 3, 1, 8)),
      total(contiguous(1000, 4097, 1, 4)),
      total(contiguous(1, 5000, 1027, 2)),
  };
  for (const auto& problem : problems) {
    SCOPED_TRACE(::testing::Message() << problem.outer << " x " << problem.reduce << " x " << problem.inner);
    const auto aligned = sq::plan_reduction(problem);
    for (const auto& [input_aligned, weight_aligned] : {std::pair{false, true}, {true, false}, {false, false}}) {
      auto moved = problem;
      moved.input_aligned = input_aligned;
      moved.weight_aligned = weight_aligned;
      const auto plan = sq::plan_reduction(moved);
      expect_same_order(aligned, plan);
      if (!input_aligned) {
        EXPECT_FALSE(plan.vectorized);
      }
    }
  }
}

TEST(WeightedSquareSumPlan, SizeOneDimsDoNotSpoilTheLayout) {
  // A size-1 dim's stride is never stepped along: any value gives the same plan.
  auto problem = contiguous(1, 1 << 20, 1, 4);
  const auto plain = sq::plan_reduction(problem);
  problem.input_strides[0] = 7;
  problem.input_strides[2] = 3;
  problem.weight_strides[0] = 5;
  const auto odd = sq::plan_reduction(problem);
  ASSERT_EQ(odd.layout, sq::Layout::Rows);
  EXPECT_EQ(odd.vectorized, plain.vectorized);
  expect_same_order(plain, odd);
}

TEST(WeightedSquareSumPlan, FullReductionsAreTotalsOfFewPartials) {
  for (const int64_t vector : {2, 4, 8}) {
    SCOPED_TRACE(vector);
    // 2^26 contiguous elements: the Rows segments of the non-total plan, a warp each, a partial
    // per block of them: few enough for the last block.
    const auto plain = sq::plan_reduction(contiguous(1, int64_t{1} << 26, 1, vector));
    const auto full = sq::plan_reduction(total(contiguous(1, int64_t{1} << 26, 1, vector)));
    ASSERT_EQ(full.layout, sq::Layout::Rows);
    EXPECT_TRUE(full.vectorized);
    EXPECT_EQ(full.rows.splits, plain.rows.splits);
    EXPECT_EQ(full.rows.segment, plain.rows.segment);
    EXPECT_TRUE(full.passes.empty());
    EXPECT_LE(full.partials, sq::kTotalWarps / sq::kWarpsPerBlock);
    EXPECT_LE(full.rows.segment, sq::kMaxSegment);
    EXPECT_FALSE(full.weight_in_registers());
    expect_total_sound(full);
    EXPECT_FALSE(plain.total);
    EXPECT_TRUE(plain.passes.empty());
  }
}

TEST(WeightedSquareSumPlan, BroadcastRowTotalAddsRowsInWarpsOfSeveral) {
  // x [R, 1024] with w [1024], dim=None: [R, 1024, 1], the weight's row stride 0. Each warp adds
  // several rows, so the partials are about kTotalWarps / kWarpsPerBlock, not R.
  for (const int64_t vector : {2, 4, 8}) {
    SCOPED_TRACE(vector);
    const int64_t rows = (int64_t{1} << 26) / 1024;
    sq::Problem p = contiguous(rows, 1024, 1, vector);
    p.weight_strides = {0, 1, 0};
    const auto plan = sq::plan_reduction(total(p));
    ASSERT_EQ(plan.layout, sq::Layout::Rows);
    EXPECT_TRUE(plan.vectorized);
    EXPECT_FALSE(plan.weight_fixed);
    EXPECT_GT(plan.run, 1);
    EXPECT_TRUE(plan.passes.empty());
    EXPECT_LE(plan.partials, sq::kTotalWarps / sq::kWarpsPerBlock);
    // A short shared row's runs aim at kSharedWeightTotalWarps warps, with or without 16-byte loads.
    const bool short_row = 1024 <= sq::kWarp * vector * sq::kWeightRegisterGroups;
    EXPECT_EQ(plan.shared_weight_row, short_row);
    EXPECT_EQ(plan.run, rows / (short_row ? sq::kSharedWeightTotalWarps : sq::kTotalWarps));
    // A lane's weight groups of a row stay in registers where the row has at most
    // kWeightRegisterGroups groups a lane: rows of 1024 in 2-byte types, not in float32.
    EXPECT_EQ(plan.weight_in_registers(), short_row);
    // Not without 16-byte loads, but the same cut and order of additions.
    sq::Problem misaligned = total(p);
    misaligned.input_aligned = false;
    const auto element_wise = sq::plan_reduction(misaligned);
    EXPECT_FALSE(element_wise.weight_in_registers());
    EXPECT_EQ(element_wise.shared_weight_row, short_row);
    expect_same_order(plan, element_wise);
    expect_total_sound(plan);
    // Twice the rows: the same partials, longer runs.
    p.outer *= 2;
    const auto longer = sq::plan_reduction(total(p));
    EXPECT_EQ(longer.run, 2 * plan.run);
    EXPECT_EQ(longer.partials, plan.partials);
    expect_total_sound(longer);
    // Not for rows with weights of their own, nor for a sum per row.
    EXPECT_FALSE(sq::plan_reduction(total(contiguous(rows, 1024, 1, vector))).weight_in_registers());
    EXPECT_FALSE(sq::plan_reduction(p).weight_in_registers());
  }
}

TEST(WeightedSquareSumPlan, TransposedAndShortTotalsAreTiles) {
  // x.t() of a contiguous [2^16, 1024], all summed: threads along the contiguous dim.
  sq::Problem transposed = contiguous(1024, 1 << 16, 1, 4);
  transposed.input_strides = {1, 1024, 0};
  transposed.weight_strides = {1, 0, 0};  // a weight per column of x: fixed along reduce
  const auto plan = sq::plan_reduction(total(transposed));
  ASSERT_EQ(plan.layout, sq::Layout::Tiles);
  EXPECT_TRUE(plan.tiles.transposed);
  EXPECT_TRUE(plan.weight_fixed);
  EXPECT_TRUE(plan.passes.empty());
  EXPECT_LE(plan.partials, 2 * sq::kTargetBlocks);
  expect_total_sound(plan);
  // Many short rows: many tiles, several per partial.
  const auto short_rows = sq::plan_reduction(total(contiguous(1 << 22, 16, 1, 4)));
  ASSERT_EQ(short_rows.layout, sq::Layout::Tiles);
  EXPECT_GT(short_rows.run, 1);
  EXPECT_LE(short_rows.partials, 2 * sq::kTargetBlocks);
  expect_total_sound(short_rows);
  // One term: one block, which writes the result itself.
  const auto one = sq::plan_reduction(total(contiguous(1, 1, 1, 4)));
  EXPECT_EQ(one.partials, 1);
  EXPECT_TRUE(one.passes.empty());
  expect_total_sound(one);
}

TEST(WeightedSquareSumPlan, TotalsBeyondOneBlocksSerialBoundAddPartialsInPasses) {
  // 2^38 terms (an expanded view needs no memory for them): more partials than the last block
  // may add in series.
  sq::Problem rows = contiguous(int64_t{1} << 28, 1024, 1, 4);
  rows.input_strides = {0, 1, 0};
  rows.weight_strides = {0, 1, 0};
  const auto huge_rows = sq::plan_reduction(total(rows));
  ASSERT_EQ(huge_rows.layout, sq::Layout::Rows);
  EXPECT_FALSE(huge_rows.passes.empty());
  expect_total_sound(huge_rows);
  const auto huge_tiles = sq::plan_reduction(total(contiguous(1, 16, int64_t{1} << 36, 4)));
  ASSERT_EQ(huge_tiles.layout, sq::Layout::Tiles);
  EXPECT_FALSE(huge_tiles.passes.empty());
  expect_total_sound(huge_tiles);
}

}  // namespace

TEST(WeightedSquareSumPlan, PairsTileEveryOutputAndBoundTheSerialAdds) {
  for (const int64_t rows : {1, 127, 128, 129, 4096}) {
    const auto plan = sq::plan_pairs(rows, rows + 1, 64);
    EXPECT_TRUE(plan.fits);
    EXPECT_GE(plan.tiles_i * sq::kPairsTile, rows);
    EXPECT_LT((plan.tiles_i - 1) * sq::kPairsTile, rows);
    EXPECT_GE(plan.tiles_j * sq::kPairsTile, rows + 1);
    EXPECT_LT((plan.tiles_j - 1) * sq::kPairsTile, rows + 1);
  }
  // Chunks: every term in one, none empty, at most kMaxSerial terms each (whole stages but the
  // last), and at most kMaxSerial of them for the second kernel to add.
  for (const int64_t length : {1, 7, 8, 9, 1000, 1024, 1025, 4096, 100000, 1 << 20}) {
    for (const int64_t rows : {1, 1024, 4096}) {
      const auto plan = sq::plan_pairs(rows, rows, length);
      ASSERT_TRUE(plan.fits) << length;
      EXPECT_EQ(plan.chunk_length % sq::kPairsStep, 0);
      EXPECT_LE(plan.chunk_length, sq::kMaxSerial);
      EXPECT_GE(plan.chunks * plan.chunk_length, length);
      EXPECT_LT((plan.chunks - 1) * plan.chunk_length, length);
      EXPECT_LE(plan.chunks, sq::kMaxSerial);
    }
  }
  // The outputs' tiles alone fill the GPU: one chunk where it holds the terms; else chunks fill it
  // to kEnoughBlocks, none shorter than kPairsMinChunk terms.
  EXPECT_EQ(sq::plan_pairs(4096, 4096, 256).chunks, 1);
  const auto few_tiles = sq::plan_pairs(1024, 1024, 4096);
  EXPECT_EQ(few_tiles.tiles_i * few_tiles.tiles_j * few_tiles.chunks, sq::kEnoughBlocks);
  const auto two_tiles = sq::plan_pairs(67, 129, 513);
  EXPECT_EQ(two_tiles.chunks, 513 / sq::kPairsMinChunk);
  EXPECT_GE(two_tiles.chunk_length, sq::kPairsMinChunk);
  EXPECT_FALSE(sq::plan_pairs(8, 8, sq::kMaxSerial * sq::kMaxSerial + 1).fits);
  // The j tiles are the grid's y, which has at most 65535 blocks.
  EXPECT_TRUE(sq::plan_pairs(8, sq::kPairsTile * sq::kMaxGridY, 8).fits);
  EXPECT_FALSE(sq::plan_pairs(8, sq::kPairsTile * sq::kMaxGridY + 1, 8).fits);
}
