// SPDX-License-Identifier: BSD-3-Clause
// Typed dispatcher handles of every operator of the table, each looked up once per process. The
// public C++ API (operators.cpp) calls them; the autograd kernels and batching rules redispatch
// through them below their own key.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <c10/util/OptionalArrayRef.h>

#include "find_operator.h"
#include "operator_rows.h"

namespace custom::detail {

using BackwardSignature =
    std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&, std::array<bool, 2>);
using ReductionSignature =
    at::Tensor(const at::Tensor&, const at::Tensor&, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>);

template <class Row>
const auto& functional_handle() {
  static const auto op = find_operator<at::Tensor(const at::Tensor&, const at::Tensor&)>(Row::name, "");
  return op;
}

template <class Row>
const auto& scalar_handle() {
  static const auto op = find_operator<at::Tensor(const at::Tensor&, const at::Scalar&)>(Row::name, "Scalar");
  return op;
}

template <class Row>
const auto& out_handle() {
  static const auto op = find_operator<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>(Row::name, "out");
  return op;
}

template <class Row>
const auto& inplace_handle() {
  static const auto op = find_operator<void(const at::Tensor&, const at::Tensor&)>(Row::inplace_name, "");
  return op;
}

// Row: a term's rows::BackwardOf<Term>, or an operator's row (its term's backward).
template <class Row>
const auto& backward_handle() {
  static const auto op = find_operator<BackwardSignature>(Row::Backward::name, "");
  return op;
}

template <class Row>
const auto& reduction_handle() {
  static const auto op = find_operator<ReductionSignature>(Row::name, "");
  return op;
}

}  // namespace custom::detail
