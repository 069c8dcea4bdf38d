// Public C++ API of custom::weighted_square_sum, the reduction sum(weight * input**2).
//
// The call goes through the PyTorch dispatcher, so autograd, vmap, tracing, Meta/fake tensors and
// whichever device kernel fits the arguments apply exactly as they do for Python callers of
// torch.ops.custom.weighted_square_sum.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/util/OptionalArrayRef.h>

#include <custom_ops/export.h>

namespace custom {

// (weight * input.square()).sum(dim, keepdim, dtype=dtype) in one pass, without the temporary:
// input and weight broadcast together; `dim` empty or absent reduces every dim (as torch.sum);
// the result has `dtype` if given, else torch.result_type(input, weight). Sums in float32
// (float64 for float64), pairwise, in an order fixed by the shape: the same bits on every run.
// float16 and bfloat16 results are rounded once.
CUSTOM_OPS_API at::Tensor weighted_square_sum(
    const at::Tensor& input,
    const at::Tensor& weight,
    at::OptionalIntArrayRef dim = std::nullopt,
    bool keepdim = false,
    std::optional<at::ScalarType> dtype = std::nullopt);

}  // namespace custom
