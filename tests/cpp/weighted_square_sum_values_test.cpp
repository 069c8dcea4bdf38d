// SPDX-License-Identifier: BSD-3-Clause
// custom::weighted_square_sum on the CPU: values against a float64 reference of
// (weight * input.square()).sum(dim, keepdim, dtype=dtype) for every dtype, dim list, keepdim,
// dtype= and broadcast, strided and misaligned operands, empty and 0-dim shapes. The shape, dtype
// and (contiguous) layout of every result are those of the composite; float16/bfloat16 results are
// the float32 sums rounded once; full reductions match with broadcast weights, the same bits each run.
#include <gtest/gtest.h>
#include <torch/torch.h>

// The umbrella header, so a test checks that it brings in the new operator.
#include <custom_ops/custom_ops.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference.h"
#include "weighted_square_sum_reference.h"

namespace {

using custom_ops_test::expect_rounded_once;
using custom_ops_test::expect_totals_match;
using custom_ops_test::IsWeightedSquareSumOf;
using custom_ops_test::kCols;
using custom_ops_test::kFloatingDtypes;
using custom_ops_test::kRows;
using custom_ops_test::random;
using custom_ops_test::rank2_reductions;
using custom_ops_test::Reduction;
using custom_ops_test::Shape;
using custom_ops_test::weighted_square_sum;

class WeightedSquareSumValues : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_F(WeightedSquareSumValues, EveryDimListMatchesReferenceForEachDtype) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kCols}, dtype);
    for (const auto& w : {random({kRows, kCols}, dtype), random({kCols}, dtype), random({kRows, 1}, dtype)}) {
      SCOPED_TRACE("weight shape " + c10::str(w.sizes()));
      for (const auto& r : rank2_reductions()) {
        SCOPED_TRACE(r.str());
        EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
      }
    }
  }
  // More elements than at::internal::GRAIN_SIZE, so parallel loops split the work.
  const auto x = random({64, 1031}, at::kFloat);
  const auto w = random({64, 1031}, at::kFloat);
  for (const auto& r : {Reduction{std::nullopt}, Reduction{Shape{0}}, Reduction{Shape{1}, true}}) {
    SCOPED_TRACE(r.str());
    EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
  }
}

TEST_F(WeightedSquareSumValues, LowPrecisionResultsAreTheFloat32SumsRoundedOnce) {
  expect_rounded_once(at::kCPU);
}

TEST_F(WeightedSquareSumValues, TotalsWithBroadcastWeightsMatchAndRepeatBitwise) {
  expect_totals_match(at::kCPU);
  // The CPU's tree over the rows' sums follows the shape, not the thread count.
  const auto x = random({4099, 1024}, at::kFloat) * random({4099, 1024}, at::kFloat).mul(2).exp();
  const auto w = random({1024}, at::kFloat);
  const int threads = at::get_num_threads();
  const auto one = [&] {
    at::set_num_threads(1);
    return custom::weighted_square_sum(x, w);
  }();
  for (const int n : {2, 3, 8}) {
    at::set_num_threads(n);
    EXPECT_TRUE(torch::equal(custom::weighted_square_sum(x, w), one)) << n << " threads";
  }
  at::set_num_threads(threads);
}

TEST_F(WeightedSquareSumValues, DimsOfRank4ShapesWithBroadcastWeights) {
  const std::vector<std::optional<Shape>> dims = {std::nullopt, Shape{1},       Shape{0, 2},       Shape{-1, 1},
                                                  Shape{3, 0},  Shape{1, 2, 3}, Shape{0, 1, 2, 3}, Shape{2}};
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({3, 4, 5, 6}, dtype);
    for (const Shape& w_shape : std::vector<Shape>{{3, 4, 5, 6}, {6}, {4, 1, 1}, {}, {3, 1, 5, 1}, {1, 4, 1, 6}}) {
      SCOPED_TRACE("weight shape " + c10::str(at::IntArrayRef(w_shape)));
      const auto w = random(w_shape, dtype);
      for (const auto& dim : dims) {
        for (const bool keepdim : {false, true}) {
          const Reduction r{dim, keepdim};
          SCOPED_TRACE(r.str());
          EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
        }
      }
    }
  }
}

TEST_F(WeightedSquareSumValues, InputBroadcastAgainstAWeightOfMoreDims) {
  const std::vector<std::pair<Shape, Shape>> shapes = {{{5, 1}, {2, 5, 7}}, {{7}, {3, 1, 7}}, {{}, {3, 4}}};
  for (const auto& [x_shape, w_shape] : shapes) {
    SCOPED_TRACE("input " + c10::str(at::IntArrayRef(x_shape)) + ", weight " + c10::str(at::IntArrayRef(w_shape)));
    const auto x = random(x_shape, at::kFloat);
    const auto w = random(w_shape, at::kFloat);
    const auto rank = static_cast<int64_t>(w_shape.size());
    for (const auto& dim : std::vector<std::optional<Shape>>{std::nullopt, Shape{0}, Shape{rank - 1}, Shape{-1, 0}}) {
      for (const bool keepdim : {false, true}) {
        const Reduction r{dim, keepdim};
        SCOPED_TRACE(r.str());
        EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
      }
    }
  }
}

// Each operand's row depends on one kept dim alone (x [N, 1, D] with w [1, M, D]): the pairs loops
// (kernels/cpu/reduction_pairs.cpp), with tiles off their sizes, runs past 128 terms, and the
// input's row by either dim. Under the sanitizers too (make sanitize).
TEST_F(WeightedSquareSumValues, OperandsThatBroadcastAgainstEachOther) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{70, 1, 130}, {1, 67, 130}}, {{1, 300, 9}, {5, 1, 9}}, {{3, 1, 2}, {1, 2, 2}}};
  for (const auto dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    for (const auto& [x_shape, w_shape] : shapes) {
      SCOPED_TRACE(c10::toString(dtype) + (" input " + c10::str(at::IntArrayRef(x_shape))));
      const auto x = random(x_shape, dtype);
      const auto w = random(w_shape, dtype);
      for (const auto& dim : std::vector<std::optional<Shape>>{Shape{-1}, Shape{0, 2}, std::nullopt}) {
        const Reduction r{dim, false};
        SCOPED_TRACE(r.str());
        EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
      }
    }
  }
}

TEST_F(WeightedSquareSumValues, NonContiguousAndMisalignedOperands) {
  using custom_ops_test::offset_by_one;
  using custom_ops_test::sliced_with_step;
  using custom_ops_test::transposed;
  for (const auto dtype : {at::kHalf, at::kFloat, at::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    const std::vector<std::pair<std::string, at::Tensor>> layouts = {
        {"contiguous", random({kRows, kCols}, dtype)},
        {"transposed", transposed(kRows, kCols, dtype)},
        {"sliced with step 2", sliced_with_step(kRows, kCols, dtype)},
        {"offset by one", offset_by_one(kRows, kCols, dtype)},
        {"expanded rows", random({1, kCols}, dtype).expand({kRows, kCols})},
    };
    for (const auto& [x_name, x] : layouts) {
      for (const auto& [w_name, w] : layouts) {
        SCOPED_TRACE("input " + x_name + ", weight " + w_name);
        for (const auto& r : rank2_reductions()) {
          SCOPED_TRACE(r.str());
          EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
        }
      }
    }
  }
  // Rank 4: channels_last and a permutation, reduced over the channels or the spatial dims.
  const auto x = random({2, 3, 5, 7}, at::kFloat).contiguous(at::MemoryFormat::ChannelsLast);
  const auto permuted = random({5, 2, 7, 3}, at::kFloat).permute({1, 3, 0, 2});
  for (const auto& w : {random({3, 1, 1}, at::kFloat), permuted, random({7}, at::kFloat)}) {
    for (const auto& dim : std::vector<Shape>{{1}, {2, 3}, {0, 2, 3}, {0}, {3}}) {
      for (const bool keepdim : {false, true}) {
        const Reduction r{dim, keepdim};
        SCOPED_TRACE("weight shape " + c10::str(w.sizes()) + ", " + r.str());
        EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
        EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(permuted, w, r), permuted, w, r));
      }
    }
  }
}

TEST_F(WeightedSquareSumValues, ResultDtypeIsResultTypeOrTheDtypeArgument) {
  // Without dtype=: at::result_type(input, weight).
  const std::vector<std::pair<at::ScalarType, at::ScalarType>> pairs = {
      {at::kHalf, at::kFloat}, {at::kBFloat16, at::kHalf}, {at::kFloat, at::kDouble}, {at::kDouble, at::kBFloat16}};
  for (const auto& [input_dtype, weight_dtype] : pairs) {
    SCOPED_TRACE(std::string(c10::toString(input_dtype)) + " input, " + c10::toString(weight_dtype) + " weight");
    const auto x = random({kRows, kCols}, input_dtype);
    const auto w = random({kCols}, weight_dtype);
    for (const auto& r : {Reduction{std::nullopt}, Reduction{Shape{0}}, Reduction{Shape{1}, true}}) {
      SCOPED_TRACE(r.str());
      const auto y = weighted_square_sum(x, w, r);
      EXPECT_EQ(y.scalar_type(), c10::promoteTypes(input_dtype, weight_dtype));
      EXPECT_TRUE(IsWeightedSquareSumOf(y, x, w, r));
    }
  }
  // A 0-dim float64 weight does not widen a float16 input's result (at::result_type's rule).
  const auto xh = random({kCols}, at::kHalf);
  const auto w0 = random({}, at::kDouble);
  EXPECT_EQ(custom::weighted_square_sum(xh, w0).scalar_type(), at::kHalf);
  EXPECT_TRUE(IsWeightedSquareSumOf(custom::weighted_square_sum(xh, w0), xh, w0, {}));

  // With dtype=: that dtype, wider or narrower than the operands'.
  const std::vector<std::pair<at::ScalarType, at::ScalarType>> with_dtype = {
      {at::kFloat, at::kDouble}, {at::kHalf, at::kFloat},     {at::kBFloat16, at::kFloat}, {at::kHalf, at::kDouble},
      {at::kDouble, at::kFloat}, {at::kFloat, at::kBFloat16}, {at::kDouble, at::kHalf},    {at::kFloat, at::kFloat}};
  for (const auto& [operand_dtype, dtype] : with_dtype) {
    SCOPED_TRACE(std::string(c10::toString(operand_dtype)) + " operands, dtype=" + c10::toString(dtype));
    const auto x = random({kRows, kCols}, operand_dtype);
    const auto w = random({kCols}, operand_dtype);
    for (const auto& dim : std::vector<std::optional<Shape>>{std::nullopt, Shape{0}, Shape{1}}) {
      const Reduction r{dim, false, dtype};
      SCOPED_TRACE(r.str());
      const auto y = weighted_square_sum(x, w, r);
      EXPECT_EQ(y.scalar_type(), dtype);
      EXPECT_TRUE(IsWeightedSquareSumOf(y, x, w, r));
    }
  }
}

TEST_F(WeightedSquareSumValues, HalfProductsAndSumsAreComputedInFloat32) {
  const auto half = torch::dtype(at::kHalf);
  // Each product, 300**2 = 90000, overflows float16 (largest finite 65504); their sum is 0.
  const auto x = torch::full({4}, 300.0, half);
  const auto alternating = torch::tensor({1.0, -1.0, 1.0, -1.0}, half);
  const auto y = custom::weighted_square_sum(x, alternating);
  EXPECT_EQ(y.scalar_type(), at::kHalf);
  EXPECT_EQ(y.item<double>(), 0.0);
  // Each product, 200**2 = 40000, fits; the partial sums 80000 do not; the total is 0.
  const auto x200 = torch::full({2, 4}, 200.0, half);
  const auto paired = torch::tensor({1.0, 1.0, -1.0, -1.0}, half);
  EXPECT_EQ(custom::weighted_square_sum(x200, paired).item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(custom::weighted_square_sum(x200, paired, Shape{1}), torch::zeros({2}, half)));
  // A float16 result that overflows is inf, as the composite's; as float32 it is exact.
  const auto ones = torch::ones({4}, half);
  EXPECT_TRUE(std::isinf(custom::weighted_square_sum(x200, ones).item<double>()));
  EXPECT_EQ(custom::weighted_square_sum(x200, ones, std::nullopt, false, at::kFloat).item<double>(), 320000.0);
  // bfloat16: one float32 sum, rounded once (a running bfloat16 sum, 8 significant bits, would stop
  // growing at 256 when adding ones).
  const auto bf_ones = torch::ones({1000}, torch::dtype(at::kBFloat16));
  EXPECT_EQ(custom::weighted_square_sum(bf_ones, bf_ones).item<double>(), 1000.0);
}

TEST_F(WeightedSquareSumValues, EmptyShapes) {
  const std::vector<std::pair<Shape, Shape>> shapes = {{{0, 4}, {4}}, {{2, 0, 3}, {3}}, {{0}, {}}, {{3, 1}, {0}}};
  for (const auto& [x_shape, w_shape] : shapes) {
    SCOPED_TRACE("input " + c10::str(at::IntArrayRef(x_shape)) + ", weight " + c10::str(at::IntArrayRef(w_shape)));
    const auto x = random(x_shape, at::kFloat);
    const auto w = random(w_shape, at::kFloat);
    const auto rank = static_cast<int64_t>(std::max(x_shape.size(), w_shape.size()));
    std::vector<std::optional<Shape>> dims = {std::nullopt, Shape{}, Shape{0}, Shape{-1}};
    if (rank > 1) {
      dims.emplace_back(Shape{1});
      dims.emplace_back(Shape{0, rank - 1});
    }
    for (const auto& dim : dims) {
      for (const bool keepdim : {false, true}) {
        const Reduction r{dim, keepdim};
        SCOPED_TRACE(r.str());
        const auto y = weighted_square_sum(x, w, r);
        EXPECT_TRUE(IsWeightedSquareSumOf(y, x, w, r));  // a sum over no terms is 0
      }
    }
  }
}

TEST_F(WeightedSquareSumValues, ZeroDimOperands) {
  const auto x = random({}, at::kDouble);
  const auto w = random({}, at::kDouble);
  for (const auto& dim : std::vector<std::optional<Shape>>{std::nullopt, Shape{}, Shape{0}, Shape{-1}}) {
    for (const bool keepdim : {false, true}) {
      const Reduction r{dim, keepdim};
      SCOPED_TRACE(r.str());
      const auto y = weighted_square_sum(x, w, r);
      EXPECT_EQ(y.dim(), 0);
      EXPECT_TRUE(IsWeightedSquareSumOf(y, x, w, r));
      EXPECT_DOUBLE_EQ(y.item<double>(), (w * x * x).item<double>());
    }
  }
  // A 0-dim input broadcast against a weight of rank 2.
  const auto wide = random({3, 4}, at::kDouble);
  for (const auto& r : {Reduction{std::nullopt}, Reduction{Shape{1}}, Reduction{Shape{0}, true}}) {
    SCOPED_TRACE(r.str());
    EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, wide, r), x, wide, r));
  }
}

}  // namespace
