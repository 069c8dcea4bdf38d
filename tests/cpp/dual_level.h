// SPDX-License-Identifier: BSD-3-Clause
// DualLevel: a forward-AD level for one test, as Python's `with forward_ad.dual_level()`, for
// tests that check tangents from C++ alone.
#pragma once

#include <torch/csrc/autograd/forward_grad.h>
#include <torch/torch.h>

#include <cstdint>
#include <tuple>

namespace custom_ops_test {

class DualLevel {
 public:
  DualLevel() : level_(torch::autograd::ForwardADLevel::get_next_idx()) {}
  ~DualLevel() { torch::autograd::ForwardADLevel::release_idx(level_); }
  DualLevel(const DualLevel&) = delete;
  DualLevel& operator=(const DualLevel&) = delete;
  DualLevel(DualLevel&&) = delete;
  DualLevel& operator=(DualLevel&&) = delete;

  at::Tensor dual(const at::Tensor& primal, const at::Tensor& tangent) const {
    return at::_make_dual(primal, tangent, static_cast<int64_t>(level_));
  }
  at::Tensor tangent(const at::Tensor& dual) const {
    return std::get<1>(at::_unpack_dual(dual, static_cast<int64_t>(level_)));
  }

 private:
  uint64_t level_;
};

}  // namespace custom_ops_test
