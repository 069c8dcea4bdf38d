# SPDX-License-Identifier: BSD-3-Clause
"""Float64 references, tolerances, input layouts and bad arguments shared by the weighted_sum tests.

Not a test module: the test files import it (pytest puts this directory on sys.path).
Every helper that makes data draws fresh random numbers on each call.
"""

import math
import warnings

import pytest
import torch

OPS = torch.ops.custom

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
DTYPE_PAIRS = [(a, b) for a in FLOAT_DTYPES for b in FLOAT_DTYPES]  # (input dtype, weight dtype)
LOW_PRECISION = (torch.float16, torch.bfloat16)

# (rtol, atol) for a value of the given dtype compared with a float64 reference: one rounding
# (float16/bfloat16 compute in float32 and round once; float32 rounds twice: x*x, then w*...).
TOLERANCES = {
    torch.float16: (2.0**-10, 2.0**-24),  # 1 ulp; atol: the float16 subnormal spacing
    torch.bfloat16: (2.0**-7, 1e-30),
    torch.float32: (2.0**-21, 1e-30),
    torch.float64: (2.0**-50, 0.0),
}


# The dtypes the op refuses, with c10's names for them as the messages print them.
UNSUPPORTED_DTYPES = {
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.bool: "Bool",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def coarser(a, b):
    """The dtype of lower precision (bfloat16 is coarser than float16)."""
    return max(a, b, key=lambda d: TOLERANCES[d][0])


# ---------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------


def promoted(x, w):
    """x and w cast to the result dtype, exactly as the op's type promotion does, as float64.

    For tensors with dimensions this is exact (promotion only widens). A 0-dim operand of a
    wider dtype than the other operand is first rounded to the result dtype, like ATen does.
    """
    dtype = torch.result_type(x, w)
    return x.to(dtype).double(), w.to(dtype).double()


def reference64(x, w):
    """weight * input**2 in float64 (not rounded), broadcast."""
    x64, w64 = promoted(x, w)
    return w64 * x64**2


def reference(x, w):
    """weight * input**2 computed in float64 and cast to torch.result_type(input, weight)."""
    return reference64(x, w).to(torch.result_type(x, w))


def exact_reference(x, w):
    """`weight * input.square()` bit for bit as the op computes it: both cast to the result dtype, and
    float16/bfloat16 computed in float32 and rounded once (float32/float64: the composite itself)."""
    dtype = torch.result_type(x, w)
    xc, wc = x.to(dtype), w.to(dtype)
    if dtype in LOW_PRECISION:
        return (wc.float() * xc.float().square()).to(dtype)
    return wc * xc.square()


def sum_to(t, shape):
    """Sums a broadcast tensor back to `shape` (like at::sum_to)."""
    shape = tuple(shape)
    lead = t.dim() - len(shape)
    if lead > 0:
        t = t.sum(dim=tuple(range(lead)))
    dims = tuple(i for i, n in enumerate(shape) if n == 1 and t.shape[i] != 1)
    if dims:
        t = t.sum(dim=dims, keepdim=True)
    return t.reshape(shape)


def gradient_reference(grad, x, w):
    """The analytic gradients in float64, each summed back to its argument's shape.

    Returns ((grad_input, scale_input), (grad_weight, scale_weight)), where scale is the sum of the
    absolute values of the summed terms: the size a rounding error of the sum is relative to.
    """
    x64, w64 = promoted(x, w)
    g64 = grad.double()
    terms_input = 2 * w64 * x64 * g64
    terms_weight = x64**2 * g64
    return (
        (sum_to(terms_input, x.shape), sum_to(terms_input.abs(), x.shape)),
        (sum_to(terms_weight, w.shape), sum_to(terms_weight.abs(), w.shape)),
    )


def assert_close_to_reference(actual, expected, dtype=None):
    """actual (of dtype `dtype`, default its own) matches the reference within dtype's tolerance."""
    dtype = dtype or actual.dtype
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(actual.cpu().double(), expected.cpu().double(), rtol=rtol, atol=atol, equal_nan=False)


def assert_close_sum(actual, expected, scale, dtype, terms=1):
    """A sum of `terms` rounded terms per element: |actual - expected| <= 4 rtol scale + terms atol.

    `scale` is the sum of the absolute values of the terms (see gradient_reference), so a sum
    with cancellation is judged against the size of what was added, not of the result.
    """
    rtol, atol = TOLERANCES[dtype]
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    actual = actual.detach().cpu().double()
    expected = expected.cpu().double()
    scale = scale.cpu().double()
    assert torch.isfinite(actual).all(), f"non-finite values in {actual}"
    error = (actual - expected).abs()
    bound = 4 * rtol * scale + terms * atol
    bad = error > bound
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.numel()} elements off; worst error {float((error - bound).max())} "
        f"over its bound\nactual={actual[bad][:8]}\nexpected={expected[bad][:8]}"
    )


# ---------------------------------------------------------------------------------------------
# Layouts
# ---------------------------------------------------------------------------------------------


def make_tensor(shape, dtype, device, kind="contiguous", *, low=None, high=None):
    """A fresh random tensor of `shape` and `dtype` laid out in memory as `kind`:

    contiguous  plain
    transposed  all dimensions reversed (a permuted view, non-contiguous for >= 2-D)
    step        the last dimension sliced with a step: base[..., ::2]
    offset      storage offset of one element: flat[1:].view(shape)
    expanded    dimension 0 broadcast from size 1: stride 0
    """
    shape = tuple(shape)
    numel = math.prod(shape)

    def rand(*size):
        if low is None:
            data = torch.randn(size, dtype=torch.float32, device=device)
        else:
            data = torch.empty(size, dtype=torch.float32, device=device).uniform_(low, high)
        return data.to(dtype)

    if kind == "contiguous":
        t = rand(*shape)
    elif kind == "transposed":
        assert len(shape) >= 2
        t = rand(*shape[::-1]).permute(*reversed(range(len(shape))))
    elif kind == "step":
        assert len(shape) >= 1
        t = rand(*shape[:-1], 2 * shape[-1])[..., ::2]
    elif kind == "offset":
        t = rand(numel + 1)[1:].view(shape)
    elif kind == "expanded":
        assert len(shape) >= 1 and shape[0] > 1
        t = rand(1, *shape[1:]).expand(shape)
    else:
        raise ValueError(kind)
    assert t.shape == shape
    return t


# name -> (input shape, input kind, weight shape, weight kind)
LAYOUTS = {
    "same_shape": ((7, 33), "contiguous", (7, 33), "contiguous"),
    "channel_weight": ((2, 3, 4, 9), "contiguous", (9,), "contiguous"),
    "both_broadcast": ((4, 1, 6), "contiguous", (5, 1), "contiguous"),
    "zero_dim": ((), "contiguous", (), "contiguous"),
    "zero_dim_weight": ((5, 6), "contiguous", (), "contiguous"),
    "zero_dim_input": ((), "contiguous", (5, 6), "contiguous"),
    "empty": ((0, 3), "contiguous", (3,), "contiguous"),
    "empty_both": ((2, 0, 3), "contiguous", (0, 1), "contiguous"),
    "transposed": ((5, 6), "transposed", (5, 6), "transposed"),
    "transposed_input": ((3, 5, 6), "transposed", (5, 6), "contiguous"),
    "step_sliced": ((5, 6), "step", (5, 6), "step"),
    "offset": ((5, 7), "offset", (5, 7), "offset"),
    "expanded": ((5, 6), "expanded", (5, 6), "contiguous"),
    "expanded_both": ((5, 6), "expanded", (1, 6), "contiguous"),
    # Over ATen's CPU grain size (32768), so several threads; odd sizes leave vector tails.
    "large": ((129, 1031), "contiguous", (1031,), "contiguous"),
}
LAYOUT_NAMES = list(LAYOUTS)
# Layouts whose input already has the broadcast shape: usable as `self` of the in-place op.
INPLACE_LAYOUT_NAMES = [
    name
    for name, (xs, xk, ws, _) in LAYOUTS.items()
    if xk != "expanded" and tuple(torch.broadcast_shapes(xs, ws)) == tuple(xs)
]


def make_inputs(layout, input_dtype, weight_dtype, device, **kwargs):
    """(input, weight) for a named layout, fresh random data each call."""
    x_shape, x_kind, w_shape, w_kind = LAYOUTS[layout]
    return (
        make_tensor(x_shape, input_dtype, device, x_kind, **kwargs),
        make_tensor(w_shape, weight_dtype, device, w_kind, **kwargs),
    )


def broadcast_shape(layout):
    x_shape, _, w_shape, _ = LAYOUTS[layout]
    return tuple(torch.broadcast_shapes(x_shape, w_shape))


def valid_arguments(device, shape=(3, 4), weight_shape=(4,)):
    """Float32 arguments every overload accepts, by schema name; error tests replace one of them.

    weight_shape must broadcast to shape (or, to provoke that error, not broadcast at all).
    """
    return {
        "input": torch.randn(shape, device=device),
        "self": torch.randn(shape, device=device),
        "weight": torch.randn(weight_shape, device=device),
        "out": torch.randn(shape, device=device),
        "grad": torch.randn(shape, device=device),
    }


def call_overload(op, args, output_mask=(True, True)):
    """Calls the overload named `op` ("weighted_sum", "weighted_sum.out", ...) with args by name."""
    if op == "weighted_sum":
        return OPS.weighted_sum(args["input"], args["weight"])
    if op == "weighted_sum.out":
        return OPS.weighted_sum.out(args["input"], args["weight"], out=args["out"])
    if op == "weighted_sum_":
        return OPS.weighted_sum_(args["self"], args["weight"])
    if op == "weighted_sum_backward":
        return OPS.weighted_sum_backward(args["grad"], args["input"], args["weight"], list(output_mask))
    raise ValueError(op)


def poisoned(shape, dtype, device, kind="contiguous"):
    """An output tensor of `shape` laid out as `kind`, every element NaN (so unwritten ones show)."""
    return make_tensor(shape, dtype, device, kind).fill_(float("nan"))


def storage_snapshot(t):
    """A copy of every byte of t's storage, including bytes that t's view does not cover."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage().clone())


def assert_storage_unchanged(t, snapshot):
    now = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
    assert torch.equal(now, snapshot), "the op wrote into a tensor it must only read"


def tensor_of_dtype(like, dtype):
    """A random tensor shaped and placed like `like`, of any dtype (also integer, bool, complex)."""
    if dtype.is_complex:
        return torch.randn(like.shape, dtype=dtype, device=like.device)
    return torch.randint(0, 2 if dtype == torch.bool else 7, like.shape, device=like.device).to(dtype)


# ---------------------------------------------------------------------------------------------
# "Unchanged after the error": snapshots of every kind of tensor the error tests pass
# ---------------------------------------------------------------------------------------------


def snapshot(t):
    """What a failed call must not change: for a strided tensor its metadata and every byte of its
    storage (also outside its view); for the other layouts their shape and component tensors."""
    if t.is_nested:
        if t.layout == torch.jagged:
            return ("jagged", t.values().clone(), t.offsets().clone())
        return ("nested", [u.clone() for u in t.unbind()])
    if t.layout == torch.sparse_coo:
        return ("coo", t.shape, t._indices().clone(), t._values().clone())
    if t.layout == torch.sparse_csr:
        return ("csr", t.shape, t.crow_indices().clone(), t.col_indices().clone(), t.values().clone())
    if t.is_mkldnn:
        return ("mkldnn", t.shape, t.to_dense())
    return (
        "strided",
        t.dtype,
        t.shape,
        t.stride(),
        t.storage_offset(),
        t.untyped_storage().data_ptr(),
        t.untyped_storage().nbytes(),
        None if t.is_meta else storage_snapshot(t),  # a meta tensor has metadata only
    )


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def snapshot_all(tensors):
    return {name: snapshot(t) for name, t in tensors.items()}


def assert_unchanged(tensors, before):
    for name, t in tensors.items():
        assert _same(snapshot(t), before[name]), f"{name} was changed by a call that raised"


def assert_rejected(fn, tensors, match, exception=RuntimeError):
    """fn() raises `exception` matching `match`, and leaves every tensor in `tensors` (by name)
    exactly as it was: metadata, storage and every byte of it."""
    before = snapshot_all(tensors)
    with pytest.raises(exception, match=match):
        fn()
    assert_unchanged(tensors, before)


def nested(t):
    """A strided nested tensor holding `t` and its first two rows."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "nested tensors are a prototype"
        return torch.nested.nested_tensor([t, t[:2]])


def _sparse_csr(t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return t.to_sparse_csr()


# Layouts the op refuses: name -> (conversion of a 2-D tensor, what the error says after "got").
NON_STRIDED_LAYOUTS = {
    "sparse_coo": (lambda t: t.to_sparse(), r"layout Sparse\b"),
    "sparse_csr": (_sparse_csr, r"layout SparseCsr\b"),
    "mkldnn": (lambda t: t.to_mkldnn(), r"layout Mkldnn\b"),
    "nested": (nested, r"a nested tensor"),
}
