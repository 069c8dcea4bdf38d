// SPDX-License-Identifier: BSD-3-Clause
// Every row of the operator table (custom_ops/operators.h) against its term, through the C++ API:
// the tests are typed over the rows (ops/operator_rows.h), so a new operator is tested here with
// no edit. The reference is the term itself, evaluated per element in double (Term::value<double>
// and its partials) over contiguous float64 copies of the broadcast operands: independent of
// every engine and of the tensor overloads of the term.
//
// Test names carry the operator's name: ElementwiseRow/weighted_sum.ValuesMatchTheTerm,
// ReductionRow/weighted_square_sum.SumsMatchTheTerm; `ctest -R '/NAME\.'` (or
// --gtest_filter='*/NAME.*') runs one operator's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/ExpandUtils.h>

#include <custom_ops/custom_ops.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "expect_error.h"
#include "reference.h"
#include "row_api.h"

namespace {

using custom_ops_test::AllClose;
using custom_ops_test::AllCloseToSumOf;
using custom_ops_test::kFloatingDtypes;
using custom_ops_test::nan_filled;
using custom_ops_test::random;
using custom_ops_test::Tolerance;
using custom_ops_test::tolerance;
using custom_ops_test::WithinBound;
using Shape = std::vector<int64_t>;
using custom_ops_test::Api;
using custom_ops_test::BackwardApi;
using custom_ops_test::ElementwiseRows;
using custom_ops_test::ReductionRows;
using custom_ops_test::RowName;

// ------------------------------------------------------------------------------- the reference

// f(x, w) per element in double, over x and w broadcast: a float64 CPU tensor of the broadcast shape.
template <class F>
at::Tensor per_element(F f, const at::Tensor& x, const at::Tensor& w) {
  const auto shape = at::infer_size(x.sizes(), w.sizes());
  const auto xd = x.detach().to(at::kCPU, at::kDouble).expand(shape).contiguous();
  const auto wd = w.detach().to(at::kCPU, at::kDouble).expand(shape).contiguous();
  auto result = at::empty(shape, xd.options());
  const double* px = xd.const_data_ptr<double>();
  const double* pw = wd.const_data_ptr<double>();
  double* py = result.mutable_data_ptr<double>();
  for (int64_t i = 0; i < result.numel(); ++i) {
    py[i] = f(px[i], pw[i]);
  }
  return result;
}

template <class Term>
at::Tensor value_of(const at::Tensor& x, const at::Tensor& w) {
  return per_element([](double a, double b) { return Term::template value<double>(a, b); }, x, w);
}
template <class Term>
at::Tensor dx_of(const at::Tensor& x, const at::Tensor& w) {
  return per_element([](double a, double b) { return Term::template dx<double>(a, b); }, x, w);
}
template <class Term>
at::Tensor dw_of(const at::Tensor& x, const at::Tensor& w) {
  return per_element([](double a, double b) { return Term::template dw<double>(a, b); }, x, w);
}

// Autograd's (grad_input, grad_weight) are g times the term's partials at (x, w), each summed to
// its operand's shape (g: the gradient of the terms, of the broadcast shape).
template <class Term>
void ExpectGradientsArePartials(
    const std::vector<at::Tensor>& grads, const at::Tensor& g, const at::Tensor& x, const at::Tensor& w) {
  EXPECT_TRUE(AllCloseToSumOf(grads[0], g * dx_of<Term>(x, w), x.sizes(), tolerance(at::kDouble)));
  EXPECT_TRUE(AllCloseToSumOf(grads[1], g * dw_of<Term>(x, w), w.sizes(), tolerance(at::kDouble)));
}

// The operands as the op reads them: promoted to the result dtype (a float32 input with a float64
// weight computes in float64 from the float32 values, which converting to double keeps exactly).
std::pair<at::Tensor, at::Tensor> promoted(const at::Tensor& x, const at::Tensor& w) {
  const auto dtype = at::result_type(x, w);
  return {x.to(dtype), w.to(dtype)};
}

// A term is a few operations, each rounded in the op-math type (float for float16/bfloat16/float32),
// then the result rounded once to its dtype.
Tolerance term_tolerance(at::ScalarType dtype) {
  const auto t = tolerance(dtype == at::kDouble ? at::kDouble : at::kFloat, dtype);
  return {8 * t.rtol, 8 * t.atol};
}

// The result of an elementwise row on (x, w): its dtype, broadcast shape, device, and the term's values.
template <class Row>
::testing::AssertionResult IsTermOf(const at::Tensor& result, const at::Tensor& x, const at::Tensor& w) {
  const auto dtype = at::result_type(x, w);
  if (result.scalar_type() != dtype) {
    return ::testing::AssertionFailure() << "dtype " << result.scalar_type() << ", expected " << dtype;
  }
  if (result.device() != x.device()) {
    return ::testing::AssertionFailure() << "device " << result.device() << ", expected " << x.device();
  }
  const auto [xp, wp] = promoted(x, w);
  return AllClose(result, value_of<typename Row::Term>(xp, wp), term_tolerance(dtype));
}

// (x, w) pairs of one dtype: broadcast both ways, a strided input, empty, 0-dim.
std::vector<std::pair<at::Tensor, at::Tensor>> operand_pairs(at::ScalarType dtype) {
  return {
      {random({5, 67}, dtype), random({67}, dtype)},
      {random({4, 1, 3}, dtype), random({2, 1}, dtype)},
      {custom_ops_test::transposed(7, 9, dtype), random({9}, dtype)},
      {custom_ops_test::sliced_with_step(6, 5, dtype), random({6, 1}, dtype)},
      {random({0, 3}, dtype), random({3}, dtype)},
      {random({}, dtype), random({}, dtype)},
      {random({3, 4}, dtype), random({}, dtype)},
  };
}

std::string describe(const at::Tensor& x, const at::Tensor& w) {
  return "input " + c10::str(x.sizes()) + " strides " + c10::str(x.strides()) + " " + c10::toString(x.scalar_type()) +
      ", weight " + c10::str(w.sizes()) + " " + c10::toString(w.scalar_type());
}

// ------------------------------------------------------------------------------------ elementwise

template <class Row>
class ElementwiseRow : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};
TYPED_TEST_SUITE(ElementwiseRow, ElementwiseRows, RowName);

TYPED_TEST(ElementwiseRow, ValuesMatchTheTerm) {
  using Row = TypeParam;
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& [x, w] : operand_pairs(dtype)) {
      SCOPED_TRACE(describe(x, w));
      EXPECT_TRUE(IsTermOf<Row>(Api<Row>::forward(x, w), x, w));
    }
  }
}

TYPED_TEST(ElementwiseRow, MixedDtypesPromote) {
  using Row = TypeParam;
  for (const auto x_dtype : kFloatingDtypes) {
    for (const auto w_dtype : kFloatingDtypes) {
      const auto x = random({3, 5}, x_dtype);
      const auto w = random({5}, w_dtype);
      SCOPED_TRACE(describe(x, w));
      EXPECT_TRUE(IsTermOf<Row>(Api<Row>::forward(x, w), x, w));
    }
  }
}

TYPED_TEST(ElementwiseRow, ScalarWeightIsAZeroDimTensorOfTheInputsDtype) {
  using Row = TypeParam;
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto x = random({4, 6}, dtype);
    const auto y = Api<Row>::scalar(x, 1.5);
    EXPECT_EQ(y.scalar_type(), dtype);
    EXPECT_TRUE(IsTermOf<Row>(y, x, at::scalar_tensor(1.5, at::TensorOptions().dtype(dtype))));
  }
}

TYPED_TEST(ElementwiseRow, OutIsWrittenInItsOwnStorage) {
  using Row = TypeParam;
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& [x, w] : operand_pairs(dtype)) {
      SCOPED_TRACE(describe(x, w));
      auto out = nan_filled(at::infer_size(x.sizes(), w.sizes()), dtype);
      const void* storage = out.data_ptr();
      at::Tensor& returned = Api<Row>::out(out, x, w);
      EXPECT_EQ(&returned, &out);
      EXPECT_EQ(out.data_ptr(), storage);
      EXPECT_TRUE(IsTermOf<Row>(out, x, w));
    }
  }
}

TYPED_TEST(ElementwiseRow, InPlaceWritesSelf) {
  using Row = TypeParam;
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& [x, w] : operand_pairs(dtype)) {
      if (at::IntArrayRef(at::infer_size(x.sizes(), w.sizes())) != x.sizes()) {
        continue;  // self must be of the broadcast shape
      }
      SCOPED_TRACE(describe(x, w));
      auto self = x.clone();
      at::Tensor& returned = Api<Row>::inplace(self, w);
      EXPECT_EQ(&returned, &self);
      EXPECT_TRUE(IsTermOf<Row>(self, x, w));
    }
  }
}

// The backward op: (sum_to(grad * dx, input), sum_to(grad * dw, weight)), each only where asked.
template <class Term>
void ExpectBackwardOfTerm(const at::Tensor& x, const at::Tensor& w) {
  const auto dtype = at::result_type(x, w);
  const auto grad = random(at::infer_size(x.sizes(), w.sizes()), dtype);
  const auto [xp, wp] = promoted(x, w);
  const auto g = grad.to(at::kDouble);
  const auto dx = g * dx_of<Term>(xp, wp);
  const auto dw = g * dw_of<Term>(xp, wp);
  const auto tol = term_tolerance(dtype);
  const std::array<std::array<bool, 2>, 3> masks = {{{true, true}, {true, false}, {false, true}}};
  for (const auto& mask : masks) {
    SCOPED_TRACE(std::string("output_mask ") + (mask[0] ? "T" : "F") + (mask[1] ? "T" : "F"));
    const auto [grad_input, grad_weight] = BackwardApi<Term>::call(grad, x, w, mask);
    EXPECT_EQ(grad_input.defined(), mask[0]);
    EXPECT_EQ(grad_weight.defined(), mask[1]);
    if (mask[0]) {
      EXPECT_EQ(grad_input.scalar_type(), x.scalar_type());
      EXPECT_TRUE(AllCloseToSumOf(grad_input, dx, x.sizes(), tol));
    }
    if (mask[1]) {
      EXPECT_EQ(grad_weight.scalar_type(), w.scalar_type());
      EXPECT_TRUE(AllCloseToSumOf(grad_weight, dw, w.sizes(), tol));
    }
  }
}

TYPED_TEST(ElementwiseRow, BackwardOpIsTheTermsPartials) {
  using Term = typename TypeParam::Term;
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& [x, w] : operand_pairs(dtype)) {
      SCOPED_TRACE(describe(x, w));
      ExpectBackwardOfTerm<Term>(x, w);
    }
  }
}

// torch::autograd::grad through the C++ API gives the backward op's gradients, and the term's.
TYPED_TEST(ElementwiseRow, AutogradGradientIsTheBackwardFormula) {
  using Row = TypeParam;
  using Term = typename Row::Term;
  const std::vector<std::pair<Shape, Shape>> shape_pairs = {{{3, 5}, {5}}, {{2, 1, 4}, {3, 1}}, {{}, {}}};
  for (const auto& shapes : shape_pairs) {
    const auto x = random(shapes.first, at::kDouble).requires_grad_();
    const auto w = random(shapes.second, at::kDouble).requires_grad_();
    SCOPED_TRACE(describe(x, w));
    const auto y = Api<Row>::forward(x, w);
    const auto g = random(y.sizes(), at::kDouble);
    const auto grads = torch::autograd::grad({y}, {x, w}, {g});
    const auto [grad_input, grad_weight] = BackwardApi<Term>::call(g, x.detach(), w.detach(), {true, true});
    EXPECT_TRUE(AllClose(grads[0], grad_input, at::kDouble));
    EXPECT_TRUE(AllClose(grads[1], grad_weight, at::kDouble));
    ExpectGradientsArePartials<Term>(grads, g, x, w);
  }
}

TYPED_TEST(ElementwiseRow, IntegerOperandIsRejectedNamingTheArgument) {
  using Row = TypeParam;
  const auto good = random({2, 3}, at::kFloat);
  const auto bad = torch::ones({2, 3}, at::kInt);
  const std::string op = Row::name;
  EXPECT_C10_ERROR(Api<Row>::forward(bad, good), op + ": input must have dtype float16, bfloat16, float32 or float64");
  EXPECT_C10_ERROR(Api<Row>::forward(good, bad), op + ": weight must have dtype");
  auto out = torch::empty({2, 3});
  EXPECT_C10_ERROR(Api<Row>::out(out, bad, good), std::string(Row::out_name) + ": input must have dtype");
  auto self = good.clone();
  EXPECT_C10_ERROR(Api<Row>::inplace(self, bad), std::string(Row::inplace_name) + ": weight must have dtype");
  EXPECT_C10_ERROR(
      BackwardApi<typename Row::Term>::call(good, good, bad, {true, true}),
      std::string(Row::Backward::name) + ": weight must have dtype");
}

// -------------------------------------------------------------------------------------- reduction

template <class Row>
class ReductionRow : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};
TYPED_TEST_SUITE(ReductionRow, ReductionRows, RowName);

struct Reduction {
  std::optional<Shape> dim;
  bool keepdim = false;
  std::optional<at::ScalarType> dtype = std::nullopt;

  std::string str() const {
    return "dim " + (dim ? c10::str(at::IntArrayRef(*dim)) : std::string("None")) + ", keepdim " +
        (keepdim ? "true" : "false") + ", dtype " + (dtype ? c10::toString(*dtype) : "None");
  }
};

// The sum of the term over r.dim, against the float64 sum of the term evaluated per element: one
// rounding of the result, plus the accumulation type's pairwise-sum error relative to the sum of
// the terms' absolute values.
template <class Row>
::testing::AssertionResult IsSumOfTerm(
    const at::Tensor& result, const at::Tensor& x, const at::Tensor& w, const Reduction& r) {
  const auto promoted_dtype = at::result_type(x, w);
  const auto dtype = r.dtype.value_or(promoted_dtype);
  if (result.scalar_type() != dtype) {
    return ::testing::AssertionFailure() << "dtype " << result.scalar_type() << ", expected " << dtype;
  }
  const auto [xp, wp] = promoted(x, w);
  const auto terms = value_of<typename Row::Term>(xp, wp);
  const at::OptionalIntArrayRef dim = r.dim ? at::OptionalIntArrayRef(*r.dim) : std::nullopt;
  const auto expected = terms.sum(dim, r.keepdim);
  const auto magnitude = terms.abs().sum(dim, r.keepdim);
  const int64_t n = expected.numel() > 0 ? terms.numel() / expected.numel() : 0;
  const auto accumulate = promoted_dtype == at::kDouble && dtype == at::kDouble ? at::kDouble : at::kFloat;
  const double growth = 2 * std::ceil(std::log2(static_cast<double>(n) + 1)) + 8;
  const auto bound = 2 * tolerance(dtype).rtol * expected.abs() + growth * tolerance(accumulate).rtol * magnitude +
      tolerance(dtype).atol;
  return WithinBound(result, expected, bound, "sum of " + std::to_string(n) + " terms, " + r.str());
}

TYPED_TEST(ReductionRow, SumsMatchTheTerm) {
  using Row = TypeParam;
  const std::vector<Reduction> reductions = {
      {std::nullopt},
      {Shape{}, true},
      {Shape{0}},
      {Shape{-1}, true},
      {Shape{0, 2}},
      {Shape{-1, 0}, false, at::kDouble},
      {Shape{1}, true, at::kHalf},
      {Shape{0}, false, at::kFloat}};
  for (const auto dtype : kFloatingDtypes) {
    const std::vector<std::pair<at::Tensor, at::Tensor>> operands = {
        {random({4, 3, 5}, dtype), random({3, 1}, dtype)},
        {random({5, 3, 4}, dtype).permute({2, 1, 0}), random({4, 3, 5}, dtype)},  // strided input
        {random({2, 3, 70}, dtype).slice(2, 0, 70, 2), random({35}, at::kDouble)},  // steps, mixed dtypes
    };
    for (const auto& [x, w] : operands) {
      for (const auto& r : reductions) {
        SCOPED_TRACE(describe(x, w) + ", " + r.str());
        const at::OptionalIntArrayRef dim = r.dim ? at::OptionalIntArrayRef(*r.dim) : std::nullopt;
        EXPECT_TRUE(IsSumOfTerm<Row>(Api<Row>::forward(x, w, dim, r.keepdim, r.dtype), x, w, r));
      }
    }
  }
}

TYPED_TEST(ReductionRow, EmptyAndZeroDimOperands) {
  using Row = TypeParam;
  for (const auto dtype : kFloatingDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto empty = random({0, 3}, dtype);
    const auto w = random({3}, dtype);
    const auto sums = Api<Row>::forward(empty, w, Shape{0});
    EXPECT_EQ(sums.sizes(), (Shape{3}));
    EXPECT_TRUE(IsSumOfTerm<Row>(sums, empty, w, {Shape{0}}));
    const auto s = random({}, dtype);
    const auto t = random({}, dtype);
    EXPECT_TRUE(IsSumOfTerm<Row>(Api<Row>::forward(s, t), s, t, {std::nullopt}));
    EXPECT_TRUE(IsSumOfTerm<Row>(Api<Row>::forward(s, t, Shape{0}, true), s, t, {Shape{0}, true}));
  }
}

// The gradient of a sum is the term's partials times the broadcast gradient.
TYPED_TEST(ReductionRow, AutogradGradientIsTheTermsPartials) {
  using Row = TypeParam;
  using Term = typename Row::Term;
  const auto x = random({3, 4, 5}, at::kDouble).requires_grad_();
  const auto w = random({4, 1}, at::kDouble).requires_grad_();
  const Shape dim{0, 2};
  const auto y = Api<Row>::forward(x, w, dim, /*keepdim=*/true);
  const auto g = random(y.sizes(), at::kDouble);
  const auto grads = torch::autograd::grad({y}, {x, w}, {g});
  ExpectGradientsArePartials<Term>(grads, g.expand(at::infer_size(x.sizes(), w.sizes())), x, w);
}

TYPED_TEST(ReductionRow, ErrorsNameTheArgument) {
  using Row = TypeParam;
  const auto good = random({2, 3}, at::kFloat);
  const auto bad = torch::ones({2, 3}, at::kInt);
  const std::string op = Row::name;
  EXPECT_C10_ERROR(Api<Row>::forward(bad, good, Shape{0}), op + ": input must have dtype");
  EXPECT_C10_ERROR(Api<Row>::forward(good, bad, Shape{0}), op + ": weight must have dtype");
  EXPECT_C10_ERROR(Api<Row>::forward(good, good, Shape{2}), op, "dim 2 is out of range");
  EXPECT_C10_ERROR(Api<Row>::forward(good, good, Shape{0}, false, at::kInt), op + ": dtype must be");
}

}  // namespace
