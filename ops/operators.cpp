// SPDX-License-Identifier: BSD-3-Clause
// The public C++ API (custom_ops/custom_ops.h), for every row of the operator table: each
// function calls its operator through the dispatcher, never a kernel directly, so C++ callers get
// autograd and every dispatch key.
#include <custom_ops/custom_ops.h>

#include "handles.h"

namespace custom {

#define CUSTOM_OPS_DEFINE_BACKWARD(Term_, backward_)                                                                \
  std::tuple<at::Tensor, at::Tensor> backward_(                                                                     \
      const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, std::array<bool, 2> output_mask) { \
    return detail::backward_handle<rows::BackwardOf<terms::Term_>>().call(grad, input, weight, output_mask);        \
  }
CUSTOM_OPS_TERMS(CUSTOM_OPS_DEFINE_BACKWARD)
#undef CUSTOM_OPS_DEFINE_BACKWARD

#define CUSTOM_OPS_DEFINE_ELEMENTWISE(name_, Term_)                                             \
  at::Tensor name_(const at::Tensor& input, const at::Tensor& weight) {                         \
    return detail::functional_handle<rows::name_>().call(input, weight);                        \
  }                                                                                             \
  at::Tensor name_(const at::Tensor& input, const at::Scalar& weight) {                         \
    return detail::scalar_handle<rows::name_>().call(input, weight);                            \
  }                                                                                             \
  at::Tensor& name_##_out(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight) { \
    detail::out_handle<rows::name_>().call(input, weight, out);                                 \
    return out;                                                                                 \
  }                                                                                             \
  at::Tensor& name_##_(at::Tensor& self, const at::Tensor& weight) {                            \
    detail::inplace_handle<rows::name_>().call(self, weight);                                   \
    return self;                                                                                \
  }
CUSTOM_OPS_ELEMENTWISE_OPERATORS(CUSTOM_OPS_DEFINE_ELEMENTWISE)
#undef CUSTOM_OPS_DEFINE_ELEMENTWISE

#define CUSTOM_OPS_DEFINE_REDUCTION(name_, Term_)                                                   \
  at::Tensor name_(                                                                                 \
      const at::Tensor& input, const at::Tensor& weight, at::OptionalIntArrayRef dim, bool keepdim, \
      std::optional<at::ScalarType> dtype) {                                                        \
    return detail::reduction_handle<rows::name_>().call(input, weight, dim, keepdim, dtype);        \
  }
CUSTOM_OPS_REDUCTION_OPERATORS(CUSTOM_OPS_DEFINE_REDUCTION)
#undef CUSTOM_OPS_DEFINE_REDUCTION

}  // namespace custom
