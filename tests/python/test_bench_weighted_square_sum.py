"""The weighted_square_sum benchmark (bench/bench_weighted_square_sum.py) on the CPU, at toy
sizes: it checks every variant's values before timing, writes one JSON row per variant, layout and
size with the ratios its targets read, names its file by date, device and commit, and judges the
targets (PASS, MISS, and the compile target that holds where compile is never slow)."""

import datetime
import json

import pytest

from environment import REPO
from test_bench_harness import run_bench

LAYOUTS = ("full", "rows_c16384", "columns", "broadcast_row")


def test_cpu_run_writes_every_variant_with_its_ratios(tmp_path):
    result = run_bench(  # one thread, no torch.compile, two short rounds
        "bench_weighted_square_sum.py",
        "--device",
        "cpu",
        "--min-log2",
        "14",
        "--max-log2",
        "15",
        "--dtypes",
        "float32,bfloat16",
        "--layouts",
        ",".join(LAYOUTS),
        "--commit",
        "0123456789abcdef",
        "--out",
        str(tmp_path),  # a directory: the default name goes inside it
    )
    [output] = tmp_path.iterdir()
    assert output.name == f"{datetime.date.today().isoformat()}-cpu-square-sum-0123456.json"
    data = json.loads(output.read_text())
    assert data["benchmark"] == "weighted_square_sum" and data["complete"] is True
    assert data["git_commit"] == "0123456789abcdef" and "median of 2 rounds" in data["timing"]

    rows = data["rows"]
    assert {row["kind"] for row in rows} == {"square_sum"}
    # rows_c16384 only where n >= 2C: [2, 16384] at 2^15, no shape at 2^14.
    cases = {(row["dtype"], row["layout"], row["log2n"]): row["shape"] for row in rows if row["variant"] == "ours"}
    expected_shapes = {"full": [1 << 15], "rows_c16384": [2, 16384], "columns": [32, 1024], "broadcast_row": [32, 1024]}
    assert cases == {
        **{(dtype, layout, 15): expected_shapes[layout] for dtype in ("float32", "bfloat16") for layout in LAYOUTS},
        **{
            (dtype, layout, 14): [1 << 14] if layout == "full" else [16, 1024]
            for dtype in ("float32", "bfloat16")
            for layout in ("full", "columns", "broadcast_row")
        },
    }
    for case in cases:
        variants = {row["variant"]: row for row in rows if (row["dtype"], row["layout"], row["log2n"]) == case}
        assert set(variants) == {"copy", "sum_x", "sum_same_bytes", "eager", "two_step", "ours"}
        copy, ours, sum_x = variants["copy"], variants["ours"], variants["sum_x"]
        assert copy["vs_floor"] == 1.0 and sum_x["vs_sum"] == 1.0 and variants["eager"]["vs_eager"] == 1.0
        # Ours' floor is the copy's time (2 streams of x's size, as copy_ moves), half of it where
        # w is one row read once; the result and a broadcast w add a little.
        streams = 1 if case[1] == "broadcast_row" else 2
        assert streams / 2 <= ours["floor_us"] / copy["median_us"] < streams / 2 * 1.2
        for row in variants.values():
            assert row["median_us"] > 0 and row["gbps"] > 0 and row["vs_compile"] is None
            assert abs(row["vs_floor"] - row["median_us"] / row["floor_us"]) < 0.01 * row["vs_floor"]
            # vs_sum compares bytes per second with torch.sum(x)'s, vs_eager times with eager's.
            bandwidth = (row["bytes"] / row["median_us"]) / (sum_x["bytes"] / sum_x["median_us"])
            assert abs(row["vs_sum"] - bandwidth) < 0.01 * row["vs_sum"]
            assert abs(row["vs_eager"] - row["median_us"] / variants["eager"]["median_us"]) < 0.01 * row["vs_eager"]
            # vs_sum_same_bytes: the same, against torch.sum over x's and w's bytes in one tensor.
            same = variants["sum_same_bytes"]
            bandwidth = (row["bytes"] / row["median_us"]) / (same["bytes"] / same["median_us"])
            assert abs(row["vs_sum_same_bytes"] - bandwidth) < 0.01 * row["vs_sum_same_bytes"]
        assert ours["vs_compile_slow"] is None  # no compile measured

    # The CPU targets start at 2^20: listed, without rows.
    summary = {target["target"]: target for target in data["summary"]}
    assert len(summary) == 3 and all(text.startswith("CPU") for text in summary)
    assert all(target["status"] == "n/a" for target in summary.values())
    assert "== targets" in result.stdout and "ours" in result.stdout


@pytest.fixture
def report(monkeypatch):
    """The benchmark's report module, imported as the script imports it (bench/ on sys.path)."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import weighted_square_sum_report

    return weighted_square_sum_report


def _ours(layout, log2n, vs_floor, vs_compile=None, vs_compile_slow=None, **extra):
    return {
        "kind": "square_sum",
        "variant": "ours",
        "dtype": "float32",
        "layout": layout,
        "log2n": log2n,
        "threads": None,
        "vs_floor": vs_floor,
        "vs_compile": vs_compile,
        "vs_compile_slow": vs_compile_slow,
        **extra,
    }


def _by_target(results):
    return {result["target"].split(":")[0]: result for result in results}


def test_gpu_targets_judge_the_floor_from_2_26_and_columns_at_1_15(report):
    rows = [
        _ours("full", 25, 1.30, 0.9),  # below 2^26: not judged
        _ours("full", 26, 1.04, 0.9),
        _ours("rows_c1024", 26, 1.06, 0.9),
        _ours("columns", 26, 1.12, 0.9),
        _ours("broadcast_row", 27, 1.01, 0.9),
    ]
    found = _by_target(report.evaluate_all(rows, "cuda", None))
    assert found["GPU full n>=2^26, every dtype"]["status"] == "PASS"
    assert found["GPU full n>=2^26, every dtype"]["worst"] == 1.04
    assert found["GPU rows_c1024 n>=2^26, every dtype"]["status"] == "MISS"
    assert found["GPU rows_c16384 n>=2^26, every dtype"]["status"] == "n/a"
    assert found["GPU columns n>=2^26, every dtype"]["status"] == "PASS"
    assert found["GPU broadcast_row n>=2^26, every dtype"]["status"] == "PASS"
    # Compile within 1.05x the floor everywhere (vs_compile_slow null): the target holds.
    compile_target = found["GPU n>=2^26, every dtype and layout"]
    assert compile_target["status"] == "PASS" and "note" in compile_target
    assert not any(result["target"].startswith("CPU") for result in found.values())


def test_gpu_compile_target_judges_only_where_compile_is_slow(report):
    rows = [_ours("full", 26, 1.02, 0.95, 0.95), _ours("columns", 27, 1.2, 1.01, 1.01), _ours("full", 27, 1.0, 1.3)]
    found = _by_target(report.evaluate_all(rows, "cuda", None))
    compile_target = found["GPU n>=2^26, every dtype and layout"]
    assert compile_target["status"] == "MISS" and compile_target["worst"] == 1.01 and compile_target["rows"] == 2


def test_cpu_targets_read_all_threads_rows_from_2_20(report):
    rows = [
        _ours("full", 20, 1.0, threads=2, vs_sum=0.95, vs_sum_same_bytes=1.1, vs_eager=0.5),
        _ours("rows_c1024", 21, 1.0, threads=2, vs_sum=0.85, vs_sum_same_bytes=0.92, vs_eager=0.6),
        _ours("full", 21, 1.0, threads=1, vs_sum=0.1, vs_sum_same_bytes=0.1, vs_eager=0.9),  # not all threads
        _ours("full", 19, 1.0, threads=2, vs_sum=0.1, vs_sum_same_bytes=0.1, vs_eager=0.9),  # below 2^20
    ]
    bandwidth, same_bytes, eager = report.evaluate_all(rows, "cpu", 2)
    assert "torch.sum(x)" in bandwidth["target"] and bandwidth["status"] == "MISS" and bandwidth["worst"] == 0.85
    assert "same bytes" in same_bytes["target"] and same_bytes["status"] == "PASS" and same_bytes["worst"] == 0.92
    assert "eager" in eager["target"] and eager["status"] == "PASS" and eager["worst"] == 0.6
    assert bandwidth["rows"] == same_bytes["rows"] == eager["rows"] == 2
