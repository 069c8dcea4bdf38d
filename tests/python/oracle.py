"""ATen as the test oracle: the operator table, the documented refusals and the verdict of one call.

Not a test module: test_oracle_aten.py draws the calls (pytest puts this directory on sys.path).

Every operator plugs in with one `Operator` entry: its composite (the ATen expression it replaces),
its overloads, and the ATen op whose out=/in-place rules (broadcasting, aliasing, resizing,
casting) its mutating overloads follow. One call is judged by running ATen and ours on two
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

Ours computing where ATen raises is a failure, as is anything else.
"""
from __future__ import annotations

import collections
import dataclasses
import re
import warnings
from typing import Callable

import torch

OPS = torch.ops.custom

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
OTHER_DTYPES = (torch.uint8, torch.int8, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)

FUNCTIONAL, OUT, INPLACE = "functional", "out", "inplace"

# One rounding to the dtype, relative (and absolute, for subnormals) to an unrounded float64 value.
ROUNDING = {
    torch.float16: (2.0**-11, 2.0**-25),
    torch.bfloat16: (2.0**-8, 2.0**-134),
    torch.float32: (2.0**-24, 2.0**-150),
    torch.float64: (2.0**-53, 0.0),
}

# ---------------------------------------------------------------------------------------------
# The operator table
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Overload:
    name: str  # as in the schema: "weighted_sum.out"
    kind: str  # FUNCTIONAL, OUT or INPLACE
    call: Callable[[dict], object]  # ours, given the arguments by schema name
    # Whether our strides must equal ATen's where ATen picks them (a functional result, a
    # resized out: TensorIterator follows the inputs' layout; ours are contiguous, per the
    # README). Strides of an out or self of the right shape are always compared: both keep them.
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
    extra_args: Callable | None = None  # shape -> Hypothesis strategy of extra keyword arguments


def weighted_sum_composite(input, weight):
    # Not `w * x * x`: that is (w * x) * x, which rounds differently from our w * (x * x).
    return weight * input.square()


OPERATORS = (
    Operator(
        name="weighted_sum",
        composite=weighted_sum_composite,
        overloads=(
            # inferred_strides False: to be turned on when ours follows the inputs' layout too.
            Overload("weighted_sum", FUNCTIONAL, lambda a: OPS.weighted_sum(a["input"], a["weight"]), False, 1000),
            Overload("weighted_sum.out", OUT,
                     lambda a: OPS.weighted_sum.out(a["input"], a["weight"], out=a["out"]), False, 1500),
            Overload("weighted_sum_", INPLACE, lambda a: OPS.weighted_sum_(a["self"], a["weight"]), False, 1000),
        ),
        out_rules=lambda a: torch.mul(a["input"], a["weight"], out=a["out"]),
        inplace_rules=lambda a: a["self"].mul_(a["weight"]),
    ),
    # Future entries, one each, e.g.:
    #   Operator("weighted_square_sum",
    #            lambda input, weight, dim, keepdim, dtype: (weight * input.square()).sum(dim, keepdim, dtype=dtype),
    #            overloads=(...), out_rules=..., inplace_rules=None, bitwise=False, extra_args=reduction_args)
    #   and the .Scalar overload as an Operator with weight_kind="scalar".
)

OVERLOADS = {overload.name: (op, overload) for op in OPERATORS for overload in op.overloads}

# ---------------------------------------------------------------------------------------------
# Documented refusals: ours raises where ATen computes (the README lists them)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Refusal:
    name: str
    readme: str  # the README's wording
    applies: Callable[["Case", dict], bool]  # whether this call is such a case
    message: str  # a regex our error message matches


def _tensors(args):
    return [t for t in args.values() if isinstance(t, torch.Tensor)]


def _non_float(case, args):
    return any(t.dtype not in FLOAT_DTYPES for t in _tensors(args))


def _cpu_scalar_with_accelerator(case, args):
    devices = {t.device.type for t in _tensors(args)}
    return len(devices) > 1 and any(t.device.type == "cpu" and t.dim() == 0 for t in _tensors(args))


def _out_resized_over_an_input(case, args):
    out = args.get("out")
    if out is None or tuple(out.shape) == case.result_shape:
        return False
    return any(
        t is not out and t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
        for t in _tensors(args)
    )


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


def repro(case, device):
    """Python that makes this call again (run it from tests/python)."""
    op, overload = OVERLOADS[case.overload]
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
            lines.append(f"{name} = {spec!r}")
    names = dict(case.args)
    call = {
        FUNCTIONAL: f"torch.ops.custom.{overload.name}({', '.join(n for n in names)})",
        OUT: f"torch.ops.custom.{overload.name}({', '.join(n for n in names if n != 'out')}, out=out)",
        INPLACE: f"torch.ops.custom.{overload.name}({', '.join(n for n in names)})",
    }[overload.kind]
    lines.append(call)
    return "\n".join(line for line in lines if line)


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
        except Exception as error:  # noqa: BLE001: every exception is judged below
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
    return all(
        _nan_equal(b[~_written_mask(b, target)], s[~_written_mask(b, target)]) for b, s in zip(buffers, before)
    )


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
    return error is None and _nan_equal(args[target_name], copies[target_name]) and _untouched_outside(
        buffers, before, args[target_name])


def _opmath(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _check_values(op, operands, dtype, actual, what):
    """actual holds the composite's result of `dtype`, cast to actual's dtype: bit for bit as the
    composite computes it in float32 (float16/bfloat16) or in its own dtype, when the operator
    promises that; else within one rounding of the float64 composite (overflow: inf of its sign)."""
    cast = actual.dtype
    tensors = {k: v for k, v in operands.items() if isinstance(v, torch.Tensor)}
    if op.bitwise:
        exact = op.composite(**{k: v.to(dtype).to(_opmath(dtype)) for k, v in tensors.items()}).to(dtype).to(cast)
        assert _nan_equal(actual, exact), f"{what}: not bit for bit the composite\nours={actual}\nexpected={exact}"
        return
    reference = op.composite(**{k: v.to(dtype).double() for k, v in tensors.items()}).cpu()
    actual = actual.detach().cpu().double()
    finite = reference.abs() <= min(torch.finfo(dtype).max, torch.finfo(cast).max)
    overflow = ~finite & ~reference.isnan()
    assert torch.equal(actual[overflow], reference[overflow].sign() * float("inf")), f"{what}: overflow not inf"
    torch.testing.assert_close(
        actual[finite], reference[finite], equal_nan=True,
        rtol=ROUNDING[dtype][0] + ROUNDING[cast][0], atol=ROUNDING[dtype][1] + ROUNDING[cast][1],
        msg=lambda m: f"{what}: not within one rounding of the float64 composite\n{m}")


def _check_error(error, op_name, what):
    assert isinstance(error, RuntimeError), f"{what}: ours raised {type(error).__name__}, not a RuntimeError: {error}"
    message = str(error)
    assert op_name in message or any(re.search(p, message) for p in ATEN_MESSAGES), (
        f"{what}: our error names neither the op nor is ATen's own: {message}")


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
                _check_error(our_error, "custom::" + op.name, "both raised")
            elif target_name and not _aten_defined(op, overload, aten_args, aten_buffers, aten_before, clean):
                _check_error(our_error, "custom::" + op.name, "ATen-undefined")
                return UNDEFINED
            else:
                refusal = [r for r in REFUSALS if r.applies(case, our_args) and re.search(r.message, str(our_error))]
                if not (isinstance(our_error, RuntimeError) and refusal):
                    raise OracleFailure(f"ours raised where ATen computes, not a documented refusal: "
                                        f"{type(our_error).__name__}: {our_error}")
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
            assert (ours.dtype, tuple(ours.shape), ours.device) == (dtype, tuple(aten_value.shape), aten_value.device), (
                f"dtype/shape/device: ours {ours.dtype} {tuple(ours.shape)} {ours.device}, "
                f"ATen {dtype} {tuple(aten_value.shape)} {aten_value.device}")
            assert ours.requires_grad == aten_value.requires_grad, "requires_grad differs from ATen's"
            if overload.inferred_strides:
                assert ours.stride() == aten_value.stride(), f"strides: ours {ours.stride()}, ATen {aten_value.stride()}"
            _check_values(op, operands, dtype, ours, "result")
            assert all(_nan_equal(b, s) for b, s in zip(our_buffers, before)), "an input was written"
        else:
            assert ours is None, f"the mutating overload returned {type(ours).__name__}"
            target, aten_target = our_args[target_name], aten_args[target_name]
            assert (target.dtype, tuple(target.shape)) == (aten_target.dtype, tuple(aten_target.shape)), (
                f"{target_name}: ours {target.dtype} {tuple(target.shape)}, ATen {aten_target.dtype} "
                f"{tuple(aten_target.shape)}")
            resized = tuple(aten_target.shape) != aten_target_layout[0]
            if (overload.inferred_strides or not resized) and target.numel() > 0:
                assert target.stride() == aten_target.stride(), (
                    f"{target_name} strides: ours {target.stride()}, ATen {aten_target.stride()}")
            _check_values(op, operands, dtype, target, target_name)
            assert _untouched_outside(our_buffers, before, target), f"ours wrote outside {target_name}"
        return COMPUTED
    except AssertionError as failure:
        aten_said = f"{type(aten_error).__name__}: {aten_error}" if aten_error else "computed"
        ours_said = f"{type(our_error).__name__}: {our_error}" if our_error else "computed"
        raise OracleFailure(
            f"{failure}\nATen: {aten_said}\nours: {ours_said}\nreproduce:\n{repro(case, device)}") from None
