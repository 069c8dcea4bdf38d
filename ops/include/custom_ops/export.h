// SPDX-License-Identifier: BSD-3-Clause
// Symbol visibility for libcustom_ops.so: the library is built with hidden visibility, so only
// what is marked CUSTOM_OPS_API is part of its ABI.
#pragma once

#if defined(CUSTOM_OPS_BUILDING_LIBRARY)
#define CUSTOM_OPS_API __attribute__((visibility("default")))
#else
#define CUSTOM_OPS_API
#endif
