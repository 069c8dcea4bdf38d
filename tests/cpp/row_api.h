// SPDX-License-Identifier: BSD-3-Clause
// The rows of the operator table (custom_ops/operators.h) as the C++ tests use them: each row's
// C++ API by row type, each term's backward by term type, and the rows as ::testing::Types, named
// for the operator, so a typed test covers every row with no edit.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include <custom_ops/custom_ops.h>

#include "ops/operator_rows.h"

namespace custom_ops_test {

// Each row's C++ API, by row type (the functions custom_ops.h declares for it).
template <class Row>
struct Api;

#define CUSTOM_OPS_TEST_ELEMENTWISE_API(name_, Term_)                                                       \
  template <>                                                                                               \
  struct Api<custom::rows::name_> {                                                                         \
    static at::Tensor forward(const at::Tensor& x, const at::Tensor& w) { return custom::name_(x, w); }     \
    static at::Tensor scalar(const at::Tensor& x, const at::Scalar& w) { return custom::name_(x, w); }      \
    static at::Tensor& out(at::Tensor& out, const at::Tensor& x, const at::Tensor& w) {                     \
      return custom::name_##_out(out, x, w);                                                                \
    }                                                                                                       \
    static at::Tensor& inplace(at::Tensor& self, const at::Tensor& w) { return custom::name_##_(self, w); } \
  };
CUSTOM_OPS_ELEMENTWISE_OPERATORS(CUSTOM_OPS_TEST_ELEMENTWISE_API)
#undef CUSTOM_OPS_TEST_ELEMENTWISE_API

#define CUSTOM_OPS_TEST_REDUCTION_API(name_, Term_)           \
  template <>                                                 \
  struct Api<custom::rows::name_> {                           \
    static at::Tensor forward(                                \
        const at::Tensor& x,                                  \
        const at::Tensor& w,                                  \
        at::OptionalIntArrayRef dim = std::nullopt,           \
        bool keepdim = false,                                 \
        std::optional<at::ScalarType> dtype = std::nullopt) { \
      return custom::name_(x, w, dim, keepdim, dtype);        \
    }                                                         \
  };
CUSTOM_OPS_REDUCTION_OPERATORS(CUSTOM_OPS_TEST_REDUCTION_API)
#undef CUSTOM_OPS_TEST_REDUCTION_API

// Each term's backward op, by term type.
template <class Term>
struct BackwardApi;

#define CUSTOM_OPS_TEST_BACKWARD_API(Term_, backward_)                                                       \
  template <>                                                                                                \
  struct BackwardApi<custom::terms::Term_> {                                                                 \
    static std::tuple<at::Tensor, at::Tensor> call(                                                          \
        const at::Tensor& grad, const at::Tensor& x, const at::Tensor& w, std::array<bool, 2> output_mask) { \
      return custom::backward_(grad, x, w, output_mask);                                                     \
    }                                                                                                        \
  };
CUSTOM_OPS_TERMS(CUSTOM_OPS_TEST_BACKWARD_API)
#undef CUSTOM_OPS_TEST_BACKWARD_API

// ::testing::Types of the rows of one X-macro list (the leading void dropped: each row adds
// ", row", so the list needs something before its first comma).
template <class First, class... Rows>
struct RowTypes {
  using type = ::testing::Types<Rows...>;
};
#define CUSTOM_OPS_TEST_ROW_TYPE(name_, Term_) , custom::rows::name_
using ElementwiseRows = RowTypes<void CUSTOM_OPS_ELEMENTWISE_OPERATORS(CUSTOM_OPS_TEST_ROW_TYPE)>::type;
using ReductionRows = RowTypes<void CUSTOM_OPS_REDUCTION_OPERATORS(CUSTOM_OPS_TEST_ROW_TYPE)>::type;
#undef CUSTOM_OPS_TEST_ROW_TYPE

// The test names' row part: the operator's schema name.
struct RowName {
  template <class Row>
  static std::string GetName(int) {
    return Row::schema_name;
  }
};

}  // namespace custom_ops_test
