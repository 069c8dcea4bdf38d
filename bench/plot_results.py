#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Draws bench results as GB/s against size: bench_weighted_sum.py's (one or several files, merged;
per-channel rows as time over the floor; --fusion adds bench_fusion.py's ratios) or
bench_weighted_square_sum.py's (by its "benchmark"), with the floors and the targets' bounds.

    python bench/plot_results.py bench/results/A.json [B.json] [--fusion F.json] [-o docs/X.png]
"""

from __future__ import annotations

import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")  # files only: no display on the benchmark machines
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

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


DTYPES = ("float32", "bfloat16", "float16")
# Per-channel panels: the layout families and the C of the contenders' panel, the bound of the
# issue's target (bench_weighted_sum.TARGETS: ours <= 1.15x the 5-stream floor, n >= 2^26), and the
# sizes drawn: from 2^24, as below that a step is host-bound at up to ~50x the floor, which would
# squeeze 1.0 and 1.15 together on the scale.
PER_CHANNEL_FAMILIES = ("row", "column", "nchw")
PER_CHANNEL_C = 4096
PER_CHANNEL_BOUND = 1.15
PER_CHANNEL_MIN_LOG2 = 24
PER_CHANNEL_YLIM = (0.8, 12.0)
PER_CHANNEL = ("ours_fwd_bwd", "compile_fwd_bwd", "eager_fwd_bwd", "ours_fwd_bwd_graph")
# Colour per variant as elsewhere, except that the graph replay gets its own (the line style
# tells the layout here); line style and marker per layout family, colour per C.
PER_CHANNEL_COLORS = {**COLORS, "ours_fwd_bwd_graph": "tab:purple"}
FAMILY_STYLE = {"row": ("-", "o"), "column": ("--", "s"), "nchw": (":", "^")}
C_COLORS = {1024: "tab:blue", 4096: "tab:red", 16384: "tab:olive"}
FAMILY_SHAPES = {"row": "x [R, C], w [C]", "column": "x [R, C], w [R, 1]", "nchw": "x [N, C, H, W], w [C, 1, 1]"}
FUSION_BOUND = 1.05  # bench_fusion's target: the model with our op within 5% of the composite
FUSION = {
    "model_ours / model_composite": ("tab:red", "-", "model with ours / composite model"),
    "model_opaque / model_composite": ("tab:gray", "--", "ours opaque to Inductor / composite model"),
}


def series(rows, kind, variant, dtype, layout, threads, metric="gbps"):
    points = sorted(
        (row["log2n"], row[metric])
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


def per_channel_series(rows, variant, dtype, layout):
    """Time over the floor from PER_CHANNEL_MIN_LOG2 up (the GPU: no thread counts)."""
    x, y = series(rows, "fwd_bwd", variant, dtype, layout, None, "vs_floor")
    kept = [(size, ratio) for size, ratio in zip(x, y, strict=True) if size >= PER_CHANNEL_MIN_LOG2]
    return [p[0] for p in kept], [p[1] for p in kept]


def per_channel_layouts(rows) -> list[tuple[str, int]]:
    """(family, C) of each per-channel layout with forward+backward rows, in a fixed order."""
    found = {row["layout"] for row in rows if row["kind"] == "fwd_bwd" and "_c" in row["layout"]}
    pairs = [(layout.split("_c")[0], int(layout.split("_c")[1])) for layout in found]
    return sorted(pairs, key=lambda pair: (PER_CHANNEL_FAMILIES.index(pair[0]), pair[1]))


def format_size_axis(ax):
    ax.set_xlabel("elements")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"$2^{{{int(v)}}}$"))
    ax.tick_params(labelbottom=True)
    ax.grid(True, alpha=0.3)


def format_floor_axis(ax, bound, text):
    """Time over the 5-stream floor, log scale, with the floor and the target's bound."""
    ax.set_yscale("log")
    ax.set_ylim(*PER_CHANNEL_YLIM)
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 1.5, 2.0, 3.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.axhline(1.0, color="black", linewidth=0.8, alpha=0.6)
    ax.axhline(bound, color="black", linestyle="--", linewidth=1.0, label=text)
    ax.set_ylabel("time / 5-stream floor (log scale)")


def plot_per_channel_contenders(ax, rows, dtype, layouts):
    """ours, torch.compile, eager and ours' CUDA-graph replay at C = PER_CHANNEL_C, per family."""
    families = [family for family, c in layouts if c == PER_CHANNEL_C]
    for family in families:
        style, marker = FAMILY_STYLE[family]
        for variant in PER_CHANNEL:
            x, y = per_channel_series(rows, variant, dtype, f"{family}_c{PER_CHANNEL_C}")
            if x:
                ax.plot(x, y, style, color=PER_CHANNEL_COLORS[variant], marker=marker, markersize=4)
    format_floor_axis(ax, PER_CHANNEL_BOUND, f"target: ours <= {PER_CHANNEL_BOUND}x the floor")
    handles = [Line2D([], [], color=PER_CHANNEL_COLORS[variant], label=LABELS[variant]) for variant in PER_CHANNEL]
    handles += [
        Line2D([], [], linestyle=FAMILY_STYLE[f][0], marker=FAMILY_STYLE[f][1], color="black", label=FAMILY_SHAPES[f])
        for f in families
    ]
    handles += [Line2D([], [], color="black", linestyle="--", label=f"target {PER_CHANNEL_BOUND}x the floor")]
    ax.legend(handles=handles, fontsize=6.5, ncol=2, loc="upper right")
    ax.set_title(f"forward+backward, per-channel w, C={PER_CHANNEL_C}, {dtype}")


def plot_per_channel_ours(ax, rows, dtype, layouts):
    """ours alone at every measured (family, C)."""
    for family, c in layouts:
        style, marker = FAMILY_STYLE[family]
        x, y = per_channel_series(rows, "ours_fwd_bwd", dtype, f"{family}_c{c}")
        if x:
            ax.plot(x, y, style, color=C_COLORS.get(c, "black"), marker=marker, markersize=4, label=f"{family}, C={c}")
    format_floor_axis(ax, PER_CHANNEL_BOUND, f"target {PER_CHANNEL_BOUND}x the floor")
    ax.legend(fontsize=6.5, ncol=2, loc="upper right")
    ax.set_title(f"forward+backward, per-channel w, ours at each C, {dtype}")


def plot_fusion(ax, fusion: dict, dtype: str):
    """bench_fusion.py's two model ratios against size, with its 1.05 target."""
    for ratio, (color, style, label) in FUSION.items():
        points = sorted((row["log2_n"], row["ratios"][ratio]) for row in fusion["rows"] if row["dtype"] == dtype)
        ax.plot([p[0] for p in points], [p[1] for p in points], style, color=color, marker=".", label=label)
    ax.axhline(1.0, color="black", linewidth=0.8, alpha=0.6)
    ax.axhline(FUSION_BOUND, color="black", linestyle="--", linewidth=1.0, label=f"target {FUSION_BOUND}x")
    ax.set_ylim(0, None)
    ax.set_ylabel("time / compiled composite model")
    ax.set_title(f"torch.compile of relu(weighted_sum(a + b, w)) * 3, {dtype}")
    ax.legend(fontsize=7)


def plot(results: dict, path: pathlib.Path, fusion: dict | None = None) -> pathlib.Path:
    rows = [row for row in results["rows"] if row["kind"] in ("forward", "fwd_bwd")]
    order = {dtype: index for index, dtype in enumerate(DTYPES)}
    dtypes = sorted({row["dtype"] for row in rows}, key=lambda dtype: order.get(dtype, len(order)))
    # CPU: the largest thread count measured, normally the default "all"; None on the GPU.
    threads = max((row["threads"] for row in rows if row.get("threads")), default=None)
    grid = panels(rows)
    layouts = per_channel_layouts(rows) if threads is None else []  # the GPU targets' panels
    extra = []
    if any(c == PER_CHANNEL_C for _, c in layouts):
        extra.append(plot_per_channel_contenders)
    if layouts:
        extra.append(plot_per_channel_ours)
    fusion_dtypes = {row["dtype"] for row in fusion["rows"]} if fusion else set()
    height = len(grid) + len(extra) + bool(fusion_dtypes)
    fig, axes = plt.subplots(height, len(dtypes), figsize=(5.5 * len(dtypes), 3.8 * height), squeeze=False)
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
            format_size_axis(ax)
            ax.set_ylabel("achieved GB/s")
            ax.legend(fontsize=7)
    for r, draw in enumerate(extra, start=len(grid)):
        for c, dtype in enumerate(dtypes):
            if any(row["dtype"] == dtype and "_c" in row["layout"] for row in rows):
                draw(axes[r][c], rows, dtype, layouts)
                format_size_axis(axes[r][c])
            else:
                axes[r][c].set_axis_off()
    if fusion_dtypes:
        for c, dtype in enumerate(dtypes):
            if dtype in fusion_dtypes:
                plot_fusion(axes[-1][c], fusion, dtype)
                format_size_axis(axes[-1][c])
            else:
                axes[-1][c].set_axis_off()
    thread_note = f", {threads} threads" if threads else ""
    runs = ", ".join(dict.fromkeys(results.get("runs") or [run_name(results)]))
    if fusion:
        runs += f"; fusion: commit {fusion.get('commit') or 'unknown'}"
    fig.suptitle(f"custom::weighted_sum on {results['device_name']}{thread_note}: torch {results['torch']}, {runs}")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_figheight()))  # room for the title
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# bench_weighted_square_sum.py: its layouts, variants and the GPU targets' bounds on the floor
# (bench_weighted_square_sum.TARGETS).
SQUARE_SUM_LAYOUTS = {
    "full": "x, w [n], sum of all",
    "rows_c1024": "x, w [n/1024, 1024], dim -1",
    "rows_c16384": "x, w [n/16384, 16384], dim -1",
    "columns": "x, w [n/1024, 1024], dim 0",
    "broadcast_row": "x [n/1024, 1024], w [1024], sum of all",
}
SQUARE_SUM = {  # variant: (label, colour, line style)
    "ours": ("ours", "tab:red", "-"),
    "eager": ("eager (w*x.pow(2)).sum", "tab:green", "-"),
    "two_step": ("weighted_sum(x, w).sum", "tab:purple", "-"),
    "compile": ("torch.compile (w*x*x).sum", "tab:orange", "-"),
    "sum_x": ("torch.sum(x) (1 stream)", "tab:blue", "--"),
    "sum_same_bytes": ("torch.sum(x and w) (1 stream, ours' bytes)", "tab:cyan", ":"),
}
SQUARE_SUM_BOUNDS = {"columns": 1.15}  # else 1.05


def plot_square_sum(results: dict, path: pathlib.Path) -> pathlib.Path:
    """Bytes moved per second against size, a panel per layout and dtype; the floor dotted."""
    rows = [row for row in results["rows"] if row["kind"] == "square_sum"]
    order = {dtype: index for index, dtype in enumerate(DTYPES)}
    dtypes = sorted({row["dtype"] for row in rows}, key=lambda dtype: order.get(dtype, len(order)))
    layouts = [layout for layout in SQUARE_SUM_LAYOUTS if any(row["layout"] == layout for row in rows)]
    threads = max((row["threads"] for row in rows if row.get("threads")), default=None)
    fig, axes = plt.subplots(len(layouts), len(dtypes), figsize=(5.5 * len(dtypes), 3.8 * len(layouts)), squeeze=False)
    for r, layout in enumerate(layouts):
        for c, dtype in enumerate(dtypes):
            ax = axes[r][c]
            if not any(row["dtype"] == dtype and row["layout"] == layout for row in rows):
                ax.set_axis_off()
                continue
            for variant, (label, color, style) in SQUARE_SUM.items():
                x, y = series(rows, "square_sum", variant, dtype, layout, threads)
                if x:
                    ax.plot(x, y, style, color=color, marker=".", label=label)
            # The floor in ours' GB/s: ours' bytes over the floor's time.
            floor = sorted(
                (row["log2n"], row["bytes"] / row["floor_us"] / 1e3)
                for row in rows
                if row["variant"] == "ours"
                and row["dtype"] == dtype
                and row["layout"] == layout
                and row.get("threads") == threads
            )
            if floor:
                x, y = [p[0] for p in floor], [p[1] for p in floor]
                streams = "1 stream" if layout == "broadcast_row" else "2 streams"
                ax.plot(x, y, ":", color="tab:gray", label=f"floor ({streams} at copy_'s GB/s)")
                if threads is None:  # the GPU targets
                    bound = SQUARE_SUM_BOUNDS.get(layout, 1.05)
                    ax.plot(
                        x, [v / bound for v in y], "--", color="black", linewidth=0.8, label=f"target: floor / {bound}"
                    )
            ax.set_title(f"{layout}: {SQUARE_SUM_LAYOUTS[layout]}, {dtype}", fontsize=9)
            format_size_axis(ax)
            ax.set_ylabel("GB/s (bytes moved / time)")
            ax.set_ylim(0, None)
            ax.legend(fontsize=6.5)
    thread_note = f", {threads} threads" if threads else ""
    runs = ", ".join(dict.fromkeys(results.get("runs") or [run_name(results)]))
    fig.suptitle(
        f"custom::weighted_square_sum on {results['device_name']}{thread_note}: torch {results['torch']}, {runs}"
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_figheight()))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_name(results: dict) -> str:
    return f"commit {(results.get('git_commit') or 'unknown')[:12]}, {results['date']}"


def merge(files: list[dict]) -> dict:
    """One results dict of several: the first file's fields, the rows of all (a row measured in
    two files, the later file's), and in "runs" each file's commit and date."""
    merged = {}
    for results in files:
        for row in results["rows"]:
            key = (row["kind"], row["variant"], row["dtype"], row["layout"], row["log2n"], row.get("threads"))
            merged[key] = row
    return {**files[0], "rows": list(merged.values()), "runs": [run_name(results) for results in files]}


def plot_file(results_path, output: pathlib.Path | None = None, fusion_path: pathlib.Path | None = None):
    """Draws one results file, or a list of them merged, and optionally a bench_fusion.py JSON."""
    paths = [results_path] if isinstance(results_path, (str, pathlib.Path)) else list(results_path)
    results = merge([json.loads(pathlib.Path(path).read_text()) for path in paths])
    if results.get("benchmark") == "weighted_square_sum":
        return plot_square_sum(results, output or REPO / "docs" / f"bandwidth-square-sum-{results['device']}.png")
    fusion = json.loads(pathlib.Path(fusion_path).read_text()) if fusion_path else None
    return plot(results, output or REPO / "docs" / f"bandwidth-{results['device']}.png", fusion)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=pathlib.Path, nargs="+", help="bench/results/*.json files, drawn as one")
    parser.add_argument(
        "-o",
        "--output",
        type=pathlib.Path,
        help="PNG path (default docs/bandwidth-<device>.png; docs/bandwidth-square-sum-<device>.png for "
        "bench_weighted_square_sum.py's results)",
    )
    parser.add_argument("--fusion", type=pathlib.Path, help="a bench_fusion.py JSON: adds a row of its ratios")
    args = parser.parse_args()
    print(f"wrote {plot_file(args.results, args.output, args.fusion)}")


if __name__ == "__main__":
    main()
