# SPDX-License-Identifier: BSD-3-Clause
"""ATen as the test oracle: the operator table, the documented refusals and the verdict of one call.

Not a test module: test_oracle_aten.py draws the calls (pytest puts this directory on sys.path).

Every operator of operators.py's table plugs in by its kind (the entries at "The operator table"):
its composite (the ATen expression it replaces, from its term), its overloads, and the ATen op whose
out=/in-place rules (broadcasting, aliasing, resizing, casting) its mutating overloads follow.
One call is judged by running ATen and ours on two
identical copies of the same arguments (same buffers, views and aliasing) and asserting ONE of:

  computed       both compute; ours has ATen's dtype, shape, device (and strides where the
                 overload promises them) and the composite's values (bit for bit where the
                 operator promises it, always within one rounding of the float64 composite);
                 memory outside the written tensor is untouched.
  both raised    ours raises a RuntimeError naming the op (or ATen's own message), and leaves
                 every buffer, and out's shape and strides where ATen leaves them, untouched.
  refused        ours raises one of REFUSALS (documented in the README) where ATen computes,
                 leaving everything untouched.
  ATen-undefined ATen's own op gives, with this aliasing, other values than on unaliased copies
                 (or writes outside its output): no behaviour to match; ours may compute or raise
                 a RuntimeError.

Ours computing where ATen raises is a failure, as is anything else. `judge_transform` (at the end)
judges the same calls under torch.func.grad, torch.func.jvp and torch.vmap.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
import warnings
from collections.abc import Callable

import torch

import operators
import term_error

OPS = torch.ops.custom
FUNCTIONS = operators.table.FUNCTIONS

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
OTHER_DTYPES = (torch.uint8, torch.int8, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)

FUNCTIONAL, OUT, INPLACE = "functional", "out", "inplace"


def layout_rule(input, weight):
    """A tensor laid out as an elementwise operator's new result is (the README's rule, for every
    term): as ATen lays out `weight * input.square()`. Not the composite's own layout: a chain of
    ATen ops gets it from its operation order, which differs from term to term where a
    zero-element result makes several layouts dense at once."""
    return weight * input.square()


def _addressing_strides(tensor):
    """The strides that address elements: a size-1 dimension's stride addresses none (ATen's own
    choice for it differs with the operation order that made the tensor)."""
    return tuple(stride if size != 1 else None for size, stride in zip(tensor.shape, tensor.stride()))


# One rounding to the dtype, relative (and absolute, for subnormals) to an unrounded float64 value.
ROUNDING = term_error.ROUNDING

# ---------------------------------------------------------------------------------------------
# The operator table
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Overload:
    name: str  # as in the schema: "weighted_sum.out"
    kind: str  # FUNCTIONAL, OUT or INPLACE
    call: Callable[[dict], object]  # ours, given the arguments by schema name
    # Whether our functional result's strides must be the layout rule's (layout_rule). Strides of
    # an out or self of the right shape are always compared with ATen's: both keep them.
    inferred_strides: bool
    examples: int  # Hypothesis examples per device


@dataclasses.dataclass(frozen=True)
class Operator:
    name: str
    composite: Callable[..., torch.Tensor]  # composite(input, weight, **extra)
    overloads: tuple
    # ATen's out= / in-place rules for the same operands: an ATen op that reads input and weight
    # and writes out (or self), e.g. torch.mul for an elementwise binary op.
    out_rules: Callable[[dict], object]
    inplace_rules: Callable[[dict], object]
    # Float16/bfloat16 computed in float32 and rounded once, float32/float64 in the composite's
    # order: bit for bit equal to the composite evaluated that way.
    bitwise: bool = True
    weight_kind: str = "tensor"  # "scalar" for a .Scalar overload: weight is a Python number
    # (broadcast shape or None, its rank) -> Hypothesis strategy of a dict of the extra arguments, in
    # schema order (test_oracle_aten.py draws them after input and weight)
    extra_args: Callable | None = None
    # For an operator that is not elementwise (a reduction): operands -> (float64 value, float64 sum
    # of the absolute values of its terms, terms per element, accumulation dtype); its values are
    # then judged against that instead of the float64 composite (see _check_values).
    exact: Callable | None = None
    term: object = None  # the row's term (python/custom_ops/_operators.py)


def sum_exact(term, input, weight, dim=None, keepdim=False, dtype=None):
    """A reduction's sum in float64 from the operands as ATen promotes them (a 0-dim operand of a
    wider dtype rounded to the other's, whatever dtype= is): float16/bfloat16 sum in float32 and
    round once, float32 sums in float32 (pairwise: an error that grows with log2 of the terms),
    float64 operands or results in float64."""
    promoted = torch.result_type(input, weight)
    result = dtype if dtype is not None else promoted
    x, w = input.to(promoted).double(), weight.to(promoted).double()
    terms = operators.term_value(term, x, w)
    value, magnitude = terms.sum(dim, keepdim), terms.abs().sum(dim, keepdim)
    n = terms.numel() // value.numel() if value.numel() else 0
    accumulate = torch.float64 if torch.float64 in (promoted, result) else torch.float32  # as the README says
    if not term.calls_functions:
        return value, magnitude, n, accumulate, None
    # Each term's own error, computed in the accumulation type (term_error.py), summed.
    _, errors = term_error.value_error(term, x, w, accumulate, input.device.type)
    return value, magnitude, n, accumulate, operators.as_result(errors, x, w).sum(dim, keepdim)


def reduction_args(shape, rank):
    """dim (None, [], lists of dims, also negative, repeated or out of range, or an int), keepdim
    and dtype (None mostly; a floating dtype, or one the op refuses) of a reduction over a broadcast
    shape of `rank` dims. A Hypothesis strategy: imported here, where a test draws it."""
    from hypothesis import strategies as st

    dims = st.integers(-max(rank, 1) - 1, max(rank, 1))  # one past each end: IndexError now and then
    dim = st.one_of(
        st.none(),
        st.just([]),
        dims,
        st.lists(st.integers(-max(rank, 1), max(rank, 1) - 1), min_size=1, max_size=max(rank, 1), unique=True),
        st.lists(st.integers(-max(rank, 1), max(rank, 1) - 1), min_size=1, max_size=max(rank, 1), unique=True),
        st.lists(dims, min_size=1, max_size=rank + 2),  # repeated dims too
    )
    dtype = st.one_of(st.none(), st.none(), st.none(), st.sampled_from(FLOAT_DTYPES), st.sampled_from(OTHER_DTYPES))
    return st.fixed_dictionaries({"dim": dim, "keepdim": st.booleans(), "dtype": dtype})


def _elementwise(row):
    """An elementwise operator's two oracle entries: its tensor overloads, with torch.mul's out=
    and in-place rules (a binary elementwise op's), and its .Scalar overload: a Python number as
    weight, like `input * 2.5`. That kernel calls the tensor overload with the number as a 0-dim
    tensor of the result dtype, so its errors name custom::NAME and its values are the
    composite's with the number rounded to that dtype (the README's promise)."""
    name = row.name

    def op():  # looked up at the call: the table is built before any library is loaded
        return getattr(OPS, name)

    tensor = Operator(
        name=name,
        composite=row.composite,
        overloads=(
            Overload(name, FUNCTIONAL, lambda a: op()(a["input"], a["weight"]), True, 1000),
            Overload(f"{name}.out", OUT, lambda a: op().out(a["input"], a["weight"], out=a["out"]), False, 1500),
            Overload(f"{name}_", INPLACE, lambda a: getattr(OPS, f"{name}_")(a["self"], a["weight"]), False, 1000),
        ),
        out_rules=lambda a: torch.mul(a["input"], a["weight"], out=a["out"]),
        inplace_rules=lambda a: a["self"].mul_(a["weight"]),
        bitwise=row.bitwise,
        term=row.term,
    )
    scalar = Operator(
        name=name,
        composite=row.composite,
        overloads=(Overload(f"{name}.Scalar", FUNCTIONAL, lambda a: op().Scalar(a["input"], a["weight"]), True, 500),),
        out_rules=None,
        inplace_rules=None,
        bitwise=row.bitwise,
        weight_kind="scalar",
        term=row.term,
    )
    return (tensor, scalar)


def _reduction(row):
    """A reduction: the sum of its term over dim, like torch.sum (dim, keepdim, dtype=). Not bit
    for bit: judged against the exact sum (sum_exact)."""
    name = row.name
    return (
        Operator(
            name=row.name,
            composite=row.composite,
            overloads=(
                Overload(
                    row.name,
                    FUNCTIONAL,
                    lambda a: getattr(OPS, name)(a["input"], a["weight"], a["dim"], a["keepdim"], dtype=a["dtype"]),
                    False,
                    800,
                ),
            ),
            out_rules=None,
            inplace_rules=None,
            bitwise=False,
            extra_args=reduction_args,
            exact=lambda *args, **kwargs: sum_exact(row.term, *args, **kwargs),
            term=row.term,
        ),
    )


# Every row of operators.py's table, by its kind.
OPERATORS = tuple(
    entry
    for row in operators.OPERATORS
    for entry in {operators.ELEMENTWISE: _elementwise, operators.REDUCTION: _reduction}[row.kind](row)
)

OVERLOADS = {overload.name: (op, overload) for op in OPERATORS for overload in op.overloads}

# ---------------------------------------------------------------------------------------------
# Documented refusals: ours raises where ATen computes (the README lists them)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Refusal:
    name: str
    readme: str  # the README's wording
    # Whether this call is such a case: applies(case, args, in_dims), in_dims vmap's (else empty).
    applies: Callable[[Case, dict, tuple], bool]
    message: str  # a regex our error message matches


def _tensors(args):
    return [t for t in args.values() if isinstance(t, torch.Tensor)]


def _dtype_argument(case, args, in_dims):
    return any(isinstance(v, torch.dtype) and v not in FLOAT_DTYPES for v in args.values())


def _non_float(case, args, in_dims):
    # A complex number as a .Scalar weight makes the result complex, as a complex tensor would.
    return any(t.dtype not in FLOAT_DTYPES for t in _tensors(args)) or any(
        isinstance(v, complex) for v in args.values()
    )


def _cpu_scalar_with_accelerator(case, args, in_dims):
    devices = {t.device.type for t in _tensors(args)}
    return len(devices) > 1 and any(t.device.type == "cpu" and t.dim() == 0 for t in _tensors(args))


def _out_resized_over_an_input(case, args, in_dims):
    out = args.get("out")
    if out is None or tuple(out.shape) == case.result_shape:
        return False
    return any(
        t is not out and t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr() for t in _tensors(args)
    )


def _self_grows_per_example(case, args, in_dims):
    """vmap, in place: weight has more dimensions per example than self. ATen raises per example
    (self cannot grow); vmap of its in-place ops computes anyway with a batch of one, whose
    physical shapes broadcast."""
    dims = dict(in_dims)
    if not dims or not isinstance(args.get("self"), torch.Tensor) or not isinstance(args.get("weight"), torch.Tensor):
        return False

    def rank(name):
        return args[name].dim() - (dims.get(name) is not None)

    return rank("weight") > rank("self")


REFUSALS = (
    Refusal(
        "dtype",
        "integer, bool and complex dtypes, of any argument (input, weight, out, self), also where "
        "the result would be floating (an integer weight with a float input) or where out= would "
        "only cast a float result to complex: ATen computes these",
        _non_float,
        r"must have dtype float16, bfloat16, float32 or float64, got",
    ),
    Refusal(
        "dtype_argument",
        "a dtype= argument that is not floating (ATen sums in integers, bool or complex)",
        _dtype_argument,
        r"dtype must be float16, bfloat16, float32 or float64, got",
    ),
    Refusal(
        "cpu_scalar",
        "a CPU 0-dim tensor with CUDA tensors (ATen takes it as a scalar)",
        _cpu_scalar_with_accelerator,
        r"on the same device|like the inputs",
    ),
    Refusal(
        "out_resized_over_input",
        "an out= that shares memory with an input and would have to be resized over it (ATen "
        "checks overlap before it resizes, so it resizes such an out and computes from memory it "
        "has just overwritten)",
        _out_resized_over_an_input,
        r"would overlap it",
    ),
    Refusal(
        "vmap_self_grows",
        "under vmap, in place with a weight of more dimensions per example than self (ATen raises "
        "per example; vmap of ATen's in-place ops computes with a batch of one)",
        _self_grows_per_example,
        r"per vmapped example, more than self's",
    ),
)

# ATen's own messages that ours may raise word for word (checks we call from ATen).
ATEN_MESSAGES = (
    r"refer to a single memory location",  # at::assert_no_partial_overlap / internal overlap
    r"refers to a single memory location",
    r"don't support automatic differentiation",  # out= with inputs that require grad
    r"a leaf Variable that requires grad",  # in place on a leaf
    r"view of a leaf Variable",
)

# ---------------------------------------------------------------------------------------------
# One call: buffers, views into them, and which argument is which tensor
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Buffer:
    dtype: torch.dtype
    numel: int
    on_cpu: bool = False  # on the CPU even when the call runs on an accelerator
    specials: bool = False  # some elements inf, nan, -0.0, huge or tiny


@dataclasses.dataclass(frozen=True)
class View:
    buffer: int
    shape: tuple
    stride: tuple
    offset: int
    requires_grad: bool = False  # a leaf of its own that shares the buffer's memory


@dataclasses.dataclass(frozen=True)
class Same:
    role: str  # this argument is that argument's tensor object itself


@dataclasses.dataclass(frozen=True)
class Case:
    overload: str
    buffers: tuple
    args: tuple  # ((name, View | Same | number), ...), in schema order
    seed: int
    result_shape: tuple  # the broadcast shape (None when not broadcastable)
    note: str = ""  # what the draw meant to test, for the reader of a failure


SPECIAL_VALUES = (float("inf"), float("-inf"), float("nan"), -0.0, 1e30, 1e-30, 65504.0)


def buffer_data(buffer, generator):
    """A buffer's random contents (on the CPU), from `generator`."""
    n, dtype = buffer.numel, buffer.dtype
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=generator).bool()
    if dtype.is_complex:
        return torch.randn(n, generator=generator, dtype=torch.complex128).to(dtype)
    if not dtype.is_floating_point:
        return torch.randint(-4, 5, (n,), generator=generator).to(dtype)
    data = torch.randn(n, generator=generator, dtype=torch.float64) * 2
    if buffer.specials and n > 0:
        picks = torch.randint(0, n, (max(1, n // 4),), generator=generator)
        values = torch.randint(0, len(SPECIAL_VALUES), picks.shape, generator=generator)
        data[picks] = torch.tensor(SPECIAL_VALUES, dtype=torch.float64)[values]
    return data.to(dtype)


def build(case, device):
    """(arguments by name, buffers): fresh tensors laid out and aliased as `case` says."""
    g = torch.Generator().manual_seed(case.seed)
    buffers = [buffer_data(b, g).to("cpu" if b.on_cpu else device) for b in case.buffers]
    args = {}
    for name, spec in case.args:
        if isinstance(spec, Same):
            args[name] = args[spec.role]
        elif isinstance(spec, View):
            t = buffers[spec.buffer].as_strided(spec.shape, spec.stride, spec.offset)
            args[name] = t.detach().requires_grad_() if spec.requires_grad else t
        else:
            args[name] = spec
    return args, buffers


def _literal(number):
    """Python source for a number (repr gives `inf` and `nan`, which are not)."""
    if isinstance(number, float) and not math.isfinite(number):
        return f"float({str(number)!r})"
    return repr(number)


def _setup_source(case, device):
    """Python lines that make this call's buffers and arguments again."""
    lines = [
        "import torch, oracle  # after torch.ops.load_library(<libcustom_ops.so>)",
        f"# {case.note}" if case.note else "",
        f"g = torch.Generator().manual_seed({case.seed})",
    ]
    for i, b in enumerate(case.buffers):
        lines.append(f"b{i} = oracle.buffer_data(oracle.{b!r}, g).to({'cpu' if b.on_cpu else device!r})")
    for name, spec in case.args:
        if isinstance(spec, Same):
            lines.append(f"{name} = {spec.role}")
        elif isinstance(spec, View):
            grad = ".detach().requires_grad_()" if spec.requires_grad else ""
            lines.append(f"{name} = b{spec.buffer}.as_strided({spec.shape}, {spec.stride}, {spec.offset}){grad}")
        else:
            lines.append(f"{name} = {_literal(spec)}")
    return [line for line in lines if line]


def _keyword_only(overload):
    base, _, name = overload.name.partition(".")
    schema = getattr(getattr(OPS, base), name or "default")._schema
    return {a.name for a in schema.arguments if a.kwarg_only}


def _call_source(overload, names):
    """Python for one call of `overload` on the arguments called `names` (in schema order)."""
    keyword = _keyword_only(overload)
    return f"torch.ops.custom.{overload.name}({', '.join(f'{n}={n}' if n in keyword else n for n in names)})"


def repro(case, device):
    """Python that makes this call again (run it from tests/python)."""
    _, overload = OVERLOADS[case.overload]
    return "\n".join([*_setup_source(case, device), _call_source(overload, [n for n, _ in case.args])])


# ---------------------------------------------------------------------------------------------
# The verdict
# ---------------------------------------------------------------------------------------------

# (device, overload name) -> Counter of outcomes; read by the count test and conftest's summary.
OUTCOMES = collections.defaultdict(collections.Counter)
FINISHED = set()  # (device, overload name) whose campaign ran to the end
COMPUTED, BOTH_RAISED, REFUSED, UNDEFINED = "computed", "both raised", "refused", "ATen-undefined"


class OracleFailure(AssertionError):
    pass


def _call(fn):
    """(result, exception): the call with its warnings (e.g. out= resizes) captured."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            return fn(), None
        except Exception as error:
            return None, error


def _nan_equal(a, b):
    if a.shape != b.shape:
        return False
    a, b = a.detach().cpu(), b.detach().cpu()
    same = a == b
    if a.dtype.is_floating_point or a.dtype.is_complex:
        same |= a.isnan() & b.isnan()
    return bool(same.all())


def _layout(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype


def _written_mask(buffer, target):
    """True at the elements of `buffer` that `target` covers (none when they do not share memory)."""
    mask = torch.zeros(buffer.numel(), dtype=torch.bool, device=buffer.device)
    if target is None or target.untyped_storage().data_ptr() != buffer.untyped_storage().data_ptr():
        return mask
    extent = target.storage_offset() + sum((n - 1) * s for n, s in zip(target.shape, target.stride())) + 1
    if target.numel() == 0:
        return mask
    wide = torch.zeros(max(extent, buffer.numel()), dtype=torch.bool, device=buffer.device)
    wide.as_strided(target.shape, target.stride(), target.storage_offset()).fill_(True)
    return wide[: buffer.numel()]


def _untouched_outside(buffers, before, target):
    return all(_nan_equal(b[~_written_mask(b, target)], s[~_written_mask(b, target)]) for b, s in zip(buffers, before))


def _operands(op, overload, args):
    """The composite's arguments: input (self, in place) and weight, and extra keyword arguments."""
    names = {"input": "self" if overload.kind == INPLACE else "input", "weight": "weight"}
    out = {k: args[v] for k, v in names.items()}
    out.update({k: v for k, v in args.items() if k not in ("input", "self", "weight", "out")})
    return out


def _clean(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _aten(op, overload, args):
    """ATen's behaviour for this overload: the composite's value, with its out=/in-place rules."""
    value = op.composite(**_operands(op, overload, args))
    if overload.kind == FUNCTIONAL:
        return value
    target = args["out"] if overload.kind == OUT else args["self"]
    (op.out_rules if overload.kind == OUT else op.inplace_rules)(args)
    if not torch.can_cast(value.dtype, target.dtype):  # the composite's own dtype, not the rule op's
        raise RuntimeError(f"result type {value.dtype} can't be cast to the desired output type {target.dtype}")
    return value


def _aten_defined(op, overload, args, buffers, before, clean):
    """Whether ATen's rule op wrote, with this aliasing, what it writes on unaliased copies."""
    target_name = "out" if overload.kind == OUT else "self"
    copies = {k: _clean(v) for k, v in clean.items()}
    rules = op.out_rules if overload.kind == OUT else op.inplace_rules
    _, error = _call(lambda: rules(copies))
    return (
        error is None
        and _nan_equal(args[target_name], copies[target_name])
        and _untouched_outside(buffers, before, args[target_name])
    )


def _opmath(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _as_tensors(op, operands, dtype):
    """The operands, a number weight (.Scalar) made a 0-dim tensor of `dtype`: rounded to the result
    dtype first, as the README promises (ATen's mul keeps it unrounded in float16/bfloat16 but rounds
    x.square() there instead: neither is one rounding from the truth)."""
    if op.weight_kind != "scalar":
        return dict(operands)
    return {**operands, "weight": torch.tensor(operands["weight"], dtype=dtype, device=operands["input"].device)}


def _check_values(op, operands, dtype, actual, what):
    """actual holds the composite's result of `dtype`, cast to actual's dtype: bit for bit as the
    composite computes it in float32 (float16/bfloat16) or in its own dtype, when the operator
    promises that; else within one rounding of the float64 composite (overflow: inf of its sign)."""
    cast = actual.dtype
    tensors = _as_tensors(op, operands, dtype)

    def each(convert):
        return {k: convert(v) if isinstance(v, torch.Tensor) else v for k, v in tensors.items()}

    if op.bitwise:
        exact = op.composite(**each(lambda v: v.to(dtype).to(_opmath(dtype)))).to(dtype).to(cast)
        assert _nan_equal(actual, exact), f"{what}: not bit for bit the composite\nours={actual}\nexpected={exact}"
        return
    if op.exact is not None:
        _check_sum(op, tensors, actual, what)
        return
    if op.term is not None and op.term.calls_functions:
        _check_function_term(op, each(lambda v: v.to(dtype).double()), dtype, actual, what)
        return
    reference = op.composite(**each(lambda v: v.to(dtype).double())).cpu()
    actual = actual.detach().cpu().double()
    finite = reference.abs() <= min(torch.finfo(dtype).max, torch.finfo(cast).max)
    overflow = ~finite & ~reference.isnan()
    assert torch.equal(actual[overflow], reference[overflow].sign() * float("inf")), f"{what}: overflow not inf"
    torch.testing.assert_close(
        actual[finite],
        reference[finite],
        equal_nan=True,
        rtol=ROUNDING[dtype][0] + ROUNDING[cast][0],
        atol=ROUNDING[dtype][1] + ROUNDING[cast][1],
        msg=lambda m: f"{what}: not within one rounding of the float64 composite\n{m}",
    )


def _check_function_term(op, operands, dtype, actual, what):
    """A term that calls functions: within its running error bound in the op-math type (each
    operation's rounding and each function's documented ulps, carried through the formula:
    term_error.py) plus the roundings to `dtype` and to the result's dtype, of the float64
    composite."""
    x, w = operands["input"], operands["weight"]
    w = w if isinstance(w, torch.Tensor) else torch.tensor(float(w), dtype=torch.float64, device=x.device)
    cast = actual.dtype
    reference, bound = term_error.result_error(op.term, x, w, dtype, actual.device.type, cast)
    reference = operators.as_result(reference, x, w).cpu()
    bound = operators.as_result(bound, x, w).cpu()
    limit = min(torch.finfo(dtype).max, torch.finfo(cast).max)
    finite = reference.abs() <= limit
    # Past the result dtype's range (or within the error of it), inf of the reference's sign.
    overflow = ~finite & ~reference.isnan()
    actual = actual.detach().cpu().double()
    assert torch.equal(actual[overflow], reference[overflow].sign() * float("inf")), f"{what}: overflow not inf"
    near_limit = reference.abs() + bound > limit
    nan = reference.isnan()
    assert actual[nan].isnan().all(), f"{what}: nan where the float64 composite is nan\nours={actual}"
    _assert_within(
        actual, reference, bound, finite & ~near_limit, what, "values further than the term's error bound", "float64"
    )


def _assert_within(actual, reference, bound, where, what, values, name):
    """|actual - reference| <= bound (nan is not) wherever `where` (a bool tensor, or True); else
    fails with "<what>: <how many> of <how many> <values>", the first such element and all of them,
    the reference called `name`."""
    actual, reference, bound = (t.detach().cpu().double() for t in (actual, reference, bound))
    bad = ~((actual - reference).abs() <= bound) & where
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} {values}, e.g. at {i}: ours {actual[i].item()!r}, "
            f"{name} {reference[i].item()!r}, allowed error {bound[i].item():.3g}\nours={actual}\n{name}={reference}"
        )


def _check_sum(op, operands, actual, what):
    """A reduction's values (op.exact): within one rounding of the result's dtype plus the
    accumulation dtype's pairwise-sum error (relative to the sum of the terms' absolute values) of
    the exact sum. Where a term or the sum of their absolute values overflows the accumulation
    dtype, any value goes (ATen's own sum gives inf or nan there); a NaN sum is NaN; a finite sum
    past the result dtype's range is the infinity of its sign."""
    value, magnitude, n, accumulate, term_errors = (
        t.cpu() if isinstance(t, torch.Tensor) else t for t in op.exact(**operands)
    )
    cast = actual.dtype
    actual = actual.detach().cpu().double()
    assert actual.shape == value.shape, f"{what}: shape {tuple(actual.shape)}, exact {tuple(value.shape)}"
    u_cast, tiny_cast = ROUNDING[cast]
    u_acc, tiny_acc = ROUNDING[accumulate]
    judged = magnitude <= torch.finfo(accumulate).max  # False for nan and inf too
    nan = value.isnan()
    assert actual[nan].isnan().all(), f"{what}: a NaN sum is not NaN\nours={actual}\nexact={value}"
    limit = torch.finfo(cast).max
    overflow = judged & (value.abs() > limit * (1 + 2 * u_cast))
    assert torch.equal(actual[overflow], value[overflow].sign() * float("inf")), f"{what}: overflow not inf"
    close = judged & (value.abs() <= limit)
    growth = 2 * math.ceil(math.log2(n + 1)) + 8
    bound = 2 * u_cast * value.abs() + growth * (u_acc * magnitude + tiny_acc) + 2 * tiny_cast
    if term_errors is not None:  # a term calling functions: each term's own error, summed
        bound = bound + 2 * term_errors
    _assert_within(
        actual, value, bound, close, what, f"sums of {n} terms further from the exact sum than allowed", "exact"
    )


def _check_error(error, op_name, what, also=()):
    """Ours raised a RuntimeError (or an exception of a type in `also`: ATen's own, e.g. IndexError
    for a dim out of range) that names the op or is ATen's own message."""
    assert isinstance(error, (RuntimeError, *also)), (
        f"{what}: ours raised {type(error).__name__}, not a RuntimeError: {error}"
    )
    message = str(error)
    assert op_name in message or any(re.search(p, message) for p in ATEN_MESSAGES), (
        f"{what}: our error names neither the op nor is ATen's own: {message}"
    )


def judge(case, device):
    """Runs ATen and ours on copies of `case`; returns the outcome or raises OracleFailure."""
    op, overload = OVERLOADS[case.overload]
    aten_args, aten_buffers = build(case, device)
    our_args, our_buffers = build(case, device)
    aten_before = [b.clone() for b in aten_buffers]
    before = [b.clone() for b in our_buffers]
    clean = {k: _clean(v) for k, v in our_args.items()}
    target_name = {FUNCTIONAL: None, OUT: "out", INPLACE: "self"}[overload.kind]
    aten_target_layout = _layout(aten_args[target_name]) if target_name else None
    our_target_layout = _layout(our_args[target_name]) if target_name else None

    aten_value, aten_error = _call(lambda: _aten(op, overload, aten_args))
    ours, our_error = _call(lambda: overload.call(our_args))

    try:
        if aten_error is not None and our_error is None:
            raise OracleFailure(f"ours computed where ATen raised: {type(aten_error).__name__}: {aten_error}")
        if our_error is not None:
            if aten_error is not None:
                outcome = BOTH_RAISED
                _check_error(our_error, "custom::" + op.name, "both raised", also=(type(aten_error),))
            elif target_name and not _aten_defined(op, overload, aten_args, aten_buffers, aten_before, clean):
                _check_error(our_error, "custom::" + op.name, "ATen-undefined")
                return UNDEFINED
            else:
                refusal = [
                    r for r in REFUSALS if r.applies(case, our_args, ()) and re.search(r.message, str(our_error))
                ]
                if not (isinstance(our_error, RuntimeError) and refusal):
                    raise OracleFailure(
                        f"ours raised where ATen computes, not a documented refusal: "
                        f"{type(our_error).__name__}: {our_error}"
                    )
                outcome = f"{REFUSED} ({refusal[0].name})"
            assert all(_nan_equal(b, s) for b, s in zip(our_buffers, before)), f"{outcome}: ours wrote memory"
            if target_name and (outcome != BOTH_RAISED or _layout(aten_args[target_name]) == aten_target_layout):
                assert _layout(our_args[target_name]) == our_target_layout, f"{outcome}: ours resized {target_name}"
            return outcome

        if target_name and not _aten_defined(op, overload, aten_args, aten_buffers, aten_before, clean):
            return UNDEFINED
        operands = _operands(op, overload, clean)
        dtype = aten_value.dtype
        if overload.kind == FUNCTIONAL:
            assert isinstance(ours, torch.Tensor), f"ours returned {type(ours).__name__}"
            assert (ours.dtype, tuple(ours.shape), ours.device) == (
                dtype,
                tuple(aten_value.shape),
                aten_value.device,
            ), (
                f"dtype/shape/device: ours {ours.dtype} {tuple(ours.shape)} {ours.device}, "
                f"ATen {dtype} {tuple(aten_value.shape)} {aten_value.device}"
            )
            assert ours.requires_grad == aten_value.requires_grad, "requires_grad differs from ATen's"
            if overload.inferred_strides:
                # The operands as called, not clean copies: clone() makes a broadcast weight
                # contiguous, which changes the layout ATen gives.
                called = _operands(op, overload, aten_args)
                rule = layout_rule(called["input"], called["weight"])
                assert _addressing_strides(ours) == _addressing_strides(rule), (
                    f"strides: ours {ours.stride()}, ATen's weight * input.square() {rule.stride()}"
                )
            _check_values(op, operands, dtype, ours, "result")
            assert all(_nan_equal(b, s) for b, s in zip(our_buffers, before)), "an input was written"
        else:
            assert ours is None, f"the mutating overload returned {type(ours).__name__}"
            target, aten_target = our_args[target_name], aten_args[target_name]
            assert (target.dtype, tuple(target.shape)) == (aten_target.dtype, tuple(aten_target.shape)), (
                f"{target_name}: ours {target.dtype} {tuple(target.shape)}, ATen {aten_target.dtype} "
                f"{tuple(aten_target.shape)}"
            )
            resized = tuple(aten_target.shape) != aten_target_layout[0]
            if (overload.inferred_strides or not resized) and target.numel() > 0:
                assert target.stride() == aten_target.stride(), (
                    f"{target_name} strides: ours {target.stride()}, ATen {aten_target.stride()}"
                )
            _check_values(op, operands, dtype, target, target_name)
            assert _untouched_outside(our_buffers, before, target), f"ours wrote outside {target_name}"
        return COMPUTED
    except AssertionError as failure:
        aten_said = f"{type(aten_error).__name__}: {aten_error}" if aten_error else "computed"
        ours_said = f"{type(our_error).__name__}: {our_error}" if our_error else "computed"
        raise OracleFailure(
            f"{failure}\nATen: {aten_said}\nours: {ours_said}\nreproduce:\n{repro(case, device)}"
        ) from None


# ---------------------------------------------------------------------------------------------
# Under function transforms: torch.func.grad, torch.func.jvp, torch.vmap
# ---------------------------------------------------------------------------------------------
#
# The same call inside a transform, ours against the composite with ATen's out=/in-place rules
# (`_body`), on identical copies of the arguments; the outcomes are `judge`'s. Where both compute:
#   vmap  every example's values as `judge` checks them (bit for bit where the operator promises
#         it), and the physical out/self written with them;
#   grad, jvp (tangent)  the composite's dtype and shape, and values within (TRANSFORM_SLACK + n)
#         roundings, of the result's dtype or the gradient's (tangent's) own, whichever is coarser,
#         of the same transform of the float64 composite, relative to that transform of the
#         absolute values (a bound on every product summed), n the number of elements one gradient
#         element sums (broadcasting). A transform is several operations, not one, each computed
#         in the result's dtype (a float32 input's gradient of a float64 result rounded to float32
#         once, at the end), but not rounded as ATen's composite rounds them.
# Where both raise, an error that the transform itself raises for both alike (functorch refusing
# an integer input) needs no op name. ATen-undefined: functorch crashed on an empty batch
# (`_empty_batch_crash`); ours may compute an empty result of ATen's dtype and shape, or raise.

GRAD, JVP, VMAP = "grad", "jvp", "vmap"
OURS, COMPOSITE = "ours", "composite"
TRANSFORM_SLACK = 8
# Arguments of the transform rather than of the op (identifiers: the repro assigns them).
TRANSFORM_ARGS = ("cotangent", "tangent_input", "tangent_self", "tangent_weight", "batched")


@dataclasses.dataclass(frozen=True)
class Transformed:
    transform: str  # GRAD, JVP or VMAP
    case: Case  # the op's arguments (under vmap with their batch dims), then TRANSFORM_ARGS
    wrt: tuple = ()  # grad/jvp: the differentiated arguments, by schema name
    in_dims: tuple = ()  # vmap: ((argument name, batch dim or None), ...); "batched" is unused by the op
    clone_self: bool = True  # grad/jvp in place: write a clone of self (else the input itself)


def _op_args(args):
    return {k: v for k, v in args.items() if k not in TRANSFORM_ARGS}


def _alias(case, args):
    """Re-points the arguments that are another argument (Same) at that argument's current value."""
    for name, spec in case.args:
        if isinstance(spec, Same):
            args[name] = args[spec.role]
    return args


def _body(op, overload, impl, a):
    """One call on the op's arguments `a`, ours or the composite: the result, or out/self written."""
    if overload.kind == FUNCTIONAL:
        return overload.call(a) if impl == OURS else op.composite(**_operands(op, overload, a))
    target = a["out" if overload.kind == OUT else "self"]
    if impl == OURS:
        overload.call(a)
        return target
    operands, rules_args = _operands(op, overload, a), a
    if overload.kind == INPLACE:
        # The value from a copy of self, and a weight that is self as a copy in the rule op: what
        # autograd saves for either must not be overwritten by the rule op or the copy_ below.
        original = a["self"].clone()
        aliased = a["weight"] is a["self"]
        operands = {**operands, "input": original, **({"weight": original} if aliased else {})}
        rules_args = {**a, "weight": original} if aliased else a
    # ATen's checks for this out/self, and their errors, before the value's (as the overload's own).
    (op.out_rules if overload.kind == OUT else op.inplace_rules)(rules_args)
    value = op.composite(**operands)
    if not torch.can_cast(value.dtype, target.dtype):
        raise RuntimeError(f"result type {value.dtype} can't be cast to the desired output type {target.dtype}")
    return target.copy_(value)


def _run(t, impl, args):
    """The transform of one call (ours or the composite) on `args`, by name."""
    op, overload = OVERLOADS[t.case.overload]
    if t.transform == VMAP:
        names = [name for name, _ in t.in_dims]

        def batched(*values):
            return _body(op, overload, impl, _alias(t.case, _op_args({**args, **dict(zip(names, values))})))

        return torch.vmap(batched, in_dims=tuple(d for _, d in t.in_dims))(*(args[n] for n in names))

    def f(*values):
        a = _op_args({**args, **dict(zip(t.wrt, values))})
        if overload.kind == INPLACE and t.clone_self:
            a["self"] = a["self"].clone()
        y = _body(op, overload, impl, _alias(t.case, a))
        return (y * args["cotangent"]).sum() if t.transform == GRAD else y

    primals = tuple(args[n] for n in t.wrt)
    if t.transform == GRAD:
        return torch.func.grad(f, argnums=tuple(range(len(primals))))(*primals)
    return torch.func.jvp(f, primals, tuple(args[f"tangent_{n}"] for n in t.wrt))


def repro_transform(t, device):
    """Python that runs ours under this transform again (run it from tests/python); `result` is
    what the transform returns."""
    _, overload = OVERLOADS[t.case.overload]
    names = [n for n, _ in t.case.args if n not in TRANSFORM_ARGS]
    params = [n for n, _ in t.in_dims] if t.transform == VMAP else list(t.wrt)
    body, signature = [], list(params)
    if overload.kind == INPLACE and t.transform != VMAP and t.clone_self:
        body.append("self = self.clone()")
        if "self" not in params:  # the captured self, as a local name the clone can take
            signature.append("self=self")
    body += [f"{name} = {spec.role}" for name, spec in t.case.args if isinstance(spec, Same)]
    call = _call_source(overload, names)
    if overload.kind == FUNCTIONAL:
        body.append(f"y = {call}")
    else:
        body += [call, f"y = {'out' if overload.kind == OUT else 'self'}"]
    body.append("return (y * cotangent).sum()" if t.transform == GRAD else "return y")
    lines = _setup_source(t.case, device) + [f"def f({', '.join(signature)}):"] + [f"    {line}" for line in body]
    if t.transform == GRAD:
        lines.append(f"result = torch.func.grad(f, argnums={tuple(range(len(params)))})({', '.join(params)})")
    elif t.transform == JVP:
        tangents = "".join(f"tangent_{n}, " for n in params)
        lines.append(f"result = torch.func.jvp(f, ({''.join(p + ', ' for p in params)}), ({tangents}))")
    else:
        lines.append(f"result = torch.vmap(f, in_dims={tuple(d for _, d in t.in_dims)})({', '.join(params)})")
    return "\n".join(lines)


def _float64(args, absolute):
    """Float64 copies of the arguments (their absolute values, when `absolute`)."""

    def convert(v):
        if isinstance(v, torch.Tensor):
            v = v.detach().to(torch.float64, copy=True)  # the transform may write it (in place on the input)
        return abs(v) if absolute else v

    return {k: convert(v) for k, v in args.items()}


def _value_dtype(op, overload, operands):
    return op.composite(**_operands(op, overload, operands)).dtype


def transform_slack(term):
    """TRANSFORM_SLACK plus the operations of the term's longest partial, each of which may round
    once on the way (two for w x^2's, a dozen for a rational term's second derivatives), and each
    function call's documented error in ulps (on the coarser device)."""
    texts = [operators.table.expression(f) or "" for f in (term.dx, term.dw, term.dxx, term.dxw, term.dww)]

    def roundings(text):
        calls = sum(max(FUNCTIONS[name].ulps) for name in operators.table.function_calls(text))
        return sum(text.count(c) for c in "+-*/") + calls

    return TRANSFORM_SLACK + max(map(roundings, texts))


def _check_close(actual, reference, magnitude, rounding, terms, what, slack=TRANSFORM_SLACK):
    u, a = rounding
    # `magnitude` is the composite at the operands' absolute values: a bound of the intermediate
    # values for a term like w x^2, but of either sign, or smaller than the result, for a term that
    # subtracts or divides; the larger of the two sizes is the scale of the rounding errors.
    magnitude = torch.maximum(magnitude.abs(), reference.abs())
    bound = (slack + terms) * (u * magnitude + a)
    values = f"values further than {slack} + {terms} roundings from the float64 composite's"
    _assert_within(actual, reference, bound, True, what, values, "float64")


def _check_transformed(t, op, overload, args, clean, ours, expected):
    """Both computed: ours against the composite's result under the transform (see above)."""

    def same_kind(got, want, what):
        assert isinstance(got, torch.Tensor), f"{what}: ours returned {type(got).__name__}"
        assert (got.dtype, tuple(got.shape)) == (want.dtype, tuple(want.shape)), (
            f"{what} dtype/shape: ours {got.dtype} {tuple(got.shape)}, composite {want.dtype} {tuple(want.shape)}"
        )

    op_names = [n for n, _ in t.case.args if n not in TRANSFORM_ARGS]
    if t.transform == VMAP:
        same_kind(ours, expected, "result")
        dims = dict(t.in_dims)
        target = {OUT: "out", INPLACE: "self"}.get(overload.kind)
        for b in range(ours.shape[0]):
            example = {n: clean[n] if dims.get(n) is None else clean[n].select(dims[n], b) for n in op_names}
            example = _alias(t.case, example)
            operands = _operands(op, overload, example)
            _check_values(op, operands, _value_dtype(op, overload, example), ours[b], f"example {b}")
            if target:  # the batched out/self was written, not a copy of it
                written = args[target] if dims.get(target) is None else args[target].select(dims[target], b)
                assert _nan_equal(written, ours[b]), f"example {b}: {target} does not hold the result"
        return

    start = _alias(t.case, {n: clean[n] for n in op_names})
    result_dtype = _value_dtype(op, overload, start)

    def rounding(dtype):  # of the coarser of the result's dtype and `dtype`
        return max(ROUNDING[result_dtype], ROUNDING[dtype], key=lambda r: r[0])

    reference = _run(t, COMPOSITE, _alias(t.case, _float64(clean, False)))
    magnitude = _run(t, COMPOSITE, _alias(t.case, _float64(clean, True)))
    if t.transform == GRAD:
        assert isinstance(ours, tuple) and len(ours) == len(t.wrt), f"ours returned {ours!r}"
        y_numel = math.prod(t.case.result_shape if overload.kind != INPLACE else clean["self"].shape)
        for name, got, want, ref, mag in zip(t.wrt, ours, expected, reference, magnitude):
            same_kind(got, want, f"grad w.r.t. {name}")
            terms = max(1, y_numel // max(1, clean[name].numel()))
            _check_close(got, ref, mag, rounding(got.dtype), terms, f"grad w.r.t. {name}")
        return
    (primal, tangent), (want_primal, want_tangent) = ours, expected
    same_kind(primal, want_primal, "jvp primal")
    # The tangent has its primal's dtype, as forward AD keeps them. Not always the composite's: ATen's
    # tangent of a 0-dim float16/float32 tensor times a Python float is float64.
    same_kind(tangent, want_tangent.to(want_primal.dtype), "jvp tangent")
    _check_values(op, _operands(op, overload, start), result_dtype, primal, "jvp primal")
    _check_close(tangent, reference[1], magnitude[1], rounding(primal.dtype), 1, "jvp tangent")


def _empty_batch_crash(t, args, error):
    """Whether ATen's batching rules crashed on an empty batch rather than refused the call: with
    a per-example 0-dim operand and an unbatched one, functorch's binary rules index example 0
    (`torch.vmap(lambda x: w * x)(torch.empty(0))` raises IndexError).
    ATen computes such calls for batch sizes 1 to 3: no refusal to match."""
    if t.transform != VMAP or not isinstance(error, IndexError) or "out of range" not in str(error):
        return False
    return any(d is not None and args[n].shape[d] == 0 for n, d in t.in_dims)


def _check_empty_batch(t, op, overload, clean, ours):
    """Ours computed an empty batch where ATen crashed: its dtype and shape must be ATen's per example."""
    dims = dict(t.in_dims)
    example = {}
    for name, _ in t.case.args:
        v = clean[name]
        if name not in TRANSFORM_ARGS and isinstance(v, torch.Tensor):
            shape = list(v.shape)
            if dims.get(name) is not None:
                del shape[dims[name]]
            example[name] = torch.empty(shape, dtype=v.dtype, device="meta")
        else:
            example[name] = v
    example = _alias(t.case, example)
    want = (
        op.composite(**_operands(op, overload, example))
        if overload.kind == FUNCTIONAL
        else example["out" if overload.kind == OUT else "self"]
    )
    assert isinstance(ours, torch.Tensor) and (ours.dtype, tuple(ours.shape)) == (want.dtype, (0, *want.shape)), (
        f"empty batch: ours {ours.dtype} {tuple(ours.shape)}, ATen per example {want.dtype} {tuple(want.shape)}"
    )


def judge_transform(t, device):
    """Runs ours and the composite under transform `t` on copies of its arguments; returns the
    outcome or raises OracleFailure with the Python that reproduces ours."""
    op, overload = OVERLOADS[t.case.overload]
    aten_args, _ = build(t.case, device)
    our_args, our_buffers = build(t.case, device)
    before = [b.clone() for b in our_buffers]
    clean = _alias(t.case, {k: _clean(v) for k, v in our_args.items()})

    expected, aten_error = _call(lambda: _run(t, COMPOSITE, aten_args))
    ours, our_error = _call(lambda: _run(t, OURS, our_args))

    try:
        if _empty_batch_crash(t, aten_args, aten_error):
            if our_error is None:
                _check_empty_batch(t, op, overload, clean, ours)
            else:
                _check_error(our_error, "custom::" + op.name, "ATen-undefined")
            return UNDEFINED
        if aten_error is not None and our_error is None:
            raise OracleFailure(f"ours computed where the composite raised: {type(aten_error).__name__}: {aten_error}")
        if our_error is not None:
            if aten_error is not None:
                outcome = BOTH_RAISED
                if (type(our_error), str(our_error)) != (type(aten_error), str(aten_error)):
                    _check_error(our_error, "custom::" + op.name, "both raised")
            else:
                refusal = [
                    r
                    for r in REFUSALS
                    if r.applies(t.case, _op_args(our_args), t.in_dims) and re.search(r.message, str(our_error))
                ]
                if not (isinstance(our_error, RuntimeError) and refusal):
                    raise OracleFailure(
                        f"ours raised where the composite computes, not a documented refusal: "
                        f"{type(our_error).__name__}: {our_error}"
                    )
                outcome = f"{REFUSED} ({refusal[0].name})"
            assert all(_nan_equal(b, s) for b, s in zip(our_buffers, before)), f"{outcome}: ours wrote memory"
            return outcome
        _check_transformed(t, op, overload, our_args, clean, ours, expected)
        return COMPUTED
    except AssertionError as failure:
        aten_said = f"{type(aten_error).__name__}: {aten_error}" if aten_error else "computed"
        ours_said = f"{type(our_error).__name__}: {our_error}" if our_error else "computed"
        raise OracleFailure(
            f"{t.transform} of {overload.name}: {failure}\ncomposite: {aten_said}\nours: {ours_said}\n"
            f"reproduce:\n{repro_transform(t, device)}"
        ) from None
