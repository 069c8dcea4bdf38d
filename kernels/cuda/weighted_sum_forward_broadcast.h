// The forward for a broadcast row or column (weighted_sum_forward_layout.h picks it). Launches on
// the current stream of the iterator's device (the caller's guard has made it current).
#pragma once

#include <ATen/TensorIterator.h>

#include "kernels/cuda/weighted_sum_forward_layout.h"

namespace custom::cuda {

void launch_forward_broadcast(at::TensorIteratorBase& iter, const BroadcastPlan& plan);

}  // namespace custom::cuda
