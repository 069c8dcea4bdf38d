# SPDX-License-Identifier: BSD-3-Clause
"""The benchmark harness (bench/bench_harness.py) and bench_weighted_sum.py on the CPU at toy sizes:
every variant is checked before it is timed, each gets one JSON row with the ratios its targets
read, and the one evaluator judges the targets. run_bench serves the other benchmarks' tests."""

import json
import subprocess
import sys

import pytest
import torch

from environment import LIBRARY, REPO

# One thread, no torch.compile, two short rounds: a run of seconds that still takes every path.
TOY_SETTINGS = ("--threads", "1", "--no-compile", "--min-run-time", "0.02", "--rounds", "2")


def run_bench(script, *options, toy=TOY_SETTINGS):
    """Runs bench/<script> on the library under test; fails the test, with its output, if it fails."""
    command = [sys.executable, str(REPO / "bench" / script), "--library", str(LIBRARY), *options, *toy]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def approx_ratio(numerator_us, denominator_us, scale=1.0):
    """scale * numerator / denominator, a ratio the harness computed from two medians, as
    recomputed from its rows' medians, rounded to 0.001 us: exact up to that rounding and the
    ratio's own (4 decimals), whatever the times are, so the check holds for any timing and still
    tells one reference variant from another."""
    half = 0.0005
    low = scale * (numerator_us - half) / (denominator_us + half)
    high = scale * (numerator_us + half) / max(denominator_us - half, 1e-12)
    return pytest.approx((low + high) / 2, abs=(high - low) / 2 + 0.00005)


@pytest.fixture
def harness(monkeypatch):
    """bench_harness, imported as the scripts import it (bench/ on sys.path)."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import bench_harness

    return bench_harness


def test_cpu_run_writes_every_variant_with_its_ratios(tmp_path):
    output = tmp_path / "result.json"
    sizes = ("--min-log2", "10", "--max-log2", "11", "--host-max-log2", "10")
    cases = ("--dtypes", "float32,bfloat16", "--layouts", "contiguous,broadcast")
    run_bench("bench_weighted_sum.py", "--cpu", *sizes, *cases, "--output", str(output))
    data = json.loads(output.read_text())
    assert data["benchmark"] == "weighted_sum" and data["device"] == "cpu" and data["complete"] is True
    assert "median of 2 rounds" in data["timing"]

    forward = [row for row in data["rows"] if row["kind"] == "forward"]
    sizes = {(row["dtype"], row["layout"], row["log2n"]) for row in forward}
    assert sizes == {
        (d, lay, n) for d in ("float32", "bfloat16") for lay in ("contiguous", "broadcast") for n in (10, 11)
    }
    for size in sizes:
        variants = {row["variant"]: row for row in forward if (row["dtype"], row["layout"], row["log2n"]) == size}
        assert set(variants) == {"copy", "add_out", "add", "eager", "ours", "ours_out"}
        for row in variants.values():
            assert row["median_us"] > 0 and row["gbps"] > 0
            # vs_add is torch.add(out=)'s time over this variant's, as the targets read it.
            assert row["vs_add"] == approx_ratio(variants["add_out"]["median_us"], row["median_us"])

    fwd_bwd = [row for row in data["rows"] if row["kind"] == "fwd_bwd"]
    assert {row["variant"] for row in fwd_bwd} == {"ours_fwd_bwd", "eager_fwd_bwd", "add_fwd_bwd"}
    assert {(row["layout"], row["dtype"]) for row in fwd_bwd} == {
        (layout, dtype) for layout in ("contiguous", "broadcast") for dtype in ("float32", "bfloat16")
    }
    # The floor: the step's streams, x, w and grad read, y written, x and w read again, grad_x and
    # grad_w written (5 of x's size and 3 of w's), at the bandwidth copy_ (2 of x's size) reached.
    # Both times come from one timing of the row's group: the ratio holds for any timing.
    copies = {(r["dtype"], r["layout"], r["log2n"]): r for r in forward if r["variant"] == "copy"}
    for row in fwd_bwd:
        copy = copies[(row["dtype"], row["layout"], row["log2n"])]
        n = 1 << row["log2n"]
        w_numel = n if row["layout"] == "contiguous" else 1 << ((row["log2n"] - 1) // 2)
        itemsize = torch.empty((), dtype=getattr(torch, row["dtype"])).element_size()
        assert row["bytes"] == (5 * n + 3 * w_numel) * itemsize and copy["bytes"] == 2 * n * itemsize
        # floor_us and median_us are rounded to 1 ns: the tolerance is that rounding, not a timing's.
        expected_floor = copy["median_us"] * row["bytes"] / copy["bytes"]
        assert row["floor_us"] == pytest.approx(expected_floor, abs=0.0015 * row["bytes"] / copy["bytes"] + 0.001)
    assert {row["variant"] for row in data["rows"] if row["kind"] == "host"} == {"ours", "add", "eager"}
    assert any(target["target"].startswith("CPU") for target in data["summary"])


def test_cpu_run_of_the_per_channel_layouts(tmp_path):
    output = tmp_path / "result.json"
    layouts = "row_c1024,column_c1024,nchw_c1024"
    run_bench("bench_weighted_sum.py", "--cpu", "--min-log2", "10", "--max-log2", "12", "--host-max-log2", "10",
              "--dtypes", "float32", "--layouts", layouts, "--output", str(output))  # fmt: skip
    data = json.loads(output.read_text())
    fwd_bwd = [row for row in data["rows"] if row["kind"] == "fwd_bwd" and row["variant"] == "ours_fwd_bwd"]
    # n >= 2C only (2^10 has no [R >= 2, 1024] shape), forward+backward without --fwd-bwd-layouts.
    assert {(row["layout"], row["log2n"]): row["shape"] for row in fwd_bwd} == {
        ("row_c1024", 11): [2, 1024],
        ("row_c1024", 12): [4, 1024],
        ("column_c1024", 11): [2, 1024],
        ("column_c1024", 12): [4, 1024],
        ("nchw_c1024", 11): [2, 1024, 1, 1],
        ("nchw_c1024", 12): [2, 1024, 2, 1],
    }
    eager = {(row["layout"], row["log2n"]): row for row in data["rows"] if row["variant"] == "eager_fwd_bwd"}
    for row in fwd_bwd:
        # vs_eager is this step's time over eager's, as the CPU target reads it.
        other = eager[(row["layout"], row["log2n"])]
        assert row["vs_eager"] == approx_ratio(row["median_us"], other["median_us"])
    assert any("row_c1024" in target["target"] for target in data["summary"])


def test_transforms_run_times_ours_and_the_composite(tmp_path):
    output = tmp_path / "transforms.json"
    run_bench("bench_transforms.py", "--output", str(output), toy=("--rounds", "2", "--min-run-time", "0.02"))
    data = json.loads(output.read_text())
    assert data["benchmark"] == "transforms" and "median of 2 rounds" in data["timing"]
    workloads = {row["workload"]: row for row in data["rows"]}
    assert set(workloads) == {
        "per_sample_grads",
        "per_sample_grads_both",
        "forward_no_grad",
        "forward_grad",
        "forward_backward",
    }
    for row in workloads.values():  # the library supports every transform here
        assert row["error"] is None and row["ratio"] == pytest.approx(row["ours_us"] / row["composite_us"])


def test_check_stops_the_run_on_wrong_or_missing_values(harness):
    x, y = torch.randn(64), torch.empty(64)

    def square_into_y(call):
        return harness.Variant("ours_out", call, lambda: (x.double() ** 2,), 2 * x.nbytes)

    harness.check(square_into_y(lambda: torch.mul(x, x, out=y)), "float32 case", torch.float32, y)
    with pytest.raises(SystemExit, match=r"ours_out computes wrong values for float32 case"):
        harness.check(square_into_y(lambda: torch.add(x, x, out=y)), "float32 case", torch.float32, y)
    # y is filled with NaN before the call: an out= variant that writes nothing fails too.
    with pytest.raises(SystemExit, match="wrong values"):
        harness.check(square_into_y(lambda: y), "float32 case", torch.float32, y)


def test_check_bounds_a_sum_by_its_terms(harness):
    terms = torch.tensor([1e4, -1e4, 1.0], dtype=torch.float64)
    expected = lambda: (harness.Summed(terms.sum(), terms.abs().sum()),)
    # 4 eps of float32 times 20001 is 0.0095: an error of 0.005 passes, one of 0.05 does not.
    harness.check(harness.Variant("ours", lambda: torch.tensor(1.005), expected, 0), "case", torch.float32)
    with pytest.raises(SystemExit, match="over its bound"):
        harness.check(harness.Variant("ours", lambda: torch.tensor(1.05), expected, 0), "case", torch.float32)


def _row(variant, log2n, threads=None, **fields):
    return {"kind": "forward", "variant": variant, "dtype": "float32", "layout": "contiguous", "log2n": log2n,
            "threads": threads, **fields}  # fmt: skip


def test_evaluator_judges_the_worst_row_in_range_and_where_it_would_hold(harness):
    target = harness.Target("cuda", "forward", "ours ours_out", ("contiguous",), 24, "vs_add >= 0.97")
    rows = [_row("ours", 23, vs_add=0.5), _row("ours", 24, vs_add=0.96), _row("ours_out", 25, vs_add=0.99),
            _row("ours", 26, vs_add=1.01), _row("add", 26, vs_add=0.1)]  # fmt: skip
    [result] = harness.evaluate([target], rows, "cuda", None)
    assert result["status"] == "MISS" and result["worst"] == 0.96 and result["rows"] == 3
    assert result["at"] == "float32 contiguous n=2^24" and result["holds_from_log2"] == 25
    assert harness.evaluate([target], rows[2:], "cuda", None)[0]["status"] == "PASS"
    assert harness.evaluate([target], rows, "cpu", 2) == []  # another device's target


def test_evaluator_reads_cpu_rows_at_all_threads_and_bounds_above(harness):
    target = harness.Target("cpu", "forward", "ours", ("contiguous",), 20, "vs_eager < 1", max_log2=21)
    rows = [_row("ours", 20, 2, vs_eager=0.8), _row("ours", 21, 1, vs_eager=3.0), _row("ours", 22, 2, vs_eager=3.0)]
    [result] = harness.evaluate([target], rows, "cpu", 2)
    assert result["status"] == "PASS" and result["worst"] == 0.8 and result["rows"] == 1
    [result] = harness.evaluate([target], [_row("ours", 21, 2, vs_eager=1.0)], "cpu", 2)
    assert result["status"] == "MISS"  # strict


def test_results_json_is_json_with_one_line_per_row(harness, tmp_path):
    results = {
        "device": "cpu",
        "summary": [{"target": "t", "status": "PASS"}],
        "rows": [{"variant": "ours", "median_us": 1.5}, {"variant": "add", "median_us": 1.25}],
    }
    path = tmp_path / "r.json"
    harness.write_json(path, results)
    text = path.read_text()
    assert json.loads(text) == results
    row_lines = [line for line in text.splitlines() if '"variant"' in line]
    assert [json.loads(line.strip().rstrip(",")) for line in row_lines] == results["rows"]
