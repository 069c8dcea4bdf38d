// SPDX-License-Identifier: BSD-3-Clause
// The CUDA pairs loop of the reductions (reduction_pairs.cu): out[i, j] = the sum over k of
// Term::value of row i of one operand and row j of the other (ReductionLoops::reduce_pairs).
#pragma once

#include "ops/reduction_frontend.h"

namespace custom::cuda {

template <class Term>
bool reduce_pairs(const detail::Reduction& args);

}  // namespace custom::cuda
