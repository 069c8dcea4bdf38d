# SPDX-License-Identifier: BSD-3-Clause
"""Autograd of custom::weighted_square_sum: gradients, higher orders, forward AD, compiled autograd.

grad_input = sum_to(2 w x g), grad_weight = sum_to(x**2 g), with g the incoming gradient broadcast
back over the reduced dims. Float64 cases go through gradcheck and gradgradcheck (reverse and
forward mode); low-precision gradients are judged against the float64 gradients and compared
with the composite's.
"""

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.autograd import gradcheck, gradgradcheck

from autodiff_helpers import WHICH, dual, random_tangents
from reference import DTYPE_PAIRS, assert_close_sum, coarser, dtype_name, gradient_reference, make_tensor
from square_sum_reference import composite, make, op, reduced_dims

# name -> (input shape, input kind, weight shape, weight kind, dim, keepdim)
CASES = {
    "same_shape_all": ((3, 4), "contiguous", (3, 4), "contiguous", None, False),
    "row_weight_dim1": ((2, 3, 4), "contiguous", (4,), "contiguous", [1], False),
    "row_weight_dim_last_keepdim": ((2, 3, 4), "contiguous", (4,), "contiguous", [-1], True),
    "column_weight_two_dims": ((2, 3, 4), "contiguous", (3, 1), "contiguous", [0, 2], False),
    "per_channel_nchw": ((2, 3, 2, 3), "contiguous", (3, 1, 1), "contiguous", [0, 2, 3], False),
    "both_broadcast": ((3, 1, 4), "contiguous", (2, 1), "contiguous", [-2], True),
    "zero_dim_weight": ((3, 4), "contiguous", (), "contiguous", [0], False),
    "zero_dim_input": ((), "contiguous", (3, 4), "contiguous", [1], True),
    "zero_dim_both": ((), "contiguous", (), "contiguous", [0], False),
    "empty_dim_list": ((2, 3), "contiguous", (3,), "contiguous", [], True),
    "transposed": ((3, 4, 2), "transposed", (3, 4, 2), "transposed", [1], False),
    "step_sliced": ((3, 4), "step", (4,), "step", [0], False),
    "channels_last": ((2, 3, 2, 2), "channels_last", (3, 1, 1), "contiguous", [1, -1], True),
}
REQUIRES_GRAD = WHICH


def leaves(case, device, requires_grad=(True, True), dtype=torch.float64, weight_dtype=None):
    x_shape, x_kind, w_shape, w_kind, dim, keepdim = CASES[case]
    x = make(x_shape, dtype, device, x_kind).detach().requires_grad_(requires_grad[0])
    w = make(w_shape, weight_dtype or dtype, device, w_kind).detach().requires_grad_(requires_grad[1])
    return x, w, dim, keepdim


def broadcast_grad(g, shape, dim, keepdim):
    """The incoming gradient of the reduction, broadcast back over the reduced dims of `shape`."""
    if not keepdim:
        for d in sorted(reduced_dims(len(shape), dim)):
            g = g.unsqueeze(d)
    return g.expand(shape)


# ------------------------------------------------------------------------ float64 checks


@pytest.mark.parametrize("requires_grad", list(REQUIRES_GRAD))
@pytest.mark.parametrize("case", list(CASES))
def test_gradcheck_reverse_and_forward(device, case, requires_grad):
    x, w, dim, keepdim = leaves(case, device, REQUIRES_GRAD[requires_grad])
    assert gradcheck(lambda a, b: op(a, b, dim, keepdim), (x, w), check_forward_ad=True)


@pytest.mark.parametrize("requires_grad", list(REQUIRES_GRAD))
@pytest.mark.parametrize("case", list(CASES))
def test_gradgradcheck(device, case, requires_grad):
    x, w, dim, keepdim = leaves(case, device, REQUIRES_GRAD[requires_grad])
    assert gradgradcheck(lambda a, b: op(a, b, dim, keepdim), (x, w), check_fwd_over_rev=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dtype_name)
def test_gradcheck_with_dtype_argument(device, dtype):
    # A float64 result from float64 operands with dtype= given; and float32 rounding inside, checked
    # against the composite's gradients below (gradcheck needs float64 throughout).
    x, w, dim, keepdim = leaves("row_weight_dim1", device)
    if dtype == torch.float64:
        assert gradcheck(lambda a, b: op(a, b, dim, keepdim, dtype), (x, w), check_forward_ad=True)
        assert gradgradcheck(lambda a, b: op(a, b, dim, keepdim, dtype), (x, w))
        return
    y = op(x, w, dim, keepdim, dtype)
    assert y.dtype == torch.float32
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, w), g)
    expected = torch.autograd.grad(composite(x, w, dim, keepdim, dtype), (x, w), g)
    for a, e in zip(got, expected):
        assert (a.dtype, a.shape) == (e.dtype, e.shape) == (torch.float64, a.shape)
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", ["same_shape_all", "both_broadcast", "zero_dim_weight", "per_channel_nchw"])
def test_third_order_matches_composite(device, case):
    x, w, dim, keepdim = leaves(case, device)

    def third(f):
        y = f(x, w, dim, keepdim).sum()
        (gx,) = torch.autograd.grad(y, x, create_graph=True)
        (gxx,) = torch.autograd.grad(gx.sin().sum(), x, create_graph=True)
        return torch.autograd.grad(gxx.sum(), (x, w), allow_unused=True, materialize_grads=True)

    for got, expected in zip(third(op), third(composite)):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(lambda y: y.t(), id="transposed_grad"),
        pytest.param(lambda y: y.sum(), id="expanded_grad"),  # sum's backward expands: stride 0
        pytest.param(lambda y: y[:, 1:3], id="sliced_grad"),
    ],
)
def test_non_contiguous_incoming_grad(device, after):
    x = make_tensor((3, 5, 4), torch.float64, device).requires_grad_()
    w = make_tensor((5, 1), torch.float64, device).requires_grad_()
    assert gradcheck(lambda a, b: after(op(a, b, [1])), (x, w))
    assert gradgradcheck(lambda a, b: after(op(a, b, [1])), (x, w))


def test_expanded_inputs(device):
    x = make_tensor((5, 6), torch.float64, device, "expanded").requires_grad_()
    w = make_tensor((5, 6), torch.float64, device, "expanded").requires_grad_()
    g = torch.randn(6, dtype=torch.float64, device=device)
    got = torch.autograd.grad(op(x, w, [0]), (x, w), g)
    expected = torch.autograd.grad(composite(x, w, [0]), (x, w), g)
    for a, e in zip(got, expected):
        assert a.shape == e.shape
        torch.testing.assert_close(a, e)


# ------------------------------------------------------------------ gradient values


@pytest.mark.parametrize("case", ["row_weight_dim1", "column_weight_two_dims", "per_channel_nchw", "zero_dim_weight"])
@pytest.mark.parametrize(
    "input_dtype,weight_dtype", DTYPE_PAIRS, ids=[f"{dtype_name(a)}-{dtype_name(b)}" for a, b in DTYPE_PAIRS]
)
def test_gradients_match_float64_reference_and_composite(device, case, input_dtype, weight_dtype):
    x, w, dim, keepdim = leaves(case, device, dtype=input_dtype, weight_dtype=weight_dtype)
    y = op(x, w, dim, keepdim)
    g = make_tensor(y.shape, y.dtype, device)
    grad_input, grad_weight = torch.autograd.grad(y, (x, w), g)
    assert (grad_input.dtype, grad_input.shape) == (x.dtype, x.shape)
    assert (grad_weight.dtype, grad_weight.shape) == (w.dtype, w.shape)
    shape = torch.broadcast_shapes(x.shape, w.shape)
    full = broadcast_grad(g, shape, dim, keepdim)
    (ref_input, scale_input), (ref_weight, scale_weight) = gradient_reference(full, x.detach(), w.detach())
    terms = full.numel()
    assert_close_sum(grad_input, ref_input, scale_input, coarser(x.dtype, y.dtype), terms // max(x.numel(), 1))
    assert_close_sum(grad_weight, ref_weight, scale_weight, coarser(w.dtype, y.dtype), terms // max(w.numel(), 1))
    # The composite's gradients: the same dtypes and shapes.
    expected = torch.autograd.grad(composite(x, w, dim, keepdim), (x, w), g)
    for a, e in zip((grad_input, grad_weight), expected):
        assert (a.dtype, a.shape) == (e.dtype, e.shape)


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32, torch.float64], ids=dtype_name)
@pytest.mark.parametrize("input_dtype", [torch.bfloat16, torch.float32], ids=dtype_name)
def test_gradients_with_dtype_argument_have_the_operands_dtypes(device, input_dtype, out_dtype):
    x, w, dim, keepdim = leaves("column_weight_two_dims", device, dtype=input_dtype)
    y = op(x, w, dim, keepdim, out_dtype)
    assert y.dtype == out_dtype
    g = make_tensor(y.shape, out_dtype, device)
    grad_input, grad_weight = torch.autograd.grad(y, (x, w), g)
    assert (grad_input.dtype, grad_weight.dtype) == (input_dtype, input_dtype)
    full = broadcast_grad(g, torch.broadcast_shapes(x.shape, w.shape), dim, keepdim)
    (ref_input, scale_input), (ref_weight, scale_weight) = gradient_reference(full, x.detach(), w.detach())
    terms = full.numel()
    assert_close_sum(grad_input, ref_input, scale_input, coarser(input_dtype, out_dtype), terms // x.numel())
    assert_close_sum(grad_weight, ref_weight, scale_weight, coarser(input_dtype, out_dtype), terms // w.numel())


@pytest.mark.parametrize("dim", [[0], [1], None], ids=str)
def test_gradients_of_empty_reductions_are_zeros(device, dim):
    x = torch.randn(0, 3, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(3, dtype=torch.float64, device=device, requires_grad=True)
    y = op(x, w, dim)
    grad_input, grad_weight = torch.autograd.grad(y, (x, w), torch.randn_like(y))
    assert grad_input.shape == (0, 3)
    assert torch.equal(grad_weight, torch.zeros_like(w))


def test_only_inputs_requiring_grad_get_gradients(device):
    x, w, dim, keepdim = leaves("row_weight_dim1", device, (True, False))
    y = op(x, w, dim, keepdim)
    assert y.requires_grad and y.grad_fn is not None
    y.sum().backward()
    assert x.grad is not None and w.grad is None
    torch.testing.assert_close(x.grad, torch.autograd.grad(composite(x, w, dim, keepdim).sum(), x)[0])


def test_no_graph_when_nothing_requires_grad(device):
    x, w, dim, keepdim = leaves("row_weight_dim1", device, (False, False))
    y = op(x, w, dim, keepdim)
    assert not y.requires_grad and y.grad_fn is None


def test_no_graph_under_no_grad(device):
    x, w, dim, keepdim = leaves("row_weight_dim1", device)
    with torch.no_grad():
        y = op(x, w, dim, keepdim)
    assert not y.requires_grad and y.grad_fn is None


def test_saved_input_modified_in_place_makes_backward_raise(device):
    x, w, dim, keepdim = leaves("row_weight_dim1", device)
    a = x * 1  # a non-leaf the node saves
    y = op(a, w, dim, keepdim)
    a.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# ------------------------------------------------------------------------- forward AD


@pytest.mark.parametrize("tangents", list(REQUIRES_GRAD))
@pytest.mark.parametrize("case", list(CASES))
def test_forward_ad_dual_tensors_match_composite(device, case, tangents):
    x, w, dim, keepdim = leaves(case, device, (False, False))
    tx, tw = random_tangents(x, w, tangents)
    primal, tangent = dual(op, x, w, tx, tw, dim, keepdim)
    expected_primal, expected_tangent = dual(composite, x, w, tx, tw, dim, keepdim)
    assert tangent.shape == primal.shape == expected_primal.shape
    torch.testing.assert_close(primal, expected_primal)
    torch.testing.assert_close(tangent, expected_tangent)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64], ids=dtype_name)
@pytest.mark.parametrize("input_dtype", [torch.float16, torch.float32], ids=dtype_name)
def test_forward_ad_tangent_has_the_result_dtype(device, input_dtype, out_dtype):
    x, w, dim, keepdim = leaves("column_weight_two_dims", device, (False, False), dtype=input_dtype)
    tx, tw = torch.randn_like(x), torch.randn_like(w)
    with fwAD.dual_level():
        primal, tangent = fwAD.unpack_dual(op(fwAD.make_dual(x, tx), fwAD.make_dual(w, tw), dim, keepdim, out_dtype))
    assert primal.dtype == tangent.dtype == out_dtype
    assert tangent.shape == primal.shape
    # d/dt sum(w x^2) = sum(tw x^2 + 2 w x tx), in float64.
    x64, w64, tx64, tw64 = (t.double() for t in (x, w, tx, tw))
    expected = (tw64 * x64.square() + 2 * w64 * x64 * tx64).sum(dim, keepdim)
    scale = (tw64 * x64.square()).abs().sum(dim, keepdim) + (2 * w64 * x64 * tx64).abs().sum(dim, keepdim)
    rtol = {torch.float16: 2e-3, torch.float32: 1e-5}[input_dtype]
    assert ((tangent.double() - expected).abs() <= rtol * scale + 1e-6).all()


def test_forward_ad_of_the_gradient(device):
    # forward-over-reverse: the tangent of a gradient, as hessian-vector products compute.
    x, w, dim, keepdim = leaves("both_broadcast", device)
    tx = torch.randn_like(x)

    def hvp(f):
        with fwAD.dual_level():
            dx = fwAD.make_dual(x.detach().requires_grad_(), tx)
            (gx,) = torch.autograd.grad(f(dx, w.detach(), dim, keepdim).sum(), dx, create_graph=True)
            return fwAD.unpack_dual(gx).tangent

    torch.testing.assert_close(hvp(op), hvp(composite))


# ------------------------------------------------------------------- compiled autograd


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compiled_autograd_matches_eager(device, fresh_dynamo):
    from torch._dynamo import compiled_autograd
    from torch._dynamo.utils import counters

    x, w, dim, keepdim = leaves("per_channel_nchw", device)

    # First and second order: the op's node, and the nodes of its gradient (taken with create_graph).
    def step(x, w):
        (gx,) = torch.autograd.grad(op(x, w, dim, keepdim).sum(), x, create_graph=True)
        return op(x, w, dim, keepdim).square().sum() + gx.sin().sum()

    expected = torch.autograd.grad(step(x, w), (x, w))
    counters.clear()
    loss = step(x, w)
    with compiled_autograd._enable(torch.compile(backend="aot_eager", fullgraph=True)):
        loss.backward()
    assert counters["compiled_autograd"]["captures"] == 1
    torch.testing.assert_close((x.grad, w.grad), expected)
