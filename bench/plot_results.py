#!/usr/bin/env python3
"""Draws achieved GB/s against size from a bench_weighted_sum.py results JSON.

One column per dtype; one row per forward layout (contiguous first), and a last row for
forward+backward, where the copy_ line is the bandwidth of the 8-stream floor. CPU results are
drawn at the default (all) thread count. Usage:

    python bench/plot_results.py bench/results/2026-01-01-h200.json [-o docs/bandwidth-h200.png]
"""

from __future__ import annotations

import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")  # files only: no display on the benchmark machines
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, MaxNLocator

REPO = pathlib.Path(__file__).resolve().parents[1]
FORWARD = ("copy", "add_out", "eager", "compile", "ours", "ours_out")
# Not add_fwd_bwd: it moves 3 streams, not 8, so in the panel's GB/s (8-stream bytes per second)
# it is a host limit far above the scale of the others; the JSON and the summary keep it.
FWD_BWD = ("ours_fwd_bwd", "eager_fwd_bwd", "compile_fwd_bwd", "ours_fwd_bwd_graph", "eager_fwd_bwd_graph")
LABELS = {
    "copy": "y.copy_(x) (2 streams)",
    "add_out": "torch.add(out=) (3 streams)",
    "eager": "eager w*x.pow(2)",
    "compile": "torch.compile w*x*x",
    "ours": "ours",
    "ours_out": "ours (out=)",
    "ours_fwd_bwd": "ours",
    "eager_fwd_bwd": "eager autograd",
    "compile_fwd_bwd": "torch.compile autograd",
    "ours_fwd_bwd_graph": "ours, CUDA-graph replay",
    "eager_fwd_bwd_graph": "eager autograd, CUDA-graph replay",
}
# The ceilings dotted/dashed, the contenders solid, their CUDA-graph replays dash-dotted.
STYLE = {"copy": ":", "add_out": "--", "ours_fwd_bwd_graph": "-.", "eager_fwd_bwd_graph": "-."}
# One colour per implementation, the same in the forward and the forward+backward panels.
COLORS = {
    "copy": "tab:gray",
    "add_out": "tab:blue",
    "eager": "tab:green",
    "compile": "tab:orange",
    "ours": "tab:red",
    "ours_out": "tab:purple",
    "ours_fwd_bwd": "tab:red",
    "eager_fwd_bwd": "tab:green",
    "compile_fwd_bwd": "tab:orange",
    "ours_fwd_bwd_graph": "tab:red",
    "eager_fwd_bwd_graph": "tab:green",
}


def series(rows, kind, variant, dtype, layout, threads):
    points = sorted(
        (row["log2n"], row["gbps"])
        for row in rows
        if row["kind"] == kind
        and row["variant"] == variant
        and row["dtype"] == dtype
        and row["layout"] == layout
        and row.get("threads") == threads
    )
    return [p[0] for p in points], [p[1] for p in points]


def panels(rows):
    """(title, kind, layout, variants) of each row of subplots that has data."""
    layouts = [
        layout
        for layout in ("contiguous", "broadcast", "transposed")
        if any(row["kind"] == "forward" and row["layout"] == layout for row in rows)
    ]
    found = [(f"forward, {layout}", "forward", layout, FORWARD) for layout in layouts]
    for layout in ("contiguous", "broadcast", "transposed"):
        if any(row["kind"] == "fwd_bwd" and row["layout"] == layout for row in rows):
            found.append((f"forward+backward, {layout}", "fwd_bwd", layout, FWD_BWD))
    return found


def plot(results: dict, path: pathlib.Path) -> pathlib.Path:
    rows = [row for row in results["rows"] if row["kind"] in ("forward", "fwd_bwd")]
    dtypes = list(dict.fromkeys(row["dtype"] for row in rows))
    # CPU: the largest thread count measured, normally the default "all"; None on the GPU.
    threads = max((row["threads"] for row in rows if row.get("threads")), default=None)
    grid = panels(rows)
    fig, axes = plt.subplots(
        len(grid), len(dtypes), figsize=(5.5 * len(dtypes), 3.8 * len(grid)), squeeze=False, sharex=True
    )
    for r, (title, kind, layout, variants) in enumerate(grid):
        for c, dtype in enumerate(dtypes):
            ax = axes[r][c]
            for variant in variants:
                x, y = series(rows, kind, variant, dtype, layout, threads)
                if x:
                    ax.plot(x, y, STYLE.get(variant, "-"), color=COLORS[variant], marker=".", label=LABELS[variant])
            if kind == "fwd_bwd":  # the floor runs at copy_'s bandwidth
                x, y = series(rows, "forward", "copy", dtype, layout, threads)
                ax.plot(x, y, ":", color=COLORS["copy"], label="floor (copy_ GB/s)")
            ax.set_title(f"{title}, {dtype}")
            ax.set_xlabel("elements")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"$2^{{{int(v)}}}$"))
            ax.tick_params(labelbottom=True)
            ax.set_ylabel("achieved GB/s")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    thread_note = f", {threads} threads" if threads else ""
    fig.suptitle(
        f"custom::weighted_sum on {results['device_name']}{thread_note}: torch {results['torch']}, "
        f"commit {(results.get('git_commit') or 'unknown')[:12]}, {results['date']}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_file(results_path: pathlib.Path, output: pathlib.Path | None = None) -> pathlib.Path:
    results = json.loads(pathlib.Path(results_path).read_text())
    return plot(results, output or REPO / "docs" / f"bandwidth-{results['device']}.png")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=pathlib.Path, help="a bench/results/*.json file")
    parser.add_argument("-o", "--output", type=pathlib.Path, help="PNG path (default docs/bandwidth-<device>.png)")
    args = parser.parse_args()
    print(f"wrote {plot_file(args.results, args.output)}")


if __name__ == "__main__":
    main()
