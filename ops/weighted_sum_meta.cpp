// Meta kernels: shapes, strides, dtypes and argument errors without touching data. They run the
// same frontend as the device kernels with no loops, on SymInt shapes, so FakeTensor and
// torch.compile(dynamic=True) need no Python fake implementation.
#include "weighted_sum_registration.h"

TORCH_LIBRARY_IMPL(custom, Meta, m) {
  custom::detail::register_weighted_sum_kernels<custom::detail::kNoLoops>(m);
}
