# SPDX-License-Identifier: BSD-3-Clause
"""custom::weighted_sum.Scalar: a Python number as weight, like aten::mul.Scalar.

Checked against the tensor overload with the number as a 0-dim tensor of the result dtype (the
Scalar kernel is defined as exactly that), the float64 reference, and the composite's dtype.
"""

import pytest
import torch
from torch.autograd import gradcheck

from reference import FLOAT_DTYPES, assert_close_to_reference, dtype_name, make_tensor, reference64

OPS = torch.ops.custom
NUMBERS = [2.5, -0.1, 3, True]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("number", NUMBERS, ids=str)
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "expanded"])
def test_dtype_and_values_like_mul_scalar(device, dtype, number, kind):
    x = make_tensor((5, 6), dtype, device, kind)
    result = OPS.weighted_sum(x, number)  # overload resolution picks .Scalar for a Python number
    assert result.dtype == (x.square() * number).dtype == dtype  # bfloat16 * 2.5 stays bfloat16
    assert result.stride() == (number * x.square()).stride()
    weight = torch.tensor(number, dtype=dtype, device=device)
    assert torch.equal(result, OPS.weighted_sum(x, weight))
    assert_close_to_reference(result, reference64(x, weight).to(dtype))


def test_zero_dim_input_keeps_its_dtype(device):
    x = torch.tensor(1.5, dtype=torch.bfloat16, device=device)
    assert OPS.weighted_sum(x, 2.5).dtype == torch.bfloat16 == (x * 2.5).dtype


def test_bad_input_names_the_argument():
    with pytest.raises(RuntimeError, match="input"):
        OPS.weighted_sum(torch.ones(3, dtype=torch.int32), 2.0)


def test_gradient_with_respect_to_input(device):
    x = torch.randn(4, 5, dtype=torch.float64, device=device, requires_grad=True)
    assert gradcheck(lambda x: OPS.weighted_sum(x, -1.25), (x,))
    y = OPS.weighted_sum(x, 1.5)
    (grad,) = torch.autograd.grad(y, x, torch.ones_like(y))
    torch.testing.assert_close(grad, 3.0 * x.detach(), rtol=0, atol=0)


def test_vmap_and_meta():
    x = torch.randn(3, 4)
    torch.testing.assert_close(torch.vmap(lambda r: OPS.weighted_sum(r, 2.0))(x), OPS.weighted_sum(x, 2.0))
    meta = OPS.weighted_sum(torch.empty(3, 4, dtype=torch.bfloat16, device="meta"), 2.5)
    assert meta.shape == (3, 4) and meta.dtype == torch.bfloat16


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiles(dynamic):
    torch._dynamo.reset()
    f = lambda x: torch.relu(OPS.weighted_sum(x + 1, 2.5))
    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for n in (4, 9):
        x = torch.randn(n, 3, dtype=torch.bfloat16, requires_grad=True)
        out = compiled(x)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, f(x), rtol=0, atol=0)
        (grad,) = torch.autograd.grad(out.float().sum(), x)
        (expected,) = torch.autograd.grad(f(x).float().sum(), x)
        torch.testing.assert_close(grad, expected)
