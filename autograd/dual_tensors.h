// SPDX-License-Identifier: BSD-3-Clause
// What every Autograd kernel asks of its operands: their forward-mode tangents and primals, and
// whether they are dense tensors the graph bookkeeping can handle.
#pragma once

#include <algorithm>
#include <initializer_list>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>

namespace custom::autograd {

// The tangent of a dual tensor at forward level 0 (undefined when it has none) and its primal,
// as ATen's generated kernels take them (toNonOptFwGrad / toNonOptPrimal). Only level 0 exists:
// torch.func's jvp gives each of its levels its own tensors, and level 0 on them.
inline at::Tensor tangent_of(const at::Tensor& t) {
  return t.defined() ? t._fw_grad(/*level=*/0) : at::Tensor();
}
inline at::Tensor primal_of(const at::Tensor& t) {
  return torch::autograd::isFwGradDefined(t) ? t._fw_primal(/*level=*/0) : t;
}

// Undefined, nested, sparse or mkldnn operands go straight to the kernels below autograd, which
// name the argument and the problem, before any graph bookkeeping could fail less clearly.
inline bool all_dense(std::initializer_list<at::Tensor> tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) {
    return t.defined() && t.layout() == at::kStrided && !t.is_nested() && !t.is_mkldnn();
  });
}

}  // namespace custom::autograd
