// A build with CUDA kernels (CUSTOM_OPS_WITH_CUDA) must have registered one for every operator
// overload: a test fails here, where the CUDA tests would only skip.
#include <gtest/gtest.h>

#include "cuda_test.h"

// Set to 1 by CMake when the library is built with CUDA kernels.
#ifndef CUSTOM_OPS_TESTS_EXPECT_CUDA
#define CUSTOM_OPS_TESTS_EXPECT_CUDA 0
#endif

namespace {

TEST(CudaBuild, EveryOperatorHasItsCudaKernelWhenBuiltWithCuda) {
  if (!CUSTOM_OPS_TESTS_EXPECT_CUDA) {
    GTEST_SKIP() << "libcustom_ops was built without CUDA kernels (CUSTOM_OPS_WITH_CUDA is OFF)";
  }
  for (const char* op :
       {"custom::weighted_sum", "custom::weighted_sum.out", "custom::weighted_sum_", "custom::weighted_sum_backward",
        "custom::weighted_square_sum"}) {
    EXPECT_TRUE(custom_ops_test::has_cuda_kernel(op)) << "built with CUDA, but " << op << " has no CUDA kernel";
  }
}

}  // namespace
