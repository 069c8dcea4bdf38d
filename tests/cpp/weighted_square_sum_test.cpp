// custom::weighted_square_sum from C++ alone: values against a float64 reference of
// (weight * input.square()).sum(dim, keepdim, dtype=dtype) for every dtype, dim list, keepdim,
// dtype= and broadcast; empty and 0-dim shapes; errors that name the argument; backward, double
// backward and forward-mode AD against the same derivatives of that composite; the same on CUDA
// when a GPU and the CUDA kernels are there (skipped otherwise). The shape, dtype and (contiguous)
// layout of every result are those of the composite. Float16/bfloat16 results, which the loops
// write directly, are the float32 sums rounded once; full reductions, summed inside the loops
// (one CUDA kernel), match with broadcast weights and give the same bits on every run.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

// The umbrella header, so a test checks that it brings in the new operator.
#include <custom_ops/custom_ops.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test.h"
#include "dual_level.h"
#include "expect_error.h"
#include "reference.h"
#include "weighted_square_sum_reference.h"

namespace {

using custom_ops_test::DualLevel;
using custom_ops_test::IsWeightedSquareSumOf;
using custom_ops_test::kFloatingDtypes;
using custom_ops_test::random;
using custom_ops_test::Reduction;
using custom_ops_test::weighted_square_sum;
using custom_ops_test::weighted_square_sum_composite;
using Shape = std::vector<int64_t>;

// 37 x 259: rows and columns that are no multiple of any vector width or block size.
constexpr int64_t kRows = 37;
constexpr int64_t kCols = 259;

// Every dim list of a rank-2 shape, with and without keepdim.
std::vector<Reduction> rank2_reductions() {
  std::vector<Reduction> reductions;
  for (const bool keepdim : {false, true}) {
    for (const auto& dim : std::vector<std::optional<Shape>>{
             std::nullopt, Shape{}, Shape{0}, Shape{1}, Shape{-1}, Shape{-2}, Shape{0, 1}, Shape{1, 0}, Shape{-1, 0}}) {
      reductions.push_back({dim, keepdim});
    }
  }
  return reductions;
}

// ------------------------------------------------------------------------------------- values

// Layouts whose float16/bfloat16 results the loops write themselves (last-dim, first-dim and full
// reductions, with weights broadcast along the rows or down them) and one the frontend finishes (a
// weight broadcast between the reduced dims), each with its dims.
struct RoundingCase {
  Shape x;
  Shape w;
  std::optional<Shape> dim;
};

std::vector<RoundingCase> rounding_cases() {
  return {
      {{37, 1031}, {1031}, Shape{-1}},     {{1031, 37}, {1031, 1}, Shape{0}},     {{70001}, {70001}, std::nullopt},
      {{513, 1024}, {1024}, std::nullopt}, {{513, 1024}, {513, 1}, std::nullopt}, {{6, 7, 300}, {7, 1}, Shape{0, 2}},
  };
}

// A low-precision result is the float32 result (the same sums in the same order) rounded once.
void expect_rounded_once(at::Device device) {
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    for (const auto& c : rounding_cases()) {
      const auto x = random(c.x, dtype, device);
      const auto w = random(c.w, dtype, device);
      for (const bool keepdim : {false, true}) {
        const Reduction r{c.dim, keepdim};
        SCOPED_TRACE(std::string(c10::toString(dtype)) + ", input " + c10::str(x.sizes()) + ", " + r.str());
        const auto y = weighted_square_sum(x, w, r);
        EXPECT_EQ(y.scalar_type(), dtype);
        EXPECT_TRUE(torch::equal(y, weighted_square_sum(x, w, {c.dim, keepdim, at::kFloat}).to(dtype)));
        EXPECT_TRUE(IsWeightedSquareSumOf(y, x, w, r));
      }
    }
  }
}

// Full reductions with a weight broadcast along a dim, and the same reduction spelled with every
// dim: within the reference, the same bits each time.
void expect_totals_match(at::Device device) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{4099, 1024}, {1024}}, {{4099, 1024}, {4099, 1}}, {{4099, 1024}, {}}, {{33, 129, 65}, {129, 1}}};
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& [x_shape, w_shape] : shapes) {
      SCOPED_TRACE(
          std::string(c10::toString(dtype)) + ", input " + c10::str(at::IntArrayRef(x_shape)) + ", weight " +
          c10::str(at::IntArrayRef(w_shape)));
      // A weight shared by many terms cancels less: sums small enough for float16 to hold (x / 16
      // is exact).
      const auto x = random(x_shape, dtype, device) / 16;
      const auto w =
          w_shape.empty() ? torch::full({}, 0.01, torch::dtype(dtype).device(device)) : random(w_shape, dtype, device);
      const auto y = custom::weighted_square_sum(x, w);
      EXPECT_TRUE(IsWeightedSquareSumOf(y, x, w, {std::nullopt}));
      Shape every(x_shape.size());
      std::iota(every.begin(), every.end(), 0);
      EXPECT_TRUE(torch::equal(custom::weighted_square_sum(x, w, every), y));
      for (int run = 0; run < 3; ++run) {
        EXPECT_TRUE(torch::equal(custom::weighted_square_sum(x, w), y));
      }
    }
  }
}

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

// ------------------------------------------------------------------------------------- errors

constexpr const char* kOp = "custom::weighted_square_sum";

TEST(WeightedSquareSumErrors, DimOutOfRangeOfTheBroadcastShapeIsAnIndexError) {
  const auto x = random({2, 3}, at::kFloat);
  const auto w = random({3}, at::kFloat);
  EXPECT_THROW(custom::weighted_square_sum(x, w, Shape{2}), c10::IndexError);
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{2}), kOp, "dim 2 is out of range", "[-2, 1]");
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{0, -3}), kOp, "dim -3 is out of range");
  // The range is the broadcast shape's, not the input's.
  const auto x1 = random({3}, at::kFloat);
  const auto w2 = random({2, 3}, at::kFloat);
  EXPECT_NO_THROW(custom::weighted_square_sum(x1, w2, Shape{-2}));
  EXPECT_C10_ERROR(custom::weighted_square_sum(x1, w2, Shape{2}), kOp, "dim 2 is out of range");
  // A 0-dim shape takes 0 and -1 only, as torch.sum.
  const auto s = random({}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_square_sum(s, s, Shape{1}), kOp, "dim 1 is out of range", "[-1, 0]");
  // The same through the Autograd kernel.
  const auto xg = random({2, 3}, at::kFloat).requires_grad_();
  EXPECT_C10_ERROR(custom::weighted_square_sum(xg, w, Shape{5}), kOp, "dim 5 is out of range");
}

TEST(WeightedSquareSumErrors, RepeatedDimIsRejectedNamingIt) {
  const auto x = random({2, 3}, at::kFloat);
  const auto w = random({3}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{1, 1}), kOp, "dim 1 appears more than once");
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{1, -1}), kOp, "appears more than once");
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{0, -2}, true), kOp, "appears more than once");
  const auto s = random({}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_square_sum(s, s, Shape{0, -1}), kOp, "appears more than once");
}

TEST(WeightedSquareSumErrors, NonFloatingOperandsAreRejectedNamingTheArgument) {
  const auto good = random({4}, at::kFloat);
  for (const auto dtype : {at::kByte, at::kInt, at::kLong, at::kBool, at::kComplexFloat}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto bad = torch::ones({4}, torch::dtype(dtype));
    EXPECT_C10_ERROR(
        custom::weighted_square_sum(bad, good),
        "custom::weighted_square_sum: input must have dtype float16, bfloat16, float32 or float64, got",
        c10::toString(dtype));
    EXPECT_C10_ERROR(
        custom::weighted_square_sum(good, bad, Shape{0}), "custom::weighted_square_sum: weight must have dtype",
        c10::toString(dtype));
  }
}

TEST(WeightedSquareSumErrors, NonFloatingDtypeArgumentIsRejectedNamingIt) {
  const auto x = random({2, 3}, at::kFloat);
  const auto w = random({3}, at::kFloat);
  for (const auto dtype : {at::kInt, at::kLong, at::kBool, at::kComplexDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    EXPECT_C10_ERROR(
        custom::weighted_square_sum(x, w, std::nullopt, false, dtype),
        "custom::weighted_square_sum: dtype must be float16, bfloat16, float32 or float64, got", c10::toString(dtype));
    EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{1}, true, dtype), kOp, "dtype must be");
  }
}

TEST(WeightedSquareSumErrors, NonBroadcastableShapesAreRejectedNamingBoth) {
  const auto x = random({2, 3}, at::kFloat);
  const auto w = random({4}, at::kFloat);
  EXPECT_C10_ERROR(
      custom::weighted_square_sum(x, w), kOp, "input of shape [2, 3]", "weight of shape [4]", "not broadcastable");
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{0}, true), kOp, "not broadcastable");
  // Before the dims are checked against the (nonexistent) broadcast shape.
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w, Shape{7}), kOp, "not broadcastable");
}

TEST(WeightedSquareSumErrors, OperandsOnDifferentDevicesOrUndefinedAreRejectedNamingThem) {
  // The Meta device stands in for a second device: it needs no GPU.
  const auto x = random({4}, at::kFloat);
  const auto meta = torch::empty({4}, torch::dtype(at::kFloat).device(at::kMeta));
  EXPECT_C10_ERROR(
      custom::weighted_square_sum(x, meta), kOp, "expected input and weight on the same device", "input on cpu",
      "weight on meta");
  EXPECT_C10_ERROR(custom::weighted_square_sum(at::Tensor(), x), kOp, "input is an undefined tensor");
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, at::Tensor()), kOp, "weight is an undefined tensor");
}

// ----------------------------------------------------------------------------------- autograd

// d/d(input, weight) of sum(f(input, weight) * grad), by reverse mode.
std::vector<at::Tensor> gradients(
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f,
    const at::Tensor& x0,
    const at::Tensor& w0,
    const at::Tensor& grad) {
  auto x = x0.detach().clone().requires_grad_();
  auto w = w0.detach().clone().requires_grad_();
  return torch::autograd::grad({f(x, w)}, {x, w}, {grad});
}

struct AutogradCase {
  Shape x;
  Shape w;
  Reduction r;
};

std::vector<AutogradCase> autograd_cases() {
  return {
      {{5, 7}, {5, 7}, {std::nullopt}},
      {{5, 7}, {5, 7}, {Shape{}, true}},
      {{5, 7}, {7}, {Shape{0}}},
      {{5, 7}, {7}, {Shape{1}, true}},
      {{5, 7}, {5, 1}, {Shape{-1}}},
      {{3, 4, 5}, {4, 1}, {Shape{0, 2}}},
      {{3, 4, 5}, {}, {Shape{-1}, true}},
      {{3, 4, 5}, {5}, {Shape{2, 0, 1}}},
      {{4, 1}, {1, 6}, {Shape{1}}},
      {{7}, {3, 1, 7}, {Shape{0}, true}},
      {{}, {3}, {Shape{0}}},
      {{}, {}, {std::nullopt, true}},
      {{0, 3}, {3}, {Shape{0}}},
  };
}

class WeightedSquareSumAutograd : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_F(WeightedSquareSumAutograd, BackwardMatchesCompositeForEachDimAndBroadcast) {
  for (const auto& c : autograd_cases()) {
    SCOPED_TRACE(
        "input " + c10::str(at::IntArrayRef(c.x)) + ", weight " + c10::str(at::IntArrayRef(c.w)) + ", " + c.r.str());
    const auto x = random(c.x, at::kDouble);
    const auto w = random(c.w, at::kDouble);
    const auto result = weighted_square_sum(x.clone().requires_grad_(), w, c.r);
    ASSERT_TRUE(result.requires_grad());
    ASSERT_NE(result.grad_fn(), nullptr);
    const auto g = random(result.sizes(), at::kDouble);
    const auto r = c.r;
    const auto got = gradients([&](const auto& a, const auto& b) { return weighted_square_sum(a, b, r); }, x, w, g);
    const auto expected =
        gradients([&](const auto& a, const auto& b) { return weighted_square_sum_composite(a, b, r); }, x, w, g);
    for (size_t i = 0; i < 2; ++i) {
      SCOPED_TRACE(i == 0 ? "grad of input" : "grad of weight");
      ASSERT_TRUE(got[i].defined());
      EXPECT_EQ(got[i].sizes(), expected[i].sizes());
      EXPECT_EQ(got[i].scalar_type(), at::kDouble);
      EXPECT_TRUE(torch::allclose(got[i], expected[i], 1e-12, 1e-12));
    }
  }
}

TEST_F(WeightedSquareSumAutograd, BackwardForEachDtypeAndDtypeArgument) {
  // (operand dtype, dtype=): gradients have the operands' dtypes; values against the composite's
  // gradients in float64. Same shapes, so each gradient element is one product, no sum.
  std::vector<std::pair<at::ScalarType, std::optional<at::ScalarType>>> cases;
  for (const auto dtype : kFloatingDtypes) {
    cases.emplace_back(dtype, std::nullopt);
  }
  cases.emplace_back(at::kFloat, at::kDouble);
  cases.emplace_back(at::kHalf, at::kFloat);
  cases.emplace_back(at::kDouble, at::kFloat);
  for (const auto& [dtype, result_dtype] : cases) {
    for (const auto& dim : std::vector<std::optional<Shape>>{std::nullopt, Shape{1}}) {
      const Reduction r{dim, false, result_dtype};
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " operands, " + r.str());
      const auto x = random({kRows, kCols}, dtype);
      const auto w = random({kRows, kCols}, dtype);
      const auto g = random(weighted_square_sum_composite(x, w, r).sizes(), r.dtype.value_or(dtype));
      const auto got = gradients([&](const auto& a, const auto& b) { return weighted_square_sum(a, b, r); }, x, w, g);
      const auto as_double = [](const at::Tensor& t) { return t.to(at::kDouble); };
      const Reduction r64{dim, false};
      const auto expected = gradients(
          [&](const auto& a, const auto& b) { return weighted_square_sum_composite(a, b, r64); }, as_double(x),
          as_double(w), as_double(g));
      for (size_t i = 0; i < 2; ++i) {
        SCOPED_TRACE(i == 0 ? "grad of input" : "grad of weight");
        EXPECT_EQ(got[i].scalar_type(), dtype);
        EXPECT_TRUE(
            custom_ops_test::AllClose(got[i], expected[i], custom_ops_test::tolerance(dtype, r.dtype.value_or(dtype))));
      }
    }
  }
}

TEST_F(WeightedSquareSumAutograd, OnlyArgumentsThatRequireGradReceiveOneAndNoGradRecordsNothing) {
  auto x = random({kRows, kCols}, at::kDouble).requires_grad_();
  auto w = random({kCols}, at::kDouble);
  custom::weighted_square_sum(x, w, Shape{1}).sum().backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_TRUE(torch::allclose(x.grad(), 2 * w * x.detach()));

  auto x2 = random({kRows, kCols}, at::kDouble);
  auto w2 = random({kCols}, at::kDouble).requires_grad_();
  custom::weighted_square_sum(x2, w2).backward();
  EXPECT_FALSE(x2.grad().defined());
  EXPECT_TRUE(torch::allclose(w2.grad(), x2.square().sum(0)));

  EXPECT_FALSE(custom::weighted_square_sum(x2, w.detach()).requires_grad());
  torch::NoGradGuard no_grad;
  const auto y = custom::weighted_square_sum(x, w2);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

constexpr std::array<const char*, 5> kSecondOrderNames = {
    "grad of input", "grad of weight", "hvp of input", "hvp of weight", "forward over reverse of input"};

// Gradients of f(x, w).sin().sum(), their Hessian-vector products by double backward, and the
// same product for the input by forward mode over reverse mode.
std::vector<at::Tensor> second_order(
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f,
    const at::Tensor& x0,
    const at::Tensor& w0,
    const at::Tensor& direction) {
  auto x = x0.clone().requires_grad_();
  auto w = w0.clone().requires_grad_();
  const auto grads = torch::autograd::grad({f(x, w).sin().sum()}, {x, w}, {}, true, true);
  const auto hvp = torch::autograd::grad({(grads[0] * direction).sum() + grads[1].sum()}, {x, w});
  at::Tensor forward_over_reverse;
  {
    const DualLevel level;
    auto dx = level.dual(x0, direction).requires_grad_();
    const auto g = torch::autograd::grad({f(dx, w0).sin().sum()}, {dx}, {}, true, true);
    forward_over_reverse = level.tangent(g[0]);
  }
  return {grads[0], grads[1], hvp[0], hvp[1], forward_over_reverse};
}

TEST_F(WeightedSquareSumAutograd, DoubleBackwardAndForwardOverReverseMatchComposite) {
  for (const auto& c : autograd_cases()) {
    SCOPED_TRACE(
        "input " + c10::str(at::IntArrayRef(c.x)) + ", weight " + c10::str(at::IntArrayRef(c.w)) + ", " + c.r.str());
    const auto x = random(c.x, at::kDouble);
    const auto w = random(c.w, at::kDouble);
    const auto direction = random(c.x, at::kDouble);
    const auto r = c.r;
    const auto got =
        second_order([&](const auto& a, const auto& b) { return weighted_square_sum(a, b, r); }, x, w, direction);
    const auto expected = second_order(
        [&](const auto& a, const auto& b) { return weighted_square_sum_composite(a, b, r); }, x, w, direction);
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(kSecondOrderNames[i]);
      ASSERT_TRUE(got[i].defined());
      EXPECT_EQ(got[i].sizes(), expected[i].sizes());
      EXPECT_TRUE(torch::allclose(got[i], expected[i], 1e-12, 1e-12));
    }
  }
}

TEST_F(WeightedSquareSumAutograd, ForwardAdTangentMatchesComposite) {
  for (const auto& c : autograd_cases()) {
    SCOPED_TRACE(
        "input " + c10::str(at::IntArrayRef(c.x)) + ", weight " + c10::str(at::IntArrayRef(c.w)) + ", " + c.r.str());
    const auto x = random(c.x, at::kDouble);
    const auto w = random(c.w, at::kDouble);
    const auto tx = random(c.x, at::kDouble);
    const auto tw = random(c.w, at::kDouble);
    for (const auto& [with_x, with_w] : {std::pair{true, false}, {false, true}, {true, true}}) {
      SCOPED_TRACE(std::string("tangent of ") + (with_x ? "input " : "") + (with_w ? "weight" : ""));
      const DualLevel level;
      const auto dx = with_x ? level.dual(x, tx) : x;
      const auto dw = with_w ? level.dual(w, tw) : w;
      const auto result = weighted_square_sum(dx, dw, c.r);
      const auto tangent = level.tangent(result);
      ASSERT_TRUE(tangent.defined()) << "the result lost its tangent";
      const auto expected = level.tangent(weighted_square_sum_composite(dx, dw, c.r));
      EXPECT_EQ(tangent.sizes(), result.sizes());
      EXPECT_EQ(tangent.sizes(), expected.sizes());
      EXPECT_TRUE(torch::allclose(tangent, expected, 1e-12, 1e-12));
    }
  }
  // dtype=: the tangent has the result's dtype.
  const auto x = random({3, 4}, at::kFloat);
  const auto w = random({4}, at::kFloat);
  const auto tx = random({3, 4}, at::kFloat);
  const DualLevel level;
  const Reduction r{Shape{1}, true, at::kDouble};
  const auto tangent = level.tangent(weighted_square_sum(level.dual(x, tx), w, r));
  ASSERT_TRUE(tangent.defined());
  EXPECT_EQ(tangent.scalar_type(), at::kDouble);
  EXPECT_TRUE(torch::allclose(tangent, level.tangent(weighted_square_sum_composite(level.dual(x, tx), w, r))));
}

// --------------------------------------------------------------------------------------- CUDA

class WeightedSquareSumCuda : public custom_ops_test::CudaTest {};

TEST_F(WeightedSquareSumCuda, ValuesMatchReferenceForEachDtypeDimAndLayout) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kCols}, dtype, cuda);
    for (const auto& w :
         {random({kRows, kCols}, dtype, cuda), random({kCols}, dtype, cuda), random({kRows, 1}, dtype, cuda),
          custom_ops_test::transposed(kRows, kCols, dtype, cuda)}) {
      SCOPED_TRACE("weight shape " + c10::str(w.sizes()) + ", strides " + c10::str(w.strides()));
      for (const auto& r : rank2_reductions()) {
        SCOPED_TRACE(r.str());
        EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
      }
    }
  }
  const auto x = random({3, 4, 5, 6}, at::kFloat, cuda);
  const auto w = random({4, 1, 6}, at::kFloat, cuda);
  for (const auto& dim : std::vector<Shape>{{0, 2}, {1, 3}, {3}, {0, 1, 2, 3}}) {
    const Reduction r{dim, false, at::kDouble};
    SCOPED_TRACE(r.str());
    EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(x, w, r), x, w, r));
  }
  const auto empty = random({0, 4}, at::kFloat, cuda);
  const auto w4 = random({4}, at::kFloat, cuda);
  for (const auto& r : {Reduction{std::nullopt}, Reduction{Shape{0}}, Reduction{Shape{1}, true}}) {
    SCOPED_TRACE("empty input, " + r.str());
    EXPECT_TRUE(IsWeightedSquareSumOf(weighted_square_sum(empty, w4, r), empty, w4, r));
  }
}

TEST_F(WeightedSquareSumCuda, LowPrecisionResultsAreTheFloat32SumsRoundedOnce) {
  expect_rounded_once(cuda);
}

TEST_F(WeightedSquareSumCuda, TotalsWithBroadcastWeightsMatchAndRepeatBitwise) {
  expect_totals_match(cuda);
  // 2^26 elements: a few hundred block partials, added by the last block; the same bits each run.
  const auto x = random({1 << 16, 1024}, at::kBFloat16, cuda);
  const auto w = random({1024}, at::kBFloat16, cuda);
  const auto y = custom::weighted_square_sum(x, w);
  EXPECT_TRUE(IsWeightedSquareSumOf(y, x, w, {std::nullopt}));
  for (int run = 0; run < 3; ++run) {
    EXPECT_TRUE(torch::equal(custom::weighted_square_sum(x, w), y));
  }
}

TEST_F(WeightedSquareSumCuda, GradientsMatchTheCpuOnes) {
  const auto x = random({kRows, kCols}, at::kDouble);
  const auto w = random({kCols}, at::kDouble);
  const Reduction r{Shape{1}};
  const auto g = random({kRows}, at::kDouble);
  const auto f = [&](const at::Tensor& a, const at::Tensor& b) { return weighted_square_sum(a, b, r); };
  const auto cpu = gradients(f, x, w, g);
  const auto gpu = gradients(f, x.to(cuda), w.to(cuda), g.to(cuda));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(gpu[i].is_cuda());
    EXPECT_TRUE(torch::allclose(gpu[i].cpu(), cpu[i], 1e-12, 1e-12));
  }
}

TEST_F(WeightedSquareSumCuda, OperandsOnCpuAndCudaAreRejectedNamingBoth) {
  const auto x = random({4}, at::kFloat, cuda);
  const auto w = random({4}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_square_sum(x, w), kOp, "input on cuda:0", "weight on cpu");
}

}  // namespace
