// SPDX-License-Identifier: BSD-3-Clause
// custom::weighted_sum_out and custom::weighted_sum_ on the CPU: ATen's out= rules (write in
// place, resize a wrong shape, cast to a castable dtype, refuse the rest) and the in-place
// overload's values and refusals. Destinations are filled with NaN first, so an element the op
// fails to write shows up.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <custom_ops/custom_ops.h>

#include <string>
#include <vector>

#include "expect_error.h"
#include "reference.h"

namespace {

using custom_ops_test::AllClose;
using custom_ops_test::kFloatingDtypes;
using custom_ops_test::nan_filled;
using custom_ops_test::random;
using custom_ops_test::reference;

constexpr int64_t kRows = 5;
constexpr int64_t kCols = 67;

// Collects the warnings issued while it is installed.
class WarningCollector : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  bool any_contains(const std::string& part) const {
    for (const auto& m : messages) {
      if (m.find(part) != std::string::npos) return true;
    }
    return false;
  }
  std::vector<std::string> messages;
};

class WeightedSumOut : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

using WeightedSumInplace = WeightedSumOut;

TEST_F(WeightedSumOut, RightShapeOutIsWrittenInItsOwnStorage) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kRows, kCols}, dtype);
    const auto w = random({kCols}, dtype);
    auto out = nan_filled({kRows, kCols}, dtype);
    const void* storage = out.data_ptr();
    const auto version = out._version();
    at::Tensor& returned = custom::weighted_sum_out(out, x, w);
    EXPECT_EQ(&returned, &out);
    EXPECT_EQ(out.data_ptr(), storage);
    EXPECT_GT(out._version(), version);
    EXPECT_TRUE(AllClose(out, reference(x, w), dtype));
  }
}

TEST_F(WeightedSumOut, WrongShapeOutIsResizedWarningOnlyWhenItHeldElements) {
  const auto x = random({kRows, kCols}, at::kFloat);
  const auto w = random({kCols}, at::kFloat);
  auto out = nan_filled({7}, at::kFloat);
  auto empty_out = torch::empty({0}, torch::kFloat);
  WarningCollector resize_warnings;
  {
    c10::WarningUtils::WarningHandlerGuard guard(&resize_warnings);
    custom::weighted_sum_out(out, x, w);
  }
  WarningCollector empty_warnings;
  {
    c10::WarningUtils::WarningHandlerGuard guard(&empty_warnings);
    custom::weighted_sum_out(empty_out, x, w);
  }
  for (const auto& resized : {out, empty_out}) {
    EXPECT_EQ(resized.sizes(), (std::vector<int64_t>{kRows, kCols}));
    EXPECT_TRUE(AllClose(resized, reference(x, w), at::kFloat));
  }
  EXPECT_TRUE(resize_warnings.any_contains("resized")) << c10::Join("; ", resize_warnings.messages);
  EXPECT_TRUE(empty_warnings.messages.empty()) << c10::Join("; ", empty_warnings.messages);
}

TEST_F(WeightedSumOut, CastableDifferentDtypeOutReceivesTheResultCastToIt) {
  const auto x = random({kRows, kCols}, at::kFloat);
  const auto w = random({kCols}, at::kFloat);
  for (const auto out_dtype : {at::kDouble, at::kHalf, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(out_dtype));
    auto out = nan_filled({kRows, kCols}, out_dtype);
    custom::weighted_sum_out(out, x, w);
    EXPECT_EQ(out.scalar_type(), out_dtype);
    EXPECT_TRUE(AllClose(out, reference(x, w), custom_ops_test::tolerance(at::kFloat, out_dtype)));
  }
  // ATen's out= rule: computed in the result dtype (float16 here, via float32), then cast, so a
  // float32 out holds the float16-rounded values.
  const auto xh = random({kRows, kCols}, at::kHalf);
  const auto wh = random({kCols}, at::kHalf);
  auto out = nan_filled({kRows, kCols}, at::kFloat);
  custom::weighted_sum_out(out, xh, wh);
  EXPECT_TRUE(torch::equal(out, custom::weighted_sum(xh, wh).to(at::kFloat)));
  EXPECT_TRUE(AllClose(out, reference(xh, wh), at::kHalf));
}

TEST_F(WeightedSumOut, NonFloatingOutOrOutOnAnotherDeviceIsRejectedNamingOut) {
  const auto x = random({kRows, kCols}, at::kFloat);
  const auto w = random({kCols}, at::kFloat);
  for (const auto out_dtype : {at::kInt, at::kLong, at::kBool, at::kComplexFloat}) {
    SCOPED_TRACE(c10::toString(out_dtype));
    auto out = torch::zeros({kRows, kCols}, torch::dtype(out_dtype));
    EXPECT_C10_ERROR(custom::weighted_sum_out(out, x, w), "custom::weighted_sum.out", "out must have dtype");
  }
  // The Meta device stands in for another device: it needs no GPU.
  auto meta_out = torch::empty({kRows, kCols}, torch::dtype(at::kFloat).device(at::kMeta));
  EXPECT_C10_ERROR(custom::weighted_sum_out(meta_out, x, w), "expected out on cpu", "got out on meta");
}

TEST_F(WeightedSumOut, ViewsAndAliasesFollowAtenOverlapRules) {
  const auto x = random({kRows, kCols}, at::kFloat);
  const auto w = random({kCols}, at::kFloat);
  // A strided view of a larger tensor: only the view's elements are written.
  auto base = nan_filled({kRows, 2 * kCols}, at::kFloat);
  auto odd_columns = base.slice(1, 1, 2 * kCols, 2);
  custom::weighted_sum_out(odd_columns, x, w);
  EXPECT_TRUE(AllClose(odd_columns, reference(x, w), at::kFloat));
  EXPECT_TRUE(base.slice(1, 0, 2 * kCols, 2).isnan().all().item<bool>()) << "wrote outside the view";
  // out may be the input itself ...
  auto self = random({kRows, kCols}, at::kDouble);
  const auto expected = reference(self, w);
  custom::weighted_sum_out(self, self, w);
  EXPECT_TRUE(AllClose(self, expected, at::kDouble));
  // ... but not overlap it partially.
  auto storage = random({kCols + 1}, at::kFloat);
  auto shifted_out = storage.slice(0, 0, kCols);
  EXPECT_C10_ERROR(custom::weighted_sum_out(shifted_out, storage.slice(0, 1), w), "memory location");
}

// Checks that a refused call left `tensor` as it was: same shape, memory and values.
void expect_untouched(const at::Tensor& tensor, const at::Tensor& copy, const void* storage) {
  EXPECT_EQ(tensor.sizes(), copy.sizes());
  EXPECT_EQ(tensor.data_ptr(), storage);
  EXPECT_TRUE(torch::equal(tensor, copy));
}

TEST_F(WeightedSumOut, OutThatIsAnInputAndMustGrowIsRefusedWithAtensWordingUntouched) {
  // Resized first, the input would be read from its new memory: wrong values, no error (issue 20).
  auto x = random({1, 2, 2}, at::kDouble);
  const auto w = random({2, 1, 2, 2}, at::kDouble);
  const auto x_copy = x.clone();
  const void* x_storage = x.data_ptr();
  EXPECT_C10_ERROR(
      custom::weighted_sum_out(x, x, w),
      "custom::weighted_sum.out: ", "output with shape [1, 2, 2] doesn't match the broadcast shape [2, 1, 2, 2]");
  expect_untouched(x, x_copy, x_storage);

  const auto input = random({2}, at::kDouble);
  auto scalar_weight = random({}, at::kDouble);
  const auto w_copy = scalar_weight.clone();
  const void* w_storage = scalar_weight.data_ptr();
  EXPECT_C10_ERROR(
      custom::weighted_sum_out(scalar_weight, input, scalar_weight),
      "output with shape [] doesn't match the broadcast shape [2]");
  expect_untouched(scalar_weight, w_copy, w_storage);

  // An empty input is no exception (ATen refuses it too), and neither is out as both operands.
  auto empty = torch::empty({0, 3}, torch::kFloat);
  EXPECT_C10_ERROR(custom::weighted_sum_out(empty, empty, random({2, 1, 3}, at::kFloat)), "broadcast shape [2, 0, 3]");
  auto row = random({1, 3}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_sum_out(row, row, random({2, 1}, at::kFloat)), "doesn't match");
}

TEST_F(WeightedSumOut, OutThatIsAnInputOfTheBroadcastShapeIsWrittenInPlace) {
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({kCols}, dtype);
    auto w = random({kRows, kCols}, dtype);
    const auto expected = w * x.square();
    const void* storage = w.data_ptr();
    custom::weighted_sum_out(w, x, w);
    EXPECT_EQ(w.data_ptr(), storage);
    EXPECT_TRUE(torch::equal(w, expected));  // bit for bit, as the functional op
    auto both = random({kRows, kCols}, dtype);
    const auto cube = both * both.square();
    custom::weighted_sum_out(both, both, both);
    EXPECT_TRUE(torch::equal(both, cube));
  }
}

TEST_F(WeightedSumOut, OutSharingAnInputsMemoryIsRefusedWhenResizingWouldOverlapIt) {
  const auto w = random({2, 1, 2, 2}, at::kDouble);
  // Another tensor over the input's memory: ATen resizes it and reads what it has overwritten.
  auto x = random({1, 2, 2}, at::kDouble);
  auto view = x.view({1, 2, 2});
  const auto x_copy = x.clone();
  const void* storage = x.data_ptr();
  EXPECT_C10_ERROR(
      custom::weighted_sum_out(view, x, w), "custom::weighted_sum.out: out of shape [1, 2, 2] shares memory",
      "would overlap it");
  expect_untouched(view, x_copy, storage);
  expect_untouched(x, x_copy, storage);
  // An out ahead of the input in one buffer would grow over it, also from zero elements; and over
  // a strided input, where ATen's own overlap check cannot tell.
  auto buffer = random({16}, at::kDouble);
  auto ahead = buffer.slice(0, 0, 4).view({1, 2, 2});
  EXPECT_C10_ERROR(custom::weighted_sum_out(ahead, buffer.slice(0, 4, 8).view({1, 2, 2}), w), "would overlap it");
  auto nothing_yet = buffer.slice(0, 0, 0);
  EXPECT_C10_ERROR(custom::weighted_sum_out(nothing_yet, buffer.slice(0, 4, 8).view({1, 2, 2}), w), "would overlap");
  auto strided_ahead = buffer.slice(0, 0, 1);
  EXPECT_C10_ERROR(
      custom::weighted_sum_out(strided_ahead, buffer.slice(0, 1, 16, 4).view({1, 2, 2}), w), "would overlap");
  EXPECT_EQ(ahead.sizes(), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(nothing_yet.numel(), 0);
  // Grown where the inputs are not, it is resized as any out.
  auto behind = buffer.slice(0, 8, 12).view({1, 2, 2});
  const auto input = buffer.slice(0, 0, 4).view({1, 2, 2});
  const auto expected = w * input.square();
  custom::weighted_sum_out(behind, input, w);
  EXPECT_EQ(behind.sizes(), (std::vector<int64_t>{2, 1, 2, 2}));
  EXPECT_TRUE(torch::equal(behind, expected));
}

TEST_F(WeightedSumInplace, OverwritesSelfInItsOwnStorageForEachDtypeAndWeightShape) {
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& weight_shape : std::vector<std::vector<int64_t>>{{kRows, kCols}, {kCols}, {kRows, 1}, {}}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + ", weight shape " + c10::str(at::IntArrayRef(weight_shape)));
      auto self = random({kRows, kCols}, dtype);
      const auto w = random(weight_shape, dtype);
      const auto expected = reference(self, w);
      const void* storage = self.data_ptr();
      const auto version = self._version();
      at::Tensor& returned = custom::weighted_sum_(self, w);
      EXPECT_EQ(&returned, &self);
      EXPECT_EQ(self.data_ptr(), storage);
      EXPECT_EQ(self.scalar_type(), dtype);
      EXPECT_GT(self._version(), version);
      EXPECT_TRUE(AllClose(self, expected, dtype));
    }
  }
  auto empty = torch::empty({0, kCols}, torch::kFloat);
  custom::weighted_sum_(empty, random({kCols}, at::kFloat));
  EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, kCols}));
}

TEST_F(WeightedSumInplace, LowerPrecisionSelfWithWiderWeightComputesWideAndCastsBack) {
  auto self = random({kRows, kCols}, at::kHalf);
  const auto w = random({kCols}, at::kFloat);
  const auto expected = (w * self.to(at::kFloat).square()).to(at::kHalf);
  custom::weighted_sum_(self, w);
  EXPECT_EQ(self.scalar_type(), at::kHalf);
  EXPECT_TRUE(torch::equal(self, expected));
}

TEST_F(WeightedSumInplace, StridedOffsetAndTransposedSelfWriteOnlyTheirElements) {
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    auto base = nan_filled({kRows, 2 * kCols + 1}, dtype);
    auto self = base.slice(1, 1, 2 * kCols + 1, 2);  // offset by one, step 2
    self.copy_(random({kRows, kCols}, dtype));
    const auto w = random({kCols}, dtype);
    const auto expected = reference(self, w);
    custom::weighted_sum_(self, w);
    EXPECT_TRUE(AllClose(self, expected, dtype));
    EXPECT_TRUE(base.slice(1, 0, 2 * kCols + 1, 2).isnan().all().item<bool>()) << "wrote outside the view";

    auto transposed = custom_ops_test::transposed(kRows, kCols, dtype);
    const auto w_t = custom_ops_test::transposed(kRows, kCols, dtype);
    const auto expected_t = reference(transposed, w_t);
    custom::weighted_sum_(transposed, w_t);
    EXPECT_TRUE(AllClose(transposed, expected_t, dtype));
  }
}

TEST_F(WeightedSumInplace, InvalidSelfOrWeightIsRejectedNamingIt) {
  auto self = random({kCols}, at::kFloat);
  EXPECT_C10_ERROR(
      custom::weighted_sum_(self, random({kRows, kCols}, at::kFloat)), "custom::weighted_sum_", "weight of shape",
      "cannot resize self");
  auto column = random({kRows, 1}, at::kFloat);
  EXPECT_C10_ERROR(custom::weighted_sum_(column, random({kRows, kCols}, at::kFloat)), "cannot resize self");
  EXPECT_C10_ERROR(
      custom::weighted_sum_(self, random({3}, at::kFloat)), "self of shape [67]", "weight of shape [3]",
      "not broadcastable");
  auto int_self = torch::ones({kCols}, torch::kInt);
  EXPECT_C10_ERROR(custom::weighted_sum_(int_self, random({kCols}, at::kFloat)), "self must have dtype");
  EXPECT_C10_ERROR(custom::weighted_sum_(self, torch::ones({kCols}, torch::kBool)), "weight must have dtype");
  auto expanded = random({kCols}, at::kFloat).expand({kRows, kCols});
  EXPECT_C10_ERROR(custom::weighted_sum_(expanded, random({kRows, kCols}, at::kFloat)), "memory location");
}

}  // namespace
