# SPDX-License-Identifier: BSD-3-Clause
"""Autograd of custom::weighted_sum: gradients, higher orders, out= and in-place under autograd."""

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.utils._python_dispatch import TorchDispatchMode

from reference import (
    DTYPE_PAIRS,
    OPS,
    assert_close_sum,
    assert_rejected,
    coarser,
    dtype_name,
    gradient_reference,
    make_tensor,
)

# Small float64 cases for gradcheck: name -> (input shape, input kind, weight shape, weight kind).
# Expanded (stride-0) inputs are left to test_gradients_of_expanded_inputs: gradcheck perturbs
# inputs element by element, which is ill-defined when elements share memory.
GRADCHECK_CASES = {
    "same_shape": ((3, 4), "contiguous", (3, 4), "contiguous"),
    "channel_weight": ((2, 3, 4), "contiguous", (4,), "contiguous"),
    "both_broadcast": ((3, 1, 4), "contiguous", (2, 1), "contiguous"),
    "zero_dim_weight": ((3, 4), "contiguous", (), "contiguous"),
    "zero_dim_input": ((), "contiguous", (3, 4), "contiguous"),
    "zero_dim": ((), "contiguous", (), "contiguous"),
    "transposed": ((3, 4), "transposed", (3, 4), "transposed"),
    "step_sliced": ((3, 4), "step", (4,), "step"),
    "offset": ((3, 4), "offset", (3, 4), "offset"),
}
REQUIRES_GRAD = {"input": (True, False), "weight": (False, True), "both": (True, True)}
MASKS = [[True, True], [True, False], [False, True], [False, False]]


def leaves(case, device, requires_grad=(True, True), dtype=torch.float64, weight_dtype=None):
    x_shape, x_kind, w_shape, w_kind = GRADCHECK_CASES[case]
    x = make_tensor(x_shape, dtype, device, x_kind).detach().requires_grad_(requires_grad[0])
    w = make_tensor(w_shape, weight_dtype or dtype, device, w_kind).detach().requires_grad_(requires_grad[1])
    return x, w


def composite(x, w):
    return w * x.square()


# ------------------------------------------------------------------- float64 gradcheck


@pytest.mark.parametrize("requires_grad", list(REQUIRES_GRAD))
@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_gradcheck(device, case, requires_grad):
    x, w = leaves(case, device, REQUIRES_GRAD[requires_grad])
    assert gradcheck(OPS.weighted_sum, (x, w))


@pytest.mark.parametrize("requires_grad", list(REQUIRES_GRAD))
@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_gradgradcheck(device, case, requires_grad):
    x, w = leaves(case, device, REQUIRES_GRAD[requires_grad])
    assert gradgradcheck(OPS.weighted_sum, (x, w))


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(lambda y: y.t(), id="transposed_grad"),
        pytest.param(lambda y: y.sum(), id="expanded_grad"),  # sum's backward expands: stride 0
        pytest.param(lambda y: y[:, 1:3], id="sliced_grad"),
    ],
)
@pytest.mark.parametrize("case", ["same_shape", "both_broadcast", "transposed"])
def test_gradcheck_with_non_contiguous_incoming_grad(device, case, after):
    x, w = leaves(case, device)
    if x.dim() > 2:
        x = x.detach()[0].requires_grad_()
    assert gradcheck(lambda a, b: after(OPS.weighted_sum(a, b)), (x, w))
    assert gradgradcheck(lambda a, b: after(OPS.weighted_sum(a, b)), (x, w))


@pytest.mark.parametrize("grad_kind", ["transposed", "step", "offset", "expanded"])
@pytest.mark.parametrize("case", ["same_shape", "both_broadcast"])
def test_non_contiguous_grad_outputs_match_reference(device, case, grad_kind):
    x, w = leaves(case, device)
    y = OPS.weighted_sum(x, w)
    grad = make_tensor(y.shape, y.dtype, device, grad_kind)
    grad_input, grad_weight = torch.autograd.grad(y, (x, w), grad)
    (ref_input, scale_input), (ref_weight, scale_weight) = gradient_reference(grad, x.detach(), w.detach())
    assert_close_sum(grad_input, ref_input, scale_input, torch.float64)
    assert_close_sum(grad_weight, ref_weight, scale_weight, torch.float64)


@pytest.mark.parametrize("requires_grad", list(REQUIRES_GRAD))
def test_gradients_of_expanded_inputs(device, requires_grad):
    x = make_tensor((5, 6), torch.float64, device, "expanded").requires_grad_(REQUIRES_GRAD[requires_grad][0])
    w = make_tensor((5, 6), torch.float64, device, "expanded").requires_grad_(REQUIRES_GRAD[requires_grad][1])
    grad = make_tensor((5, 6), torch.float64, device)
    wanted = [t for t in (x, w) if t.requires_grad]
    got = torch.autograd.grad(OPS.weighted_sum(x, w), wanted, grad)
    expected = torch.autograd.grad(composite(x, w), wanted, grad)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e)


# ------------------------------------------------------------ which gradients are computed


class BackwardCalls(TorchDispatchMode):
    """Records the output_mask of every custom::weighted_sum_backward call below autograd."""

    def __init__(self):
        super().__init__()
        self.masks = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is OPS.weighted_sum_backward.default:
            self.masks.append(list(args[3]))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("requires_grad", list(REQUIRES_GRAD))
def test_only_the_needed_gradients_are_computed(requires_grad):
    x_rg, w_rg = REQUIRES_GRAD[requires_grad]
    x, w = leaves("both_broadcast", "cpu", (x_rg, w_rg))
    y = OPS.weighted_sum(x, w)
    assert y.requires_grad and y.grad_fn is not None
    with BackwardCalls() as calls:
        y.backward(torch.ones_like(y))
    assert calls.masks == [[x_rg, w_rg]]
    assert (x.grad is not None) == x_rg
    assert (w.grad is not None) == w_rg


def test_no_graph_when_nothing_requires_grad(device):
    x, w = leaves("same_shape", device, (False, False))
    y = OPS.weighted_sum(x, w)
    assert not y.requires_grad and y.grad_fn is None


def test_no_graph_under_no_grad(device):
    x, w = leaves("same_shape", device)
    with torch.no_grad():
        y = OPS.weighted_sum(x, w)
    assert not y.requires_grad and y.grad_fn is None


# ------------------------------------------------------------- low-precision gradients


@pytest.mark.parametrize("case", ["same_shape", "channel_weight", "both_broadcast", "zero_dim_weight", "step_sliced"])
@pytest.mark.parametrize(
    "input_dtype,weight_dtype", DTYPE_PAIRS, ids=[f"{dtype_name(a)}-{dtype_name(b)}" for a, b in DTYPE_PAIRS]
)
def test_gradients_match_float64_reference(device, case, input_dtype, weight_dtype):
    x, w = leaves(case, device, dtype=input_dtype, weight_dtype=weight_dtype)
    y = OPS.weighted_sum(x, w)
    grad = make_tensor(y.shape, y.dtype, device)
    grad_input, grad_weight = torch.autograd.grad(y, (x, w), grad)
    assert (grad_input.dtype, grad_input.shape) == (x.dtype, x.shape)
    assert (grad_weight.dtype, grad_weight.shape) == (w.dtype, w.shape)
    (ref_input, scale_input), (ref_weight, scale_weight) = gradient_reference(grad, x.detach(), w.detach())
    terms = y.numel()
    assert_close_sum(grad_input, ref_input, scale_input, coarser(x.dtype, y.dtype), terms // max(x.numel(), 1))
    assert_close_sum(grad_weight, ref_weight, scale_weight, coarser(w.dtype, y.dtype), terms // max(w.numel(), 1))


# -------------------------------------------------------------- the backward operator


BACKWARD_LAYOUTS = [
    "same_shape",
    "channel_weight",
    "both_broadcast",
    "zero_dim_weight",
    "transposed",
    "step_sliced",
    "offset",
]
BACKWARD_PAIRS = [
    (torch.float64, torch.float64),
    (torch.float32, torch.float32),
    (torch.float16, torch.float16),
    (torch.bfloat16, torch.bfloat16),
    (torch.float32, torch.float64),
    (torch.float16, torch.bfloat16),
]


@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize(
    "input_dtype,weight_dtype", BACKWARD_PAIRS, ids=[f"{dtype_name(a)}-{dtype_name(b)}" for a, b in BACKWARD_PAIRS]
)
@pytest.mark.parametrize("case", BACKWARD_LAYOUTS)
def test_backward_op_values(device, case, input_dtype, weight_dtype, mask):
    x, w = leaves(case, device, (False, False), input_dtype, weight_dtype)
    out_dtype = torch.result_type(x, w)
    grad = make_tensor(torch.broadcast_shapes(x.shape, w.shape), out_dtype, device)
    grad_input, grad_weight = OPS.weighted_sum_backward(grad, x, w, mask)
    (ref_input, scale_input), (ref_weight, scale_weight) = gradient_reference(grad, x, w)
    terms = grad.numel()
    if mask[0]:
        assert (grad_input.dtype, grad_input.shape) == (x.dtype, x.shape)
        assert_close_sum(grad_input, ref_input, scale_input, coarser(x.dtype, out_dtype), terms // max(x.numel(), 1))
    else:
        assert grad_input is None
    if mask[1]:
        assert (grad_weight.dtype, grad_weight.shape) == (w.dtype, w.shape)
        assert_close_sum(grad_weight, ref_weight, scale_weight, coarser(w.dtype, out_dtype), terms // max(w.numel(), 1))
    else:
        assert grad_weight is None


@pytest.mark.parametrize("mask", MASKS[:3], ids=str)
@pytest.mark.parametrize("case", ["same_shape", "both_broadcast", "zero_dim_weight"])
def test_backward_op_gradcheck_and_gradgradcheck(device, case, mask):
    x, w = leaves(case, device)
    grad = make_tensor(torch.broadcast_shapes(x.shape, w.shape), torch.float64, device).requires_grad_()

    def backward(g, a, b):
        return tuple(t for t in OPS.weighted_sum_backward(g, a, b, mask) if t is not None)

    assert gradcheck(backward, (grad, x, w))
    assert gradgradcheck(backward, (grad, x, w))


def test_backward_op_with_nothing_requested_returns_two_nones(device):
    x, w = leaves("same_shape", device)
    grad = make_tensor(x.shape, torch.float64, device).requires_grad_()
    assert OPS.weighted_sum_backward(grad, x, w, [False, False]) == (None, None)


def test_third_order_matches_composite(device):
    x, w = leaves("both_broadcast", device)

    def third(f):
        y = f(x, w).sum()
        (gx,) = torch.autograd.grad(y, x, create_graph=True)
        (gxx,) = torch.autograd.grad(gx.sum(), x, create_graph=True)
        return torch.autograd.grad(gxx.sum(), (x, w), allow_unused=True, materialize_grads=True)

    for got, expected in zip(third(OPS.weighted_sum), third(composite)):
        torch.testing.assert_close(got, expected)


# ----------------------------------------------------------------------------- out=


@pytest.mark.parametrize("which", ["input", "weight", "out"])
def test_out_with_an_argument_requiring_grad_raises(device, which):
    x, w = leaves("same_shape", device, (which == "input", which == "weight"))
    out = torch.zeros(x.shape, dtype=torch.float64, device=device, requires_grad=which == "out")
    assert_rejected(
        lambda: OPS.weighted_sum.out(x, w, out=out),
        {"input": x.detach(), "weight": w.detach(), "out": out.detach()},
        r"custom::weighted_sum\.out: out=\.\.\. arguments don't support automatic differentiation",
    )


def test_out_with_grad_arguments_is_allowed_under_no_grad(device):
    x, w = leaves("same_shape", device)
    out = torch.zeros(x.shape, dtype=torch.float64, device=device)
    with torch.no_grad():
        OPS.weighted_sum.out(x, w, out=out)
    assert not out.requires_grad
    torch.testing.assert_close(out, composite(x.detach(), w.detach()))


# ------------------------------------------------------------------------- in place


LEAF_MESSAGES = {
    "leaf": r"a leaf Variable that requires grad (is being|has been) used in an in-place operation",
    "view_of_leaf": r"a view of a leaf Variable that requires grad is being used in an in-place operation",
}


@pytest.mark.parametrize("target", list(LEAF_MESSAGES))
def test_inplace_on_leaf_requiring_grad_raises(device, target):
    x, w = leaves("same_shape", device)
    self = x if target == "leaf" else x[0]
    assert_rejected(
        lambda: OPS.weighted_sum_(self, w[0]), {"leaf": x.detach(), "weight": w.detach()}, LEAF_MESSAGES[target]
    )


def test_inplace_on_leaf_is_allowed_under_no_grad(device):
    x, w = leaves("same_shape", device)
    expected = composite(x.detach(), w.detach())
    with torch.no_grad():
        OPS.weighted_sum_(x, w)
    assert x.is_leaf and x.grad_fn is None
    torch.testing.assert_close(x.detach(), expected)


@pytest.mark.parametrize("requires_grad", list(REQUIRES_GRAD))
@pytest.mark.parametrize("case", ["same_shape", "channel_weight", "zero_dim_weight", "transposed", "step_sliced"])
def test_inplace_on_non_leaf_gradients_match_composite(device, case, requires_grad):
    x, w = leaves(case, device, REQUIRES_GRAD[requires_grad])
    grad = make_tensor(x.shape, torch.float64, device)

    def run(inplace):
        self = x.clone()  # a non-leaf when x requires grad, a plain tensor otherwise
        if inplace:
            OPS.weighted_sum_(self, w)
        else:
            self = composite(self, w)
        assert self.requires_grad and self.grad_fn is not None
        wanted = [t for t in (x, w) if t.requires_grad]
        return self.detach(), torch.autograd.grad(self, wanted, grad)

    values, grads = run(inplace=True)
    expected_values, expected_grads = run(inplace=False)
    torch.testing.assert_close(values, expected_values)
    for got, expected in zip(grads, expected_grads):
        torch.testing.assert_close(got, expected)


def inplace_on_clone(x, w):
    self = x.clone()
    OPS.weighted_sum_(self, w)
    return self


@pytest.mark.parametrize("requires_grad", list(REQUIRES_GRAD))
@pytest.mark.parametrize("case", ["same_shape", "channel_weight", "zero_dim_weight"])
def test_inplace_on_non_leaf_gradcheck(device, case, requires_grad):
    x, w = leaves(case, device, REQUIRES_GRAD[requires_grad])
    assert gradcheck(inplace_on_clone, (x, w))


@pytest.mark.parametrize("requires_grad", ["input", "both"])
@pytest.mark.parametrize("case", ["same_shape", "channel_weight"])
def test_inplace_on_non_leaf_gradgradcheck(device, case, requires_grad):
    x, w = leaves(case, device, REQUIRES_GRAD[requires_grad])
    assert gradgradcheck(inplace_on_clone, (x, w))


def test_inplace_on_view_of_non_leaf_gradients_match_composite(device):
    x, w = leaves("same_shape", device)
    w2 = w.detach()[:, :2].clone().requires_grad_()
    grad = make_tensor(x.shape, torch.float64, device)

    base = x.clone()
    OPS.weighted_sum_(base[:, ::2], w2)
    got = torch.autograd.grad(base, (x, w2), grad)

    expected_base = x.clone()
    expected_base[:, ::2] = composite(x[:, ::2].clone(), w2)
    expected = torch.autograd.grad(expected_base, (x, w2), grad)
    torch.testing.assert_close(base, expected_base)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_inplace_with_self_as_weight_gives_right_gradient_or_raises(device):
    x = make_tensor((5,), torch.float64, device).requires_grad_()
    a = x.clone()
    OPS.weighted_sum_(a, a)
    try:
        (grad,) = torch.autograd.grad(a.sum(), x)
    except RuntimeError as error:  # refusing, as ATen does for a.mul_(a), is fine too
        assert "modified by an inplace operation" in str(error)
        return
    torch.testing.assert_close(grad, 3 * x.detach() ** 2)


# ------------------------------------------------------------------ version counter


def test_inplace_bumps_version(device):
    x, w = leaves("same_shape", device, (False, False))
    version = x._version
    OPS.weighted_sum_(x, w)
    assert x._version > version


def test_inplace_recording_graph_bumps_version(device):
    x, w = leaves("same_shape", device)
    self = x.clone()
    version = self._version
    OPS.weighted_sum_(self, w)
    assert self._version > version


def test_out_bumps_version_of_out_only(device):
    x, w = leaves("same_shape", device, (False, False))
    out = torch.empty_like(x)
    versions = (x._version, w._version, out._version)
    OPS.weighted_sum.out(x, w, out=out)
    assert out._version > versions[2]
    assert (x._version, w._version) == versions[:2]


def test_functional_bumps_no_version(device):
    x, w = leaves("same_shape", device, (False, False))
    versions = (x._version, w._version)
    OPS.weighted_sum(x, w)
    assert (x._version, w._version) == versions


@pytest.mark.parametrize("mutation", ["inplace", "out", "inplace_recording_graph"])
def test_mutating_a_tensor_saved_for_backward_makes_backward_raise(device, mutation):
    leaf, w = leaves("same_shape", device)
    if mutation == "inplace_recording_graph":
        saved = leaf.clone()
        y = saved.sin()  # saves `saved`
        OPS.weighted_sum_(saved, w)
    else:
        saved = make_tensor(leaf.shape, torch.float64, device)
        y = leaf * saved  # saves `saved` for leaf's gradient
        x2, w2 = leaves("same_shape", device, (False, False))
        if mutation == "inplace":
            OPS.weighted_sum_(saved, w2)
        else:
            OPS.weighted_sum.out(x2, w2, out=saved)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=dtype_name)
def test_backward_op_one_pass_over_many_threads_and_vector_tails(device, dtype):
    # Same shape and dtype: the one-pass kernel. More elements than one thread's grain, and a row
    # length (1031) that leaves a scalar tail after the vector loop.
    x, w, grad = (make_tensor((67, 1031), dtype, device) for _ in range(3))
    grad_input, grad_weight = OPS.weighted_sum_backward(grad, x, w, [True, True])
    x64, w64, g64 = x.double(), w.double(), grad.double()
    rtol = {torch.float64: 1e-12, torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(grad_input.double(), 2 * w64 * x64 * g64, rtol=rtol, atol=rtol)
    torch.testing.assert_close(grad_weight.double(), x64 * x64 * g64, rtol=rtol, atol=rtol)
