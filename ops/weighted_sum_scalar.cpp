// custom::weighted_sum.Scalar: a number as weight, like aten::mul.Scalar. One CompositeImplicitAutograd
// kernel for every key: it makes the number a 0-dim tensor on input's device and calls the tensor
// overload, so autograd (gradient w.r.t. input), forward AD, vmap, Meta and torch.compile all come
// from that overload's kernels.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <torch/library.h>

#include <custom_ops/weighted_sum.h>

namespace {

at::Tensor weighted_sum_scalar(const at::Tensor& input, const at::Scalar& weight) {
  // mul.Scalar's dtype: a number does not promote a float tensor of its category. The 0-dim weight
  // is made in that dtype outright (not as a flagged "wrapped number", a flag graph capture drops),
  // so every caller, traced or not, gets the same promotion.
  const auto dtype = at::result_type(input, weight);
  return custom::weighted_sum(input, at::scalar_tensor(weight, input.options().dtype(dtype)));
}

}  // namespace

TORCH_LIBRARY_IMPL(custom, CompositeImplicitAutograd, m) {
  m.impl("weighted_sum.Scalar", weighted_sum_scalar);
}
