# SPDX-License-Identifier: BSD-3-Clause
"""The random-shapes benchmark (bench/bench_random_shapes.py) on the CPU at toy sizes: its draws
follow the seed alone and cover both operators, broadcasts, layouts and reduced dims; every case is
checked before timing and gets one row per variant with its ratio to eager; the target reads them."""

import json
import random

import pytest
import torch

from environment import REPO
from test_bench_harness import approx_ratio, run_bench


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import bench_random_shapes

    return bench_random_shapes


def test_draws_follow_the_seed_and_cover_operators_broadcasts_and_layouts(bench):
    def texts(seed):
        rng = random.Random(seed)
        return [bench.draw(rng, torch.float32, "cpu", 8, 12)["text"] for _ in range(64)]

    first = texts(0)
    assert texts(0) == first and texts(1) != first
    assert any(t.startswith("weighted_sum ") for t in first) and any("dims=" in t for t in first)
    assert any("dims=None" in t for t in first) and any("keep=True" in t for t in first)
    for layout in ("contiguous", "transposed", "strided", "permuted"):
        assert any(f":{layout}" in t for t in first), layout
    rng = random.Random(2)
    cases = [bench.draw(rng, torch.float32, "cpu", 8, 12) for _ in range(64)]
    # Each operand broadcasts along some dim in some case; never both along one dim.
    assert any(1 in c["x"].shape for c in cases) and any(
        1 in c["w"].shape or c["w"].dim() < c["x"].dim() for c in cases
    )
    for c in cases:
        shape = torch.broadcast_shapes(c["x"].shape, c["w"].shape)
        assert shape.numel() <= 2**14, c["text"]  # 2^12 at most, sizes up to 3 off a power of two


def test_cpu_run_writes_a_row_per_case_and_variant_and_judges_vs_eager(tmp_path):
    output = tmp_path / "random.json"
    run_bench(
        "bench_random_shapes.py", "--device", "cpu", "--cases", "6", "--seed", "3", "--min-log2", "8",
        "--max-log2", "10", "--dtypes", "float32,bfloat16", "--output", str(output),
        toy=("--no-compile", "--min-run-time", "0.02", "--rounds", "2"),  # all threads: what the target reads
    )  # fmt: skip
    data = json.loads(output.read_text())
    assert data["benchmark"] == "random_shapes" and data["complete"] is True
    ours = [row for row in data["rows"] if row["variant"] == "ours"]
    assert len(ours) == 12 and len({row["case"] for row in ours}) == 12
    by_case = {(row["case"], row["variant"]): row for row in data["rows"]}
    for row in ours:
        eager = by_case[(row["case"], "eager")]
        assert row["vs_eager"] == approx_ratio(row["median_us"], eager["median_us"])
        assert row["vs_compile"] is None  # --no-compile
    [target] = data["summary"]
    assert target["target"].startswith("CPU") and target["rows"] == 12
    assert target["worst"] == max(row["vs_eager"] for row in ours)
