// The CPU per-channel backward loop of one instruction set (CPU_CAPABILITY), for its loops table.
#pragma once

#include "ops/weighted_sum_frontend.h"

namespace custom::cpu::CPU_CAPABILITY {

void backward_per_channel(const detail::PerChannelBackward& args);

}  // namespace custom::cpu::CPU_CAPABILITY
