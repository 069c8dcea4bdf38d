# SPDX-License-Identifier: BSD-3-Clause
"""Float64 references, error bounds and input layouts shared by the weighted_square_sum tests.

Not a test module: the test files import it (pytest puts this directory on sys.path). Every helper
that makes data draws fresh random numbers on each call.

The contract: weighted_square_sum(input, weight, dim, keepdim, dtype=dtype) equals
`(weight * input.square()).sum(dim, keepdim, dtype=dtype)` evaluated exactly, input and weight
broadcast together first; float16/bfloat16 accumulate in float32 and round once.
"""

import math

import torch

from reference import FLOAT_DTYPES, make_tensor, promoted

OPS = torch.ops.custom
SCHEMA = (
    "custom::weighted_square_sum(Tensor input, Tensor weight, int[1]? dim=None, bool keepdim=False, *, "
    "ScalarType? dtype=None) -> Tensor"
)

# The unit roundoff of each floating dtype: the largest relative error of one rounding.
UNIT_ROUNDOFF = {
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
}


def op(x, w, dim=None, keepdim=False, dtype=None):
    return OPS.weighted_square_sum(x, w, dim, keepdim, dtype=dtype)


def composite(x, w, dim=None, keepdim=False, dtype=None):
    """The ATen expression the op replaces."""
    return (w * x.square()).sum(dim, keepdim, dtype=dtype)


def result_dtype(x, w, dtype=None):
    return dtype if dtype is not None else torch.result_type(x, w)


def reduced_dims(ndim, dim):
    """The set of dims of a rank-`ndim` broadcast shape that `dim` reduces (torch.sum's rule)."""
    if dim is None:
        return set(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return set(range(ndim))
    return {d % ndim for d in dims} if ndim > 0 else set()


def terms_per_output(x, w, dim):
    shape = torch.broadcast_shapes(x.shape, w.shape)
    return math.prod(shape[d] for d in reduced_dims(len(shape), dim))


def exact(x, w, dim=None, keepdim=False):
    """(the exact sum, the sum of the absolute values of its terms), both float64.

    The operands as the op promotes them (a 0-dim float64 weight with a float32 input is rounded to
    float32, as ATen's promotion does), then every product and sum in float64: exact enough to
    judge a float32 sum of 2**26 terms."""
    x64, w64 = promoted(x, w)
    terms = w64 * x64.square()
    return terms.sum(dim, keepdim), terms.abs().sum(dim, keepdim)


def error_bound(x, w, dim, dtype, expected, scale):
    """How far a correct result may be from the exact sum.

    One rounding of the result to its dtype, plus the error of accumulating the terms in float32
    (float64 when both the operands' promoted dtype and the result are float64), relative to the
    sum of the terms' absolute values: a few roundings per term (the products) and a pairwise sum's
    log2(n) growth, with room for a blocked sum. A sum accumulated in float16/bfloat16, or a plain
    float32 running sum over many terms, falls outside it.
    """
    out_dtype = result_dtype(x, w, dtype)
    accumulate = torch.float64 if torch.result_type(x, w) == out_dtype == torch.float64 else torch.float32
    n = max(terms_per_output(x, w, dim), 1)
    growth = 2 * math.ceil(math.log2(n + 1)) + 8
    tiny = torch.finfo(out_dtype).smallest_normal * torch.finfo(out_dtype).eps  # the subnormal spacing
    return UNIT_ROUNDOFF[out_dtype] * expected.abs() + UNIT_ROUNDOFF[accumulate] * growth * scale + tiny


def assert_matches_exact(actual, x, w, dim=None, keepdim=False, dtype=None):
    """actual has the composite's dtype, shape and device, and is within error_bound of the exact sum."""
    expected_meta = composite(
        torch.empty(x.shape, dtype=x.dtype, device="meta"),
        torch.empty(w.shape, dtype=w.dtype, device="meta"),
        dim,
        keepdim,
        dtype,
    )
    assert (actual.dtype, actual.shape) == (expected_meta.dtype, expected_meta.shape), (
        f"dtype/shape: ours {actual.dtype} {tuple(actual.shape)}, composite {expected_meta.dtype} "
        f"{tuple(expected_meta.shape)}"
    )
    assert actual.device == x.device
    expected, scale = exact(x, w, dim, keepdim)
    bound = error_bound(x, w, dim, dtype, expected, scale)
    got = actual.detach().double()
    assert torch.isfinite(got).all(), f"non-finite values: {got}"
    error = (got - expected).abs()
    bad = error > bound
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.numel()} values off (dim={dim}, keepdim={keepdim}, dtype={dtype}, "
        f"{terms_per_output(x, w, dim)} terms each); worst error/bound "
        f"{float((error / bound).max()):.3g}\nours={got[bad][:6].tolist()}\nexact={expected[bad][:6].tolist()}"
    )


def make(shape, dtype, device, kind="contiguous"):
    """A fresh random tensor of `shape` laid out as `kind`: reference.make_tensor's kinds
    (contiguous, transposed, step, offset, expanded) and channels_last (4-D) and permuted
    (the middle dims swapped, >= 3-D)."""
    if kind == "channels_last":
        return make_tensor(shape, dtype, device).contiguous(memory_format=torch.channels_last)
    if kind == "permuted":
        n = len(shape)
        order = [0, *range(n - 2, 0, -1), n - 1]
        base = make_tensor([shape[d] for d in order], dtype, device)
        t = base.permute(*[order.index(d) for d in range(n)])
        assert t.shape == tuple(shape)
        return t
    return make_tensor(shape, dtype, device, kind)


__all__ = [
    "FLOAT_DTYPES",
    "OPS",
    "SCHEMA",
    "assert_matches_exact",
    "composite",
    "exact",
    "make",
    "op",
    "reduced_dims",
    "result_dtype",
    "terms_per_output",
]
