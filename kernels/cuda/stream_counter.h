// A device counter per CUDA stream, for kernels whose blocks count themselves to find the last
// one (weighted_square_sum's totals). Such a counter must read zero at launch; one of its own per
// call costs a memset on the stream before each launch, a visible share of a large total
// (docs/benchmarks.md). A stream's counter needs none: kernels on one stream run one after another,
// and each leaves the counter at zero again (its last block resets it).
#pragma once

#include <c10/cuda/CUDAStream.h>

namespace custom::cuda {

// The counter of `stream` (on the stream's device): zero before the stream's next kernel, as long
// as every kernel that counts on it resets it. nullptr while `stream` is being captured into a
// CUDA graph: a graph may replay on any stream, next to this one's own work, so a captured
// kernel needs a counter of its own, zeroed in the graph.
unsigned int* stream_counter(const c10::cuda::CUDAStream& stream);

}  // namespace custom::cuda
