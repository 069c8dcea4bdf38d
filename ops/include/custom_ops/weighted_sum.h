// Public C++ API of the `custom` operator library.
//
// Every function here calls through the PyTorch dispatcher, so autograd, tracing, Meta/fake
// tensors and whichever device kernel fits the arguments all apply exactly as they do for
// Python callers of torch.ops.custom.*.
#pragma once

#include <array>
#include <tuple>

#include <ATen/core/Tensor.h>

#include <custom_ops/export.h>

namespace custom {

// weight * input**2, elementwise, with broadcasting and type promotion like `weight * input.square()`.
// Half and bfloat16 compute in float32. The result is a new tensor laid out as the composite's
// (channels_last stays channels_last, a transposed input gives a transposed result).
CUSTOM_OPS_API at::Tensor weighted_sum(const at::Tensor& input, const at::Tensor& weight);

// A number as weight, like `input * 2.5` (aten::mul.Scalar): the result has input's dtype for a
// float input (bfloat16 times 2.5 stays bfloat16), the number rounded to it.
CUSTOM_OPS_API at::Tensor weighted_sum(const at::Tensor& input, const at::Scalar& weight);

// Writes weight * input**2 into `out`, resizing it (with ATen's warning) when its shape is wrong.
CUSTOM_OPS_API at::Tensor& weighted_sum_out(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight);

// self = weight * self**2 in place; weight must broadcast to self's shape.
CUSTOM_OPS_API at::Tensor& weighted_sum_(at::Tensor& self, const at::Tensor& weight);

// The fused backward: (grad_input, grad_weight) = (2 * weight * input * grad, input**2 * grad), each
// summed back to its argument's shape. A gradient whose output_mask entry is false is undefined.
CUSTOM_OPS_API std::tuple<at::Tensor, at::Tensor> weighted_sum_backward(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, std::array<bool, 2> output_mask);

}  // namespace custom
