# SPDX-License-Identifier: BSD-3-Clause
"""ATen as the oracle for every overload of every operator in oracle.OPERATORS (issue 20).

Hypothesis (fixed seed, no example database; new seeds with CUSTOM_OPS_NEW_SEEDS=1:
environment.campaign_settings) draws calls and oracle.judge runs each through ATen
and ours on identical copies; see oracle.py for the outcomes it accepts. Draws:
  dtypes    float16, bfloat16, float32, float64 mostly; uint8, int8, int32, int64, bool,
            complex64, complex128 too; requires_grad on float/complex operands now and then
  shapes    0 to 4 dimensions of sizes 0 to 5: 0-dim, empty, broadcast both ways, not broadcastable
  layouts   contiguous, transposed, permuted, sliced with steps, expanded (stride 0),
            channels_last, storage offsets; special values (inf, nan, -0.0, huge, tiny)
  out=      the right shape, a wrong shape (empty included), another dtype, another device;
            out IS the input, the weight or both, is another view of either, is part of either,
            or shares a buffer with either without overlapping it
  in place  weight is self, another view of self or part of it; self that would have to grow
  .Scalar   a Python number as weight: floats, ints, bools, complex, inf, nan, -0.0, huge, tiny
  reduction dim None, [], an int or a list (negative, repeated or out of range now and then),
            keepdim, dtype= None mostly, else floating or one the op refuses (oracle.reduction_args)
On an accelerator, 0-dim operands are left on the CPU now and then.
"""

import pytest
import torch

import oracle
from environment import campaign_settings
from operators import each_elementwise_operator
from oracle import FLOAT_DTYPES, FUNCTIONAL, INPLACE, OTHER_DTYPES, Buffer, Case, Same, View

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, note  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MIN_EXAMPLES_PER_DEVICE = 3000

# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

dtypes = st.one_of(st.sampled_from(FLOAT_DTYPES), st.sampled_from(FLOAT_DTYPES), st.sampled_from(OTHER_DTYPES))
sizes = st.sampled_from([0, 1, 1, 2, 2, 3, 4, 5])
# A .Scalar weight: mostly ordinary floats; ints, bools, complex numbers (a complex result, refused),
# special values and numbers the result's dtype cannot hold (rounded to inf, as the README says;
# for an integer input, the dtype refusal).
numbers = st.one_of(
    st.floats(-4, 4),
    st.floats(-4, 4),
    st.integers(-3, 3),
    st.booleans(),
    st.complex_numbers(max_magnitude=4, allow_nan=False, allow_infinity=False),
    st.sampled_from([float("inf"), float("-inf"), float("nan"), -0.0, 1e-30, 65504.0, 1e5, 1e30, 1e39, -1e300]),
    st.sampled_from([2**40, -(2**63), 2**63 - 1]),
)


def _extent(shape, stride):
    return 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, stride))


@st.composite
def layouts(draw, shape, allow_expanded=True):
    """(stride, offset, note) of a view of `shape` into a buffer."""
    nd = len(shape)
    kinds = ["contiguous", "contiguous", "transposed", "permuted", "sliced", "offset"]
    kinds += ["expanded"] if allow_expanded else []
    kinds += ["channels_last"] if nd == 4 else []
    kind = draw(st.sampled_from(kinds))
    order = list(range(nd))[::-1]  # innermost first
    steps, expanded, offset = [1] * nd, set(), 0
    if kind == "transposed":
        order = list(range(nd))
    elif kind == "permuted":
        order = list(draw(st.permutations(range(nd))))
    elif kind == "channels_last":
        order = [1, 3, 2, 0]
    elif kind == "sliced":
        steps = [draw(st.integers(1, 3)) for _ in shape]
    elif kind == "expanded":
        expanded = {d for d in range(nd) if draw(st.booleans())}
    if kind in ("offset", "sliced") or draw(st.integers(0, 5)) == 0:
        offset = draw(st.integers(1, 3))
    stride, running = [0] * nd, 1
    for d in order:
        if d not in expanded:
            stride[d] = running * steps[d]
            running *= max(shape[d], 1) * steps[d]
    return tuple(stride), offset, kind


@st.composite
def shape_pairs(draw):
    """(input shape, weight shape, broadcast shape or None)."""
    full = tuple(draw(st.lists(sizes, max_size=4)))

    def variant():
        kept = full[draw(st.integers(0, len(full))) :]
        return tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in kept)

    x, w = (full, variant()) if draw(st.booleans()) else (variant(), variant())
    if draw(st.booleans()):
        x, w = w, x
    if draw(st.integers(0, 9)) == 0 and x and w:  # not broadcastable
        d = draw(st.integers(1, min(len(x), len(w))))
        n = max(x[-d], 2)
        x = (*x[:-d], n, *x[len(x) - d + 1 :])
        w = (*w[:-d], n + 1, *w[len(w) - d + 1 :])
    try:
        return x, w, tuple(torch.broadcast_shapes(x, w))
    except RuntimeError:
        return x, w, None


class Builder:
    """Collects buffers and argument specs while a case is drawn."""

    def __init__(self, draw, device):
        self.draw, self.device, self.buffers, self.args, self.notes = draw, device, [], [], []

    def buffer(self, dtype, numel, on_cpu=False):
        specials = dtype.is_floating_point and self.draw(st.integers(0, 4)) == 0
        self.buffers.append(Buffer(dtype, numel, on_cpu, specials))
        return len(self.buffers) - 1

    def grow(self, index, numel):
        b = self.buffers[index]
        if b.numel < numel:
            self.buffers[index] = Buffer(b.dtype, numel, b.on_cpu, b.specials)

    def fresh(self, name, shape, dtype, allow_expanded=True, on_cpu=False, grad_ok=True):
        stride, offset, kind = self.draw(layouts(shape, allow_expanded))
        slack = self.draw(st.integers(0, 2))
        index = self.buffer(dtype, offset + _extent(shape, stride) + slack, on_cpu)
        grad = grad_ok and (dtype.is_floating_point or dtype.is_complex) and self.draw(st.integers(0, 9)) == 0
        view = View(index, shape, stride, offset, grad)
        self.args.append((name, view))
        self.notes.append(f"{name} {kind}{' requires_grad' if grad else ''}{' on cpu' if on_cpu else ''}")
        return view

    def alias(self, name, role):
        self.args.append((name, Same(role)))
        self.notes.append(f"{name} is {role}")

    def view_in(self, name, of, how):
        """A new tensor over the memory of view `of`: the same view, a part of it, or past its end."""
        if how == "same view":
            view = View(of.buffer, of.shape, of.stride, of.offset)
        else:
            shape = tuple(self.draw(st.lists(sizes, max_size=3)))
            stride, _, _ = self.draw(layouts(shape, allow_expanded=False))
            end = of.offset + _extent(of.shape, of.stride)
            offset = end if how == "past its end" else self.draw(st.integers(0, max(end, 1)))
            view = View(of.buffer, shape, stride, offset)
            self.grow(of.buffer, offset + _extent(shape, stride))
        self.args.append((name, view))
        self.notes.append(f"{name}: {how} of another argument")
        return view

    def case(self, overload, result_shape):
        seed = self.draw(st.integers(0, 2**31 - 1))
        return Case(overload, tuple(self.buffers), tuple(self.args), seed, result_shape, "; ".join(self.notes))


def _zero_dim_on_cpu(draw, device, shape):
    return device != "cpu" and shape == () and draw(st.integers(0, 3)) == 0


@st.composite
def cases(draw, overload_name, device):
    op, overload = oracle.OVERLOADS[overload_name]
    b = Builder(draw, device)
    x_shape, w_shape, shape = draw(shape_pairs())
    x_dtype, w_dtype = draw(dtypes), draw(dtypes)

    if op.weight_kind == "scalar":  # functional only: input and a number
        b.fresh("input", x_shape, x_dtype)
        weight = draw(numbers)
        b.args.append(("weight", weight))
        b.notes.append(f"weight {oracle._literal(weight)}")
        return b.case(overload_name, x_shape)

    if overload.kind == INPLACE:
        if shape is not None and draw(st.integers(0, 5)) != 0:
            x_shape = shape  # self of the broadcast shape, mostly; else self that would have to grow
        self_view = b.fresh("self", x_shape, x_dtype)
        how = draw(st.sampled_from(["fresh"] * 6 + ["is self", "same view", "part"]))
        if how == "fresh":
            b.fresh("weight", w_shape, w_dtype, on_cpu=_zero_dim_on_cpu(draw, device, w_shape))
        elif how == "is self":
            b.alias("weight", "self")
        else:
            b.view_in("weight", self_view, "same view" if how == "same view" else "part")
        return b.case(overload_name, _broadcast(dict(b.args), b))

    x_view = b.fresh("input", x_shape, x_dtype, on_cpu=_zero_dim_on_cpu(draw, device, x_shape))
    if draw(st.integers(0, 9)) == 0:
        b.alias("weight", "input")
        w_view = x_view
    else:
        w_view = b.fresh("weight", w_shape, w_dtype, on_cpu=_zero_dim_on_cpu(draw, device, w_shape))
    if op.extra_args is not None:  # e.g. a reduction's dim, keepdim and dtype, in schema order
        rank = len(shape) if shape is not None else max(len(x_view.shape), len(w_view.shape))
        for name, value in draw(op.extra_args(shape, rank)).items():
            b.args.append((name, value))
            b.notes.append(f"{name}={value!r}")
    if overload.kind == FUNCTIONAL:
        return b.case(overload_name, _broadcast(dict(b.args), b))

    args = dict(b.args)
    result = _broadcast(args, b)
    how = draw(
        st.sampled_from(
            ["right shape"] * 5 + ["wrong shape"] * 2 + ["is input", "is weight", "same view", "part", "past its end"]
        )
    )
    if how == "right shape" and result is not None:
        dtype = draw(st.one_of(st.just(_result_dtype(args, b)), dtypes))
        on_cpu = device != "cpu" and draw(st.integers(0, 19)) == 0
        b.fresh("out", result, dtype, allow_expanded=draw(st.integers(0, 9)) == 0, on_cpu=on_cpu, grad_ok=False)
    elif how in ("right shape", "wrong shape"):
        wrong = tuple(draw(st.lists(sizes, max_size=4)))
        b.fresh("out", wrong, draw(dtypes), allow_expanded=False, grad_ok=False)
    elif how == "is input":
        b.alias("out", "input")
    elif how == "is weight":
        b.alias("out", "weight")
    else:
        of = draw(st.sampled_from([x_view, w_view]))
        b.view_in("out", of, how)
    return b.case(overload_name, result)


def _broadcast(args, b):
    shapes = [
        v.shape if isinstance(v, View) else args[v.role].shape
        for k, v in args.items()
        if k != "out" and isinstance(v, (View, Same))  # not a reduction's dim, keepdim or dtype
    ]
    try:
        return tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        return None


def _result_dtype(args, b):
    operands = []
    for name in ("input", "weight"):
        spec = args[name]
        while isinstance(spec, Same):
            spec = args[spec.role]
        operands.append(torch.empty(spec.shape, dtype=b.buffers[spec.buffer].dtype, device="meta"))
    return torch.result_type(*operands)


# ---------------------------------------------------------------------------------------------
# The campaign
# ---------------------------------------------------------------------------------------------

OVERLOAD_NAMES = list(oracle.OVERLOADS)


def _settings(examples):
    return campaign_settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


def _campaign(overload_name):
    _, overload = oracle.OVERLOADS[overload_name]

    @_settings(overload.examples)
    @given(data=st.data())
    def run(device, data):
        case = data.draw(cases(overload_name, device), label="case")
        note(oracle.repro(case, device))
        outcome = oracle.judge(case, device)
        oracle.OUTCOMES[(device, overload_name)][outcome] += 1

    return run


@pytest.mark.parametrize("overload_name", OVERLOAD_NAMES)
def test_overload_agrees_with_aten(device, overload_name):
    _campaign(overload_name)(device)
    oracle.FINISHED.add((device, overload_name))


def test_campaign_ran_enough_examples(device):
    if not all((device, name) in oracle.FINISHED for name in OVERLOAD_NAMES):
        pytest.skip("runs after every test_overload_agrees_with_aten on this device")
    counts = {name: sum(oracle.OUTCOMES[(device, name)].values()) for name in OVERLOAD_NAMES}
    assert sum(counts.values()) >= MIN_EXAMPLES_PER_DEVICE, counts
    for name in OVERLOAD_NAMES:  # every outcome a campaign is meant to reach was reached
        op, _ = oracle.OVERLOADS[name]
        outcomes = oracle.OUTCOMES[(device, name)]
        refused = sum(n for outcome, n in outcomes.items() if outcome.startswith(oracle.REFUSED))
        # With a number as weight nothing fails to broadcast: ATen raises for none of the drawn calls.
        both_raised = outcomes[oracle.BOTH_RAISED] > 0 or op.weight_kind == "scalar"
        assert outcomes[oracle.COMPUTED] > 0 and both_raised and refused > 0, (name, dict(outcomes))


# ---------------------------------------------------------------------------------------------
# Regressions (issue 20): out= that is an input and would have to grow
# ---------------------------------------------------------------------------------------------


def _judge_views(overload, device, views, buffers, result_shape):
    case = Case(overload, tuple(buffers), tuple(views), 0, result_shape)
    return oracle.judge(case, device)


@each_elementwise_operator
def test_out_is_input_that_must_grow_is_refused_like_aten(device, op):
    x = torch.randn(1, 2, 2, dtype=torch.float64, device=device)
    w = torch.randn(2, 1, 2, 2, dtype=torch.float64, device=device)
    before = x.clone()
    with pytest.raises(
        RuntimeError,
        match=rf"^custom::{op.name}.out: output with shape \[1, 2, 2\] doesn't "
        r"match the broadcast shape \[2, 1, 2, 2\]",
    ):
        getattr(oracle.OPS, op.name).out(x, w, out=x)
    assert x.shape == (1, 2, 2) and torch.equal(x, before)
    with pytest.raises(RuntimeError, match=r"output with shape \[1, 2, 2\] doesn't match the broadcast shape"):
        torch.mul(x, w, out=x)  # ATen's own wording, which ours repeats
    # The oracle's verdict on the same call.
    buffers = [Buffer(torch.float64, 4), Buffer(torch.float64, 8)]
    views = [
        ("input", View(0, (1, 2, 2), (4, 2, 1), 0)),
        ("weight", View(1, (2, 1, 2, 2), (4, 4, 2, 1), 0)),
        ("out", Same("input")),
    ]
    assert _judge_views(f"{op.name}.out", device, views, buffers, (2, 1, 2, 2)) == oracle.BOTH_RAISED


@each_elementwise_operator
def test_out_is_weight_that_must_grow_is_refused_like_aten(device, op):
    x = torch.randn(2, dtype=torch.float64, device=device)
    w = torch.randn((), dtype=torch.float64, device=device)
    before = w.clone()
    with pytest.raises(
        RuntimeError,
        match=rf"custom::{op.name}.out: output with shape \[\] doesn't match the "
        r"broadcast shape \[2\]",
    ):
        getattr(oracle.OPS, op.name).out(x, w, out=w)
    assert w.shape == () and torch.equal(w, before)
    buffers = [Buffer(torch.float64, 2), Buffer(torch.float64, 1)]
    views = [("input", View(0, (2,), (1,), 0)), ("weight", View(1, (), (), 0)), ("out", Same("weight"))]
    assert _judge_views(f"{op.name}.out", device, views, buffers, (2,)) == oracle.BOTH_RAISED


@each_elementwise_operator
def test_out_is_input_of_the_broadcast_shape_still_computes(device, op):
    buffers = [Buffer(torch.float32, 6), Buffer(torch.float32, 3)]
    views = [("input", View(0, (2, 3), (3, 1), 0)), ("weight", View(1, (3,), (1,), 0)), ("out", Same("input"))]
    assert _judge_views(f"{op.name}.out", device, views, buffers, (2, 3)) == oracle.COMPUTED


@each_elementwise_operator
def test_out_viewing_an_input_that_must_grow_is_a_documented_refusal(device, op):
    # ATen resizes this out and reads the input from memory it has overwritten; ours refuses.
    buffers = [Buffer(torch.float64, 4), Buffer(torch.float64, 8)]
    views = [
        ("input", View(0, (1, 2, 2), (4, 2, 1), 0)),
        ("weight", View(1, (2, 1, 2, 2), (4, 4, 2, 1), 0)),
        ("out", View(0, (1, 2, 2), (4, 2, 1), 0)),
    ]
    outcome = _judge_views(f"{op.name}.out", device, views, buffers, (2, 1, 2, 2))
    assert outcome in ("refused (out_resized_over_input)", oracle.UNDEFINED)


def _scalar_case(op, dtype, weight):
    args = (("input", View(0, (2,), (1,), 0)), ("weight", weight))
    return Case(f"{op.name}.Scalar", (Buffer(dtype, 2),), args, 0, (2,))


# A number past the result dtype's range: computed as ATen computes it (inf for weighted_sum; once
# a checked conversion raised, naming no op); for an integer input, the documented dtype refusal
# (once the same overflow error).
@each_elementwise_operator
def test_scalar_weight_beyond_float32_range_computes(device, op):
    assert oracle.judge(_scalar_case(op, torch.float32, 1e39), device) == oracle.COMPUTED


@each_elementwise_operator
def test_scalar_weight_beyond_an_integer_inputs_range_is_the_dtype_refusal(device, op):
    assert oracle.judge(_scalar_case(op, torch.int8, 2**40), device) == "refused (dtype)"


# ---------------------------------------------------------------------------------------------
# The oracle itself: it must catch a planted bug (the one of issue 20)
# ---------------------------------------------------------------------------------------------


def test_oracle_fails_an_out_that_resizes_an_input_before_reading_it(monkeypatch):
    op, overload = oracle.OVERLOADS["weighted_sum.out"]

    def resize_then_compute(a):  # what weighted_sum.out did before issue 20's fix
        a["out"].resize_(torch.broadcast_shapes(a["input"].shape, a["weight"].shape))
        torch.mul(a["weight"], a["input"].square(), out=a["out"])

    monkeypatch.setitem(
        oracle.OVERLOADS,
        "weighted_sum.out",
        (
            op,
            oracle.Overload(
                overload.name, overload.kind, resize_then_compute, overload.inferred_strides, overload.examples
            ),
        ),
    )
    buffers = [Buffer(torch.float64, 4), Buffer(torch.float64, 8)]
    views = [
        ("input", View(0, (1, 2, 2), (4, 2, 1), 0)),
        ("weight", View(1, (2, 1, 2, 2), (4, 4, 2, 1), 0)),
        ("out", Same("input")),
    ]
    with pytest.raises(oracle.OracleFailure, match="ours computed where ATen raised"):
        _judge_views("weighted_sum.out", "cpu", views, buffers, (2, 1, 2, 2))
