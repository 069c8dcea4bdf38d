# SPDX-License-Identifier: BSD-3-Clause
"""The CPU loops' streaming-store path (outputs larger than the last-level cache bypass it).

Tensors that large would make slow tests, so each test runs in a fresh process with
CUSTOM_OPS_CPU_STREAMING_MIN_BYTES set (the threshold is read once per process): 0 makes every
call take the streaming path, a huge value none. The streaming path must give the reference
values, bit for bit what the cached path gives, for every dtype, alignment and row shape.
"""

import os
import pathlib
import subprocess
import sys

import pytest
import torch

from environment import LIBRARY

ALWAYS, NEVER = "0", str(1 << 62)
TESTS_DIR = pathlib.Path(__file__).parent

# Outputs of every shape the streaming rows treat differently: lengths around the vector width
# (8 float, 16 half lanes), outputs offset from the vector alignment by 0-3 elements, weight
# contiguous, broadcast over rows, or one value per row (inner stride 0), a transposed input
# (no vector rows), an out= of a wider dtype, the fused backward, and tensors large enough to be
# split over threads.
CASES = """
import sys
import torch
torch.ops.load_library(sys.argv[1])
sys.path.insert(0, sys.argv[2])
from reference import (DTYPE_PAIRS, FLOAT_DTYPES, LAYOUT_NAMES, assert_close_to_reference, make_inputs,
                       reference)

torch.manual_seed(0)
results = []
for layout in LAYOUT_NAMES:
    for input_dtype, weight_dtype in DTYPE_PAIRS:
        x, w = make_inputs(layout, input_dtype, weight_dtype, "cpu")
        y = torch.ops.custom.weighted_sum(x, w)
        assert_close_to_reference(y, reference(x, w))
        results.append(y)
for dtype in FLOAT_DTYPES:
    for n in (1, 7, 15, 16, 17, 31, 33, 100, 1027):
        for offset in range(4):
            x = torch.randn(n + 2, dtype=dtype)[2:]
            weights = {"contiguous": torch.randn(n, dtype=dtype), "one value": torch.randn((), dtype=dtype)}
            for name, w in weights.items():
                out = torch.full((n + offset,), float("nan"), dtype=dtype)[offset:]
                torch.ops.custom.weighted_sum.out(x, w, out=out)
                assert_close_to_reference(out, reference(x, w))
                results.append(out)
            wider = torch.full((n,), float("nan"), dtype=torch.float64)  # out= of another dtype
            torch.ops.custom.weighted_sum.out(x, weights["contiguous"], out=wider)
            assert_close_to_reference(wider, reference(x, weights["contiguous"]), dtype)
            results.append(wider)
        rows = torch.randn(5, n, dtype=dtype)
        for w in (torch.randn(n, dtype=dtype), torch.randn(5, 1, dtype=dtype), torch.randn(n, 5, dtype=dtype).t()):
            y = torch.ops.custom.weighted_sum(rows, w)
            assert_close_to_reference(y, reference(rows, w))
            results.append(y)
        transposed = torch.randn(n, 5, dtype=dtype).t()
        results.append(torch.ops.custom.weighted_sum(transposed, torch.randn(n, dtype=dtype)))
        grad, x, w = (torch.randn(3, n + 1, dtype=dtype)[:, 1:] for _ in range(3))
        results.extend(torch.ops.custom.weighted_sum_backward(grad, x, w, [True, True]))
torch.set_num_threads(2)
for dtype in FLOAT_DTYPES:  # past at::parallel_for's grain size: threads write chunks, each fenced
    for shape in ((100_003,), (301, 1001)):
        x, w, grad = (torch.randn(shape, dtype=dtype) for _ in range(3))
        y = torch.ops.custom.weighted_sum(x, w[..., -1:] if len(shape) > 1 else w)
        assert_close_to_reference(y, reference(x, w[..., -1:] if len(shape) > 1 else w))
        results.append(y)
        results.extend(torch.ops.custom.weighted_sum_backward(grad, x, w, [True, True]))
torch.save(results, sys.argv[3])
print("ok")
"""


def run_cases(tmp_path, threshold, capability=None):
    saved = tmp_path / f"results-{threshold}-{capability}.pt"
    env = {**os.environ, "CUSTOM_OPS_CPU_STREAMING_MIN_BYTES": threshold}
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    result = subprocess.run(
        [sys.executable, "-c", CASES, str(LIBRARY), str(TESTS_DIR), str(saved)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0 and result.stdout.split()[-1:] == ["ok"], (
        result.stdout[-2000:] + result.stderr[-3000:]
    )
    return torch.load(saved)


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_streaming_path_matches_the_reference_and_the_cached_path_bit_for_bit(tmp_path, capability):
    streamed = run_cases(tmp_path, ALWAYS, capability)
    cached = run_cases(tmp_path, NEVER, capability)
    assert len(streamed) == len(cached) > 0
    for index, (a, b) in enumerate(zip(streamed, cached)):
        assert a.dtype == b.dtype and a.shape == b.shape, index
        assert torch.equal(a, b), f"result {index}: the streaming path differs from the cached path"


def test_a_malformed_threshold_is_ignored_with_a_warning():
    code = (
        "import torch, sys; torch.ops.load_library(sys.argv[1]); "
        "x = torch.arange(4.0); print(torch.ops.custom.weighted_sum(x, x).tolist())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(LIBRARY)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CUSTOM_OPS_CPU_STREAMING_MIN_BYTES": "lots"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[0.0, 1.0, 8.0, 27.0]"
    assert "ignoring CUSTOM_OPS_CPU_STREAMING_MIN_BYTES=lots" in result.stderr
