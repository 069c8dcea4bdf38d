// The public C++ API of weighted_square_sum: a call through the dispatcher, never a kernel.
#include <custom_ops/weighted_square_sum.h>

#include "weighted_square_sum_handles.h"

namespace custom {

at::Tensor weighted_square_sum(
    const at::Tensor& input,
    const at::Tensor& weight,
    at::OptionalIntArrayRef dim,
    bool keepdim,
    std::optional<at::ScalarType> dtype) {
  return detail::weighted_square_sum_handle().call(input, weight, dim, keepdim, dtype);
}

}  // namespace custom
