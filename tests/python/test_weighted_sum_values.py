"""custom::weighted_sum values: every dtype pair and layout against a float64 reference."""
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from environment import LIBRARY
from reference import (
    DTYPE_PAIRS,
    LAYOUT_NAMES,
    LOW_PRECISION,
    OPS,
    assert_close_to_reference,
    assert_storage_unchanged,
    broadcast_shape,
    dtype_name,
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


def test_special_values_propagate(device):
    x = torch.tensor([float("inf"), float("nan"), 0.0, -0.0, float("inf"), 3.0], device=device)
    w = torch.tensor([2.0, 1.0, float("inf"), -1.0, 0.0, float("-inf")], device=device)
    out = OPS.weighted_sum(x, w)
    torch.testing.assert_close(out, w * x.square(), equal_nan=True, rtol=0, atol=0)


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
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "ATEN_CPU_CAPABILITY": capability})
    assert result.returncode == 0 and result.stdout.split()[-1] == "ok", result.stdout[-2000:] + result.stderr[-3000:]
    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":  # else ATen cannot raise it to AVX2
        assert result.stdout.split()[0] == capability.upper()
