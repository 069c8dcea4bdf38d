// SPDX-License-Identifier: BSD-3-Clause
// When the CPU loops switch to streaming stores (kernels/cpu/streaming_store.h).
#pragma once

#include <cstdint>

namespace custom::cpu {

// Bytes an elementwise op must touch (inputs and outputs) before its outputs are written with
// streaming stores: the size of this CPU's last-level cache, so that outputs that could stay
// cached for the next op still go through the cache. CUSTOM_OPS_CPU_STREAMING_MIN_BYTES (read
// once) overrides it, e.g. 0 to always stream.
int64_t streaming_min_bytes();

}  // namespace custom::cpu
