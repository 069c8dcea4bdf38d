# SPDX-License-Identifier: BSD-3-Clause
"""The ATen oracle under function transforms: torch.func.grad, torch.func.jvp and torch.vmap of
every overload in oracle.OPERATORS, against the same transform of the composite (issue 20).

Hypothesis (fixed seed, no example database; new seeds with CUSTOM_OPS_NEW_SEEDS=1) draws calls
as test_oracle_aten.py does (dtypes float and not, shapes 0-dim / empty / broadcast both ways / not
broadcastable, transposed, permuted, sliced, expanded and offset views) and
oracle.judge_transform runs each through ours and the composite under the transform; see oracle.py
for the outcomes it accepts. Per transform:
  grad  of (result * cotangent).sum() w.r.t. the input, the weight or both; in place on a clone
        of the input, now and then on the differentiated input itself (a leaf: both raise);
        out= into a captured tensor (both raise: out= is not differentiable)
  jvp   with random tangents for the input, the weight or both (out=: both raise)
  vmap  batch sizes 0 to 3, every operand batched at a random (also negative) dim or not, batch
        dims expanded too; in place with self batched or not; out= batched (both raise) or, with
        only an unused argument batched, computing
A .Scalar weight is a Python number: differentiated and batched only through the input.
"""

import contextlib
import math

import pytest
import torch

import environment
import operators
import oracle
from operators import ELEMENTWISE_OPERATORS, each_elementwise_operator
from oracle import GRAD, INPLACE, JVP, OUT, VMAP, Buffer, Transformed, View

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, note  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# The ATen oracle's own strategies and settings: the same draws, the same fixed seed.
from test_oracle_aten import Builder, _settings, dtypes, numbers, shape_pairs  # noqa: E402

MIN_EXAMPLES_PER_DEVICE = 600

# Per transform, an elementwise operator's overloads (by suffix) -> (examples per device, the
# outcomes its campaign must reach). Reductions have none: their grad, jvp and vmap are checked
# by test_derivatives_agree_with_float64_composite below and the op's own transform tests.
ELEMENTWISE_CAMPAIGNS = {
    (GRAD, ""): (150, {"computed", "both raised", "refused"}),
    (GRAD, ".out"): (30, {"both raised"}),
    (GRAD, "_"): (120, {"computed", "both raised", "refused"}),
    (GRAD, ".Scalar"): (60, {"computed", "both raised"}),  # an integer input: ATen raises too
    (JVP, ""): (150, {"computed", "both raised", "refused"}),
    (JVP, ".out"): (30, {"both raised"}),
    (JVP, "_"): (120, {"computed", "both raised", "refused"}),
    (JVP, ".Scalar"): (100, {"computed", "both raised", "refused"}),
    (VMAP, ""): (150, {"computed", "both raised", "refused"}),
    (VMAP, ".out"): (80, {"computed", "both raised", "refused"}),
    (VMAP, "_"): (120, {"computed", "both raised", "refused"}),
    (VMAP, ".Scalar"): (60, {"computed", "refused"}),
}
# (transform, overload) -> (examples per device, the outcomes its campaign must reach).
CAMPAIGNS = {
    (transform, op.name + suffix): campaign
    for op in ELEMENTWISE_OPERATORS
    for (transform, suffix), campaign in ELEMENTWISE_CAMPAIGNS.items()
}


# Campaigns that need functorch's per-example fallback (none: every overload has a batching rule).
FALLBACK_NEEDED = set()


def key(transform, overload_name):
    return f"{transform} {overload_name}"


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------


def _meta(shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


@st.composite
def transformed(draw, transform, overload_name, device):
    op, overload = oracle.OVERLOADS[overload_name]
    b = Builder(draw, device)
    x_shape, w_shape, shape = draw(shape_pairs())
    x_dtype, w_dtype = draw(dtypes), draw(dtypes)
    scalar = op.weight_kind == "scalar"
    x_name = "self" if overload.kind == INPLACE else "input"
    if scalar:  # no inf, nan or overflow under grad and jvp: no tolerance holds there
        weight = draw(numbers if transform == VMAP else numbers.filter(lambda v: abs(v) <= 4))
        shape = x_shape
    if overload.kind == INPLACE and shape is not None and draw(st.integers(0, 5)) != 0:
        x_shape = shape  # self of the broadcast shape, mostly; else self that would have to grow
    aliased = overload.kind == INPLACE and draw(st.integers(0, 7)) == 0  # weighted_sum_(self, self)
    if aliased:
        w_shape, w_dtype = x_shape, x_dtype
    wrt = ()
    if transform in (GRAD, JVP):
        choices = [(x_name,)] if scalar or aliased else [(x_name,), ("weight",), (x_name, "weight")]
        wrt = draw(st.sampled_from(choices))
        if "weight" not in wrt and not (scalar or aliased) and draw(st.booleans()):
            # An integer weight that is not differentiated: ATen differentiates, ours refuses.
            w_dtype = draw(st.sampled_from(oracle.OTHER_DTYPES))
    result_shape = shape if shape is not None else x_shape  # not broadcastable: both raise anyway
    # (a number promotes by its kind only: 0 of its type stands for it, whatever its size)
    result_dtype = torch.result_type(_meta(x_shape, x_dtype), type(weight)(0) if scalar else _meta(w_shape, w_dtype))

    # vmap: each tensor operand batched at a random dim or not; if none is, only an unused
    # argument is (out= computes only then). A batch dim of the layout can be expanded.
    batch = draw(st.integers(1 if (transform, overload_name) in FALLBACK_NEEDED else 0, 3))
    in_dims, nothing_batched = [], transform == VMAP and draw(st.integers(0, 7 if overload.kind != OUT else 2)) == 0

    def operand(name, shape, dtype):
        if transform == VMAP:
            dim = (
                None
                if nothing_batched or draw(st.integers(0, 2)) == 0
                else draw(st.integers(-len(shape) - 1, len(shape)))
            )
            in_dims.append((name, dim))
            if dim is not None:  # the physical shape
                at = dim % (len(shape) + 1)
                shape = (*shape[:at], batch, *shape[at:])
        b.fresh(name, shape, dtype, grad_ok=False)

    operand(x_name, x_shape, x_dtype)
    if scalar:
        b.args.append(("weight", weight))
        b.notes.append(f"weight {oracle._literal(weight)}")
    elif aliased:
        b.alias("weight", "self")
    else:
        operand("weight", w_shape, w_dtype)
    if overload.kind == OUT:
        if draw(st.integers(0, 4)) != 0:
            out_shape, out_dtype = result_shape, draw(st.one_of(st.just(result_dtype), dtypes))
        else:
            out_shape, out_dtype = tuple(draw(st.lists(st.integers(0, 4), max_size=3))), draw(dtypes)
        operand("out", out_shape, out_dtype)

    clone_self = True
    if transform in (GRAD, JVP):
        clone_self = overload.kind != INPLACE or draw(st.integers(0, 7)) != 0
        if not clone_self:
            b.notes.append("in place on the differentiated input itself")
        shapes = {x_name: x_shape, "weight": w_shape}
        dtypes_of = {x_name: x_dtype, "weight": w_dtype}
        if transform == GRAD:
            y_shape = x_shape if overload.kind == INPLACE else result_shape
            y_dtype = x_dtype if overload.kind == INPLACE else result_dtype
            b.fresh("cotangent", y_shape, y_dtype if y_dtype in oracle.FLOAT_DTYPES else torch.float32, grad_ok=False)
        else:
            for name in wrt:  # a tangent of its primal's dtype: jvp refuses integer primals itself
                b.fresh(f"tangent_{name}", shapes[name], dtypes_of[name], grad_ok=False)
        # No special values (inf, nan, huge): no tolerance for gradients and tangents holds there.
        b.buffers = [Buffer(buf.dtype, buf.numel, buf.on_cpu, False) for buf in b.buffers]
    elif not any(d is not None for _, d in in_dims):
        b.fresh("batched", (batch,), torch.float32, grad_ok=False)
        in_dims.append(("batched", 0))
        b.notes.append("only an unused argument batched")
    if transform == VMAP:
        b.notes.append(f"batch size {batch}")
    case = b.case(overload_name, shape)
    return Transformed(transform, case, wrt=wrt, in_dims=tuple(in_dims), clone_self=clone_self)


# ---------------------------------------------------------------------------------------------
# The campaigns
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def vmap_fallback(enabled):
    # Off, ours must batch through its C++ rules: functorch's per-example loop would hide a missing one.
    before = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(enabled)
    try:
        yield
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(before)


def _campaign(transform, overload_name):
    examples, _ = CAMPAIGNS[(transform, overload_name)]

    @_settings(examples)
    @given(data=st.data())
    def run(device, data):
        t = data.draw(transformed(transform, overload_name, device), label="case")
        note(oracle.repro_transform(t, device))
        outcome = oracle.judge_transform(t, device)
        oracle.OUTCOMES[(device, key(transform, overload_name))][outcome] += 1

    return run


@pytest.mark.parametrize("transform,overload_name", list(CAMPAIGNS), ids=[key(*k) for k in CAMPAIGNS])
def test_transform_agrees_with_composite(device, transform, overload_name):
    with vmap_fallback((transform, overload_name) in FALLBACK_NEEDED):
        _campaign(transform, overload_name)(device)
    oracle.FINISHED.add((device, key(transform, overload_name)))


def test_transform_campaigns_ran_enough_examples(device):
    keys = [key(*k) for k in CAMPAIGNS]
    if not all((device, k) in oracle.FINISHED for k in keys):
        pytest.skip("runs after every test_transform_agrees_with_composite on this device")
    counts = {k: sum(oracle.OUTCOMES[(device, k)].values()) for k in keys}
    assert sum(counts.values()) >= MIN_EXAMPLES_PER_DEVICE, counts
    if environment.new_seeds():
        return  # which outcomes new draws reach is chance; the fixed draws reach every one
    for (transform, overload_name), (_, reachable) in CAMPAIGNS.items():
        outcomes = oracle.OUTCOMES[(device, key(transform, overload_name))]
        reached = {o.split(" (")[0] for o in outcomes}
        assert reachable <= reached, (transform, overload_name, dict(outcomes))


# ---------------------------------------------------------------------------------------------
# .Scalar under vmap: its composite is registered at the vmap key too, so functorch's per-example
# fallback (which refuses empty batches) never runs
# ---------------------------------------------------------------------------------------------


def _scalar_vmap(op, batch):
    case = oracle.Case(
        f"{op.name}.Scalar",
        (Buffer(torch.float32, 3 * batch),),
        (("input", View(0, (batch, 3), (3, 1), 0)), ("weight", 2.5)),
        0,
        (3,),
    )
    return Transformed(VMAP, case, in_dims=(("input", 0),))


@each_elementwise_operator
def test_vmap_of_scalar_overload_over_an_empty_batch(device, op):
    assert oracle.judge_transform(_scalar_vmap(op, 0), device) == oracle.COMPUTED


@each_elementwise_operator
def test_vmap_of_scalar_overload_without_the_per_example_fallback(device, op):
    with vmap_fallback(False):
        assert oracle.judge_transform(_scalar_vmap(op, 2), device) == oracle.COMPUTED


# ---------------------------------------------------------------------------------------------
# Every pair of float dtypes (issue 31): grad and jvp, and grad of grad, jvp of grad and hessian, of
# every functional overload with a tensor weight, against the same transform of the float64
# composite, within TRANSFORM_SLACK + (terms) roundings of the result's dtype or of the
# derivative's own, whichever is coarser: float64 where both are (a float32 input with a float64
# weight: the weight's derivatives), the precision that computing in the promoted dtype keeps.
# ---------------------------------------------------------------------------------------------

ORDERS = ("grad", "jvp", "grad of grad", "jvp of grad", "hessian")
# A reduction's arguments other than input and weight, one dict a call.
REDUCTION_ARGS = (
    {"dim": [0], "keepdim": False, "dtype": None},  # its grad broadcast back over dim 0
    {"dim": [0], "keepdim": False, "dtype": torch.float64},  # summed wider than the operands
)
CALLS = [
    (name, other)
    for name, (op, o) in oracle.OVERLOADS.items()
    if o.kind == oracle.FUNCTIONAL and op.weight_kind == "tensor"
    for other in (REDUCTION_ARGS if op.extra_args is not None else ({},))
]
X_SHAPE, W_SHAPE = (3, 4), (4,)  # a broadcast weight: its gradients are sums of 3 terms


def _derivatives(order, f, x, w, cotangent, tangents):
    """What `order` gives of f at (x, w) (grads of (f(x, w) * cotangent).sum()), as a tuple."""
    loss = lambda x, w: (f(x, w) * cotangent).sum()
    first = torch.func.grad(loss, argnums=(0, 1))
    if order == "grad":
        return first(x, w)
    if order == "jvp":
        return (torch.func.jvp(f, (x, w), tangents)[1],)
    if order == "grad of grad":
        return torch.func.grad(lambda x, w: sum((g * t).sum() for g, t in zip(first(x, w), tangents)), (0, 1))(x, w)
    if order == "jvp of grad":
        return torch.func.jvp(first, (x, w), tangents)[1]
    return tuple(h for row in torch.func.hessian(loss, argnums=(0, 1))(x, w) for h in row)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("w_dtype", oracle.FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("x_dtype", oracle.FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize(
    "name,other", CALLS, ids=[name + (f" dtype={o['dtype']}" if o.get("dtype") else "") for name, o in CALLS]
)
def test_derivatives_agree_with_float64_composite(device, name, other, x_dtype, w_dtype, order):
    op, overload = oracle.OVERLOADS[name]
    generator = torch.Generator().manual_seed(31)

    def fresh(shape, dtype):
        return (torch.randn(shape, generator=generator, dtype=torch.float64) * 2).to(dtype).to(device)

    ours = lambda x, w: overload.call({"input": x, "weight": w, **other})
    composite = lambda x, w: op.composite(x, w, **other)
    x, w = fresh(X_SHAPE, x_dtype), fresh(W_SHAPE, w_dtype)
    result = ours(x, w)
    args = (x, w, fresh(result.shape, result.dtype), (fresh(X_SHAPE, x_dtype), fresh(W_SHAPE, w_dtype)))

    def float64(value, absolute=False):
        if isinstance(value, tuple):
            return tuple(float64(v, absolute) for v in value)
        return value.abs().double() if absolute else value.double()

    got = _derivatives(order, ours, *args)
    expected = _derivatives(order, composite, *args)
    reference = _derivatives(order, composite, *float64(args))
    magnitude = _derivatives(order, composite, *float64(args, absolute=True))
    assert len(got) == len(expected)
    for i, (actual, want, ref, mag) in enumerate(zip(got, expected, reference, magnitude)):
        what = f"{order} of {name}, derivative {i}"
        # A tangent has its primal's dtype, not always the composite's (see _check_transformed).
        assert (actual.dtype, actual.shape) == (result.dtype if order == "jvp" else want.dtype, want.shape), what
        rounding = max(oracle.ROUNDING[result.dtype], oracle.ROUNDING[actual.dtype], key=lambda r: r[0])
        slack = oracle.transform_slack(operators.BY_NAME[op.name].term)
        oracle._check_close(actual, ref, mag, rounding, math.prod(X_SHAPE), what, slack)


# ---------------------------------------------------------------------------------------------
# The printed reproducer is the call that was judged
# ---------------------------------------------------------------------------------------------


def _results_equal(a, b):
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_results_equal(x, y) for x, y in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and oracle._nan_equal(a, b)


@pytest.mark.parametrize("transform", [GRAD, JVP, VMAP])
@pytest.mark.parametrize("overload_name", list(dict.fromkeys(name for _, name in CAMPAIGNS)))
def test_repro_runs_the_judged_call(transform, overload_name):
    @_settings(8)
    @given(data=st.data())
    def run(data):
        t = data.draw(transformed(transform, overload_name, "cpu"))
        args, _ = oracle.build(t.case, "cpu")
        ours, error = oracle._call(lambda: oracle._run(t, oracle.OURS, args))
        scope = {}
        source = oracle.repro_transform(t, "cpu")
        if error is not None:
            with pytest.raises(type(error)) as raised:
                exec(source, scope)
            assert str(raised.value) == str(error), source
        else:
            exec(source, scope)
            assert _results_equal(scope["result"], ours), source

    with vmap_fallback((transform, overload_name) in FALLBACK_NEEDED):
        run()


# ---------------------------------------------------------------------------------------------
# The oracle itself: planted transform bugs must fail it (planted in weighted_sum, whose formula
# some of the bugs repeat: tests of the oracle, not of an operator)
# ---------------------------------------------------------------------------------------------


def _planted(monkeypatch, overload_name, call):
    op, overload = oracle.OVERLOADS[overload_name]
    monkeypatch.setitem(
        oracle.OVERLOADS,
        overload_name,
        (op, oracle.Overload(overload.name, overload.kind, call, overload.inferred_strides, overload.examples)),
    )


def _case(transform, overload_name, args, **fields):
    """A Transformed call on contiguous tensors: args are (name, shape, dtype)."""
    buffers = tuple(Buffer(dtype, math.prod(shape)) for _, shape, dtype in args)
    views = tuple((name, View(i, shape, torch.empty(shape).stride(), 0)) for i, (name, shape, _) in enumerate(args))
    return Transformed(transform, oracle.Case(overload_name, buffers, views, 0, (3, 4)), **fields)


F64 = torch.float64


def test_oracle_fails_a_tangent_that_drops_the_weight_term(monkeypatch):
    # Forward AD that ignores the weight's tangent: right values, wrong tangent.
    _planted(monkeypatch, "weighted_sum", lambda a: oracle.OPS.weighted_sum(a["input"], a["weight"].detach()))
    t = _case(
        JVP,
        "weighted_sum",
        [("input", (3, 4), F64), ("weight", (4,), F64), ("tangent_input", (3, 4), F64), ("tangent_weight", (4,), F64)],
        wrt=("input", "weight"),
    )
    with pytest.raises(oracle.OracleFailure, match=r"jvp tangent: .* further than") as failure:
        oracle.judge_transform(t, "cpu")
    assert "result = torch.func.jvp(f, (input, weight, ), (tangent_input, tangent_weight, ))" in str(failure.value)


def test_oracle_fails_a_weight_gradient_counted_twice(monkeypatch):
    # Autograd that doubles the weight's gradient: right values, wrong gradient.
    _planted(
        monkeypatch,
        "weighted_sum",
        lambda a: oracle.OPS.weighted_sum(a["input"], 2 * a["weight"] - a["weight"].detach()),
    )
    t = _case(
        GRAD,
        "weighted_sum",
        [("input", (3, 4), F64), ("weight", (4,), F64), ("cotangent", (3, 4), F64)],
        wrt=("input", "weight"),
    )
    with pytest.raises(oracle.OracleFailure, match=r"grad w\.r\.t\. weight: .* further than"):
        oracle.judge_transform(t, "cpu")


def test_oracle_fails_an_out_that_computes_under_vmap_where_aten_raises(monkeypatch):
    # An out= batching rule that writes the batched result where torch.mul(out=) refuses to.
    _planted(
        monkeypatch, "weighted_sum.out", lambda a: a["out"].copy_(oracle.OPS.weighted_sum(a["input"], a["weight"]))
    )
    t = _case(
        VMAP,
        "weighted_sum.out",
        [("input", (3, 4), F64), ("weight", (4,), F64), ("out", (3, 4), F64)],
        in_dims=(("input", 0), ("weight", None), ("out", 0)),
    )
    with pytest.raises(oracle.OracleFailure, match="ours computed where the composite raised"):
        oracle.judge_transform(t, "cpu")


def test_oracle_fails_a_batched_result_promoted_by_physical_rank(monkeypatch):
    # float32 [4] per example times a per-example 0-dim float64 weight is float32, as with a scalar;
    # a rule that promotes the physical tensors ([3, 4] and [3]) gives float64.
    _planted(monkeypatch, "weighted_sum", lambda a: a["weight"].unsqueeze(-1) * a["input"].double().square())
    t = _case(
        VMAP,
        "weighted_sum",
        [("input", (3, 4), torch.float32), ("weight", (3,), F64)],
        in_dims=(("input", 0), ("weight", 0)),
    )
    with pytest.raises(oracle.OracleFailure, match=r"result dtype/shape: ours torch\.float64"):
        oracle.judge_transform(t, "cpu")


def _empty_batch_of_zero_dim_examples():
    return _case(
        VMAP,
        "weighted_sum",
        [("input", (0,), torch.float32), ("weight", (), torch.float32)],
        in_dims=(("input", 0), ("weight", None)),
    )


def test_empty_batch_where_functorch_crashes_is_aten_undefined():
    # `vmap(lambda x: w * x.square())(torch.empty(0))` raises IndexError in ATen's batching rule (a
    # functorch bug): ours may compute. Once torch computes it, this is `computed`: drop
    # oracle._empty_batch_crash then.
    assert oracle.judge_transform(_empty_batch_of_zero_dim_examples(), "cpu") == oracle.UNDEFINED


def test_oracle_fails_an_empty_batch_of_the_wrong_dtype_where_functorch_crashes(monkeypatch):
    _planted(monkeypatch, "weighted_sum", lambda a: oracle.OPS.weighted_sum(a["input"].double(), a["weight"]))
    with pytest.raises(
        oracle.OracleFailure,
        match=r"empty batch: ours torch.float64 \(0,\), ATen per example "
        r"torch.float32 \(\)",
    ):
        oracle.judge_transform(_empty_batch_of_zero_dim_examples(), "cpu")
