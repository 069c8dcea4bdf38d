// SPDX-License-Identifier: BSD-3-Clause
#include "elementwise_frontend.h"

#include <numeric>

#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <c10/core/SymBool.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/DimVector.h>
#include <c10/util/accumulate.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include "operand_checks.h"

namespace custom::detail {

namespace {

// The layout of the functional op's result: the strides `weight * input.square()` gets from
// TensorIterator (channels_last in, channels_last out; a transposed input, a transposed result),
// computed on SymInts so the Meta kernel gives the same strides under dynamic shapes.

using Strides = c10::SymDimVector;

// A guard only where the answer is known: for size-oblivious (unbacked) sizes, "no".
bool known(const c10::SymBool& condition) {
  return c10::guard_or_false(condition, __FILE__, __LINE__);
}

bool equal(const c10::SymInt& a, int64_t b) {
  return known(a.sym_eq(b));
}

bool equal(const c10::SymInt& a, const c10::SymInt& b) {
  return known(a.sym_eq(b));
}

// Dense strides of `shape` with its dimensions ordered from outermost to innermost as `order`.
// As TensorIterator: a size-0 dimension gives the outer ones stride 0, except in the contiguous
// order (at::empty's strides).
Strides dense_strides(c10::SymIntArrayRef shape, c10::ArrayRef<int64_t> order) {
  bool contiguous = true;
  for (const auto i : c10::irange(order.size())) {
    contiguous = contiguous && order[i] == static_cast<int64_t>(i);
  }
  Strides strides(shape.size());
  c10::SymInt next = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = next;
    next = next * (contiguous ? c10::SymInt(shape[*it]).max(1) : shape[*it]);
  }
  return strides;
}

c10::DimVector identity_order(size_t ndim) {
  c10::DimVector order(ndim);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

Strides contiguous_strides(c10::SymIntArrayRef shape) {
  return dense_strides(shape, identity_order(shape.size()));
}

// Whether strides lay `sizes` out in `order` with no gaps (size-1 dimensions may have any stride).
bool dense_in_order(c10::SymIntArrayRef sizes, c10::SymIntArrayRef strides, c10::ArrayRef<int64_t> order) {
  for (const auto& size : sizes) {
    if (equal(size, 0)) {
      return true;  // empty: every layout at once, as Tensor::is_contiguous says
    }
  }
  c10::SymInt expected = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (equal(sizes[*it], 1)) {
      continue;
    }
    if (!equal(strides[*it], expected)) {
      return false;
    }
    expected = expected * sizes[*it];
  }
  return true;
}

constexpr std::array<int64_t, 4> kChannelsLast = {0, 2, 3, 1};

// One operand as TensorIterator sees it: its strides over the broadcast shape, 0 where broadcast.
struct Operand {
  c10::SymIntArrayRef sizes;
  Strides strides;
};

Strides broadcast_strides(c10::SymIntArrayRef sizes, c10::SymIntArrayRef strides, c10::SymIntArrayRef shape) {
  Strides result(shape.size(), c10::SymInt(0));
  const auto offset = shape.size() - sizes.size();
  for (const auto i : c10::irange(sizes.size())) {
    const bool broadcast = equal(sizes[i], 1) && !equal(shape[offset + i], 1);
    result[offset + i] = broadcast ? c10::SymInt(0) : strides[i];
  }
  return result;
}

// TensorIterator's reorder_dimensions: an insertion sort of the dimensions by the operands'
// strides, the first operand with a definite answer deciding; returns outermost-first order.
c10::DimVector stride_order(const std::vector<Strides>& operands, c10::SymIntArrayRef shape) {
  const auto ndim = static_cast<int64_t>(shape.size());
  // 1 if dim0 belongs inside dim1 (innermost first, as TensorIterator sorts), -1 if outside, 0 unknown.
  auto should_swap = [&](int64_t dim0, int64_t dim1) {
    for (const auto& strides : operands) {
      const auto& stride0 = strides[dim0];
      const auto& stride1 = strides[dim1];
      if (equal(stride0, 0) || equal(stride1, 0)) {
        continue;
      }
      if (known(stride0.sym_lt(stride1))) {
        return -1;
      }
      if (known(stride0.sym_gt(stride1))) {
        return 1;
      }
      if (known(shape[dim0].sym_gt(shape[dim1]))) {  // equal strides: the smaller size inside
        return 1;
      }
    }
    return 0;
  };
  c10::DimVector perm(ndim);  // innermost first
  for (const auto i : c10::irange(ndim)) {
    perm[i] = ndim - 1 - i;
  }
  for (int64_t i = 1; i < ndim; ++i) {
    auto dim1 = i;
    for (auto dim0 = i - 1; dim0 >= 0; --dim0) {
      const int comparison = should_swap(perm[dim0], perm[dim1]);
      if (comparison > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (comparison < 0) {
        break;
      }
    }
  }
  return c10::DimVector(perm.rbegin(), perm.rend());
}

// The strides TensorIterator gives a new output for these operands (all of the broadcast shape
// or broadcast to it): its fast set-up when every operand has the shape and one dense layout,
// else dense strides in the order of reorder_dimensions.
Strides iterator_output_strides(
    c10::ArrayRef<c10::SymIntArrayRef> sizes, c10::ArrayRef<c10::SymIntArrayRef> strides, c10::SymIntArrayRef shape) {
  bool same_shape = true;
  for (const auto& operand_sizes : sizes) {
    same_shape = same_shape && operand_sizes.size() == shape.size() &&
        std::equal(operand_sizes.begin(), operand_sizes.end(), shape.begin(),
                   [](const auto& a, const auto& b) { return equal(a, b); });
  }
  if (same_shape) {
    const auto all = [&](auto&& predicate) {
      for (const auto i : c10::irange(sizes.size())) {
        if (!predicate(strides[i])) {
          return false;
        }
      }
      return true;
    };
    const auto order = identity_order(shape.size());
    if (all([&](auto s) { return dense_in_order(shape, s, order); })) {
      return contiguous_strides(shape);
    }
    if (shape.size() == 4 && all([&](auto s) { return dense_in_order(shape, s, kChannelsLast); })) {
      return dense_strides(shape, kChannelsLast);
    }
    // Every operand dense in one layout, with equal strides: the output takes them.
    const auto first = stride_order({Strides(strides[0].begin(), strides[0].end())}, shape);
    if (all([&](auto s) {
          return dense_in_order(shape, s, first) &&
              std::equal(
                     s.begin(), s.end(), strides[0].begin(), [](const auto& a, const auto& b) { return equal(a, b); });
        })) {
      return Strides(strides[0].begin(), strides[0].end());
    }
  }
  std::vector<Strides> operands;
  for (const auto i : c10::irange(sizes.size())) {
    operands.push_back(broadcast_strides(sizes[i], strides[i], shape));
  }
  return dense_strides(shape, stride_order(operands, shape));
}

// The weight's strides as `weight * squared` reads it. On the CPU TensorIterator first copies an
// input of another dtype to the common one with `.to()`, which keeps a dense layout's strides and
// gives any other the dense strides of its dimensions' order (at::infer_dense_strides). A
// FakeTensor reports its real device here, so the Meta kernel follows the same rule.
Strides weight_strides_as_read(const at::Tensor& weight, at::ScalarType dtype) {
  const auto strides = weight.sym_strides();
  if (!weight.device().is_cpu() || weight.scalar_type() == dtype || weight.is_non_overlapping_and_dense()) {
    return Strides(strides.begin(), strides.end());
  }
  const auto sizes = weight.sym_sizes();
  return dense_strides(sizes, stride_order({Strides(strides.begin(), strides.end())}, sizes));
}

// Strides of a dense tensor of `shape` laid out as `weight * input.square()` lays out its result.
c10::SymDimVector composite_output_strides(
    const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef shape, at::ScalarType dtype) {
  // The common case without sorting anything: TensorIterator's contiguous fast set-up. (With
  // broadcasting it sorts, and even contiguous operands can move a size-1 dimension inwards.)
  if (shape.size() <= 1 ||
      (input.sym_sizes().equals(shape) && weight.sym_sizes().equals(shape) && input.is_contiguous() &&
       weight.is_contiguous())) {
    return contiguous_strides(shape);
  }
  // input.square(): one operand, laid out like the input.
  const auto input_sizes = input.sym_sizes();
  const auto squared = iterator_output_strides({input_sizes}, {input.sym_strides()}, input_sizes);
  // weight * squared, in this operand order (the first one decides ties).
  const auto weight_strides = weight_strides_as_read(weight, dtype);
  return iterator_output_strides(
      {weight.sym_sizes(), input_sizes}, {c10::SymIntArrayRef(weight_strides), c10::SymIntArrayRef(squared)}, shape);
}

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

// An operand in the output's memory that is neither the output itself (each element read, then
// written) nor a partial overlap (refused by TensorIterator), such as a 0-dim view of one of
// self's elements or a broadcast row: read from a copy, so every element is computed from the
// operands as they were before the call, as the composite `weight * input.square()` computes them.
at::Tensor read_before_written(const at::Tensor& operand, const at::Tensor& out) {
  const bool aliased = at::get_overlap_status(out, operand) == at::MemOverlapStatus::TooHard &&
      out.storage().is_alias_of(operand.storage());
  return aliased ? operand.clone() : operand;
}

void run_forward(const at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, Loop loop, Output output) {
  if (loop == nullptr || out.numel() == 0) {
    return;
  }
  // Named, not temporaries: the iterator borrows its operands.
  const auto x = output == Output::Given ? read_before_written(input, out) : input;
  const auto w = output == Output::Given ? read_before_written(weight, out) : weight;
  auto iter = elementwise_iterator(out, {x, w}, output);
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

at::Tensor elementwise_impl(const ElementwiseKernel& kernel, const at::Tensor& input, const at::Tensor& weight) {
  const char* op = kernel.name;
  const auto dtype = check_forward_inputs(input, weight, op);
  const auto shape = broadcast_shape(input, "input", weight, "weight", op);
  // Laid out as `weight * input.square()` lays out its result (channels_last stays channels_last).
  auto out = at::empty_strided_symint(
      shape, composite_output_strides(input, weight, shape, dtype), input.options().dtype(dtype));
  run_forward(out, input, weight, kernel.loops.forward, Output::Fresh);
  return out;
}

void elementwise_out_impl(
    const ElementwiseKernel& kernel, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& out) {
  const char* op = kernel.out_name;
  const auto dtype = check_forward_inputs(input, weight, op);
  check_destination(out, "out", dtype, input.device(), op);
  const auto shape = broadcast_shape(input, "input", weight, "weight", op);
  const bool resize = !has_shape(out, shape);
  // ATen's rule (TensorIterator's is_read_write): an out that is an input is read as well as
  // written, so it is never resized; resized first, it would be read from its new memory.
  TORCH_CHECK(
      !resize || (!out.is_same(input) && !out.is_same(weight)), op, ": output with shape ", out.sym_sizes(),
      " doesn't match the broadcast shape ", c10::SymIntArrayRef(shape));
  if (kernel.loops.forward != nullptr) {
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
  run_forward(out, input, weight, kernel.loops.forward, Output::Given);
}

void elementwise_inplace_impl(const ElementwiseKernel& kernel, const at::Tensor& self, const at::Tensor& weight) {
  const char* op = kernel.inplace_name;
  check_operand(self, op, "self");
  check_operand(weight, op, "weight");
  check_same_device(self, "self", weight, "weight", op);
  check_destination(self, "self", result_dtype({self, weight}), self.device(), op);
  const auto shape = broadcast_shape(self, "self", weight, "weight", op);
  TORCH_CHECK(
      has_shape(self, shape), op, ": weight of shape ", weight.sym_sizes(), " would broadcast self of shape ",
      self.sym_sizes(), " to ", c10::SymIntArrayRef(shape), ", but an in-place op cannot resize self");
  run_forward(self, self, weight, kernel.loops.forward, Output::Given);
}

std::tuple<at::Tensor, at::Tensor> elementwise_backward_impl(
    const ElementwiseKernel& kernel,
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    std::array<bool, 2> output_mask) {
  const char* op = kernel.backward_name;
  const auto& loops = kernel.loops;
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
    // dw * grad computes in the dtype the forward promoted to, weight's included: wider than
    // grad's and input's when grad is a narrower in-place self's (or a reduction's dtype=). Then
    // input is widened, as TensorIterator would widen it; the weight is an operand only when dw
    // reads it.
    const auto dtype = result_dtype({grad, input, weight});
    const auto x = input.scalar_type() == dtype ? input : input.to(dtype);
    grad_weight = kernel.dw_reads_weight ? gradient_for(weight, shape, loops.backward_weight, {grad, x, weight})
                                         : gradient_for(weight, shape, loops.backward_weight, {grad, x});
  }
  return {grad_input, grad_weight};
}

}  // namespace custom::detail

// The Meta kernels: this frontend with no loops, on SymInt shapes, so FakeTensor and
// torch.compile(dynamic=True) need no Python fake implementation.
TORCH_LIBRARY_IMPL(custom, Meta, m) {
  custom::detail::register_elementwise_kernels<custom::detail::NoElementwiseLoops>(m);
}
