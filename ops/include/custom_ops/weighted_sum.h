// SPDX-License-Identifier: BSD-3-Clause
// The 0.1 header of custom::weighted_sum and its _out, in-place and backward functions, kept through 0.2 so that
// 0.1 applications still build: <custom_ops/custom_ops.h> declares the same functions. Removed in 0.3.
#pragma once

// Warned as PyTorch warns for its deprecated headers (torch/torch.h): #warning for GCC and Clang,
// which show it even from an -isystem directory (where find_package(CustomOps) puts ours), and
// #pragma message for MSVC. Once per translation unit: #pragma once skips a second inclusion.
#ifdef _MSC_VER
#pragma message(                                                            \
    "<custom_ops/weighted_sum.h> is deprecated since 0.2, removed in 0.3: " \
    "include <custom_ops/custom_ops.h>")
#else
#warning "<custom_ops/weighted_sum.h> is deprecated since 0.2, removed in 0.3: include <custom_ops/custom_ops.h>"
#endif

#include <custom_ops/custom_ops.h>
