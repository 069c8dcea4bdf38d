// The CUDA per-channel backward loop (backward_per_channel.cu), for the loops table; defined for
// every term of CUSTOM_OPS_TERMS. The block geometry of its first pass and its variants are
// host-only and header-only here, so that the CPU tests check them without a GPU.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/backward_per_channel_plan.h"

namespace custom::cuda {

// Launches on the current stream of the tensors' device (the caller's guard has made it current).
template <class Term>
void backward_per_channel(const detail::PerChannelBackward& args);

namespace per_channel {

inline constexpr int kThreads = 256;
inline constexpr int kUnroll = 4;  // vectors of each input in flight per thread before the first use
inline constexpr int64_t kVectorsPerThread = 32;  // per lane and block at least: sets a block's work

// Issue 40's sweep: variants chosen once per process by CUSTOM_OPS_PER_CHANNEL_VARIANT (0 when
// unset). The losers go before landing.
//  0: today's: rows_per_block = lanes * 32, float32 (float64) partials per 32-row block, and a
//     second stage of one thread per channel walking every row block in turn.
//  1: 0's first pass; the second stage over [groups, channels] by blocks of 32 channels x 32
//     slices of the groups (8 loads in flight per thread), a fixed tree over the slices.
//  2-4: a first pass of about `target_blocks` blocks whatever the rows (rows_per_block grows with
//     them: fewer partials), each lane's terms summed in float32 per unrolled group of kUnroll
//     rows and those groups in float64 (lanes walk up to R / row_blocks rows), the lanes' tree in
//     float64, partials rounded to float32 once; 1's second stage.
struct PerChannelVariant {
  bool wide_second_stage = false;
  bool double_lanes = false;
  int64_t target_blocks = 0;  // 0: rows_per_block = lanes * kVectorsPerThread
};

inline constexpr int kPerChannelVariants = 5;

constexpr PerChannelVariant per_channel_variant_of(int variant) {
  switch (variant) {
    case 1:
      return {true, false, 0};
    case 2:
      return {true, true, 1024};
    case 3:
      return {true, true, 512};
    case 4:
      return {true, true, 256};
    default:
      return {};
  }
}

// The variant of this process: CUSTOM_OPS_PER_CHANNEL_VARIANT, read once (0 when unset; any other
// text than 0..kPerChannelVariants-1 is an error, so that a sweep never times the wrong one).
int per_channel_variant();

// The first pass's blocks over the matrix [rows, width] read in vectors of `vec` elements
// (width % vec == 0): blockDim = (tile, lanes), tile columns (in vectors) a power of two up to
// kThreads and lanes = kThreads / tile rows at a time; row_blocks blocks of rows_per_block rows
// (a multiple of lanes) down each of column_tiles tiles.
struct DownRowsGeometry {
  int tile = 1;
  int lanes = kThreads;
  int64_t rows_per_block = 0;
  int64_t row_blocks = 0;
  int64_t column_tiles = 0;
};

// target_blocks 0: lanes * kVectorsPerThread rows per block (variants 0 and 1); else about
// target_blocks blocks in all, never fewer rows per block than that, and a multiple of
// lanes * kUnroll rows. Depends on the shape only, never on the device: the same bits on every GPU.
inline DownRowsGeometry down_rows_geometry(int64_t rows, int64_t width, int vec, int64_t target_blocks) {
  DownRowsGeometry g;
  const int64_t vectors_per_row = width / vec;
  while (g.tile < kThreads && g.tile < vectors_per_row) {
    g.tile *= 2;
  }
  g.lanes = kThreads / g.tile;
  g.column_tiles = (vectors_per_row + g.tile - 1) / g.tile;
  g.rows_per_block = g.lanes * kVectorsPerThread;
  if (target_blocks > 0) {
    const int64_t wanted_row_blocks = std::max<int64_t>(1, target_blocks / g.column_tiles);
    const int64_t step = int64_t{g.lanes} * kUnroll;
    const int64_t spread = ((rows + wanted_row_blocks - 1) / wanted_row_blocks + step - 1) / step * step;
    g.rows_per_block = std::max(g.rows_per_block, spread);
  }
  g.row_blocks = (rows + g.rows_per_block - 1) / g.rows_per_block;
  return g;
}

// The second stage's shape when the partials are [groups, channels] (per_group == 1): the wide
// kernel's blocks of kSumLanes channels x kSumSlices slices of the groups, each thread kSumBatch
// loads in flight; the wide kernel runs from kWideMinGroups groups (fewer: a thread per channel).
inline constexpr int kSumLanes = 32;
inline constexpr int kSumSlices = 32;
inline constexpr int kSumBatch = 8;
inline constexpr int64_t kWideMinGroups = 16;

}  // namespace per_channel
}  // namespace custom::cuda
