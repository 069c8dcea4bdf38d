// The layout of the functional op's result: the strides `weight * input.square()` gets from
// TensorIterator (channels_last in, channels_last out; a transposed input, a transposed result),
// computed on SymInts so the Meta kernel gives the same strides under dynamic shapes.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/DimVector.h>

namespace custom::detail {

// Strides of a dense tensor of `shape` laid out as `weight * input.square()` lays out its result.
c10::SymDimVector composite_output_strides(
    const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef shape, at::ScalarType dtype);

}  // namespace custom::detail
