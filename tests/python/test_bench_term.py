# SPDX-License-Identifier: BSD-3-Clause
"""bench/bench_term.py on the CPU at toy sizes, for every operator of the table (a generated one
too): ours is checked against its term's error bound before it is timed, each variant gets one
row per size, and the ratios its targets read come from the medians of those rows."""

import json
import subprocess
import sys

import pytest
import torch

from environment import REPO
from operators import ELEMENTWISE, each_operator
from test_bench_harness import approx_ratio, run_bench


@each_operator
def test_cpu_run_times_the_operator_against_its_composite(tmp_path, op):
    output = tmp_path / "result.json"
    sizes = ("--min-log2", "10", "--max-log2", "11", "--dtypes", "float32,bfloat16")
    run_bench("bench_term.py", "--cpu", "--op", op.name, *sizes, "--output", str(output))
    data = json.loads(output.read_text())
    assert data["benchmark"] == f"term-{op.name}" and data["device"] == "cpu" and data["complete"] is True
    elementwise = op.kind == ELEMENTWISE
    names = {"copy", "eager", "ours"} | ({"add_out", "ours_out"} if elementwise else {"sum_x"})
    for dtype in ("float32", "bfloat16"):
        for log2n in (10, 11):
            rows = {row["variant"]: row for row in data["rows"] if (row["dtype"], row["log2n"]) == (dtype, log2n)}
            assert set(rows) == names, (dtype, log2n)  # --no-compile: no compile row
            ours, copy, eager = rows["ours"], rows["copy"], rows["eager"]
            assert ours["kind"] == ("forward" if elementwise else "sum")
            element = 4 if dtype == "float32" else 2
            assert ours["bytes"] == (3 << log2n if elementwise else (2 << log2n) + 1) * element
            assert ours["floor_us"] == approx_ratio(copy["median_us"], 1, ours["bytes"] / copy["bytes"])
            assert ours["vs_eager"] == approx_ratio(ours["median_us"], eager["median_us"])
            assert ours["vs_compile"] is None
            if elementwise:
                assert ours["vs_add"] == approx_ratio(rows["add_out"]["median_us"], ours["median_us"])


def test_an_operator_not_in_the_table_is_refused():
    command = [sys.executable, str(REPO / "bench" / "bench_term.py"), "--cpu", "--op", "no_such_op"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "'no_such_op' is not in the table" in result.stderr


def test_a_value_outside_its_bound_aborts_the_run(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import bench_harness

    expected = torch.tensor([1.0, 2.0], dtype=torch.float64)
    bound = bench_harness.Within(expected, torch.full((2,), 0.1, dtype=torch.float64))
    right = bench_harness.Variant("ours", lambda: torch.tensor([1.05, 1.95]), lambda: (bound,), 8)
    bench_harness.check(right, "a case", torch.float32)
    wrong = bench_harness.Variant("ours", lambda: torch.tensor([1.0, 2.5]), lambda: (bound,), 8)
    with pytest.raises(SystemExit, match="ours computes wrong values for a case"):
        bench_harness.check(wrong, "a case", torch.float32)
