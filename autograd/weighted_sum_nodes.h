// The autograd graph nodes of the `custom` ops, written like the nodes ATen generates for its own
// ops (torch/csrc/autograd/generated/Functions.h): saved inputs as SavedVariables, a backward
// that calls dispatcher ops which are differentiable themselves (so every order of derivative
// works, under torch.func transforms too), and compiled-autograd support.
#pragma once

#include <mutex>
#include <string>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/saved_variable.h>

namespace custom::autograd {

using torch::autograd::SavedVariable;
using torch::autograd::variable_list;
using torch::dynamo::autograd::CompiledNodeArgs;
using torch::dynamo::autograd::SwapSavedVariables;

// Backward of y = weight * input**2, and of the in-place form (then input_ is a copy of self taken
// before the write). Next edges: input, weight.
struct WeightedSumBackward0 : torch::autograd::TraceableFunction {
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return "WeightedSumBackward0"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    input_.reset_data();
    weight_.reset_data();
  }
  void compiled_args(CompiledNodeArgs& args) const override;
  variable_list apply_with_saved(const variable_list& grads, SwapSavedVariables& saved) override;

  SavedVariable input_;
  SavedVariable weight_;
};

// Backward of (grad_input, grad_weight) = weighted_sum_backward(grad, input, weight, mask), for
// second and higher order. Inputs: the gradients of grad_input and grad_weight (an output the
// mask left out has an undefined slot). Next edges: grad, input, weight.
struct WeightedSumBackwardBackward0 : torch::autograd::TraceableFunction {
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return "WeightedSumBackwardBackward0"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    grad_.reset_data();
    input_.reset_data();
    weight_.reset_data();
  }
  void compiled_args(CompiledNodeArgs& args) const override;
  variable_list apply_with_saved(const variable_list& grads, SwapSavedVariables& saved) override;

  SavedVariable grad_;
  SavedVariable input_;
  SavedVariable weight_;
};

}  // namespace custom::autograd
