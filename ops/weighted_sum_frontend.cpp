#include "weighted_sum_frontend.h"

#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <c10/util/accumulate.h>

#include "operand_checks.h"
#include "weighted_sum_output_strides.h"

namespace custom::detail {

namespace {

// Whether the output may share memory with the inputs: a caller's out= or self may; a tensor
// the frontend has just allocated cannot, and skipping the check saves a little per call.
enum class Output { Given, Fresh };

// Like ATen's binary ops: broadcasting, promotion to the common dtype, casting to the output,
// and refusing outputs that partially overlap an input or themselves.
at::TensorIterator elementwise_iterator(
    const at::Tensor& out, std::initializer_list<at::Tensor> inputs, Output output) {
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(output == Output::Given).add_output(out);
  for (const auto& input : inputs) {
    config.add_const_input(input);
  }
  return config.promote_inputs_to_common_dtype(true)
      .cast_common_dtype_to_outputs(true)
      .enforce_safe_casting_to_output(true)
      .build();
}

void run_forward(const at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, Loop loop, Output output) {
  if (loop == nullptr || out.numel() == 0) {
    return;
  }
  auto iter = elementwise_iterator(out, {input, weight}, output);
  loop(iter);
}

bool has_shape(const at::Tensor& tensor, c10::SymIntArrayRef shape) {
  return tensor.sym_sizes().equals(shape);
}

// Whether `out`, resized to `numel` contiguous elements from its storage offset (what
// resize_output makes of it), would cover memory of `input`. ATen checks overlap before it
// resizes, so it resizes such an out and computes from memory it has just overwritten.
bool resized_would_overlap(const at::Tensor& out, int64_t numel, const at::Tensor& input) {
  if (numel == 0 || input.numel() == 0 || !out.storage().is_alias_of(input.storage())) {
    return false;
  }
  const int64_t out_begin = out.storage_offset() * out.itemsize();
  const int64_t out_end = out_begin + numel * out.itemsize();
  int64_t last = input.storage_offset();
  for (int64_t d = 0; d < input.dim(); ++d) {
    last += (input.size(d) - 1) * input.stride(d);
  }
  const int64_t input_begin = input.storage_offset() * input.itemsize();
  const int64_t input_end = (last + 1) * input.itemsize();
  return out_begin < input_end && input_begin < out_end;
}

// One gradient: computed over the full output shape, then summed back to the shape of the
// argument it belongs to when that argument was broadcast. At most one full-size temporary.
at::Tensor gradient_for(
    const at::Tensor& argument, c10::SymIntArrayRef shape, Loop loop, std::initializer_list<at::Tensor> operands) {
  const bool broadcast = !has_shape(argument, shape);
  auto compute_dtype = argument.scalar_type();
  for (const auto& operand : operands) {
    compute_dtype = c10::promoteTypes(compute_dtype, operand.scalar_type());
  }
  auto full = at::empty_symint(shape, argument.options().dtype(broadcast ? compute_dtype : argument.scalar_type()));
  if (loop != nullptr && full.numel() > 0) {
    auto iter = elementwise_iterator(full, operands, Output::Fresh);
    loop(iter);
  }
  if (!broadcast) {
    return full;
  }
  return at::sum_to(full, argument.sym_sizes(), /*always_return_non_view=*/true).to(argument.scalar_type());
}

}  // namespace

at::Tensor weighted_sum_impl(const WeightedSumLoops& loops, const at::Tensor& input, const at::Tensor& weight) {
  constexpr const char* op = "custom::weighted_sum";
  const auto dtype = check_forward_inputs(input, weight, op);
  const auto shape = broadcast_shape(input, "input", weight, "weight", op);
  // Laid out as `weight * input.square()` lays out its result (channels_last stays channels_last).
  auto out = at::empty_strided_symint(
      shape, composite_output_strides(input, weight, shape, dtype), input.options().dtype(dtype));
  run_forward(out, input, weight, loops.forward, Output::Fresh);
  return out;
}

void weighted_sum_out_impl(
    const WeightedSumLoops& loops, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& out) {
  constexpr const char* op = "custom::weighted_sum.out";
  const auto dtype = check_forward_inputs(input, weight, op);
  check_destination(out, "out", dtype, input.device(), op);
  const auto shape = broadcast_shape(input, "input", weight, "weight", op);
  const bool resize = !has_shape(out, shape);
  // ATen's rule (TensorIterator's is_read_write): an out that is an input is read as well as
  // written, so it is never resized; resized first, it would be read from its new memory.
  TORCH_CHECK(
      !resize || (!out.is_same(input) && !out.is_same(weight)), op, ": output with shape ", out.sym_sizes(),
      " doesn't match the broadcast shape ", c10::SymIntArrayRef(shape));
  if (loops.forward != nullptr) {
    // Before the resize, as ATen does, so a refused out is left untouched.
    at::assert_no_internal_overlap(out);
    at::assert_no_partial_overlap(out, input);
    at::assert_no_partial_overlap(out, weight);
    if (resize) {
      // Stricter than ATen, which resizes such an out and computes wrong values silently.
      const auto numel = c10::multiply_integers(C10_AS_INTARRAYREF_SLOW(shape));
      TORCH_CHECK(
          !resized_would_overlap(out, numel, input) && !resized_would_overlap(out, numel, weight), op,
          ": out of shape ", out.sizes(), " shares memory with an input and, resized to the broadcast shape ",
          c10::SymIntArrayRef(shape), ", would overlap it; pass an out that does not share memory with the inputs");
    }
  }
  // ATen's out= rule: resize a wrong-shaped out, warning when it held data.
  at::native::resize_output_symint(out, shape);
  run_forward(out, input, weight, loops.forward, Output::Given);
}

void weighted_sum_inplace_impl(const WeightedSumLoops& loops, const at::Tensor& self, const at::Tensor& weight) {
  constexpr const char* op = "custom::weighted_sum_";
  check_operand(self, op, "self");
  check_operand(weight, op, "weight");
  check_same_device(self, "self", weight, "weight", op);
  check_destination(self, "self", result_dtype(self, weight), self.device(), op);
  const auto shape = broadcast_shape(self, "self", weight, "weight", op);
  TORCH_CHECK(
      has_shape(self, shape), op, ": weight of shape ", weight.sym_sizes(), " would broadcast self of shape ",
      self.sym_sizes(), " to ", c10::SymIntArrayRef(shape), ", but an in-place op cannot resize self");
  run_forward(self, self, weight, loops.forward, Output::Given);
}

std::tuple<at::Tensor, at::Tensor> weighted_sum_backward_impl(
    const WeightedSumLoops& loops,
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    std::array<bool, 2> output_mask) {
  constexpr const char* op = "custom::weighted_sum_backward";
  check_forward_inputs(input, weight, op);
  check_operand(grad, op, "grad");
  check_same_device(grad, "grad", input, "input", op);
  const auto shape = broadcast_shape(input, "input", weight, "weight", op);
  TORCH_CHECK(
      has_shape(grad, shape), op, ": grad of shape ", grad.sym_sizes(), " does not match the output shape ",
      c10::SymIntArrayRef(shape));

  const bool one_pass = output_mask[0] && output_mask[1] && has_shape(input, shape) && has_shape(weight, shape) &&
      input.scalar_type() == weight.scalar_type() && grad.scalar_type() == input.scalar_type();
  if (one_pass) {
    // Reads grad, input and weight once and writes both gradients.
    auto grad_input = at::empty_symint(shape, input.options());
    auto grad_weight = at::empty_symint(shape, weight.options());
    if (loops.backward_fused != nullptr && grad_input.numel() > 0) {
      auto iter = at::TensorIteratorConfig()
                      .set_check_mem_overlap(false)  // both outputs were just allocated
                      .add_output(grad_input)
                      .add_output(grad_weight)
                      .add_const_input(grad)
                      .add_const_input(input)
                      .add_const_input(weight)
                      .build();
      loops.backward_fused(iter);
    }
    return {grad_input, grad_weight};
  }

  if (loops.backward_per_channel != nullptr && (output_mask[0] || output_mask[1])) {
    // A per-channel weight: one pass, no full-size temporary. Sizes are concrete here (Meta has no loop).
    const auto plan = plan_backward(grad, input, weight);
    if (plan.layout != BackwardLayout::Generic) {
      PerChannelBackward args{
          .grad_input = output_mask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor(),
          .grad_weight = output_mask[1] ? at::empty(weight.sizes(), weight.options()) : at::Tensor(),
          .grad = grad,
          .input = input,
          .weight = weight,
          .shape = plan.shape,
      };
      loops.backward_per_channel(args);
      return {args.grad_input, args.grad_weight};
    }
  }

  at::Tensor grad_input;
  at::Tensor grad_weight;
  if (output_mask[0]) {
    grad_input = gradient_for(input, shape, loops.backward_input, {grad, input, weight});
  }
  if (output_mask[1]) {
    // x**2 grad reads no weight but computes in the dtype the forward promoted to, weight's
    // included: wider than grad's and input's when grad is a narrower in-place self's (or
    // weighted_square_sum's dtype=). Then input is widened, as TensorIterator would widen it.
    at::native::ResultTypeState state{};
    for (const auto& operand : {grad, input, weight}) {
      state = at::native::update_result_type_state(operand, state);
    }
    const auto dtype = at::native::result_type(state);
    const auto x = input.scalar_type() == dtype ? input : input.to(dtype);
    grad_weight = gradient_for(weight, shape, loops.backward_weight, {grad, x});
  }
  return {grad_input, grad_weight};
}

}  // namespace custom::detail
