// SPDX-License-Identifier: BSD-3-Clause
#include "reduction_frontend.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include <ATen/Functions.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include "floating_types.h"
#include "operand_checks.h"

namespace custom::detail {

namespace {

// Which dims of a rank-`ndim` shape are reduced: every one for None or [] (torch.sum's rule),
// else the listed ones, wrapped like torch.sum's (a 0-dim shape takes 0 and -1).
std::vector<bool> reduced_dims(at::OptionalIntArrayRef dim, int64_t ndim, const char* op) {
  std::vector<bool> reduced(static_cast<size_t>(ndim), !dim.has_value() || dim->empty());
  if (!dim.has_value()) {
    return reduced;
  }
  const int64_t range = std::max<int64_t>(ndim, 1);
  std::vector<bool> seen(static_cast<size_t>(range), false);
  for (const auto d : *dim) {
    TORCH_CHECK_INDEX(
        d >= -range && d < range, op, ": dim ", d, " is out of range for the broadcast shape of input and weight, of ",
        ndim, " dimensions (expected a dim in [", -range, ", ", range - 1, "])");
    const auto wrapped = static_cast<size_t>(d < 0 ? d + range : d);
    TORCH_CHECK(!seen[wrapped], op, ": dim ", d, " appears more than once in dim ", *dim);
    seen[wrapped] = true;
    if (ndim > 0) {
      reduced[wrapped] = true;
    }
  }
  return reduced;
}

at::ScalarType checked_result_dtype(
    const at::Tensor& input, const at::Tensor& weight, std::optional<at::ScalarType> dtype, const char* op) {
  const auto promoted = check_forward_inputs(input, weight, op);
  if (!dtype.has_value()) {
    return promoted;
  }
  TORCH_CHECK(
      is_supported_floating_type(*dtype), op, ": dtype must be float16, bfloat16, float32 or float64, got ", *dtype);
  return *dtype;
}

// One dim of the broadcast problem, with the operands' strides along it.
struct Axis {
  int64_t size;
  int64_t input_stride;
  int64_t weight_stride;
  bool reduced;
};

// Whether axes [begin, end) are one run in memory for both operands (a view can merge them).
bool mergeable(const std::vector<Axis>& axes, size_t begin, size_t end) {
  for (size_t a = begin; a + 1 < end; ++a) {
    const auto& outer = axes[a];
    const auto& inner = axes[a + 1];
    if (outer.input_stride != inner.input_stride * inner.size ||
        outer.weight_stride != inner.weight_stride * inner.size) {
      return false;
    }
  }
  return true;
}

struct Merged {
  int64_t size = 1;
  int64_t input_stride = 0;
  int64_t weight_stride = 0;
};

Merged merge(const std::vector<Axis>& axes, size_t begin, size_t end) {
  Merged merged;
  if (begin < end) {
    merged.input_stride = axes[end - 1].input_stride;
    merged.weight_stride = axes[end - 1].weight_stride;
  }
  for (size_t a = begin; a < end; ++a) {
    merged.size *= axes[a].size;
  }
  return merged;
}

std::vector<Axis> axes_of(const at::Tensor& x, const at::Tensor& w, const std::vector<bool>& reduced) {
  std::vector<Axis> axes;
  for (const auto d : c10::irange(x.dim())) {
    if (x.size(d) != 1) {  // size-1 dims take no part
      axes.push_back({x.size(d), x.stride(d), w.stride(d), reduced[d]});
    }
  }
  return axes;
}

// The run of axes the device loop reduces: the last reduced axes that are one run in memory for
// both operands. Empty when every reduced dim has size 1.
struct Run {
  size_t begin;
  size_t end;
};

Run last_reduced_run(const std::vector<Axis>& axes) {
  size_t end = axes.size();
  while (end > 0 && !axes[end - 1].reduced) {
    --end;
  }
  size_t begin = end;
  while (begin > 0 && axes[begin - 1].reduced && mergeable(axes, begin - 1, end)) {
    --begin;
  }
  return {begin, end};
}

// The dims in the order the loops take them: the kept dims in their order (the result's), with the
// reduced dims, in theirs, before the kept dims that are innermost in memory (a stride, the larger
// of the two operands', below every reduced dim's). The kept dims after the reduced ones become the
// loop's inner dim (columns, contiguous where memory has them), those before it its outer one: a
// channels-last sum over N, H and W, or a transposed input summed along its memory rows, is one
// run of reduced dims next to a contiguous one, whatever the dims' order.
std::vector<int64_t> loop_order(const at::Tensor& x, const at::Tensor& w, const std::vector<bool>& reduced) {
  const auto stride = [&](int64_t d) { return std::max(x.stride(d), w.stride(d)); };
  int64_t reduced_stride = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> kept;
  for (const auto d : c10::irange(x.dim())) {
    if (!reduced[d]) {
      kept.push_back(d);
    } else if (x.size(d) != 1) {
      reduced_stride = std::min(reduced_stride, stride(d));
    }
  }
  auto split = kept.size();
  while (split > 0 && (x.size(kept[split - 1]) == 1 || stride(kept[split - 1]) < reduced_stride)) {
    --split;
  }
  std::vector<int64_t> order(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(split));
  for (const auto d : c10::irange(x.dim())) {
    if (reduced[d]) {
      order.push_back(d);
    }
  }
  order.insert(order.end(), kept.begin() + static_cast<std::ptrdiff_t>(split), kept.end());
  return order;
}

// x, w and the reduced flags, their dims in `order` (views).
void permute_dims(at::Tensor& x, at::Tensor& w, std::vector<bool>& reduced, const std::vector<int64_t>& order) {
  x = x.permute(order);
  w = w.permute(order);
  std::vector<bool> permuted(reduced.size());
  std::transform(order.begin(), order.end(), permuted.begin(), [&](int64_t d) { return reduced[d]; });
  reduced = std::move(permuted);
}

// Where the axes before the run that merge with it begin: they form `outer`; the axes before
// them are batch axes, one loop call per index.
size_t outer_begin(const std::vector<Axis>& axes, Run run) {
  size_t begin = run.begin;
  while (begin > 0 && mergeable(axes, begin - 1, run.begin)) {
    --begin;
  }
  return begin;
}

// Whether the batch axes [0, begin) merge into one along which one operand is constant, the other
// being constant along outer [begin, run.begin), with nothing kept after the run (x [N, 1, D] with
// w [1, M, D]): a device's pairs loop takes every batch index in one call.
bool pairs_problem(const std::vector<Axis>& axes, Run run, size_t begin) {
  if (begin == 0 || run.end != axes.size() || !mergeable(axes, 0, begin)) {
    return false;
  }
  const auto batch = merge(axes, 0, begin);
  const auto outer = merge(axes, begin, run.begin);
  const bool input_by_batch = outer.input_stride == 0 && batch.weight_stride == 0;
  const bool input_by_outer = batch.input_stride == 0 && outer.weight_stride == 0;
  return input_by_batch || input_by_outer;
}

// Terms a loop call should have at least for its fixed cost (dispatch, threads or a launch) to be
// a small share: below it, copies of the operands in whose layout every axis merges cost less.
constexpr int64_t kCpuCallTerms = int64_t{1} << 16;
constexpr int64_t kCudaCallTerms = int64_t{1} << 20;

// Whether reduce_into would loop over batch indices, each call with few terms, where no pairs loop
// takes them.
bool small_calls_per_index(const std::vector<Axis>& axes, Run run, bool cuda) {
  const size_t begin = outer_begin(axes, run);
  if (begin == 0 || pairs_problem(axes, run, begin)) {
    return false;
  }
  return merge(axes, begin, axes.size()).size < (cuda ? kCudaCallTerms : kCpuCallTerms);
}

// Sums `partial` over its dims `leftover`, in an order that gives the same bits on every run; the
// kept elements in their order, flat. CUDA: at::sum, one kernel whose order follows the shape and
// the device (no atomics). CPU: at::sum's order follows the thread count, so a pairwise tree of
// elementwise adds instead (cheap on a CPU: no launches), whose error grows with the log of the
// count, as in the device loops.
at::Tensor sum_leftover(const at::Tensor& partial, const std::vector<int64_t>& leftover) {
  if (partial.is_cuda()) {
    return at::sum(partial, leftover).reshape({-1});
  }
  std::vector<int64_t> order(leftover);
  for (const auto d : c10::irange(partial.dim())) {
    if (std::find(leftover.begin(), leftover.end(), d) == leftover.end()) {
      order.push_back(d);
    }
  }
  int64_t count = 1;
  for (const auto d : leftover) {
    count *= partial.size(d);
  }
  auto rows = partial.permute(order).reshape({count, -1});
  while (rows.size(0) > 1) {
    const auto half = rows.size(0) / 2;
    auto sum = at::add(rows.narrow(0, 0, half), rows.narrow(0, half, half));
    if (rows.size(0) % 2 == 1) {
      sum.narrow(0, 0, 1).add_(rows.narrow(0, 2 * half, 1));
    }
    rows = std::move(sum);
  }
  return rows;
}

// A pairs problem (pairs_problem): the device's pairs loop, one call for every batch index, if it
// has one and a plan for the sizes.
bool reduce_pairs(
    const ReductionKernel& kernel,
    const at::Tensor& x,
    const at::Tensor& w,
    const Merged& batch,
    const Merged& outer,
    const Merged& reduce,
    const at::Tensor& partial) {
  if (kernel.loops.reduce_pairs == nullptr) {
    return false;
  }
  const auto view = [&](const at::Tensor& t, int64_t batch_stride, int64_t outer_stride, int64_t reduce_stride) {
    return t.as_strided({batch.size, outer.size, reduce.size}, {batch_stride, outer_stride, reduce_stride});
  };
  return kernel.loops.reduce_pairs({
      .out = partial.view({batch.size, outer.size}),
      .input = view(x, batch.input_stride, outer.input_stride, reduce.input_stride),
      .weight = view(w, batch.weight_stride, outer.weight_stride, reduce.weight_stride),
      .name = kernel.name,
  });
}

// The broadcast problem as a device loop's [outer, reduce, inner] views, without copying either
// operand: the loop reduces the last reduced run; the kept axes after it form `inner`; the axes
// before it form `outer` (its longest mergeable tail; the axes before that tail are batch axes,
// one loop call per index: none in the common layouts). Where every axis is reduced and there is
// no batch axis, the loop sums outer too (`total`); otherwise reduced axes outside the run are
// summed afterwards, from the loop's float32/float64 results. The loop writes `out` itself when
// out's dtype is one it writes (accumulation or operands') and nothing is left to sum.
void reduce_into(
    const ReductionKernel& kernel,
    const at::Tensor& x,
    const at::Tensor& w,
    const std::vector<Axis>& axes,
    Run run,
    const at::Tensor& out) {
  const auto acc_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const size_t tail_begin = outer_begin(axes, run);
  const auto outer = merge(axes, tail_begin, run.begin);
  const auto reduce = merge(axes, run.begin, run.end);
  const auto inner = merge(axes, run.end, axes.size());

  // The loop's results over the axes outside the run, in their order: [batch..., outer, inner].
  std::vector<int64_t> partial_sizes;
  std::vector<int64_t> leftover_reduced;
  for (size_t a = 0; a < axes.size(); ++a) {
    if (a >= run.begin && a < run.end) {
      continue;
    }
    if (axes[a].reduced) {
      leftover_reduced.push_back(static_cast<int64_t>(partial_sizes.size()));
    }
    partial_sizes.push_back(axes[a].size);
  }
  const bool total =
      tail_begin == 0 && std::all_of(axes.begin(), axes.end(), [](const Axis& axis) { return axis.reduced; });
  const bool loop_dtype = out.scalar_type() == acc_dtype || out.scalar_type() == x.scalar_type();
  const bool direct = loop_dtype && (total || leftover_reduced.empty());  // out is contiguous
  const auto partial =
      direct ? out : at::empty(total ? std::vector<int64_t>{1} : partial_sizes, out.options().dtype(acc_dtype));

  const auto views_at = [&](int64_t x_offset, int64_t w_offset) {
    return std::pair{
        x.as_strided(
            {outer.size, reduce.size, inner.size}, {outer.input_stride, reduce.input_stride, inner.input_stride},
            x_offset),
        w.as_strided(
            {outer.size, reduce.size, inner.size}, {outer.weight_stride, reduce.weight_stride, inner.weight_stride},
            w_offset)};
  };
  if (total) {
    const auto [input, weight] = views_at(x.storage_offset(), w.storage_offset());
    kernel.loops.reduce({.out = partial, .input = input, .weight = weight, .total = true, .name = kernel.name});
  } else if (
      !pairs_problem(axes, run, tail_begin) ||
      !reduce_pairs(kernel, x, w, merge(axes, 0, tail_begin), outer, reduce, partial)) {
    int64_t batches = 1;
    for (size_t a = 0; a < tail_begin; ++a) {
      batches *= axes[a].size;
    }
    const auto partial_slices = partial.view({batches, outer.size, inner.size});
    for (const auto b : c10::irange(batches)) {
      int64_t x_offset = x.storage_offset();
      int64_t w_offset = w.storage_offset();
      int64_t rest = b;
      for (size_t a = tail_begin; a-- > 0;) {
        const auto index = rest % axes[a].size;
        rest /= axes[a].size;
        x_offset += index * axes[a].input_stride;
        w_offset += index * axes[a].weight_stride;
      }
      const auto [input, weight] = views_at(x_offset, w_offset);
      kernel.loops.reduce({.out = partial_slices[b], .input = input, .weight = weight, .name = kernel.name});
    }
  }
  if (!direct) {
    // Nothing left to sum is no sum_leftover call: at::sum reads an empty dim list as every dim.
    const bool sum_after = !total && !leftover_reduced.empty();
    out.copy_((sum_after ? sum_leftover(partial, leftover_reduced) : partial).view(out.sizes()));
  }
}

}  // namespace

at::Tensor reduction_impl(
    const ReductionKernel& kernel,
    const at::Tensor& input,
    const at::Tensor& weight,
    at::OptionalIntArrayRef dim,
    bool keepdim,
    std::optional<at::ScalarType> dtype) {
  const char* const op = kernel.name;
  const auto result = checked_result_dtype(input, weight, dtype, op);
  const auto shape = broadcast_shape(input, "input", weight, "weight", op);
  const auto ndim = static_cast<int64_t>(shape.size());
  auto reduced = reduced_dims(dim, ndim, op);
  c10::SymDimVector out_shape;
  for (const auto d : c10::irange(ndim)) {
    if (!reduced[d]) {
      out_shape.push_back(shape[d]);
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  }
  auto out = at::empty_symint(out_shape, input.options().dtype(result));
  if (kernel.loops.reduce == nullptr || out.numel() == 0) {
    return out;
  }

  // Concrete shapes from here on (Meta stopped above).
  const auto sizes = C10_AS_INTARRAYREF_SLOW(shape);
  // The operands in one dtype: the promoted one, or float64 when that is the result's. An operand
  // wider than the promoted dtype (a 0-dim one) is rounded to it first, as the composite's
  // `weight * input.square()` promotes it, whatever dtype= asks for.
  const auto promoted = result_dtype({input, weight});
  const auto operand_dtype = result == at::kDouble ? at::kDouble : promoted;
  // expand() is a dispatcher call, a visible share of a small sum on the CPU: made only where the
  // operand lacks the broadcast shape.
  const auto broadcast = [&](const at::Tensor& operand) {
    const bool wider = c10::promoteTypes(operand.scalar_type(), promoted) != promoted;
    auto converted = (wider ? operand.to(promoted) : operand).to(operand_dtype);
    return converted.sizes() == sizes ? converted : converted.expand(sizes);
  };
  auto x = broadcast(input);
  auto w = broadcast(weight);
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) {
    out.zero_();  // an empty reduction (an empty kept dim made out empty above)
    return out;
  }
  permute_dims(x, w, reduced, loop_order(x, w, reduced));
  auto axes = axes_of(x, w, reduced);
  auto run = last_reduced_run(axes);
  if (run.begin == run.end || !mergeable(axes, run.end, axes.size()) || small_calls_per_index(axes, run, x.is_cuda())) {
    // Nothing to sum over (every reduced dim has size 1), kept axes after the run that no view
    // merges, or a loop over batch indices with little to sum a call: contiguous copies, in the
    // loop order (the reduced dims together), whose axes all merge into [outer, reduce, inner].
    x = x.contiguous();
    w = w.contiguous();
    axes = axes_of(x, w, reduced);
    run = last_reduced_run(axes);
  }
  if (run.begin == run.end) {
    // A one-term "sum" per output: a trailing run of size 1.
    axes.push_back({1, 1, 1, true});
    run = {axes.size() - 1, axes.size()};
  }
  reduce_into(kernel, x, w, axes, run, out);
  return out;
}

}  // namespace custom::detail

// The Meta kernels: this frontend with no loops, on SymInt shapes, so FakeTensor and
// torch.compile(dynamic=True) need no Python fake implementation.
TORCH_LIBRARY_IMPL(custom, Meta, m) {
  custom::detail::register_reduction_kernels<custom::detail::NoReductionLoops>(m);
}
