// SPDX-License-Identifier: BSD-3-Clause
// A build with CUDA kernels (CUSTOM_OPS_WITH_CUDA) must have registered one for every operator
// overload: a test fails here, where the CUDA tests would only skip.
#include <gtest/gtest.h>

#include "cuda_test.h"
#include "kernels/cuda/architecture_coverage.h"

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

// The rule behind the warning of a kernel's first call on a GPU the library was not built for.
TEST(CudaBuild, ArchitectureListCoversTheGpusItCanRunOn) {
  using custom::cuda::architectures_cover;
  // A cubin runs on its own major version at the same or a higher minor only.
  EXPECT_TRUE(architectures_cover("8.0;9.0", 8, 0));
  EXPECT_TRUE(architectures_cover("8.0;9.0", 8, 6));
  EXPECT_TRUE(architectures_cover("8.0 9.0", 8, 9));
  EXPECT_FALSE(architectures_cover("8.6;9.0", 8, 0));
  EXPECT_FALSE(architectures_cover("8.0;9.0", 7, 5));
  EXPECT_FALSE(architectures_cover("8.0;9.0", 10, 0));
  EXPECT_FALSE(architectures_cover("10.0", 12, 0));
  EXPECT_TRUE(architectures_cover("7.5;10.0;12.0", 12, 1));
  // PTX is compiled by the driver for its own and every newer GPU, never an older one.
  EXPECT_TRUE(architectures_cover("8.0;9.0+PTX", 10, 0));
  EXPECT_TRUE(architectures_cover("8.0;9.0+PTX", 12, 0));
  EXPECT_FALSE(architectures_cover("9.0+PTX", 8, 6));
  // Arch-specific cubins (9.0a) run on that GPU alone; family ones (10.0f) like plain cubins.
  EXPECT_TRUE(architectures_cover("9.0a", 9, 0));
  EXPECT_FALSE(architectures_cover("8.0a", 8, 6));
  EXPECT_TRUE(architectures_cover("10.0f", 10, 3));
  // No architectures (a build without CUDA) and malformed entries cover nothing.
  EXPECT_FALSE(architectures_cover("", 9, 0));
  EXPECT_FALSE(architectures_cover("Hopper;sm_90;9", 9, 0));
}

}  // namespace
