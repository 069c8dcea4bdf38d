# SPDX-License-Identifier: BSD-3-Clause
"""The operators that every cross-cutting test (registration, callers, the ATen oracle, Inductor
fusion, ONNX export, the package) is parametrized over: one row per row of the package's table
(python/custom_ops/_operators.py, OPERATORS), so a new operator is its term and that row, and
nothing here.

A row's kind decides the rest: its overloads (an elementwise operator's name, name.out, name_ and
name.Scalar; a reduction's name with dim, keepdim and dtype=; and the term's backward op), its
composite (the term's value, summed over dim for a reduction), how a model calls it (on an input
of shape (n, c) and a weight of shape (c,), with `args` after them) and whether results are bit for
bit the composite's. A table row may override `args` and `bitwise` with fields of those names.

Test ids contain the operator's name (`pytest -k weighted_sum` runs every test of that operator;
`make test-op OP=NAME` does so). Not a test module: tests import it (pytest puts this directory on
sys.path).
"""

import dataclasses
import importlib
import sys
import types

import pytest
import torch

from environment import REPO

ELEMENTWISE, REDUCTION = "elementwise", "reduction"
_PACKAGE = "custom_ops_sources"


def package_module(name):
    """python/custom_ops/<name>.py of this checkout, imported as a module of a stand-in package
    (relative imports work; the package's __init__ does not run: it needs a built package's
    _build_info, and the library under test is already loaded)."""
    if _PACKAGE not in sys.modules:
        package = types.ModuleType(_PACKAGE)
        package.__path__ = [str(REPO / "python" / "custom_ops")]
        sys.modules[_PACKAGE] = package
    return importlib.import_module(f"{_PACKAGE}.{name}")


table = package_module("_operators")


def as_result(value, input, weight):
    """A term's value as the op returns it: of the broadcast shape and promoted dtype (a term
    that ignores an operand, or is a constant, still broadcasts and promotes like the op)."""
    weight_shape = weight.shape if isinstance(weight, torch.Tensor) else ()
    shape = torch.broadcast_shapes(input.shape, weight_shape)
    # torch.result_type's rules (0-dim and number operands included), read off a product: the one
    # form every supported torch.compile traces without a graph break (Inductor drops the unused
    # product).
    dtype = (input * weight).dtype
    if not isinstance(value, torch.Tensor):
        return torch.full(shape, value, dtype=dtype, device=input.device)
    if value.dtype != dtype:
        value = value.to(dtype)
    return value if value.shape == shape else value.expand(shape)


def term_value(term, input, weight):
    """The term's value on tensors, elementwise: the composite of an elementwise operator."""
    return as_result(term.value(input, weight), input, weight)


@dataclasses.dataclass(frozen=True)
class Operator:
    name: str
    kind: str  # ELEMENTWISE or REDUCTION
    term: object  # the package's Term: value, dx, dw, dxx, dxw, dww (lambda x, w: ...), backward
    args: tuple  # after input and weight, in every call a test makes
    # The schema names this operator registers kernels for, "weighted_sum.out" say; the term's
    # backward op with the first operator of its term.
    overloads: tuple
    composite_overloads: tuple  # CompositeImplicitAutograd ones: "weighted_sum.Scalar"
    # Whether a decomposition or an ONNX translation gives our kernel's bits (an elementwise op),
    # or values up to the order of a sum's additions (a reduction).
    bitwise: bool
    domain: tuple | None = None  # (low, high) of sampled operands, for a term defined on part of the line

    def __str__(self):
        return self.name

    def __call__(self, input, weight, *args, **kwargs):
        return getattr(torch.ops.custom, self.name)(input, weight, *(args or self.args), **kwargs)

    @property
    def backward(self):
        """The term's backward op's name: backward(grad, input, weight, output_mask)."""
        return self.term.backward

    def composite(self, input, weight, *args, **kwargs):
        """The ATen expression it stands for: composite(input, weight, *args)."""
        value = term_value(self.term, input, weight)
        if self.kind == ELEMENTWISE:
            return value
        dim, keepdim, dtype = _reduction_args(*args, **kwargs)
        return value.sum(dim, keepdim, dtype=dtype)

    def source(self, input, weight):
        """The call as Python source, for a test that runs it in a fresh interpreter."""
        return f"torch.ops.custom.{self.name}({', '.join([input, weight, *map(repr, self.args)])})"


def _reduction_args(dim=None, keepdim=False, dtype=None):
    return dim, keepdim, dtype


# What each kind registers, and how a model calls it.
OVERLOADS = {
    ELEMENTWISE: lambda name: (name, f"{name}.out", f"{name}_"),
    REDUCTION: lambda name: (name,),
}
COMPOSITE_OVERLOADS = {ELEMENTWISE: lambda name: (f"{name}.Scalar",), REDUCTION: lambda name: ()}
ARGS = {ELEMENTWISE: (), REDUCTION: ([1],)}  # a reduction over the channels
BITWISE = {ELEMENTWISE: True, REDUCTION: False}


def _rows():
    rows, backwards = [], set()
    for row in table.OPERATORS:
        assert row.kind in OVERLOADS, f"{row.name}: kind {row.kind!r} is neither {ELEMENTWISE!r} nor {REDUCTION!r}"
        backward = () if row.term.backward in backwards else (row.term.backward,)
        backwards.add(row.term.backward)
        rows.append(
            Operator(
                name=row.name,
                kind=row.kind,
                term=row.term,
                args=getattr(row, "args", ARGS[row.kind]),
                overloads=OVERLOADS[row.kind](row.name) + backward,
                composite_overloads=COMPOSITE_OVERLOADS[row.kind](row.name),
                # A term that calls functions computes them with Sleef, libm or CUDA's libm, not
                # with ATen's own loops: within their documented error (term_error.py), not its bits.
                bitwise=getattr(row, "bitwise", BITWISE[row.kind] and not row.term.calls_functions),
                domain=getattr(row, "domain", None),
            )
        )
    return tuple(rows)


OPERATORS = _rows()
ELEMENTWISE_OPERATORS = tuple(op for op in OPERATORS if op.kind == ELEMENTWISE)
REDUCTION_OPERATORS = tuple(op for op in OPERATORS if op.kind == REDUCTION)
BY_NAME = {op.name: op for op in OPERATORS}

# @each_operator on a test that takes `op`; the ids are the operators' names.
each_operator = pytest.mark.parametrize("op", OPERATORS, ids=str)
each_elementwise_operator = pytest.mark.parametrize("op", ELEMENTWISE_OPERATORS, ids=str)
each_reduction_operator = pytest.mark.parametrize("op", REDUCTION_OPERATORS, ids=str)
