// Forward kernels for the layouts that forward_layout.h singles out; each launches on the
// current stream of the iterator's device (the caller's guard has made it current).
#pragma once

#include <ATen/TensorIterator.h>

#include "kernels/cuda/forward_layout.h"

namespace custom::cuda {

void launch_forward_broadcast(at::TensorIteratorBase& iter, const BroadcastPlan& plan);

void launch_forward_transposed(at::TensorIteratorBase& iter, const TransposedPlan& plan);

}  // namespace custom::cuda
