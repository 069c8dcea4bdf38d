# SPDX-License-Identifier: BSD-3-Clause
"""custom::weighted_sum values: every dtype pair and layout against a float64 reference; special values
(NaN, +-Inf, -0.0, extremes, subnormals) exactly as `weight * input.square()` gives them."""

import pathlib

import pytest
import torch

from environment import LIBRARY, run_with_cpu_capability
from reference import (
    DTYPE_PAIRS,
    FLOAT_DTYPES,
    LAYOUT_NAMES,
    LOW_PRECISION,
    OPS,
    assert_close_to_reference,
    assert_storage_unchanged,
    broadcast_shape,
    dtype_name,
    exact_reference,
    make_inputs,
    reference,
    storage_snapshot,
)

pair_ids = [f"{dtype_name(a)}-{dtype_name(b)}" for a, b in DTYPE_PAIRS]


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("input_dtype,weight_dtype", DTYPE_PAIRS, ids=pair_ids)
def test_values_match_float64_reference(device, layout, input_dtype, weight_dtype):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    out = OPS.weighted_sum(x, w)
    expected = reference(x, w)
    assert out.dtype == expected.dtype
    assert_close_to_reference(out, expected)


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("input_dtype,weight_dtype", DTYPE_PAIRS, ids=pair_ids)
def test_output_dtype_shape_and_contiguity(device, layout, input_dtype, weight_dtype):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    out = OPS.weighted_sum(x, w)
    assert out.dtype == torch.result_type(x, w)
    assert out.shape == broadcast_shape(layout)
    assert out.stride() == (w * x.square()).stride()  # the composite's layout
    assert out.device == x.device
    assert not out.requires_grad


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dtype_name)
def test_float32_float64_bitwise_equal_to_composite_on_cpu(layout, dtype):
    x, w = make_inputs(layout, dtype, dtype, "cpu")
    out = OPS.weighted_sum(x, w)
    expected = w * x.square()
    assert out.dtype == expected.dtype
    assert torch.equal(out, expected)


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=dtype_name)
def test_half_bfloat16_round_once_from_float32_on_cpu(layout, dtype):
    # Computing in float32 and rounding once gives exactly what the float32 composite rounds to;
    # computing in the low-precision dtype (rounding x*x first) would not.
    x, w = make_inputs(layout, dtype, dtype, "cpu")
    out = OPS.weighted_sum(x, w)
    expected = (w.float() * x.float().square()).to(dtype)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("input_dtype,weight_dtype", DTYPE_PAIRS[::5], ids=pair_ids[::5])
def test_inputs_not_modified(device, layout, input_dtype, weight_dtype):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    x_bytes, w_bytes = storage_snapshot(x), storage_snapshot(w)
    x_meta = (x.shape, x.stride(), x.storage_offset())
    w_meta = (w.shape, w.stride(), w.storage_offset())
    OPS.weighted_sum(x, w)
    assert_storage_unchanged(x, x_bytes)
    assert_storage_unchanged(w, w_bytes)
    assert (x.shape, x.stride(), x.storage_offset()) == x_meta
    assert (w.shape, w.stride(), w.storage_offset()) == w_meta


def test_output_does_not_alias_inputs(device):
    x, w = make_inputs("same_shape", torch.float32, torch.float32, device)
    out = OPS.weighted_sum(x, w)
    assert out.untyped_storage().data_ptr() not in (
        x.untyped_storage().data_ptr(),
        w.untyped_storage().data_ptr(),
    )


# ---------------------------------------------------------------------------------------------
# NaN, +-Inf, -0.0, extremes and subnormals come out exactly as weight * input.square()
# ---------------------------------------------------------------------------------------------


def _special_values(dtype):
    info = torch.finfo(dtype)
    return [
        0.0, -0.0, 1.0, -1.0, 2.0, 2.5, 3.0, -3.0,
        float("nan"), float("inf"), float("-inf"),
        info.max, -info.max, info.tiny, -info.tiny, info.smallest_normal / 4,  # a subnormal
        float(info.max) ** 0.5 * 2, info.eps,  # the first: its square overflows
    ]  # fmt: skip


def special_grid(dtype, device):
    """(x, w): every special value of x against every special value of w, elementwise."""
    values = torch.tensor(_special_values(dtype), dtype=torch.float64).to(dtype)
    x = values.repeat_interleave(len(values)).to(device)
    w = values.repeat(len(values)).to(device)
    return x, w


def assert_identical(actual, expected):
    """Equal element for element, NaN where NaN, and the sign of every zero (and infinity) kept."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    a, e = actual.cpu(), expected.cpu()
    assert torch.equal(a.isnan(), e.isnan()), "NaN in different places"
    keep = ~e.isnan()
    assert torch.equal(a[keep], e[keep]), "values differ"
    assert torch.equal(a[keep].signbit(), e[keep].signbit()), "signs (of zeros) differ"


@pytest.mark.parametrize("input_dtype,weight_dtype", DTYPE_PAIRS, ids=pair_ids)
def test_special_values_propagate_exactly_as_weight_times_input_squared(device, input_dtype, weight_dtype):
    x, _ = special_grid(input_dtype, device)
    _, w = special_grid(weight_dtype, device)
    expected = exact_reference(x, w)
    assert_identical(OPS.weighted_sum(x, w), expected)
    out = torch.empty_like(expected)
    OPS.weighted_sum.out(x, w, out=out)
    assert_identical(out, expected)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_special_values_propagate_exactly_in_place(device, dtype):
    x, w = special_grid(dtype, device)
    expected = exact_reference(x, w)
    OPS.weighted_sum_(x, w)
    assert_identical(x, expected)


ZERO_CASES = {  # (x, w): a zero result whose sign is the sign of w, since x**2 >= +0
    "w=-0.0,x=2": (2.0, -0.0),
    "w=-0.0,x=-2": (-2.0, -0.0),
    "w=-1,x=0": (0.0, -1.0),
    "w=-1,x=-0.0": (-0.0, -1.0),
    "w=1,x=-0.0": (-0.0, 1.0),
    "w=-0.0,x=-0.0": (-0.0, -0.0),
    "w=0,x=-0.0": (-0.0, 0.0),
    "w=-1,x=tiny": ("tiny", -1.0),  # x**2 underflows to +0; for float16, w*x**2 rounds to -0.0
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("case", list(ZERO_CASES))
def test_signed_zero_results_keep_the_sign_of_the_weight(device, dtype, case):
    x_value, w_value = ZERO_CASES[case]
    if x_value == "tiny":
        x_value = torch.finfo(dtype).tiny
    x = torch.tensor([x_value], dtype=dtype, device=device)
    w = torch.tensor([w_value], dtype=dtype, device=device)
    result = OPS.weighted_sum(x, w)
    assert_identical(result, exact_reference(x, w))
    assert result.item() == 0
    assert bool(result.signbit()) == bool(w.signbit()), f"{result.item()!r} for w={w.item()!r}, x={x.item()!r}"


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_each_cpu_instruction_set_build_gives_the_reference_values(capability):
    # The CPU loops are compiled per instruction set and picked from ATen's capability; this
    # process runs one of them, so the others run in a fresh process with ATEN_CPU_CAPABILITY.
    code = f"""
import torch
torch.ops.load_library({str(LIBRARY)!r})
import sys; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
from reference import (DTYPE_PAIRS, LAYOUT_NAMES, assert_close_sum, assert_close_to_reference, gradient_reference,
                       make_inputs, reference)
print(torch.backends.cpu.get_cpu_capability())
for layout in LAYOUT_NAMES:
    for input_dtype, weight_dtype in DTYPE_PAIRS:
        x, w = make_inputs(layout, input_dtype, weight_dtype, "cpu")
        assert_close_to_reference(torch.ops.custom.weighted_sum(x, w), reference(x, w))
        if input_dtype == weight_dtype and x.shape == w.shape:
            grad = torch.randn(x.shape, dtype=input_dtype)
            got = torch.ops.custom.weighted_sum_backward(grad, x, w, [True, True])
            for actual, (expected, scale) in zip(got, gradient_reference(grad, x, w)):
                assert_close_sum(actual, expected, scale, actual.dtype)
print("ok")
"""
    output = run_with_cpu_capability(code, capability)
    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":  # else ATen cannot raise it to AVX2
        assert output.split()[0] == capability.upper()
