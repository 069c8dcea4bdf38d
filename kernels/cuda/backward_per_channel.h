// The CUDA per-channel backward loop (backward_per_channel.cu), for the loops table; defined for
// every term of CUSTOM_OPS_TERMS.
#pragma once

#include "ops/backward_per_channel_plan.h"

namespace custom::cuda {

// Launches on the current stream of the tensors' device (the caller's guard has made it current).
template <class Term>
void backward_per_channel(const detail::PerChannelBackward& args);

}  // namespace custom::cuda
