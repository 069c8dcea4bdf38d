// SPDX-License-Identifier: BSD-3-Clause
// What every operator's CUDA tests share: whether the library registered an operator's CUDA
// kernel, and a fixture that skips with the reason where no GPU is visible or the library was
// built without CUDA kernels (cuda_build_test.cpp fails instead where the build should have them).
#pragma once

#include <string>

#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace custom_ops_test {

// `op`: "custom::weighted_sum" or "custom::weighted_sum.out" (name and overload).
inline bool has_cuda_kernel(const std::string& op) {
  const auto dot = op.find('.');
  const auto name = op.substr(0, dot);
  const auto overload = dot == std::string::npos ? std::string() : op.substr(dot + 1);
  const auto handle = c10::Dispatcher::singleton().findOp(c10::OperatorName(name, overload));
  return handle.has_value() && handle->hasKernelForDispatchKey(c10::DispatchKey::CUDA);
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) {
      GTEST_SKIP() << "no CUDA device is visible (torch::cuda::is_available() is false)";
    }
    if (!has_cuda_kernel("custom::weighted_sum")) {
      GTEST_SKIP() << "libcustom_ops was built without CUDA kernels";
    }
    torch::manual_seed(0);
  }

  const at::Device cuda{at::kCUDA, 0};
};

}  // namespace custom_ops_test
