// The autograd node of weighted_square_sum (see weighted_sum_nodes.h for the pattern).
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/saved_variable.h>

namespace custom::autograd {

// Backward of y = sum(weight * input**2, dim_, keepdim_): the grad broadcast back over the reduced
// dims, then weighted_sum_backward, so the reduction's backward is the elementwise op's fused one
// (and every higher order with it). Next edges: input, weight.
struct WeightedSquareSumBackward0 : torch::autograd::TraceableFunction {
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override;
  std::string name() const override { return "WeightedSquareSumBackward0"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    input_.reset_data();
    weight_.reset_data();
  }
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override;
  torch::autograd::variable_list apply_with_saved(
      const torch::autograd::variable_list& grads, torch::dynamo::autograd::SwapSavedVariables& saved) override;

  torch::autograd::SavedVariable input_;
  torch::autograd::SavedVariable weight_;
  std::vector<int64_t> dim_;  // as given; empty: every dim
  bool keepdim_ = false;
};

// The grad of a reduction's result, broadcast to the shape of its terms: reduced dims put back
// (when keepdim was false) and expanded. No copy. Used by the node and by the tangent rule.
at::Tensor broadcast_over_reduced(
    const at::Tensor& grad, c10::SymIntArrayRef shape, const std::vector<int64_t>& dim, bool keepdim);

}  // namespace custom::autograd
