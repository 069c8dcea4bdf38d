// SPDX-License-Identifier: BSD-3-Clause
// The CPU per-channel backward loop of one instruction set (CPU_CAPABILITY), for its loops table;
// defined for every term of CUSTOM_OPS_TERMS.
#pragma once

#include "ops/backward_per_channel_plan.h"

namespace custom::cpu::CPU_CAPABILITY {

template <class Term>
void backward_per_channel(const detail::PerChannelBackward& args);

}  // namespace custom::cpu::CPU_CAPABILITY
