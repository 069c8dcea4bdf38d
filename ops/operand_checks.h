// SPDX-License-Identifier: BSD-3-Clause
// Argument checks and shape/dtype rules shared by every operator and by its CPU, CUDA and Meta
// kernels, so every op and key accepts the same inputs, gives the same errors and infers the same
// output.
// Shapes are SymInts throughout: the Meta kernels run on symbolic shapes under torch.compile.
#pragma once

#include <initializer_list>

#include <ATen/core/Tensor.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/DimVector.h>

namespace custom::detail {

// A tensor the op can read or write: defined, strided, and float16/bfloat16/float32/float64.
void check_operand(const at::Tensor& tensor, const char* op, const char* arg);

// Both tensors on one device; the message names them and their devices.
void check_same_device(
    const at::Tensor& a, const char* a_name, const at::Tensor& b, const char* b_name, const char* op);

// The broadcast shape of two tensors; the error names both arguments and their shapes.
c10::SymDimVector broadcast_shape(
    const at::Tensor& a, const char* a_name, const at::Tensor& b, const char* b_name, const char* op);

// torch.result_type of the defined tensors: 0-dim tensors promote like Python scalars of their
// category. The forward's result dtype, and the dtype every derivative computes in.
at::ScalarType result_dtype(std::initializer_list<at::Tensor> tensors);

// Checks input and weight of the functional/out overloads and returns the result dtype,
// torch.result_type(input, weight) (0-dim tensors promote like Python scalars of their category).
at::ScalarType check_forward_inputs(const at::Tensor& input, const at::Tensor& weight, const char* op);

// Checks a tensor that will receive a result of dtype `result`: a float tensor on `device` that
// `result` can be cast to under ATen's rules.
void check_destination(
    const at::Tensor& dest, const char* arg, at::ScalarType result, c10::Device device, const char* op);

}  // namespace custom::detail
