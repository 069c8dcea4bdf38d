# SPDX-License-Identifier: BSD-3-Clause
"""Hypothesis property tests of the weighted square against a float64 reference.

Hypothesis draws shapes (0 to 4 dimensions, sizes including 0), memory layouts (every dimension
sliced with a step, a storage offset, dimensions permuted, size-1 dimensions expanded to stride
0), broadcasts (weight or input with leading dimensions dropped and others set to 1) and a dtype
for each operand from float16, bfloat16, float32 and float64: the same examples in every run, new
ones with CUSTOM_OPS_NEW_SEEDS=1 (environment.campaign_settings). The data comes from a seeded
torch.Generator, so a failing example replays exactly (print_blob=True prints how).

Properties:
  functional  result of torch.result_type's dtype, the broadcast shape, contiguous, within one
              rounding of the float64 reference; the inputs' storages are not written.
  out=        out of any float dtype and any layout (or empty, to be resized) holds the result
              cast to its dtype; its strides are kept and storage outside its view is untouched.
  in place    self of any layout holds the result cast to self's dtype; the rest of its storage
              and the weight are untouched.
"""

import dataclasses
import math

import pytest
import torch

from environment import campaign_settings

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

OPS = torch.ops.custom
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# (rtol, atol) of one rounding to the dtype, against an unrounded float64 value.
TOLERANCES = {
    torch.float16: (2.0**-10, 2.0**-24),
    torch.bfloat16: (2.0**-7, 1e-30),
    torch.float32: (2.0**-21, 1e-30),
    torch.float64: (2.0**-50, 0.0),
}

# At least 500 examples in every run (on each device): 400 + 200 + 200.
FUNCTIONAL_EXAMPLES = 400
OUT_EXAMPLES = 200
INPLACE_EXAMPLES = 200


def _settings(max_examples):
    return campaign_settings(
        max_examples=max_examples,
        deadline=None,
        # `device` is a parametrized fixture that does not change between examples.
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# ---------------------------------------------------------------------------------------------
# Layouts: how one operand is laid out in memory
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Layout:
    """A tensor of `shape` viewed out of a larger buffer.

    The buffer holds `offset` leading elements, then a contiguous block whose dimensions are the
    tensor's dimensions in the order `perm`, each `steps[i]` times as long; the tensor takes every
    steps[i]-th element of it and is permuted back. `expand_to`, when set, then expands size-1
    and missing leading dimensions to it (stride 0).
    """

    shape: tuple
    steps: tuple = None
    offset: int = 0
    perm: tuple = None
    expand_to: tuple = None

    def physical(self):
        perm = self.perm or tuple(range(len(self.shape)))
        steps = self.steps or (1,) * len(self.shape)
        return perm, steps, tuple(self.shape[p] * s for p, s in zip(perm, steps))

    def buffer_numel(self):
        return self.offset + math.prod(self.physical()[2])

    def view_of(self, buffer):
        """This layout's view of a 1-D buffer of buffer_numel() elements."""
        perm, steps, big = self.physical()
        t = buffer[self.offset :].view(big)
        t = t[tuple(slice(None, None, s) for s in steps)]
        t = t.permute(tuple(sorted(range(len(perm)), key=lambda i: perm[i])))
        assert tuple(t.shape) == tuple(self.shape), (t.shape, self)
        if self.expand_to is not None:
            t = t.expand(self.expand_to)
        return t

    def make(self, dtype, device, generator):
        """(tensor, buffer): fresh random data from `generator`, laid out as described."""
        data = torch.randn(self.buffer_numel(), generator=generator, dtype=torch.float64)
        buffer = data.to(dtype).to(device)
        return self.view_of(buffer), buffer

    def mask(self, device):
        """A bool buffer that is True exactly at the elements this layout's view covers."""
        buffer = torch.zeros(self.buffer_numel(), dtype=torch.bool, device=device)
        dataclasses.replace(self, expand_to=None).view_of(buffer).fill_(True)
        return buffer


def contiguous(shape):
    return Layout(tuple(shape))


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

MAX_NUMEL = 40_000  # past ATen's CPU grain size (32768) now and then, so several threads

sizes = st.one_of(st.integers(0, 6), st.sampled_from([1, 7, 17, 33, 64]))
dtypes = st.sampled_from(FLOAT_DTYPES)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def shapes(draw, min_dims=0, max_dims=4):
    shape = tuple(draw(st.lists(sizes, min_size=min_dims, max_size=max_dims)))
    hypothesis.assume(math.prod(shape) <= MAX_NUMEL)
    return shape


@st.composite
def broadcast_to(draw, full):
    """A shape that broadcasts to `full`: leading dimensions dropped, some others set to 1."""
    drop = draw(st.integers(0, len(full)))
    kept = full[drop:]
    return tuple(1 if draw(st.booleans()) and draw(st.booleans()) else n for n in kept)


@st.composite
def layouts(draw, shape, allow_expand_to=None):
    steps = tuple(draw(st.integers(1, 3)) if draw(st.booleans()) else 1 for _ in shape)
    offset = draw(st.sampled_from([0, 0, 1, 3]))
    perm = tuple(draw(st.permutations(range(len(shape))))) if len(shape) > 1 and draw(st.booleans()) else None
    expand_to = None
    if allow_expand_to is not None and tuple(shape) != tuple(allow_expand_to) and draw(st.booleans()):
        # Materialise the broadcast as stride-0 dimensions (and new leading ones), as expand() does.
        expand_to = tuple(allow_expand_to)
    return Layout(tuple(shape), steps if any(s > 1 for s in steps) else None, offset, perm, expand_to)


@dataclasses.dataclass(frozen=True)
class BinaryCase:
    input: Layout
    weight: Layout
    input_dtype: torch.dtype
    weight_dtype: torch.dtype
    seed: int


@st.composite
def binary_cases(draw):
    full = draw(shapes())
    # Either operand may be the broadcast one, or both.
    x_shape = draw(broadcast_to(full)) if draw(st.booleans()) else full
    w_shape = draw(broadcast_to(full))
    if draw(st.booleans()):
        x_shape, w_shape = w_shape, x_shape
    out_shape = tuple(torch.broadcast_shapes(x_shape, w_shape))
    return BinaryCase(
        input=draw(layouts(x_shape, allow_expand_to=out_shape)),
        weight=draw(layouts(w_shape, allow_expand_to=out_shape)),
        input_dtype=draw(dtypes),
        weight_dtype=draw(dtypes),
        seed=draw(seeds),
    )


@dataclasses.dataclass(frozen=True)
class OutCase:
    operands: BinaryCase
    out: Layout  # of the broadcast shape, or None: an empty out= that the op resizes
    out_dtype: torch.dtype


@st.composite
def out_cases(draw):
    operands = draw(binary_cases())
    shape = tuple(torch.broadcast_shapes(operands.input.shape, operands.weight.shape))
    out = None if draw(st.integers(0, 4)) == 0 else draw(layouts(shape))
    return OutCase(operands, out, draw(dtypes))


@dataclasses.dataclass(frozen=True)
class InplaceCase:
    self: Layout
    weight: Layout
    self_dtype: torch.dtype
    weight_dtype: torch.dtype
    seed: int


@st.composite
def inplace_cases(draw):
    shape = draw(shapes())
    w_shape = draw(broadcast_to(shape))
    return InplaceCase(
        draw(layouts(shape)), draw(layouts(w_shape, allow_expand_to=shape)), draw(dtypes), draw(dtypes), draw(seeds)
    )


# ---------------------------------------------------------------------------------------------
# Reference and checks
# ---------------------------------------------------------------------------------------------


def reference64(x, w):
    """weight * input**2 in float64, after the op's type promotion (which rounds a wider 0-dim
    operand to the result dtype first)."""
    dtype = torch.result_type(x, w)
    x64, w64 = x.to(dtype).double().cpu(), w.to(dtype).double().cpu()
    return w64 * x64 * x64


def assert_within(actual, expected, *dtypes):
    """actual is within the roundings to each of `dtypes` of the unrounded float64 `expected`."""
    rtol = sum(TOLERANCES[d][0] for d in dtypes)
    atol = sum(TOLERANCES[d][1] for d in dtypes)
    assert tuple(actual.shape) == tuple(expected.shape)
    torch.testing.assert_close(actual.double().cpu(), expected, rtol=rtol, atol=atol, equal_nan=False)


def snapshot(buffer):
    return buffer.clone()


def assert_outside_unchanged(buffer, before, mask, what):
    assert torch.equal(buffer[~mask], before[~mask]), f"{what}: elements outside its view were written"


def make_operands(case, device):
    g = torch.Generator().manual_seed(case.seed)
    x, x_buffer = case.input.make(case.input_dtype, device, g)
    w, w_buffer = case.weight.make(case.weight_dtype, device, g)
    return x, x_buffer, w, w_buffer


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------

F16, BF16, F32, F64 = FLOAT_DTYPES


@_settings(FUNCTIONAL_EXAMPLES)
@given(case=binary_cases())
# Kept regressions: empty, 0-dim, scalar promotion, offsets and steps, transposes, stride 0.
@example(case=BinaryCase(contiguous((0, 3)), contiguous((3,)), F32, F32, 0))
@example(case=BinaryCase(contiguous((2, 0, 3)), contiguous((0, 1)), F16, BF16, 1))
@example(case=BinaryCase(contiguous(()), contiguous(()), BF16, F16, 2))
@example(case=BinaryCase(contiguous((5, 6)), contiguous(()), F16, F64, 3))  # 0-dim f64 weight: f16 result
@example(case=BinaryCase(contiguous(()), contiguous((5, 6)), F64, BF16, 4))  # 0-dim f64 input: bf16 result
@example(case=BinaryCase(Layout((33, 17), (2, 3), 1, (1, 0)), Layout((17,), (2,), 3), F32, F16, 5))
@example(case=BinaryCase(Layout((4, 1, 6), offset=1), Layout((5, 1), perm=(1, 0)), F64, F32, 6))
@example(case=BinaryCase(Layout((1, 64), expand_to=(33, 64)), Layout((33, 1), expand_to=(33, 64)), F16, F16, 7))
@example(case=BinaryCase(contiguous((7, 33, 64)), contiguous((64,)), BF16, BF16, 8))  # threads, vector tails
def test_functional_matches_float64_reference(device, case):
    x, x_buffer, w, w_buffer = make_operands(case, device)
    x_before, w_before = snapshot(x_buffer), snapshot(w_buffer)

    result = OPS.weighted_sum(x, w)

    dtype = torch.result_type(x, w)
    assert result.dtype == dtype
    assert result.device == x.device
    assert tuple(result.shape) == tuple(torch.broadcast_shapes(x.shape, w.shape))
    assert result.stride() == (w * x.square()).stride()  # the composite's layout
    assert_within(result, reference64(x, w), dtype)
    assert torch.equal(x_buffer, x_before) and torch.equal(w_buffer, w_before), "an input was written"


@_settings(OUT_EXAMPLES)
@given(case=out_cases())
@example(case=OutCase(BinaryCase(contiguous((3, 4)), contiguous((4,)), F32, F32, 0), None, F16))
@example(
    case=OutCase(BinaryCase(contiguous((3, 4)), contiguous((4,)), F16, BF16, 1), Layout((3, 4), (2, 3), 1, (1, 0)), F64)
)
@example(case=OutCase(BinaryCase(contiguous((0, 4)), contiguous(()), F64, F64, 2), Layout((0, 4), (1, 2), 3), BF16))
@example(case=OutCase(BinaryCase(contiguous(()), contiguous(()), F64, F16, 3), contiguous(()), F32))
def test_out_holds_the_result_cast_to_its_dtype(device, case):
    x, x_buffer, w, w_buffer = make_operands(case.operands, device)
    shape = tuple(torch.broadcast_shapes(x.shape, w.shape))
    g = torch.Generator().manual_seed(case.operands.seed + 1)
    if case.out is None:
        out, out_buffer, mask = torch.empty(0, dtype=case.out_dtype, device=device), None, None
    else:
        out, out_buffer = case.out.make(case.out_dtype, device, g)
        out.fill_(float("nan"))  # poisoned: an element the op does not write stays NaN
        mask = case.out.mask(device)
    out_stride, out_ptr = out.stride(), out.data_ptr()
    out_before = None if out_buffer is None else snapshot(out_buffer)
    x_before, w_before = snapshot(x_buffer), snapshot(w_buffer)

    assert OPS.weighted_sum.out(x, w, out=out) is None

    assert out.dtype == case.out_dtype
    assert tuple(out.shape) == shape
    if case.out is not None:  # the right shape already: written in place, in its own layout
        assert out.stride() == out_stride and (out.data_ptr() == out_ptr or out.numel() == 0)
        assert_outside_unchanged(out_buffer, out_before, mask, "out")
    assert_within(out, reference64(x, w), torch.result_type(x, w), case.out_dtype)
    assert torch.equal(x_buffer, x_before) and torch.equal(w_buffer, w_before), "an input was written"


@_settings(INPLACE_EXAMPLES)
@given(case=inplace_cases())
@example(case=InplaceCase(contiguous((3, 4)), contiguous((4,)), F16, F64, 0))
@example(case=InplaceCase(Layout((5, 6), (2, 1), 1, (1, 0)), Layout((1, 6), expand_to=(5, 6)), BF16, F32, 1))
@example(case=InplaceCase(Layout((0, 6), (1, 3)), contiguous(()), F32, F32, 2))
@example(case=InplaceCase(contiguous(()), contiguous(()), F64, BF16, 3))
@example(case=InplaceCase(contiguous((7, 33, 64)), Layout((33, 1), offset=1), F32, F32, 4))
def test_in_place_holds_the_result_cast_to_self_dtype(device, case):
    g = torch.Generator().manual_seed(case.seed)
    s, s_buffer = case.self.make(case.self_dtype, device, g)
    w, w_buffer = case.weight.make(case.weight_dtype, device, g)
    expected = reference64(s, w)
    dtype = torch.result_type(s, w)
    s_before, w_before, mask = snapshot(s_buffer), snapshot(w_buffer), case.self.mask(device)
    stride, ptr = s.stride(), s.data_ptr()

    assert OPS.weighted_sum_(s, w) is None

    assert s.dtype == case.self_dtype and s.stride() == stride and s.data_ptr() == ptr
    assert_within(s, expected, dtype, case.self_dtype)
    assert_outside_unchanged(s_buffer, s_before, mask, "self")
    assert torch.equal(w_buffer, w_before), "weight was written"


# ---------------------------------------------------------------------------------------------
# The generators themselves (a broken layout builder would make the properties vacuous)
# ---------------------------------------------------------------------------------------------


def test_layouts_really_are_strided_offset_permuted_and_expanded():
    t, _ = Layout((3, 4), (2, 3), 1, (1, 0)).make(torch.float32, "cpu", torch.Generator().manual_seed(0))
    assert t.shape == (3, 4) and t.storage_offset() == 1 and not t.is_contiguous()
    # The block is (4*2, 3*3) = (8, 9), sliced [::2, ::3] to strides (18, 3), then transposed.
    assert t.stride() == (3, 18)
    e, _ = Layout((1, 4), expand_to=(5, 4)).make(torch.float32, "cpu", torch.Generator().manual_seed(0))
    assert e.shape == (5, 4) and e.stride()[0] == 0
    mask = Layout((3, 4), (2, 3), 1, (1, 0)).mask("cpu")
    assert int(mask.sum()) == 12 and not mask[0]
