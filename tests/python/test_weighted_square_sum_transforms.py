# SPDX-License-Identifier: BSD-3-Clause
"""custom::weighted_square_sum under torch.func: grad, vjp, jacrev, jacfwd, hessian, jvp, vmap.

Each transform of the op is compared with the same transform of the composite
`(w * x.square()).sum(dim, keepdim, dtype=dtype)`. Every test runs with functorch's per-example
vmap fallback disabled, so a missing batching rule fails instead of silently looping (jacfwd,
jacrev, hessian and per-sample gradients all vmap).
"""

import pytest
import torch
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

import autodiff_helpers
from square_sum_reference import composite, make, op

no_vmap_fallback = autodiff_helpers.no_vmap_fallback  # an autouse fixture


# name -> (input shape, weight shape, input dtype, weight dtype, dim, keepdim)
F64 = torch.float64
CASES = {
    "same_shape_all": ((3, 4), (3, 4), F64, F64, None, False),
    "row_weight_dim0": ((3, 4), (4,), F64, F64, [0], False),
    "column_weight_dim_last_keepdim": ((2, 3, 4), (3, 1), F64, F64, [-1], True),
    "two_dims_negative": ((2, 3, 4), (4,), F64, F64, [-1, 0], False),
    "per_channel_nchw": ((2, 3, 2, 2), (3, 1, 1), F64, F64, [0, 2, 3], False),
    "both_broadcast": ((3, 1, 4), (2, 1), F64, F64, [1], True),
    "empty_dim_list_keepdim": ((2, 3), (3,), F64, F64, [], True),
    "zero_dim_weight": ((3, 4), (), F64, F64, [1], False),
    "zero_dim_input": ((), (3, 4), F64, F64, None, False),
    "zero_dim_both": ((), (), F64, F64, [0], True),
    "mixed_float32_float64": ((3, 4), (4,), torch.float32, F64, [0], False),
    "mixed_zero_dim_float64_weight": ((3, 4), (), torch.float32, F64, [-1], True),
}


def case_tensors(case, device):
    x_shape, w_shape, x_dtype, w_dtype, dim, keepdim = CASES[case]
    return make(x_shape, x_dtype, device), make(w_shape, w_dtype, device), dim, keepdim


def bind(f, dim, keepdim, dtype=None):
    return lambda x, w: f(x, w, dim, keepdim, dtype)


def loss_of(f, dim, keepdim):
    return lambda x, w: f(x, w, dim, keepdim).sin().sum()  # sin: a gradient that is not all ones


TOLERANCES = {
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float32: (2e-5, 1e-5),
    F64: (1e-7, 1e-7),
}


def assert_same(got, expected, inputs=()):
    """Equal structure, dtypes and shapes; values within the tolerance of the coarsest dtype of the
    result and `inputs`: the composite rounds x.square() (and its derivatives) to a float32 input's
    dtype even where the result is float64, the op does not, so they agree to float32's precision."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e, inputs)
        return
    if isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys()
        for k in expected:
            assert_same(got[k], expected[k], inputs)
        return
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
    rtol, atol = max((TOLERANCES[t.dtype] for t in (*inputs, expected)), key=lambda tol: tol[0])
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)


# -------------------------------------------------------------------------- reverse and forward mode


# transform -> f(x, w, dim, keepdim) made a function of (x, w) and transformed, with argnums
ARGNUMS_TRANSFORMS = {
    "grad": lambda f, dim, keepdim, argnums: grad(loss_of(f, dim, keepdim), argnums),
    "jacrev": lambda f, dim, keepdim, argnums: jacrev(bind(f, dim, keepdim), argnums),
    "jacfwd": lambda f, dim, keepdim, argnums: jacfwd(bind(f, dim, keepdim), argnums),
    "hessian": lambda f, dim, keepdim, argnums: hessian(loss_of(f, dim, keepdim), argnums),
}
HESSIAN_CASES = [
    "same_shape_all",
    "two_dims_negative",
    "column_weight_dim_last_keepdim",
    "zero_dim_weight",
    "zero_dim_both",
]
TRANSFORM_CASES = [(t, case) for t in ("grad", "jacrev", "jacfwd") for case in CASES] + [
    ("hessian", case) for case in HESSIAN_CASES
]


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)], ids=["input", "weight", "both"])
@pytest.mark.parametrize(("transform", "case"), TRANSFORM_CASES, ids=[f"{t}-{c}" for t, c in TRANSFORM_CASES])
def test_transform_matches_composite(device, transform, case, argnums):
    x, w, dim, keepdim = case_tensors(case, device)
    transformed = ARGNUMS_TRANSFORMS[transform]
    assert_same(
        transformed(op, dim, keepdim, argnums)(x, w), transformed(composite, dim, keepdim, argnums)(x, w), (x, w)
    )


@pytest.mark.parametrize("case", list(CASES))
def test_vjp_matches_composite(device, case):
    x, w, dim, keepdim = case_tensors(case, device)
    (y, pullback), (y_ref, pullback_ref) = vjp(bind(op, dim, keepdim), x, w), vjp(bind(composite, dim, keepdim), x, w)
    cotangent = torch.randn_like(y)
    assert_same((y, *pullback(cotangent)), (y_ref, *pullback_ref(cotangent)), (x, w))


@pytest.mark.parametrize("case", ["row_weight_dim0", "both_broadcast", "zero_dim_weight"])
def test_grad_of_grad_matches_composite(device, case):
    x, w, dim, keepdim = case_tensors(case, device)

    def second(f):
        return grad(lambda x, w: grad(loss_of(f, dim, keepdim), argnums=(0, 1))(x, w)[1].cos().sum(), argnums=(0, 1))

    assert_same(second(op)(x, w), second(composite)(x, w), (x, w))


@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=str)
def test_grad_with_dtype_argument(device, dtype):
    x, w = make((3, 4), torch.float32, device), make((4,), torch.float32, device)

    def loss(f):
        return lambda x, w: f(x, w, [0], False, dtype).sin().sum()

    assert_same(grad(loss(op), argnums=(0, 1))(x, w), grad(loss(composite), argnums=(0, 1))(x, w), (x, w))


# -------------------------------------------------------------------------- forward mode


@pytest.mark.parametrize("tangents", ["input", "weight", "both"])
@pytest.mark.parametrize("case", list(CASES))
def test_jvp_matches_composite(device, case, tangents):
    x, w, dim, keepdim = case_tensors(case, device)
    tx = torch.randn_like(x) if tangents != "weight" else torch.zeros_like(x)
    tw = torch.randn_like(w) if tangents != "input" else torch.zeros_like(w)
    assert_same(
        jvp(bind(op, dim, keepdim), (x, w), (tx, tw)), jvp(bind(composite, dim, keepdim), (x, w), (tx, tw)), (x, w)
    )


@pytest.mark.parametrize("case", ["row_weight_dim0", "both_broadcast", "zero_dim_weight"])
def test_jvp_of_grad_and_grad_of_jvp_match_composite(device, case):
    x, w, dim, keepdim = case_tensors(case, device)
    tangents = (torch.randn_like(x), torch.randn_like(w))

    def jvp_of_grad(f):
        return jvp(grad(loss_of(f, dim, keepdim), argnums=(0, 1)), (x, w), tangents)

    def grad_of_jvp(f):
        return grad(lambda x, w: jvp(bind(f, dim, keepdim), (x, w), tangents)[1].cos().sum(), argnums=(0, 1))(x, w)

    assert_same(jvp_of_grad(op), jvp_of_grad(composite), (x, w))
    assert_same(grad_of_jvp(op), grad_of_jvp(composite), (x, w))


# ---------------------------------------------------------------------------------- vmap


def stacked(t, n, dim=0):
    """n different examples of t stacked along `dim` (of t's size: a loss's sin stays well-conditioned)."""
    return torch.stack([t * (1 + k / 4) + k / 8 for k in range(n)], dim=dim)


# name -> (in_dims for (input, weight), how to batch input, how to batch weight)
VMAP_IN_DIMS = {
    "input_batched": (0, None),
    "weight_batched": (None, 0),
    "both_batched": (0, 0),
    "both_batched_at_other_dims": (-1, 1),
    "input_batched_last": (-1, None),
}


def batched_args(x, w, in_dims, n=4):
    args = []
    for t, d in zip((x, w), in_dims):
        if d is None:
            args.append(t)
        else:
            d = d if t.dim() > 0 or d in (0, -1) else 0
            args.append(stacked(t, n, d if d >= 0 else t.dim() + 1 + d))
    return args


def per_example_dims(x, w, in_dims):
    """in_dims valid for these operands (a 0-dim example can only be batched at 0 or -1)."""
    return tuple(
        None if d is None else (d if t.dim() >= (d if d >= 0 else -d - 1) else 0) for t, d in zip((x, w), in_dims)
    )


@pytest.mark.parametrize("in_dims", list(VMAP_IN_DIMS))
@pytest.mark.parametrize("case", list(CASES))
def test_vmap_matches_composite(device, case, in_dims):
    x, w, dim, keepdim = case_tensors(case, device)
    dims = per_example_dims(x, w, VMAP_IN_DIMS[in_dims])
    args = batched_args(x, w, dims)
    got = vmap(bind(op, dim, keepdim), in_dims=dims)(*args)
    expected = vmap(bind(composite, dim, keepdim), in_dims=dims)(*args)
    assert_same(got, expected, (x, w))
    # And each example is the op on that example.
    for b in range(got.shape[0]):
        example = [t if d is None else t.select(d, b) for t, d in zip(args, dims)]
        assert_same(got[b], op(*example, dim, keepdim), (x, w))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, F64], ids=str)
@pytest.mark.parametrize("in_dims", [(0, None), (None, 0), (1, 0)], ids=str)
def test_vmap_with_dtype_argument(device, in_dims, dtype):
    x, w = make((3, 5), torch.float32, device), make((5,), torch.bfloat16, device)
    args = batched_args(x, w, in_dims)
    got = vmap(bind(op, [-1], True, dtype), in_dims=in_dims)(*args)
    assert got.dtype == dtype and got.shape == (4, 3, 1)
    # Float32 products (bfloat16 * float32) in the composite: float32 precision, not bfloat16's. A
    # float16 result is the float32 sum rounded once, where torch.sum(dtype=float16) rounds each term.
    summed_in = None if dtype == torch.float16 else dtype
    expected = vmap(bind(composite, [-1], True, summed_in), in_dims=in_dims)(*args).to(dtype)
    assert_same(got, expected, (x,))


def test_vmap_promotes_a_per_example_zero_dim_weight_like_a_scalar(device):
    # Per example: float32 [3] with a float64 0-dim weight is float32. The batched weight is 1-dim
    # [4] and would promote to float64 if the rule used physical ranks.
    x = make((4, 3), torch.float32, device)
    w = make((4,), F64, device)
    got = vmap(bind(op, [0], False))(x, w)
    assert got.dtype == torch.float32
    assert_same(got, vmap(bind(composite, [0], False))(x, w), (x, w))


@pytest.mark.parametrize("dim", [[0], [-1], None, []], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_vmap_over_zero_dim_examples(device, dim, keepdim):
    x, w = make((5,), F64, device), make((5,), F64, device)  # five 0-dim examples each
    got = vmap(bind(op, dim, keepdim))(x, w)
    assert got.shape == (5,)
    assert_same(got, vmap(bind(composite, dim, keepdim))(x, w))
    assert_same(vmap(bind(op, dim, keepdim), in_dims=(0, None))(x, w[0]), w[0] * x.square())


@pytest.mark.parametrize("dim", [[2], [-3], [0, -2]], ids=str)
def test_vmap_checks_dims_against_the_per_example_rank(device, dim):
    # The physical tensors have one more dim: a rule that wrapped dims by the physical rank would
    # reduce a batch dim or an existing one instead of raising.
    x, w = make((4, 3, 5), F64, device), make((5,), F64, device)
    exception = IndexError if dim != [0, -2] else RuntimeError
    with pytest.raises(exception):
        vmap(bind(composite, dim, False), in_dims=(0, None))(x, w)
    with pytest.raises(exception):
        vmap(bind(op, dim, False), in_dims=(0, None))(x, w)


def test_vmap_out_dims_last(device):
    x, w = make((2, 3, 4), F64, device), make((4,), F64, device)
    xs = stacked(x, 3)
    assert_same(
        vmap(bind(op, [1], False), in_dims=(0, None), out_dims=-1)(xs, w),
        vmap(bind(composite, [1], False), in_dims=(0, None), out_dims=-1)(xs, w),
    )


def test_nested_vmap_matches_composite(device):
    x = make((2, 3, 4, 5), F64, device)
    w = make((3, 5), F64, device)
    nested = lambda f: vmap(vmap(bind(f, [-1], False), in_dims=(0, 0)), in_dims=(0, None))
    assert_same(nested(op)(x, w), nested(composite)(x, w))
    w2 = make((5, 2), F64, device)
    nested_moved = lambda f: vmap(vmap(bind(f, None, True), in_dims=(1, None)), in_dims=(0, 1))
    assert_same(nested_moved(op)(x, w2), nested_moved(composite)(x, w2))


@pytest.mark.parametrize("case", ["row_weight_dim0", "two_dims_negative", "zero_dim_weight", "mixed_float32_float64"])
def test_vmap_of_grad_per_example_matches_composite(device, case):
    x, w, dim, keepdim = case_tensors(case, device)
    for in_dims in [(0, None), (None, 0), (0, 0)]:
        args = batched_args(x, w, in_dims, n=3)
        assert_same(
            vmap(grad(loss_of(op, dim, keepdim), argnums=(0, 1)), in_dims=in_dims)(*args),
            vmap(grad(loss_of(composite, dim, keepdim), argnums=(0, 1)), in_dims=in_dims)(*args),
            (x, w),
        )


class WeightedSquareNorm(torch.nn.Module):
    """out = weighted_square_sum(x, scale, dim=-1) * bias: a per-example weighted squared norm."""

    def __init__(self, features, f):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(features, dtype=F64))
        self.bias = torch.nn.Parameter(torch.randn(2, 1, dtype=F64))
        self.f = f

    def forward(self, x):
        return self.f(x, self.scale, [-1], False) * self.bias


def per_sample_grads(model, x, y):
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(params, xi, yi):
        out = functional_call(model, params, (xi.unsqueeze(0),))
        return torch.nn.functional.mse_loss(out, yi.unsqueeze(0).expand_as(out))

    return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)


def test_per_sample_gradients_of_a_module_match_composite(device):
    model = WeightedSquareNorm(5, op).to(device)
    reference = WeightedSquareNorm(5, composite).to(device)
    reference.load_state_dict(model.state_dict())
    x, y = make((8, 5), F64, device), make((8, 1), F64, device)
    got, expected = per_sample_grads(model, x, y), per_sample_grads(reference, x, y)
    assert_same(got, expected)
    # The same as one autograd pass per sample.
    for i in range(3):
        model.zero_grad()
        out = model(x[i : i + 1])
        torch.nn.functional.mse_loss(out, y[i : i + 1].expand_as(out)).backward()
        torch.testing.assert_close(got["scale"][i], model.scale.grad)


def test_batching_rule_is_registered_in_cpp():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("custom::weighted_square_sum", "FuncTorchBatched")


def test_vmap_fallback_is_off_in_these_tests():
    # The fixture's premise: an op without a batching rule raises under vmap instead of looping.
    assert not torch._C._functorch._is_vmap_fallback_enabled()
