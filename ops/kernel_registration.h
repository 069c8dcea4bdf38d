// SPDX-License-Identifier: BSD-3-Clause
// The one registration helper of every operator: turns a frontend function
// `Result impl(const Loops&, First first, Rest... rest)` into the kernel of one dispatch key, with
// that key's loops bound at compile time and its device guard on `first`. Each op's frontend
// header then lists its (schema name, frontend function) pairs, and each key's kernel file calls
// that list with its loops.
#pragma once

#include <torch/library.h>

namespace custom::detail {

// For keys with no device to select (CPU, Meta).
struct NoDeviceGuard {
  explicit NoDeviceGuard(const at::Tensor& /*unused*/) {}
};

template <typename DeviceGuard, const auto& Loops, auto Impl>
struct GuardedKernel;

template <
    typename DeviceGuard,
    const auto& Loops,
    typename Result,
    typename LoopsType,
    typename First,
    typename... Rest,
    Result (*Impl)(const LoopsType&, First, Rest...)>
struct GuardedKernel<DeviceGuard, Loops, Impl> {
  static Result call(First first, Rest... rest) {
    DeviceGuard guard(first);
    return Impl(Loops, first, rest...);
  }
};

template <typename DeviceGuard, const auto& Loops, auto Impl>
void register_kernel(torch::Library& m, const char* name) {
  m.impl(name, TORCH_FN((GuardedKernel<DeviceGuard, Loops, Impl>::call)));
}

}  // namespace custom::detail
