// Autograd kernels: registered at the Autograd key, they record the graph and re-enter the
// dispatcher below autograd for the computation, so every caller (Python, C++, TorchScript,
// torch.compile) differentiates the op the same way.
#include <algorithm>

#include <torch/autograd.h>
#include <torch/library.h>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>

#include <custom_ops/weighted_sum.h>

namespace custom {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The gradients of y = weight * input**2, reduced to each argument's shape, by the fused backward
// operator. That operator is differentiable itself (below), so create_graph and second order work.
variable_list weighted_sum_gradients(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, std::array<bool, 2> needed) {
  if (!needed[0] && !needed[1]) {
    return {at::Tensor(), at::Tensor()};
  }
  auto [grad_input, grad_weight] = custom::weighted_sum_backward(grad, input, weight, needed);
  return {grad_input, grad_weight};
}

at::Tensor add_defined(const at::Tensor& sum, const at::Tensor& term) {
  return sum.defined() ? sum + term : term;
}

// Differentiates (grad_input, grad_weight) = (sum_to(2 w x g), sum_to(x^2 g)) with plain ATen ops,
// which are differentiable again, so every higher order works too.
class WeightedSumBackwardFunction : public torch::autograd::Function<WeightedSumBackwardFunction> {
 public:
  // Returns only the gradients output_mask asks for: autograd cannot track undefined outputs.
  static variable_list forward(
      AutogradContext* ctx,
      const at::Tensor& grad,
      const at::Tensor& input,
      const at::Tensor& weight,
      std::array<bool, 2> output_mask) {
    ctx->save_for_backward({grad, input, weight});
    ctx->saved_data["output_mask"] = std::vector<bool>{output_mask[0], output_mask[1]};
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [grad_input, grad_weight] = custom::weighted_sum_backward(grad, input, weight, output_mask);
    variable_list outputs;
    if (output_mask[0]) outputs.push_back(grad_input);
    if (output_mask[1]) outputs.push_back(grad_weight);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& grad = saved[0];
    const auto& input = saved[1];
    const auto& weight = saved[2];
    const auto output_mask = ctx->saved_data["output_mask"].toBoolList();
    const at::Tensor grad_grad_input = output_mask[0] ? grad_outputs[0] : at::Tensor();
    const at::Tensor grad_grad_weight = output_mask[1] ? grad_outputs.back() : at::Tensor();
    at::Tensor d_grad;
    at::Tensor d_input;
    at::Tensor d_weight;
    if (grad_grad_input.defined()) {
      const auto two_ggi = 2 * grad_grad_input;
      if (ctx->needs_input_grad(0)) d_grad = two_ggi * weight * input;
      if (ctx->needs_input_grad(1)) d_input = two_ggi * weight * grad;
      if (ctx->needs_input_grad(2)) d_weight = two_ggi * input * grad;
    }
    if (grad_grad_weight.defined()) {
      if (ctx->needs_input_grad(0)) d_grad = add_defined(d_grad, grad_grad_weight * input.square());
      if (ctx->needs_input_grad(1)) d_input = add_defined(d_input, 2 * grad_grad_weight * input * grad);
    }
    const auto reduce_to = [](const at::Tensor& g, const at::Tensor& like) {
      return g.defined() ? at::sum_to(g, like.sym_sizes()).to(like.scalar_type()) : g;
    };
    return {reduce_to(d_grad, grad), reduce_to(d_input, input), reduce_to(d_weight, weight), at::Tensor()};
  }
};

class WeightedSumFunction : public torch::autograd::Function<WeightedSumFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight) {
    ctx->save_for_backward({input, weight});  // not the output: the gradients never read it
    at::AutoDispatchBelowADInplaceOrView guard;
    return custom::weighted_sum(input, weight);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    return weighted_sum_gradients(
        grad_outputs[0], saved[0], saved[1], {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
  }
};

// In place: self is overwritten, so the backward reads copies of the original self (and of weight
// when it overlaps self) that the caller made before the write, with grad mode on, so their
// history reaches self's old history and second order is right. mark_dirty handles views.
class WeightedSumInplaceFunction : public torch::autograd::Function<WeightedSumInplaceFunction> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      at::Tensor self,
      const at::Tensor& weight,
      const at::Tensor& original_self,
      const at::Tensor& original_weight) {
    ctx->save_for_backward({original_self, original_weight});
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      custom::weighted_sum_(self, weight);
    }
    ctx->mark_dirty({self});
    return self;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto grads = weighted_sum_gradients(
        grad_outputs[0], saved[0], saved[1], {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
    // The copies are only read: their gradient reaches self's history through self's own edge.
    return {grads[0], grads[1], at::Tensor(), at::Tensor()};
  }
};

// Undefined, nested, sparse or mkldnn operands never reach Function::apply, which would fail on
// them with a message that names nothing; below autograd the kernels name the argument.
bool all_dense(std::initializer_list<at::Tensor> tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) {
    return t.defined() && t.layout() == at::kStrided && !t.is_nested() && !t.is_mkldnn();
  });
}

// Whether autograd has anything to record: Function::apply's bookkeeping costs more than a
// small kernel, so calls that record nothing skip it and run the kernel directly.
bool records_graph(std::initializer_list<at::Tensor> tensors) {
  return at::GradMode::is_enabled() &&
      std::any_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) { return t.defined() && t.requires_grad(); });
}

at::Tensor weighted_sum_autograd(c10::DispatchKeySet keys, const at::Tensor& input, const at::Tensor& weight) {
  if (!all_dense({input, weight}) || !records_graph({input, weight})) {
    // The hot path of inference: straight on to the kernel below autograd with the keys already
    // computed, as ATen's own autograd kernels do, rather than a TLS guard and a fresh dispatch.
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("custom::weighted_sum", "")
                               .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
    return op.redispatch(keys & c10::after_autograd_keyset, input, weight);
  }
  return WeightedSumFunction::apply(input, weight);
}

void weighted_sum_inplace_autograd(const at::Tensor& self, const at::Tensor& weight) {
  if (records_graph({self, weight}) && all_dense({self, weight})) {
    // ATen's checks before anything is written: no in-place on a leaf (or a view of one) that
    // requires grad.
    torch::autograd::check_inplace(self, /*requires_grad=*/true);
    // The copies are made with grad mode on (see WeightedSumInplaceFunction), and before the
    // write; weight is copied only when the write would change it (weighted_sum_(a, a)).
    const auto original_self = self.clone();
    const bool weight_overlaps_self = at::get_overlap_status(self, weight) != at::MemOverlapStatus::No;
    const auto original_weight = weight_overlaps_self ? weight.clone() : weight;
    WeightedSumInplaceFunction::apply(self, weight, original_self, original_weight);
    return;
  }
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor mutable_self = self;
    custom::weighted_sum_(mutable_self, weight);
  }
  // What ATen's ADInplaceOrView kernel does for its own in-place ops: tensors saved for a
  // backward before this call must see that they changed.
  torch::autograd::increment_version(self);
}

void weighted_sum_out_autograd(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& out) {
  // ATen's rule and message for out= under autograd.
  TORCH_CHECK(
      !(at::GradMode::is_enabled() && (input.requires_grad() || weight.requires_grad() || out.requires_grad())),
      "custom::weighted_sum.out: out=... arguments don't support automatic differentiation, "
      "but one of the arguments requires grad.");
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor mutable_out = out;
    custom::weighted_sum_out(mutable_out, input, weight);
  }
  torch::autograd::increment_version(out);
}

std::tuple<at::Tensor, at::Tensor> weighted_sum_backward_autograd(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, std::array<bool, 2> output_mask) {
  if ((!output_mask[0] && !output_mask[1]) || !all_dense({grad, input, weight}) ||
      !records_graph({grad, input, weight})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return custom::weighted_sum_backward(grad, input, weight, output_mask);
  }
  auto grads = WeightedSumBackwardFunction::apply(grad, input, weight, output_mask);
  return {output_mask[0] ? grads[0] : at::Tensor(), output_mask[1] ? grads.back() : at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(custom, Autograd, m) {
  m.impl("weighted_sum", TORCH_FN(weighted_sum_autograd));
  m.impl("weighted_sum_backward", TORCH_FN(weighted_sum_backward_autograd));
  m.impl("weighted_sum.out", TORCH_FN(weighted_sum_out_autograd));
  m.impl("weighted_sum_", TORCH_FN(weighted_sum_inplace_autograd));
}

}  // namespace custom
