// SPDX-License-Identifier: BSD-3-Clause
// The operator table's rows (custom_ops/operators.h) as types, for the code written once for every
// operator: each row a struct with its names and its term, each term's backward a specialization,
// and each kind's rows a list to register from (ElementwiseRows::for_each(...)).
#pragma once

#include <custom_ops/operators.h>

namespace custom::rows {

// A term's backward operator (custom_ops/operators.h, CUSTOM_OPS_TERMS).
template <class Term>
struct BackwardOf;

// What every row has. name: as errors and registrations name the operator ("custom::weighted_sum");
// schema_name: as the schema does.
#define CUSTOM_OPS_ROW_NAMES(name_, Term_)           \
  using Term = terms::Term_;                         \
  using Backward = BackwardOf<Term>;                 \
  static constexpr const char* schema_name = #name_; \
  static constexpr const char* name = "custom::" #name_;

#define CUSTOM_OPS_BACKWARD_ROW(Term_, backward_) \
  template <>                                     \
  struct BackwardOf<terms::Term_> {               \
    CUSTOM_OPS_ROW_NAMES(backward_, Term_)        \
  };
CUSTOM_OPS_TERMS(CUSTOM_OPS_BACKWARD_ROW)
#undef CUSTOM_OPS_BACKWARD_ROW

#define CUSTOM_OPS_ELEMENTWISE_ROW(name_, Term_)                            \
  struct name_ {                                                            \
    CUSTOM_OPS_ROW_NAMES(name_, Term_)                                      \
    static constexpr const char* out_name = "custom::" #name_ ".out";       \
    static constexpr const char* inplace_name = "custom::" #name_ "_";      \
    static constexpr const char* scalar_name = "custom::" #name_ ".Scalar"; \
  };
CUSTOM_OPS_ELEMENTWISE_OPERATORS(CUSTOM_OPS_ELEMENTWISE_ROW)
#undef CUSTOM_OPS_ELEMENTWISE_ROW

#define CUSTOM_OPS_REDUCTION_ROW(name_, Term_) \
  struct name_ {                               \
    CUSTOM_OPS_ROW_NAMES(name_, Term_)         \
  };
CUSTOM_OPS_REDUCTION_OPERATORS(CUSTOM_OPS_REDUCTION_ROW)
#undef CUSTOM_OPS_REDUCTION_ROW
#undef CUSTOM_OPS_ROW_NAMES

// The rows of one kind: for_each calls f.template operator()<Row>() for each, in table order.
template <class... Rows>
struct RowList {
  template <class F>
  static void for_each(F&& f) {
    (f.template operator()<Rows>(), ...);
  }
};

// RowList of an X-macro list: each row adds ", row", so the list needs something before its first
// comma (the void, dropped here).
template <class First, class... Rows>
struct DropFirst {
  using type = RowList<Rows...>;
};
#define CUSTOM_OPS_ROW_TYPE(name_, Term_) , name_
#define CUSTOM_OPS_BACKWARD_ROW_TYPE(Term_, backward_) , BackwardOf<terms::Term_>
using ElementwiseRows = DropFirst<void CUSTOM_OPS_ELEMENTWISE_OPERATORS(CUSTOM_OPS_ROW_TYPE)>::type;
using ReductionRows = DropFirst<void CUSTOM_OPS_REDUCTION_OPERATORS(CUSTOM_OPS_ROW_TYPE)>::type;
using BackwardRows = DropFirst<void CUSTOM_OPS_TERMS(CUSTOM_OPS_BACKWARD_ROW_TYPE)>::type;
#undef CUSTOM_OPS_BACKWARD_ROW_TYPE
#undef CUSTOM_OPS_ROW_TYPE

}  // namespace custom::rows
