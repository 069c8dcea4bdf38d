// SPDX-License-Identifier: BSD-3-Clause
// Which backward suits a call of custom::weighted_sum_backward whose weight is broadcast along
// some dimensions of the input and kept along one run of others: a per-channel weight. The
// generic backward computes each gradient over the full shape and sums the weight's with
// at::sum_to (a full-size temporary, 7 memory streams); the per-channel loops read grad and input
// once, write grad_input and reduce grad_weight in the same pass (3 streams).
//
// All three layouts are one shape: grad and input a contiguous [outer, channels, inner] block,
// the weight [channels] (contiguous, size 1 elsewhere):
//   - BroadcastRow:    x [R, C],       w [C]        -> [R, C, 1]
//   - BroadcastColumn: x [R, C],       w [R, 1]     -> [1, R, C]
//   - ChannelNCHW:     x [N, C, H, W], w [C, 1, 1]  -> [N, C, H * W]
// Anything else (mixed dtypes, non-contiguous grad or input, a broadcast input, a weight that keeps
// two separate runs of dimensions, one value) is Generic and keeps the existing path.
// Host-only and header-only, so that the CPU tests check the choice.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "floating_types.h"

namespace custom::detail {

enum class BackwardLayout { Generic, BroadcastRow, BroadcastColumn, ChannelNCHW };

struct PerChannelShape {
  int64_t outer = 0;
  int64_t channels = 0;
  int64_t inner = 0;
};

struct BackwardPlan {
  BackwardLayout layout = BackwardLayout::Generic;
  PerChannelShape shape;
};

// The arguments of a device's per-channel loop. grad, input and weight share one floating dtype;
// grad and input are contiguous with `shape`'s element count, weight contiguous with `channels`.
// grad_input and grad_weight are freshly allocated and contiguous, or undefined when not
// requested (the loop then neither writes it nor reads what only it needs).
struct PerChannelBackward {
  at::Tensor grad_input;
  at::Tensor grad_weight;
  at::Tensor grad;
  at::Tensor input;
  at::Tensor weight;
  PerChannelShape shape;
};

// Calls loop.template operator()<scalar_t, kInput, kWeight>() for args' dtype and the gradients
// it asks for: each device's loop is a template on them, so an unrequested gradient costs no code
// in the loop.
template <typename Loop>
void dispatch_per_channel(const PerChannelBackward& args, const Loop& loop) {
  const bool input = args.grad_input.defined();
  const bool weight = args.grad_weight.defined();
  CUSTOM_OPS_DISPATCH_FLOATING_TYPES(args.input.scalar_type(), "elementwise_backward_per_channel", [&] {
    if (input && weight) {
      loop.template operator()<scalar_t, true, true>();
    } else if (input) {
      loop.template operator()<scalar_t, true, false>();
    } else if (weight) {
      loop.template operator()<scalar_t, false, true>();
    }
  });
}

// The raw operands of a device's per-channel loop for the gradients it computes (a template on
// them: dispatch_per_channel): grad_input null when not requested, weight null when nothing
// requested reads it (grad_input always does, grad_weight when the term's dw does).
template <typename scalar_t>
struct PerChannelPointers {
  scalar_t* grad_input;
  const scalar_t* grad;
  const scalar_t* input;
  const scalar_t* weight;
};

template <class Term, bool kInput>
inline constexpr bool per_channel_reads_weight = kInput || Term::dw_reads_weight;

template <class Term, typename scalar_t, bool kInput>
PerChannelPointers<scalar_t> per_channel_pointers(const PerChannelBackward& args) {
  return {
      kInput ? args.grad_input.mutable_data_ptr<scalar_t>() : nullptr,
      args.grad.const_data_ptr<scalar_t>(),
      args.input.const_data_ptr<scalar_t>(),
      per_channel_reads_weight<Term, kInput> ? args.weight.const_data_ptr<scalar_t>() : nullptr,
  };
}

// A column weight w [R, 1] reduces runs of C elements each; below this length the run is too
// short to fill a vector loop and the generic path is as good.
inline constexpr int64_t kMinColumnRun = 256;

// Grid dimensions of the CUDA loops are 32-bit: channel counts past this stay generic.
inline constexpr int64_t kMaxChannels = (int64_t{1} << 31) - 1;

// Reads only sizes, strides and dtypes; concrete sizes (a device kernel's, never Meta's).
inline BackwardPlan plan_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight) {
  BackwardPlan plan;
  const auto dtype = input.scalar_type();
  if (!is_supported_floating_type(dtype) || grad.scalar_type() != dtype || weight.scalar_type() != dtype) {
    return plan;  // promotion and casting belong to the generic path
  }
  const auto shape = input.sizes();
  if (!grad.sizes().equals(shape) || input.numel() == 0 || weight.numel() == 0 || weight.dim() > input.dim() ||
      !input.is_contiguous() || !grad.is_contiguous() || !weight.is_contiguous()) {
    return plan;
  }
  // The weight's kept dimensions (its size equals the input's, which is not 1), right-aligned.
  const int64_t offset = input.dim() - weight.dim();
  int64_t first_kept = -1;
  int64_t last_kept = -1;
  for (int64_t d = 0; d < input.dim(); ++d) {
    const int64_t w = d < offset ? 1 : weight.size(d - offset);
    if (shape[d] == 1) {
      continue;  // kept and broadcast alike
    }
    if (w == shape[d]) {
      if (first_kept >= 0 && last_kept != d - 1) {
        // Only dimensions of size 1 may lie between two kept ones.
        for (int64_t between = last_kept + 1; between < d; ++between) {
          if (shape[between] != 1) {
            return plan;
          }
        }
      }
      first_kept = first_kept < 0 ? d : first_kept;
      last_kept = d;
    } else if (w != 1) {
      return plan;  // not a broadcast of input's shape (the frontend has refused this already)
    }
  }
  if (first_kept < 0) {
    return plan;  // one value: a full reduction, not a per-channel one
  }
  PerChannelShape geometry{1, 1, 1};
  for (int64_t d = 0; d < input.dim(); ++d) {
    (d < first_kept ? geometry.outer : d <= last_kept ? geometry.channels : geometry.inner) *= shape[d];
  }
  if (geometry.channels > kMaxChannels) {
    return plan;
  }
  if (geometry.inner == 1) {
    plan.layout = geometry.outer == 1 ? BackwardLayout::Generic : BackwardLayout::BroadcastRow;
  } else if (geometry.outer == 1) {
    plan.layout = geometry.inner >= kMinColumnRun ? BackwardLayout::BroadcastColumn : BackwardLayout::Generic;
  } else {
    plan.layout = BackwardLayout::ChannelNCHW;
  }
  if (plan.layout != BackwardLayout::Generic) {
    plan.shape = geometry;
  }
  return plan;
}

}  // namespace custom::detail
