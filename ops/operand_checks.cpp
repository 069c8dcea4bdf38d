// SPDX-License-Identifier: BSD-3-Clause
#include "operand_checks.h"

#include <ATen/ExpandUtils.h>
#include <ATen/native/TypeProperties.h>
#include <c10/core/ScalarType.h>

#include "floating_types.h"

namespace custom::detail {

void check_operand(const at::Tensor& tensor, const char* op, const char* arg) {
  TORCH_CHECK(tensor.defined(), op, ": ", arg, " is an undefined tensor");
  TORCH_CHECK(
      tensor.layout() == at::kStrided && !tensor.is_nested() && !tensor.is_mkldnn(), op, ": ", arg,
      " must be a dense strided tensor, got layout ", tensor.layout(), tensor.is_nested() ? " (nested)" : "");
  TORCH_CHECK(
      is_supported_floating_type(tensor.scalar_type()), op, ": ", arg,
      " must have dtype float16, bfloat16, float32 or float64, got ", tensor.scalar_type());
}

void check_same_device(
    const at::Tensor& a, const char* a_name, const at::Tensor& b, const char* b_name, const char* op) {
  TORCH_CHECK(
      a.device() == b.device(), op, ": expected ", a_name, " and ", b_name, " on the same device, got ", a_name, " on ",
      a.device(), " and ", b_name, " on ", b.device());
}

c10::SymDimVector broadcast_shape(
    const at::Tensor& a, const char* a_name, const at::Tensor& b, const char* b_name, const char* op) {
  const auto a_sizes = a.sym_sizes();
  const auto b_sizes = b.sym_sizes();
  if (!a.unsafeGetTensorImpl()->has_symbolic_sizes_strides() &&
      !b.unsafeGetTensorImpl()->has_symbolic_sizes_strides() && a.sizes().equals(b.sizes())) {
    return c10::SymDimVector(a_sizes.begin(), a_sizes.end());  // the common case, without guards
  }
  const auto ndim = std::max(a_sizes.size(), b_sizes.size());
  c10::SymDimVector shape(ndim);
  // Right-aligned, as numpy broadcasting; each comparison is a guard under symbolic shapes.
  for (size_t i = 0; i < ndim; ++i) {
    const bool in_a = i < a_sizes.size();
    const bool in_b = i < b_sizes.size();
    const c10::SymInt one = 1;
    const c10::SymInt& sa = in_a ? a_sizes[a_sizes.size() - 1 - i] : one;
    const c10::SymInt& sb = in_b ? b_sizes[b_sizes.size() - 1 - i] : one;
    TORCH_CHECK(
        sa == sb || sa == 1 || sb == 1, op, ": ", a_name, " of shape ", a_sizes, " and ", b_name, " of shape ", b_sizes,
        " are not broadcastable (dimension ", ndim - 1 - i, ": ", sa, " vs ", sb, ")");
    shape[ndim - 1 - i] = sa == 1 ? sb : sa;
  }
  return shape;
}

at::ScalarType result_dtype(std::initializer_list<at::Tensor> tensors) {
  // at::result_type's own rule, without its trip through the dispatcher.
  at::native::ResultTypeState state{};
  for (const auto& tensor : tensors) {
    if (tensor.defined()) {
      state = at::native::update_result_type_state(tensor, state);
    }
  }
  return at::native::result_type(state);
}

at::ScalarType check_forward_inputs(const at::Tensor& input, const at::Tensor& weight, const char* op) {
  check_operand(input, op, "input");
  check_operand(weight, op, "weight");
  check_same_device(input, "input", weight, "weight", op);
  return result_dtype({input, weight});
}

void check_destination(
    const at::Tensor& dest, const char* arg, at::ScalarType result, c10::Device device, const char* op) {
  check_operand(dest, op, arg);
  TORCH_CHECK(
      dest.device() == device, op, ": expected ", arg, " on ", device, " like the inputs, got ", arg, " on ",
      dest.device());
  TORCH_CHECK(
      c10::canCast(result, dest.scalar_type()), op, ": result type ", result, " can't be cast to the dtype of ", arg,
      ", ", dest.scalar_type());
}

}  // namespace custom::detail
