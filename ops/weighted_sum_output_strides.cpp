#include "weighted_sum_output_strides.h"

#include <numeric>

#include <c10/core/SymBool.h>
#include <c10/util/irange.h>

namespace custom::detail {

namespace {

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

}  // namespace

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

}  // namespace custom::detail
