"""The benchmark harness (bench/bench_weighted_sum.py) on the CPU, at toy sizes: it checks every
variant's values before timing, and writes one JSON row per variant, size and thread count with
the ratios its targets are judged on. run_bench runs a benchmark at toy settings for the other
benchmarks' tests too (test_bench_weighted_square_sum.py)."""

import json
import subprocess
import sys

import pytest
import torch

from environment import LIBRARY, REPO

# One thread, no torch.compile, two short rounds: a run of seconds that still takes every path.
TOY_SETTINGS = ("--threads", "1", "--no-compile", "--min-run-time", "0.02", "--rounds", "2")


def run_bench(script, *options):
    """Runs bench/<script> on the CPU build of the library with `options` at TOY_SETTINGS; fails
    the test, with the end of its output, where the run fails."""
    command = [sys.executable, str(REPO / "bench" / script), "--library", str(LIBRARY), *options, *TOY_SETTINGS]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_cpu_run_writes_every_variant_with_its_ratios(tmp_path):
    output = tmp_path / "result.json"
    run_bench(
        "bench_weighted_sum.py",
        "--cpu",
        "--min-log2",
        "10",
        "--max-log2",
        "11",
        "--host-max-log2",
        "10",
        "--dtypes",
        "float32,bfloat16",
        "--layouts",
        "contiguous,broadcast",
        "--output",
        str(output),
    )
    data = json.loads(output.read_text())
    assert data["device"] == "cpu" and "median of 2 rounds" in data["timing"]

    forward = [row for row in data["rows"] if row["kind"] == "forward"]
    sizes = {(row["dtype"], row["layout"], row["log2n"]) for row in forward}
    assert sizes == {
        (dtype, layout, n)
        for dtype in ("float32", "bfloat16")
        for layout in ("contiguous", "broadcast")
        for n in (10, 11)
    }
    for size in sizes:
        variants = {row["variant"]: row for row in forward if (row["dtype"], row["layout"], row["log2n"]) == size}
        assert set(variants) == {"copy", "add_out", "add", "eager", "ours", "ours_out"}
        assert variants["add_out"]["vs_add"] == 1.0
        for row in variants.values():
            assert row["median_us"] > 0 and row["gbps"] > 0
            # vs_add is torch.add(out=)'s time over this variant's, as the targets read it.
            assert abs(row["vs_add"] - variants["add_out"]["median_us"] / row["median_us"]) < 0.01 * row["vs_add"]

    fwd_bwd = [row for row in data["rows"] if row["kind"] == "fwd_bwd"]
    assert {row["variant"] for row in fwd_bwd} == {"ours_fwd_bwd", "eager_fwd_bwd", "add_fwd_bwd"}
    # Forward+backward runs on the contiguous and the broadcast layouts (by default).
    assert {(row["layout"], row["dtype"]) for row in fwd_bwd} == {
        (layout, dtype) for layout in ("contiguous", "broadcast") for dtype in ("float32", "bfloat16")
    }
    assert all(row["vs_floor"] > 0 for row in fwd_bwd)
    assert {row["variant"] for row in data["rows"] if row["kind"] == "host"} == {"ours", "add", "eager"}
    assert any(target["target"].startswith("CPU") for target in data["summary"])


def test_cpu_run_of_the_per_channel_layouts(tmp_path):
    output = tmp_path / "result.json"
    run_bench(
        "bench_weighted_sum.py",
        "--cpu",
        "--min-log2",
        "10",
        "--max-log2",
        "12",
        "--host-max-log2",
        "10",
        "--dtypes",
        "float32",
        "--layouts",
        "row_c1024,column_c1024,nchw_c1024",
        "--output",
        str(output),
    )
    data = json.loads(output.read_text())
    fwd_bwd = [row for row in data["rows"] if row["kind"] == "fwd_bwd" and row["variant"] == "ours_fwd_bwd"]
    # n >= 2C only (2^10 has no [R >= 2, 1024] shape), forward+backward without --fwd-bwd-layouts.
    shapes = {(row["layout"], row["log2n"]): row["shape"] for row in fwd_bwd}
    assert shapes == {
        ("row_c1024", 11): [2, 1024],
        ("row_c1024", 12): [4, 1024],
        ("column_c1024", 11): [2, 1024],
        ("column_c1024", 12): [4, 1024],
        ("nchw_c1024", 11): [2, 1024, 1, 1],
        ("nchw_c1024", 12): [2, 1024, 2, 1],
    }
    eager = {(row["layout"], row["log2n"]): row for row in data["rows"] if row["variant"] == "eager_fwd_bwd"}
    for row in fwd_bwd:
        assert row["vs_floor"] > 0
        # vs_eager is this step's time over eager's, as the CPU target reads it.
        other = eager[(row["layout"], row["log2n"])]
        assert abs(row["vs_eager"] - row["median_us"] / other["median_us"]) < 0.01 * row["vs_eager"]
    assert any("per-channel" in target["target"] for target in data["summary"])


@pytest.fixture
def bench_modules(monkeypatch):
    """The benchmark's modules, imported as the script imports them (bench/ on sys.path)."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import bench_harness
    import weighted_sum_report

    return bench_harness, weighted_sum_report


def test_check_stops_the_run_on_wrong_or_missing_values(bench_modules):
    harness, _ = bench_modules
    x, y = torch.randn(64), torch.empty(64)

    def square_into_y(call):
        return harness.Variant("ours_out", call, lambda: (x.double() ** 2,), 2 * x.nbytes)

    harness.check(square_into_y(lambda: torch.mul(x, x, out=y)), "ours(out=)", "float32 case", torch.float32, y)
    with pytest.raises(SystemExit, match=r"ours\(out=\) computes wrong values for float32 case"):
        harness.check(square_into_y(lambda: torch.add(x, x, out=y)), "ours(out=)", "float32 case", torch.float32, y)
    # y is filled with NaN before the call: an out= variant that writes nothing fails too.
    with pytest.raises(SystemExit, match="wrong values"):
        harness.check(square_into_y(lambda: y), "ours(out=)", "float32 case", torch.float32, y)


def test_results_json_is_json_with_one_line_per_row(bench_modules):
    _, report = bench_modules
    results = {
        "device": "cpu",
        "summary": [{"target": "t", "status": "PASS"}],
        "rows": [{"variant": "ours", "median_us": 1.5}, {"variant": "add", "median_us": 1.25}],
    }
    text = report.results_json(results)
    assert json.loads(text) == results
    row_lines = [line for line in text.splitlines() if '"variant"' in line]
    assert [json.loads(line.strip().rstrip(",")) for line in row_lines] == results["rows"]
