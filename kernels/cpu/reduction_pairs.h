// SPDX-License-Identifier: BSD-3-Clause
// The CPU pairs loop of the reductions (reduction_pairs.cpp): out[i, j] = the sum over k of
// Term::value of row i of one operand and row j of the other (ReductionLoops::reduce_pairs).
// Compiled per instruction set, as the reduction loops that list it (reduction_kernel.cpp).
#pragma once

#include "ops/reduction_frontend.h"

namespace custom::cpu::CPU_CAPABILITY {

template <class Term>
bool reduce_pairs(const detail::Reduction& args);

}  // namespace custom::cpu::CPU_CAPABILITY
