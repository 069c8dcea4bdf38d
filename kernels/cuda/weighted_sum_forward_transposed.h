// The forward for a transposed input (weighted_sum_forward_layout.h picks it). Launches on the
// current stream of the iterator's device (the caller's guard has made it current).
#pragma once

#include <ATen/TensorIterator.h>

#include "kernels/cuda/weighted_sum_forward_layout.h"

namespace custom::cuda {

void launch_forward_transposed(at::TensorIteratorBase& iter, const TransposedPlan& plan);

}  // namespace custom::cuda
