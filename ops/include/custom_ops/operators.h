// SPDX-License-Identifier: BSD-3-Clause
// The operator table: one row per operator, naming it and its term (custom_ops/term.h). Every
// other part of an operator is generated from its row: the schema (ops/schema.cpp), the C++ API
// (custom_ops.h), the kernels of every dispatch key (the elementwise and reduction engines), the
// autograd nodes and tangents, the vmap rules. The Python twin of each row, with the term's
// composite, is in python/custom_ops/_operators.py. scripts/new_op.py adds rows here.
#pragma once

#include <custom_ops/terms/weighted_square.h>

// Each list is one row a line, each line ending in a backslash, closed by a comment line: a new row
// is one new line (scripts/new_op.py appends them). clang-format stays out, as it would realign
// every backslash to the longest row.
// clang-format off

// Each term, with its backward operator, which every operator of the term shares:
//   backward(Tensor grad, Tensor input, Tensor weight, bool[2] output_mask) -> (Tensor, Tensor)
// = (sum_to(grad * dx, input), sum_to(grad * dw, weight)), grad of the broadcast shape.
#define CUSTOM_OPS_TERMS(X) \
  X(WeightedSquare, weighted_sum_backward) \
  /* end of CUSTOM_OPS_TERMS */

// Elementwise operators, value(input, weight) with broadcasting and type promotion:
//   name(Tensor input, Tensor weight) -> Tensor
//   name.Scalar(Tensor input, Scalar weight) -> Tensor
//   name.out(Tensor input, Tensor weight, *, Tensor(a!) out) -> ()
//   name_(Tensor(a!) self, Tensor weight) -> ()
#define CUSTOM_OPS_ELEMENTWISE_OPERATORS(X) \
  X(weighted_sum, WeightedSquare) \
  /* end of CUSTOM_OPS_ELEMENTWISE_OPERATORS */

// Reductions, the sum of value(input, weight) over dim (every dim for None or []), like torch.sum:
//   name(Tensor input, Tensor weight, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor
#define CUSTOM_OPS_REDUCTION_OPERATORS(X) \
  X(weighted_square_sum, WeightedSquare) \
  /* end of CUSTOM_OPS_REDUCTION_OPERATORS */

// clang-format on
