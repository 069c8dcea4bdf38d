// The one place where the `custom` operators are declared. Every other file only registers
// kernels for these schemas with TORCH_LIBRARY_IMPL. CUSTOM_OPS_LIBRARY is TORCH_LIBRARY that a
// second copy of this library in the process cannot abort (define_library_once.h).
//
// The out= and in-place overloads mutate an argument and return nothing: torch.compile's
// auto-functionalization only handles mutating custom ops without aliased returns.
#include "define_library_once.h"

CUSTOM_OPS_LIBRARY(custom, m) {
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def("weighted_sum(Tensor input, Tensor weight) -> Tensor", tags);
  // A Python number as weight, like aten::mul.Scalar (weighted_sum_scalar.cpp).
  m.def("weighted_sum.Scalar(Tensor input, Scalar weight) -> Tensor", tags);
  m.def("weighted_sum.out(Tensor input, Tensor weight, *, Tensor(a!) out) -> ()", tags);
  m.def("weighted_sum_(Tensor(a!) self, Tensor weight) -> ()", tags);
  // Which gradients to compute is an argument, so an unneeded one costs nothing.
  m.def(
      "weighted_sum_backward(Tensor grad, Tensor input, Tensor weight, bool[2] output_mask)"
      " -> (Tensor, Tensor)",
      tags);

  // sum(weight * input**2) over `dim` (every dim when None or empty), like torch.sum. Its
  // backward is weighted_sum_backward's with the grad broadcast back over the reduced dims.
  m.def(
      "weighted_square_sum(Tensor input, Tensor weight, int[1]? dim=None, bool keepdim=False, *,"
      " ScalarType? dtype=None) -> Tensor",
      tags);
}
