# SPDX-License-Identifier: BSD-3-Clause
"""The weighted_square_sum benchmark (bench/bench_weighted_square_sum.py) on the CPU at toy sizes:
it checks every variant before timing, writes one JSON row per variant, layout and size with the
ratios its targets read, names its file by date, device, benchmark and commit, and its targets
(data, judged by bench_harness.evaluate) read the floor from 2^26 and compile only where it is slow."""

import datetime
import json

import pytest

from environment import REPO
from test_bench_harness import approx_ratio, run_bench

LAYOUTS = ("full", "rows_c16384", "columns", "broadcast_row")


def test_cpu_run_writes_every_variant_with_its_ratios(tmp_path):
    result = run_bench(
        "bench_weighted_square_sum.py",
        "--device", "cpu", "--min-log2", "14", "--max-log2", "15", "--dtypes", "float32,bfloat16",
        "--layouts", ",".join(LAYOUTS), "--commit", "0123456789abcdef",
        "--out", str(tmp_path),  # a directory: the default name goes inside it
    )  # fmt: skip
    [output] = tmp_path.iterdir()
    assert output.name == f"{datetime.date.today().isoformat()}-cpu-weighted_square_sum-0123456.json"
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
        copy, ours, sum_x, same = variants["copy"], variants["ours"], variants["sum_x"], variants["sum_same_bytes"]
        # Ours' floor is the copy's time (2 streams of x's size, as copy_ moves), half of it where
        # w is one row read once; the result and a broadcast w add a little.
        streams = 1 if case[1] == "broadcast_row" else 2
        assert streams / 2 <= ours["floor_us"] / copy["median_us"] < streams / 2 * 1.2
        for row in variants.values():
            assert row["median_us"] > 0 and row["gbps"] > 0 and row["vs_compile"] is None
            # vs_sum and vs_sum_same_bytes compare bytes per second, vs_eager times.
            assert row["vs_sum"] == approx_ratio(sum_x["median_us"], row["median_us"], row["bytes"] / sum_x["bytes"])
            assert row["vs_sum_same_bytes"] == approx_ratio(
                same["median_us"], row["median_us"], row["bytes"] / same["bytes"]
            )
            assert row["vs_eager"] == approx_ratio(row["median_us"], variants["eager"]["median_us"])
        assert ours["compile_slow"] is None  # no compile measured

    # The CPU targets start at 2^20 (the pairs ones at 2^28): listed, without rows.
    assert len(data["summary"]) == 5 and all(t["target"].startswith("CPU") for t in data["summary"])
    assert all(target["status"] == "n/a" for target in data["summary"])
    assert "== targets" in result.stdout


@pytest.fixture
def judge(monkeypatch):
    """The benchmark's targets judged over rows: {"<field> <its layout, or all>": result}."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import bench_harness
    import bench_weighted_square_sum

    def judge(rows, device, all_threads):
        results = bench_harness.evaluate(bench_weighted_square_sum.TARGETS, rows, device, all_threads)

        def key(r):
            small = " small" if "<=n<=" in r["target"] else ""  # the 2^24-2^25 full-sum target
            several = "pairs" if r["layouts"][0].startswith("pairs") else "all"
            return r["test"].split()[0] + " " + (r["layouts"][0] if len(r["layouts"]) == 1 else several) + small

        return {key(r): r for r in results}

    return judge


def test_gpu_pairs_targets_judge_compile_eager_and_the_fma_floor_from_2_30(judge):
    rows = [
        _ours("pairs_n4096_m4096_d64", 30, 0.8, 0.3, vs_eager=0.02, vs_fma_floor=1.4),
        _ours("pairs_n1024_m1024_d4096", 32, 30.0, 1.2, vs_eager=0.5, vs_fma_floor=1.6),
    ]
    found = judge(rows, "cuda", None)
    assert found["vs_compile pairs"]["status"] == "MISS" and found["vs_compile pairs"]["worst"] == 1.2
    assert found["vs_eager pairs"]["status"] == "PASS" and found["vs_eager pairs"]["worst"] == 0.5
    assert found["vs_fma_floor pairs"]["status"] == "MISS" and found["vs_fma_floor pairs"]["worst"] == 1.6
    # No floor target reads them: their floor (a copy of x) is no bound for a pairwise sum.
    assert all(r["rows"] == 0 for k, r in found.items() if k.startswith("vs_floor"))


def _ours(layout, log2n, vs_floor, vs_compile=None, compile_slow=None, threads=None, **extra):
    row = {"kind": "square_sum", "variant": "ours", "dtype": "float32", "layout": layout, "log2n": log2n}
    return row | {
        "threads": threads,
        "vs_floor": vs_floor,
        "vs_compile": vs_compile,
        "compile_slow": compile_slow,
        **extra,
    }


def test_gpu_targets_judge_the_floor_from_2_26_and_columns_at_1_15(judge):
    rows = [
        _ours("full", 25, 1.30, 0.9, False),  # below 2^26: not judged
        _ours("full", 26, 1.04, 0.9, False),
        _ours("rows_c1024", 26, 1.06, 0.9, False),
        _ours("columns", 26, 1.12, 0.9, False),
        _ours("broadcast_row", 27, 1.01, 0.9, False),
    ]
    found = judge(rows, "cuda", None)
    assert found["vs_floor full"]["status"] == "PASS" and found["vs_floor full"]["worst"] == 1.04
    assert found["vs_floor full small"]["status"] == "PASS" and found["vs_floor full small"]["worst"] == 1.30
    assert found["vs_floor rows_c1024"]["status"] == "MISS"
    assert found["vs_floor rows_c16384"]["status"] == "n/a"
    assert found["vs_floor columns"]["status"] == "PASS"
    assert found["vs_floor broadcast_row"]["status"] == "PASS"
    # Compile within 1.05x the floor everywhere (compile_slow false): nothing to beat, it holds.
    compile_target = found["vs_compile all"]
    assert compile_target["status"] == "PASS" and compile_target["note"] == "no row where compile_slow"
    assert not any(result["target"].startswith("CPU") for result in found.values())


def test_gpu_compile_target_judges_only_where_compile_is_slow(judge):
    rows = [
        _ours("full", 26, 1.02, 0.95, True),
        _ours("columns", 27, 1.2, 1.01, True),
        _ours("full", 27, 1.0, 1.3, False),
    ]
    compile_target = judge(rows, "cuda", None)["vs_compile all"]
    assert compile_target["status"] == "MISS" and compile_target["worst"] == 1.01 and compile_target["rows"] == 2
    # Without compile measured (compile_slow null) the target has no rows at all.
    assert judge([_ours("full", 26, 1.0)], "cuda", None)["vs_compile all"]["status"] == "n/a"


def test_cpu_targets_read_all_threads_rows_from_2_20(judge):
    rows = [
        _ours("full", 20, 1.0, threads=2, vs_sum=0.95, vs_sum_same_bytes=1.1, vs_eager=0.5),
        _ours("rows_c1024", 21, 1.0, threads=2, vs_sum=0.85, vs_sum_same_bytes=0.92, vs_eager=0.6),
        _ours("full", 21, 1.0, threads=1, vs_sum=0.1, vs_sum_same_bytes=0.1, vs_eager=0.9),  # not all threads
        _ours("full", 19, 1.0, threads=2, vs_sum=0.1, vs_sum_same_bytes=0.1, vs_eager=0.9),  # below 2^20
    ]
    found = judge(rows, "cpu", 2)
    bandwidth, same_bytes, eager = found["vs_sum all"], found["vs_sum_same_bytes all"], found["vs_eager all"]
    assert bandwidth["status"] == "MISS" and bandwidth["worst"] == 0.85
    assert same_bytes["status"] == "PASS" and same_bytes["worst"] == 0.92
    assert eager["status"] == "PASS" and eager["worst"] == 0.6
    assert bandwidth["rows"] == same_bytes["rows"] == eager["rows"] == 2


def test_the_fma_floor_is_the_rows_terms_at_the_sgemm_rows_rate(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import bench_weighted_square_sum as bench

    side = bench.SGEMM_SIDE
    rows = [{"variant": "sgemm", "median_us": 2000.0}, {"variant": "ours", "median_us": 300.0}]
    bench.fma_floor(rows, side**3 // 16)  # a sixteenth of the product's FMAs: a floor of 125 us
    assert rows[0]["vs_fma_floor"] == 16.0 and rows[1]["vs_fma_floor"] == 2.4
