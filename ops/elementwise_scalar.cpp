// SPDX-License-Identifier: BSD-3-Clause
// Every elementwise operator's .Scalar overload: a number as weight, like aten::mul.Scalar. One
// composite kernel: it makes the number a 0-dim tensor on input's device and calls the tensor
// overload, so autograd (gradient w.r.t. input), forward AD, vmap, Meta and torch.compile all
// come from that overload's kernels.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <torch/library.h>

#include "handles.h"
#include "operand_checks.h"
#include "operator_rows.h"

namespace custom::detail {
namespace {

template <class Row>
at::Tensor elementwise_scalar(const at::Tensor& input, const at::Scalar& weight) {
  // The documented dtype refusal for an integer input, before its dtype has to hold the number.
  check_operand(input, Row::name, "input");
  // mul.Scalar's dtype: a number does not promote a float tensor of its category. The 0-dim weight
  // is made in that dtype outright (not as a flagged "wrapped number", a flag graph capture drops),
  // so every caller, traced or not, gets the same promotion. Made in the number's own type and
  // then cast, as ATen casts it: a number past the dtype's range becomes inf, not an error.
  const auto dtype = at::result_type(input, weight);
  const auto number = at::scalar_tensor(weight, input.options().dtype(weight.type()));
  return functional_handle<Row>().call(input, number.to(dtype));
}

void register_scalar_overloads(torch::Library& m) {
  rows::ElementwiseRows::for_each([&]<class Row>() { m.impl(Row::scalar_name, &elementwise_scalar<Row>); });
}

}  // namespace
}  // namespace custom::detail

TORCH_LIBRARY_IMPL(custom, CompositeImplicitAutograd, m) {
  custom::detail::register_scalar_overloads(m);
}

// functorch's vmap key comes before CompositeImplicitAutograd: without this the batched fallback
// (a per-example loop, and none at all for a batch of size 0) would run. Registered there as
// ATen registers its own composites' decompositions; the tensor overload's batching rule does
// the rest.
TORCH_LIBRARY_IMPL(custom, FuncTorchBatched, m) {
  custom::detail::register_scalar_overloads(m);
}
