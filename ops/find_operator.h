// SPDX-License-Identifier: BSD-3-Clause
// A typed dispatcher handle of one operator, for the per-op handle headers (*_handles.h).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace custom::detail {

template <typename Signature>
c10::TypedOperatorHandle<Signature> find_operator(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).typed<Signature>();
}

}  // namespace custom::detail
