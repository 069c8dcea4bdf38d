// SPDX-License-Identifier: BSD-3-Clause
// The operator table's rows (custom_ops/operators.h) as types, for the code written once for every
// operator: each row a struct with its names and its term, each term's backward a specialization.
#pragma once

#include <custom_ops/operators.h>

namespace custom::rows {

// A term's backward operator (custom_ops/operators.h, CUSTOM_OPS_TERMS).
template <class Term>
struct BackwardOf;

#define CUSTOM_OPS_BACKWARD_ROW(Term_, backward_)              \
  template <>                                                  \
  struct BackwardOf<terms::Term_> {                            \
    using Term = terms::Term_;                                 \
    using Backward = BackwardOf;                               \
    static constexpr const char* schema_name = #backward_;     \
    static constexpr const char* name = "custom::" #backward_; \
  };
CUSTOM_OPS_TERMS(CUSTOM_OPS_BACKWARD_ROW)
#undef CUSTOM_OPS_BACKWARD_ROW

// name: as errors name the operator ("custom::weighted_sum"); schema_name: as the schema does.
#define CUSTOM_OPS_ELEMENTWISE_ROW(name_, Term_)                       \
  struct name_ {                                                       \
    using Term = terms::Term_;                                         \
    using Backward = BackwardOf<Term>;                                 \
    static constexpr const char* schema_name = #name_;                 \
    static constexpr const char* name = "custom::" #name_;             \
    static constexpr const char* out_name = "custom::" #name_ ".out";  \
    static constexpr const char* inplace_name = "custom::" #name_ "_"; \
  };
CUSTOM_OPS_ELEMENTWISE_OPERATORS(CUSTOM_OPS_ELEMENTWISE_ROW)
#undef CUSTOM_OPS_ELEMENTWISE_ROW

#define CUSTOM_OPS_REDUCTION_ROW(name_, Term_)             \
  struct name_ {                                           \
    using Term = terms::Term_;                             \
    using Backward = BackwardOf<Term>;                     \
    static constexpr const char* schema_name = #name_;     \
    static constexpr const char* name = "custom::" #name_; \
  };
CUSTOM_OPS_REDUCTION_OPERATORS(CUSTOM_OPS_REDUCTION_ROW)
#undef CUSTOM_OPS_REDUCTION_ROW

}  // namespace custom::rows
