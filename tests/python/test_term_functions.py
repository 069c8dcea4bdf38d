# SPDX-License-Identifier: BSD-3-Clause
"""The functions a term may call, Python side (python/custom_ops/_operators.py, FUNCTIONS): the
same rows as the C++ table (ops/include/custom_ops/term_functions.h, whose columns
tests/cpp/term_functions_test.cpp checks), each derivative right, each form (on a tensor, on a
number) computing the same function, and ATen's conventions where one is not differentiable.

No test id here contains an operator's name: `make test-op OP=NAME` selects tests by it.
"""

import math
import re

import pytest
import torch

from environment import REPO
from operators import table

FUNCTIONS = table.FUNCTIONS
HEADER = REPO / "ops" / "include" / "custom_ops" / "term_functions.h"
# Points inside every function's domain where each is differentiable (log, sqrt, rsqrt: positive).
POINTS = (0.3, 0.9, 1.7, 2.6)
CONSTANTS = (2.0, 0.5, -1.5, 3.0)


def cxx_rows():
    text = HEADER.read_text()
    return re.findall(r"^\s+X\((\w+),", text, re.M)


def test_python_and_cxx_tables_name_the_same_functions():
    rows = cxx_rows()
    assert len(rows) == len(set(rows)), "a function twice in term_functions.h"
    assert sorted(rows) == sorted(FUNCTIONS)
    assert [name for name, f in FUNCTIONS.items() if f.constant] == ["pow"]


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_derivative_is_the_functions_slope(name):
    f = FUNCTIONS[name]
    for c in CONSTANTS if f.constant else (None,):
        constant = () if c is None else (c,)
        for e in POINTS:
            h = 1e-6 * max(1.0, abs(e))
            slope = (f.number(e + h, *constant) - f.number(e - h, *constant)) / (2 * h)
            derivative = f.derivative_at(e, *constant)
            assert derivative == pytest.approx(slope, rel=1e-6, abs=1e-6), f"{name}'({e}, c={c})"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_tensor_and_number_forms_agree(name):
    f = FUNCTIONS[name]
    points = [-40.0, -3.0, -1.0, -0.5, -0.0, 0.0, 0.25, 1.0, 2.5, 40.0, math.inf, -math.inf, math.nan]
    for c in CONSTANTS if f.constant else (None,):
        constant = () if c is None else (c,)
        tensor = f(torch.tensor(points, dtype=torch.float64), *constant)
        numbers = torch.tensor([f(p, *constant) for p in points], dtype=torch.float64)
        torch.testing.assert_close(tensor, numbers, equal_nan=True, rtol=1e-15, atol=1e-300, msg=f"{name} c={c}")


def test_conventions_where_not_differentiable():
    x = torch.tensor([0.0, -0.0, math.nan, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    # abs'(0) = sign(0) = 0 and relu'(0) = step(0) = 0, and relu's gradient at nan passes: ATen's.
    (abs_grad,) = torch.autograd.grad(x.abs().sum(), x)
    (relu_grad,) = torch.autograd.grad(x.relu().sum(), x)
    torch.testing.assert_close(FUNCTIONS["sign"](x.detach()), abs_grad, equal_nan=True)
    torch.testing.assert_close(FUNCTIONS["step"](x.detach()), relu_grad, equal_nan=True)
    assert [FUNCTIONS["step"](p) for p in (0.0, -0.0, math.nan, 2.0)] == [0.0, 0.0, 1.0, 1.0]


def test_outside_the_domain_is_nan_or_inf_never_an_error():
    for name, point in (("log", -1.0), ("log", 0.0), ("sqrt", -1.0), ("rsqrt", 0.0), ("log1p", -2.0), ("exp", 1e4)):
        number = FUNCTIONS[name](point)
        tensor = FUNCTIONS[name](torch.tensor(point, dtype=torch.float64)).item()
        assert (math.isnan(number) and math.isnan(tensor)) or number == tensor, name
