# SPDX-License-Identifier: BSD-3-Clause
"""custom::weighted_sum under PyTorch's function transforms and forward-mode AD.

Each transform of the op is compared with the same transform of the composite `w * x.square()`.
Every test runs with functorch's per-example vmap fallback disabled, so a missing batching rule
fails instead of silently looping (jacfwd, jacrev, hessian and per-sample gradients all vmap).
"""

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.autograd import gradcheck, gradgradcheck
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

import autodiff_helpers
from autodiff_helpers import WHICH, dual, random_tangents
from reference import OPS, make_tensor, sum_to


def composite(x, w):
    return w * x.square()


def op(x, w):
    return OPS.weighted_sum(x, w)


def inplace_on_clone(x, w):
    self = x.clone()
    OPS.weighted_sum_(self, w)
    return self


def inplace_returning_self(self, w):
    OPS.weighted_sum_(self, w)
    return self


def backward_op(g, x, w):
    return OPS.weighted_sum_backward(g, x, w, [True, True])


def composite_backward(g, x, w):
    return sum_to(2 * w * x * g, x.shape), sum_to(x.square() * g, w.shape)


no_vmap_fallback = autodiff_helpers.no_vmap_fallback  # an autouse fixture


# name -> (input shape, weight shape, input dtype, weight dtype)
CASES = {
    "same_shape": ((3, 4), (3, 4), torch.float64, torch.float64),
    "channel_weight": ((2, 3, 4), (4,), torch.float64, torch.float64),
    "both_broadcast": ((3, 1, 4), (2, 1), torch.float64, torch.float64),
    "zero_dim_weight": ((3, 4), (), torch.float64, torch.float64),
    "zero_dim_input": ((), (3, 4), torch.float64, torch.float64),
    "zero_dim": ((), (), torch.float64, torch.float64),
    "mixed_float32_float64": ((3, 4), (4,), torch.float32, torch.float64),
    "mixed_zero_dim_float64_weight": ((3, 4), (), torch.float32, torch.float64),
    "mixed_half_float32": ((3, 4), (3, 4), torch.float16, torch.float32),
}
TANGENTS = WHICH


def case_tensors(case, device):
    x_shape, w_shape, x_dtype, w_dtype = CASES[case]
    return make_tensor(x_shape, x_dtype, device), make_tensor(w_shape, w_dtype, device)


# (rtol, atol) by the coarsest dtype among the inputs and the result: the op and the composite
# round intermediates differently (the composite rounds x.square() and its derivative 2 x t to a
# float16 input's dtype; it sums a float64 0-dim weight's gradient in float32, the op in float64),
# so they agree to the precision of the coarsest dtype involved, not always to the result's.
TOLERANCES = {
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


def assert_same(got, expected, inputs=()):
    """Equal structure, dtypes and shapes; values within the tolerance of the coarsest dtype of
    the result and `inputs`."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e, inputs)
        return
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
    rtol, atol = max((TOLERANCES[t.dtype] for t in (*inputs, expected)), key=lambda tol: tol[0])
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)


# ------------------------------------------------------------------------- forward mode


@pytest.mark.parametrize("tangents", list(TANGENTS))
@pytest.mark.parametrize("case", list(CASES))
def test_jvp_matches_composite(device, case, tangents):
    x, w = case_tensors(case, device)
    with_x, with_w = TANGENTS[tangents]
    tx = torch.randn_like(x) if with_x else torch.zeros_like(x)
    tw = torch.randn_like(w) if with_w else torch.zeros_like(w)
    assert_same(jvp(op, (x, w), (tx, tw)), jvp(composite, (x, w), (tx, tw)), (x, w))


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)], ids=["input", "weight", "both"])
@pytest.mark.parametrize(
    "case", ["same_shape", "channel_weight", "zero_dim_weight", "zero_dim_input", "mixed_float32_float64"]
)
def test_jacfwd_matches_composite(device, case, argnums):
    x, w = case_tensors(case, device)
    assert_same(jacfwd(op, argnums=argnums)(x, w), jacfwd(composite, argnums=argnums)(x, w), (x, w))


@pytest.mark.parametrize("tangents", list(TANGENTS))
@pytest.mark.parametrize("case", list(CASES))
def test_forward_ad_dual_tensors_match_composite(device, case, tangents):
    x, w = case_tensors(case, device)
    tx, tw = random_tangents(x, w, tangents)
    assert_same(dual(op, x, w, tx, tw), dual(composite, x, w, tx, tw), (x, w))


@pytest.mark.parametrize("tangents", list(TANGENTS))
@pytest.mark.parametrize("case", ["same_shape", "channel_weight", "zero_dim_weight", "mixed_float32_float64"])
def test_forward_ad_inplace_matches_composite(device, case, tangents):
    x, w = case_tensors(case, device)
    with_x, with_w = TANGENTS[tangents]
    tx, tw = torch.randn_like(x), torch.randn_like(w)
    with fwAD.dual_level():
        self = fwAD.make_dual(x.clone(), tx.clone()) if with_x else x.clone()
        existing = fwAD.unpack_dual(self).tangent
        OPS.weighted_sum_(self, fwAD.make_dual(w, tw) if with_w else w)
        primal, tangent = fwAD.unpack_dual(self)
        assert tangent is not None
        if existing is not None:
            # Updated in place, as ATen's in-place ops do: views of the tangent see the change.
            assert tangent.data_ptr() == existing.data_ptr()
        expected = fwAD.unpack_dual(
            composite(fwAD.make_dual(x, tx) if with_x else x, fwAD.make_dual(w, tw) if with_w else w)
        )
    assert_same((primal, tangent), (expected.primal.to(x.dtype), expected.tangent.to(x.dtype)), (x, w))


def test_forward_ad_inplace_with_self_as_weight(device):
    x = make_tensor((5,), torch.float64, device)
    tx = torch.randn_like(x)
    with fwAD.dual_level():
        self = fwAD.make_dual(x.clone(), tx.clone())
        OPS.weighted_sum_(self, self)
        tangent = fwAD.unpack_dual(self).tangent
    torch.testing.assert_close(tangent, 3 * x.square() * tx)


@pytest.mark.parametrize("dual", ["input", "weight", "out"])
def test_out_with_tangents_raises(device, dual):
    x, w = case_tensors("same_shape", device)
    out = torch.zeros_like(x)
    with fwAD.dual_level():
        args = {"input": x, "weight": w, "out": out}
        args[dual] = fwAD.make_dual(args[dual], torch.randn_like(args[dual]))
        with pytest.raises(NotImplementedError, match=r"Trying to use forward AD with custom::weighted_sum\.out"):
            OPS.weighted_sum.out(args["input"], args["weight"], out=args["out"])
    assert not out.any()


def test_out_with_tangents_raises_under_jvp(device):
    x, w = case_tensors("same_shape", device)

    def f(x):
        out = torch.empty_like(x)
        OPS.weighted_sum.out(x, w, out=out)
        return out

    with pytest.raises(NotImplementedError, match="because it is an out= function"):
        jvp(f, (x,), (torch.randn_like(x),))


@pytest.mark.parametrize("tangents", [*list(TANGENTS), "grad"])
@pytest.mark.parametrize("case", ["same_shape", "channel_weight", "both_broadcast", "zero_dim_weight"])
def test_jvp_of_backward_op_matches_composite(device, case, tangents):
    x, w = case_tensors(case, device)
    g = make_tensor(torch.broadcast_shapes(x.shape, w.shape), torch.float64, device)
    with_g = tangents == "grad"
    with_x, with_w = TANGENTS.get(tangents, (False, False))
    primals = (g, x, w)
    tangents = tuple(
        torch.randn_like(t) if on else torch.zeros_like(t) for t, on in zip(primals, (with_g, with_x, with_w))
    )
    assert_same(jvp(backward_op, primals, tangents), jvp(composite_backward, primals, tangents))


# ------------------------------------------------------------------------- reverse mode


def loss_of(f):
    return lambda x, w: f(x, w).sum()


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)], ids=["input", "weight", "both"])
@pytest.mark.parametrize("case", list(CASES))
def test_grad_matches_composite(device, case, argnums):
    x, w = case_tensors(case, device)
    assert_same(grad(loss_of(op), argnums=argnums)(x, w), grad(loss_of(composite), argnums=argnums)(x, w), (x, w))


@pytest.mark.parametrize("case", ["same_shape", "both_broadcast", "zero_dim_weight", "mixed_float32_float64"])
def test_vjp_matches_composite(device, case):
    x, w = case_tensors(case, device)
    (y, pullback), (y_ref, pullback_ref) = vjp(op, x, w), vjp(composite, x, w)
    cotangent = torch.randn_like(y)
    assert_same((y, pullback(cotangent)), (y_ref, pullback_ref(cotangent)), (x, w))


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)], ids=["input", "weight", "both"])
@pytest.mark.parametrize("case", ["same_shape", "channel_weight", "zero_dim_weight", "zero_dim_input"])
def test_jacrev_matches_composite(device, case, argnums):
    x, w = case_tensors(case, device)
    assert_same(jacrev(op, argnums=argnums)(x, w), jacrev(composite, argnums=argnums)(x, w))


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)], ids=["input", "weight", "both"])
@pytest.mark.parametrize("case", ["same_shape", "channel_weight", "zero_dim_weight"])
def test_hessian_matches_composite(device, case, argnums):
    x, w = case_tensors(case, device)
    assert_same(hessian(loss_of(op), argnums=argnums)(x, w), hessian(loss_of(composite), argnums=argnums)(x, w))


@pytest.mark.parametrize("case", ["same_shape", "both_broadcast", "zero_dim_weight"])
def test_grad_of_grad_matches_composite(device, case):
    x, w = case_tensors(case, device)

    def second(f):
        return grad(lambda x, w: grad(loss_of(f), argnums=(0, 1))(x, w)[0].sin().sum(), argnums=(0, 1))

    assert_same(second(op)(x, w), second(composite)(x, w))


@pytest.mark.parametrize("case", ["same_shape", "both_broadcast", "zero_dim_weight"])
def test_jvp_of_grad_matches_composite(device, case):
    x, w = case_tensors(case, device)
    tangents = (torch.randn_like(x), torch.randn_like(w))

    def jvp_of_grad(f):
        return jvp(grad(loss_of(f), argnums=(0, 1)), (x, w), tangents)

    assert_same(jvp_of_grad(op), jvp_of_grad(composite))


@pytest.mark.parametrize("case", ["same_shape", "both_broadcast", "zero_dim_weight"])
def test_grad_of_jvp_matches_composite(device, case):
    x, w = case_tensors(case, device)
    tangents = (torch.randn_like(x), torch.randn_like(w))

    def grad_of_jvp(f):
        return grad(lambda x, w: jvp(f, (x, w), tangents)[1].cos().sum(), argnums=(0, 1))(x, w)

    assert_same(grad_of_jvp(op), grad_of_jvp(composite))


def test_grad_of_inplace_on_non_leaf_matches_composite(device):
    x, w = case_tensors("channel_weight", device)
    assert_same(grad(loss_of(inplace_on_clone), argnums=(0, 1))(x, w), grad(loss_of(composite), argnums=(0, 1))(x, w))


@pytest.mark.parametrize("transform", ["grad", "jvp"])
def test_inplace_into_captured_tensor_raises(device, transform):
    x, w = case_tensors("same_shape", device)
    captured = x.clone()

    def f(w):
        OPS.weighted_sum_(captured, w)
        return captured.sum()

    with pytest.raises(
        RuntimeError, match=r"in-place operation \(custom::weighted_sum_\) that would mutate a captured Tensor"
    ):
        if transform == "grad":
            grad(f)(w)
        else:
            jvp(f, (w,), (torch.randn_like(w),))
    assert torch.equal(captured, x), "the captured tensor was written before the error"


def test_inplace_into_captured_tensor_raises_like_aten(device):
    x, w = case_tensors("same_shape", device)
    captured = x.clone()
    with pytest.raises(RuntimeError, match="mutate a captured Tensor"):
        grad(lambda w: captured.mul_(w).sum())(w)


# ------------------------------------------------------------------- per-sample gradients


class WeightedSquares(torch.nn.Module):
    """A linear model on weighted squares: out = weighted_sum(x, scale) @ proj."""

    def __init__(self, features, weighted_square):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(features, dtype=torch.float64))
        self.proj = torch.nn.Parameter(torch.randn(features, 2, dtype=torch.float64))
        self.weighted_square = weighted_square

    def forward(self, x):
        return self.weighted_square(x, self.scale) @ self.proj


def per_sample_grads(model, x, y):
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(params, xi, yi):
        out = functional_call(model, params, (xi.unsqueeze(0),))
        return torch.nn.functional.mse_loss(out, yi.unsqueeze(0))

    return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)


def test_per_sample_gradients_of_a_module_match_composite(device):
    model = WeightedSquares(5, op).to(device)
    reference = WeightedSquares(5, composite).to(device)
    reference.load_state_dict(model.state_dict())
    x = make_tensor((8, 5), torch.float64, device)
    y = make_tensor((8, 2), torch.float64, device)
    got, expected = per_sample_grads(model, x, y), per_sample_grads(reference, x, y)
    assert got.keys() == expected.keys()
    for name in got:
        assert got[name].shape == (8, *dict(model.named_parameters())[name].shape)
        torch.testing.assert_close(got[name], expected[name])
    # The same as one autograd pass per sample.
    for i in range(2):
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x[i : i + 1]), y[i : i + 1]).backward()
        torch.testing.assert_close(got["scale"][i], model.scale.grad)


@pytest.mark.parametrize("case", ["same_shape", "channel_weight", "zero_dim_weight", "mixed_float32_float64"])
def test_vmap_of_grad_per_sample_matches_composite(device, case):
    x, w = case_tensors(case, device)
    xs = torch.stack([x, 2 * x, -x])
    for in_dims in [(0, None), (None, 0)]:
        args = (xs, w) if in_dims == (0, None) else (x, torch.stack([w, w + 1]))
        assert_same(
            vmap(grad(loss_of(op), argnums=(0, 1)), in_dims=in_dims)(*args),
            vmap(grad(loss_of(composite), argnums=(0, 1)), in_dims=in_dims)(*args),
            (x, w),
        )


# ----------------------------------------------------------------------------------- vmap


VMAP_IN_DIMS = {
    "batched_input": ((0, None), lambda x, w: (x.expand(4, *x.shape).clone(), w)),
    "batched_weight": ((None, 0), lambda x, w: (x, torch.stack([w * k for k in range(1, 5)]))),
    "both_batch_dims_moved": (
        (1, 0),
        lambda x, w: (torch.stack([x * k for k in range(1, 5)], dim=1), torch.stack([w + k for k in range(4)])),
    ),
}


@pytest.mark.parametrize("in_dims", list(VMAP_IN_DIMS))
@pytest.mark.parametrize("case", list(CASES))
def test_vmap_matches_composite(device, case, in_dims):
    x, w = case_tensors(case, device)
    dims, batch = VMAP_IN_DIMS[in_dims]
    if in_dims == "both_batch_dims_moved" and x.dim() == 0:
        dims = (0, 0)
        batch = VMAP_IN_DIMS["batched_input"][1]
        xs, _ = batch(x, w)
        args = (xs, torch.stack([w + k for k in range(4)]))
    else:
        args = batch(x, w)
    assert_same(vmap(op, in_dims=dims)(*args), vmap(composite, in_dims=dims)(*args), (x, w))


def test_vmap_promotes_per_example_zero_dim_weight_like_a_scalar(device):
    # Per example: float32 [3] times a float64 0-dim weight is float32. The batched weight is 1-dim
    # [4] and would promote to float64 if the rule used physical ranks.
    x = make_tensor((4, 3), torch.float32, device)
    w = make_tensor((4,), torch.float64, device)
    got = vmap(op)(x, w)
    assert got.dtype == torch.float32
    assert_same(got, vmap(composite)(x, w))
    self = x.clone()
    vmap(inplace_returning_self)(self, w)
    torch.testing.assert_close(self, vmap(composite)(x, w))


def test_vmap_out_dims_last(device):
    x, w = case_tensors("channel_weight", device)
    xs = torch.stack([x, 2 * x])
    assert_same(vmap(op, in_dims=(0, None), out_dims=-1)(xs, w), vmap(composite, in_dims=(0, None), out_dims=-1)(xs, w))


def test_nested_vmap_matches_composite(device):
    x = make_tensor((2, 3, 4, 5), torch.float64, device)
    w = make_tensor((3, 5), torch.float64, device)
    nested = lambda f: vmap(vmap(f, in_dims=(0, 0)), in_dims=(0, None))
    assert_same(nested(op)(x, w), nested(composite)(x, w))
    nested_moved = lambda f: vmap(vmap(f, in_dims=(1, None)), in_dims=(0, 1))
    w2 = make_tensor((5, 2), torch.float64, device)
    assert_same(nested_moved(op)(x, w2), nested_moved(composite)(x, w2))


@pytest.mark.parametrize("in_dims", [(0, None), (0, 0), (1, 0)])
def test_vmap_of_inplace_matches_composite(device, in_dims):
    x = make_tensor((3, 4, 5) if in_dims[0] == 1 else (4, 3, 5), torch.float64, device)
    w = make_tensor((4, 5) if in_dims[1] == 0 else (5,), torch.float64, device)
    self, expected = x.clone(), x.clone()
    vmap(inplace_returning_self, in_dims=in_dims, out_dims=in_dims[0])(self, w)
    vmap(lambda s, w: s.copy_(composite(s, w)), in_dims=in_dims, out_dims=in_dims[0])(expected, w)
    torch.testing.assert_close(self, expected)


def test_vmap_of_inplace_into_unbatched_self_raises(device):
    x = make_tensor((3, 5), torch.float64, device)
    w = make_tensor((4, 5), torch.float64, device)
    with pytest.raises(RuntimeError, match=r"weighted_sum_\(self, weight\) is not possible because weight is batched"):
        vmap(lambda w: OPS.weighted_sum_(x, w), in_dims=0)(w)


def test_vmap_of_inplace_with_weight_of_higher_rank_raises(device):
    self = make_tensor((4, 5), torch.float64, device)
    w = make_tensor((4, 3, 5), torch.float64, device)
    with pytest.raises(RuntimeError, match="an in-place op cannot resize self"):
        vmap(inplace_returning_self)(self, w)


def test_vmap_of_out_raises_clearly(device):
    x = make_tensor((4, 5), torch.float64, device)
    w = make_tensor((5,), torch.float64, device)
    out = torch.empty(4, 5, dtype=torch.float64, device=device)
    with pytest.raises(RuntimeError, match=r"custom::weighted_sum\.out: vmap over the out= overload is not supported"):
        vmap(lambda x, out: OPS.weighted_sum.out(x, w, out=out), in_dims=(0, 0))(x, out)


@pytest.mark.parametrize("in_dims", [(0, 0, 0), (0, None, None), (None, 0, None), (None, None, 0), (1, 0, None)])
@pytest.mark.parametrize("case", ["same_shape", "channel_weight", "zero_dim_weight", "zero_dim_input"])
def test_vmap_of_backward_op_matches_composite(device, case, in_dims):
    x, w = case_tensors(case, device)
    g = make_tensor(torch.broadcast_shapes(x.shape, w.shape), torch.float64, device)

    def batched(t, dim):
        return t if dim is None else torch.stack([t * (k + 1) for k in range(3)], dim=dim if t.dim() else 0)

    dims = tuple(d if d is None or t.dim() > 0 else 0 for d, t in zip(in_dims, (g, x, w)))
    args = tuple(batched(t, d) for t, d in zip((g, x, w), dims))
    assert_same(vmap(backward_op, in_dims=dims)(*args), vmap(composite_backward, in_dims=dims)(*args))


def test_vmap_rules_are_registered_in_cpp():
    for name in ["weighted_sum", "weighted_sum.out", "weighted_sum_", "weighted_sum_backward"]:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"custom::{name}", "FuncTorchBatched"), name


# ------------------------------------------------------------------ gradcheck, every overload


GRADCHECK_CASES = ["same_shape", "channel_weight", "both_broadcast", "zero_dim_weight", "zero_dim_input"]
CHECKS = {"check_forward_ad": True, "check_batched_grad": True, "check_batched_forward_grad": True}


def leaves(case, device):
    x, w = case_tensors(case, device)
    return x.requires_grad_(), w.requires_grad_()


@pytest.mark.parametrize("case", GRADCHECK_CASES)
def test_gradcheck_functional_all_modes(device, case):
    x, w = leaves(case, device)
    assert gradcheck(op, (x, w), **CHECKS)
    assert gradgradcheck(op, (x, w), check_fwd_over_rev=True, check_rev_over_rev=True, check_batched_grad=True)


@pytest.mark.parametrize("case", ["same_shape", "channel_weight", "zero_dim_weight"])
def test_gradcheck_inplace_all_modes(device, case):
    x, w = leaves(case, device)
    assert gradcheck(inplace_on_clone, (x, w), **CHECKS)
    assert gradgradcheck(inplace_on_clone, (x, w), check_fwd_over_rev=True, check_batched_grad=True)


@pytest.mark.parametrize("mask", [[True, True], [True, False], [False, True]], ids=str)
@pytest.mark.parametrize("case", ["same_shape", "both_broadcast", "zero_dim_weight"])
def test_gradcheck_backward_op_all_modes(device, case, mask):
    x, w = leaves(case, device)
    g = make_tensor(torch.broadcast_shapes(x.shape, w.shape), torch.float64, device).requires_grad_()

    def backward(g, x, w):
        return tuple(t for t in OPS.weighted_sum_backward(g, x, w, mask) if t is not None)

    assert gradcheck(backward, (g, x, w), **CHECKS)
    assert gradgradcheck(backward, (g, x, w), check_fwd_over_rev=True, check_batched_grad=True)


def test_out_overload_refuses_both_modes(device):
    # out= is not differentiable, in either mode (ATen's rule): what gradcheck would exercise raises.
    x, w = leaves("same_shape", device)
    out = torch.empty_like(x.detach())
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        OPS.weighted_sum.out(x, w, out=out)
    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="out= function"):
        OPS.weighted_sum.out(fwAD.make_dual(x.detach(), torch.ones_like(out)), w.detach(), out=out)


# ------------------------------------------------------------------------ torch.compile


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled_ops_only(fn, *args):
    """fn compiled with fullgraph=True (any graph break raises), and its result."""
    return torch.compile(fn, fullgraph=True)(*args)


def test_compile_grad(device, fresh_dynamo):
    x, w = case_tensors("channel_weight", device)
    f = lambda f_: grad(loss_of(f_), argnums=(0, 1))
    assert_same(compiled_ops_only(f(op), x, w), f(composite)(x, w))


def test_compile_vmap_of_grad(device, fresh_dynamo):
    x, w = case_tensors("channel_weight", device)
    xs = torch.stack([x, 2 * x, 3 * x])
    f = lambda f_: vmap(grad(loss_of(f_), argnums=1), in_dims=(0, None))
    assert_same(compiled_ops_only(f(op), xs, w), f(composite)(xs, w))


def test_compile_jvp(device, fresh_dynamo):
    x, w = case_tensors("channel_weight", device)
    tx, tw = torch.randn_like(x), torch.randn_like(w)
    f = lambda f_: lambda x, w: jvp(f_, (x, w), (tx, tw))
    assert_same(compiled_ops_only(f(op), x, w), f(composite)(x, w))


def test_compiled_autograd_matches_eager(device, fresh_dynamo):
    from torch._dynamo import compiled_autograd
    from torch._dynamo.utils import counters

    x, w = leaves("channel_weight", device)

    # First and second order: the op's node, and the backward op's node (run by backward of a
    # gradient taken eagerly with create_graph=True).
    def step(x, w):
        (gx,) = torch.autograd.grad(op(x, w).sum(), x, create_graph=True)
        return op(x, w).square().sum() + gx.sin().sum()

    expected = torch.autograd.grad(step(x, w), (x, w))
    counters.clear()
    loss = step(x, w)
    with compiled_autograd._enable(torch.compile(backend="aot_eager", fullgraph=True)):
        loss.backward()
    assert counters["compiled_autograd"]["captures"] == 1
    assert_same((x.grad, w.grad), expected)
