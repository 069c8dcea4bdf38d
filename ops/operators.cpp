// The public C++ API: each function calls its operator through the dispatcher, never a kernel
// directly, so C++ callers get autograd and every dispatch key.
#include <custom_ops/weighted_sum.h>

#include "weighted_sum_handles.h"

namespace custom {

at::Tensor weighted_sum(const at::Tensor& input, const at::Tensor& weight) {
  return detail::weighted_sum_handle().call(input, weight);
}

at::Tensor weighted_sum(const at::Tensor& input, const at::Scalar& weight) {
  return detail::weighted_sum_scalar_handle().call(input, weight);
}

at::Tensor& weighted_sum_out(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight) {
  detail::weighted_sum_out_handle().call(input, weight, out);
  return out;
}

at::Tensor& weighted_sum_(at::Tensor& self, const at::Tensor& weight) {
  detail::weighted_sum_inplace_handle().call(self, weight);
  return self;
}

std::tuple<at::Tensor, at::Tensor> weighted_sum_backward(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, std::array<bool, 2> output_mask) {
  return detail::weighted_sum_backward_handle().call(grad, input, weight, output_mask);
}

}  // namespace custom
