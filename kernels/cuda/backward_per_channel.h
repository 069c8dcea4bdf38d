// SPDX-License-Identifier: BSD-3-Clause
// The CUDA per-channel backward loop (backward_per_channel.cu), for the loops table; defined for
// every term of CUSTOM_OPS_TERMS. The block geometry of its first pass and its second stage's
// shape are host-only and header-only here, so that the CPU tests check them without a GPU.
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
inline constexpr int64_t kVectorsPerThread = 32;  // per lane and block at least: a block's least work
// About this many first-pass blocks whatever the rows: enough to fill the GPU, and few partials.
inline constexpr int64_t kTargetBlocks = 256;

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

// About kTargetBlocks blocks in all (rows_per_block grows with the rows), never fewer rows per
// block than lanes * kVectorsPerThread, and always a multiple of lanes * kUnroll rows.
// Depends on the shape only, never on the device: the same bits on every GPU.
inline DownRowsGeometry down_rows_geometry(int64_t rows, int64_t width, int vec) {
  DownRowsGeometry g;
  const int64_t vectors_per_row = width / vec;
  while (g.tile < kThreads && g.tile < vectors_per_row) {
    g.tile *= 2;
  }
  g.lanes = kThreads / g.tile;
  g.column_tiles = (vectors_per_row + g.tile - 1) / g.tile;
  const int64_t wanted_row_blocks = std::max<int64_t>(1, kTargetBlocks / g.column_tiles);
  const int64_t step = int64_t{g.lanes} * kUnroll;
  const int64_t spread = ((rows + wanted_row_blocks - 1) / wanted_row_blocks + step - 1) / step * step;
  g.rows_per_block = std::max(g.lanes * kVectorsPerThread, spread);
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
