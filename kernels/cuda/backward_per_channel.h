// The CUDA per-channel backward loop (weighted_sum_backward_per_channel.cu), for the loops table.
#pragma once

#include "ops/weighted_sum_frontend.h"

namespace custom::cuda {

// Launches on the current stream of the tensors' device (the caller's guard has made it current).
void backward_per_channel(const detail::PerChannelBackward& args);

}  // namespace custom::cuda
