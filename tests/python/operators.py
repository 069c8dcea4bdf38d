"""The operators that every cross-cutting test (registration, Inductor fusion, ONNX export, the
package) is parametrized over: one row per operator, so a new operator is one more row.

A row says how a model calls the operator: on an input of shape (n, c) and a weight of shape (c,),
with `args` after them. Its values contract is oracle.py's table, whose composites this one reuses.
Not a test module: tests import it (pytest puts this directory on sys.path).
"""

import dataclasses

import pytest
import torch

import oracle


@dataclasses.dataclass(frozen=True)
class Operator:
    name: str
    args: tuple  # after input and weight, in every call a test makes
    overloads: tuple  # the schema names this operator registers, "weighted_sum.out" say
    composite: object  # composite(input, weight, *args): the ATen expression it stands for
    # Whether a decomposition or an ONNX translation gives our kernel's bits (an elementwise op),
    # or values up to the order of a sum's additions (a reduction).
    bitwise: bool

    def __str__(self):
        return self.name

    def __call__(self, input, weight):
        return getattr(torch.ops.custom, self.name)(input, weight, *self.args)

    def source(self, input, weight):
        """The call as Python source, for a test that runs it in a fresh interpreter."""
        return f"torch.ops.custom.{self.name}({', '.join([input, weight, *map(repr, self.args)])})"


OPERATORS = (
    Operator(
        "weighted_sum",
        (),
        ("weighted_sum", "weighted_sum.out", "weighted_sum_", "weighted_sum_backward"),
        oracle.weighted_sum_composite,
        bitwise=True,
    ),
    Operator(
        "weighted_square_sum", ([1],), ("weighted_square_sum",), oracle.weighted_square_sum_composite, bitwise=False
    ),
)

# @each_operator on a test that takes `op`.
each_operator = pytest.mark.parametrize("op", OPERATORS, ids=str)
