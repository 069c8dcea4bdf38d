"""How bench_weighted_square_sum.py reports: the rows of the results JSON with the ratios its
targets read, the printed tables, the targets with their PASS/MISS summary, the file and the plot.
The rows are bench_harness.timed_row's with this benchmark's ratios; the tables are printed, the
targets judged and summarized, the JSON written and the plot drawn by weighted_sum_report's
functions, as the first benchmark's."""

from __future__ import annotations

import pathlib

import weighted_sum_report as first
from bench_harness import timed_row
from weighted_square_sum_variants import LAYOUTS
from weighted_sum_report import Target, evaluate, plot, results_json  # noqa: F401 (plot, results_json: re-exported)

BENCHMARK = "weighted_square_sum"  # the results JSON's "benchmark": plot_results.py draws by it
KIND = "square_sum"  # every row's "kind"
LABELS = {
    "copy": "y.copy_(x) floor",
    "sum_x": "torch.sum(x)",
    "sum_same_bytes": "torch.sum(x and w)",
    "eager": "eager (w*x^2).sum",
    "two_step": "weighted_sum().sum",
    "compile": "compile (w*x*x).sum",
    "ours": "ours",
}
# Where torch.compile's time is above this multiple of the floor, ours must beat it.
COMPILE_SLOW = 1.05


# ----------------------------------------------------------------------------------------------
# Rows


def timed_rows(case, shape, variants, times: dict) -> list[dict]:
    """One row per variant of a case, with

    vs_floor    this time / the floor: the variant's bytes at the bandwidth `copy` reached here
                (copy_ reads x and writes y, 2 streams of x's size, so ours' floor is the copy's
                time, and half of it for broadcast_row, whose w is read once)
    vs_sum      this variant's GB/s / torch.sum(x)'s: above 1, more bytes read per second than
                the 1-stream reduction of x alone (the CPU target)
    vs_sum_same_bytes  this variant's GB/s / torch.sum's over a tensor of x's and w's bytes (CPU
                only): the same comparison at ours' working set
    vs_eager    this time / eager's (below 1: faster)
    vs_compile  this time / torch.compile's
    vs_compile_slow  ours only: vs_compile where compile's time is above COMPILE_SLOW x the
                floor, else null (the target "ours ahead of compile wherever compile is slow")
    """
    copy = next(v for v in variants if v.name == "copy")
    by_name = {variant.name: variant for variant in variants}

    def floor_us(variant):
        return times["copy"] * variant.bytes / copy.bytes

    sum_gbps = by_name["sum_x"].bytes / times["sum_x"]
    same = by_name.get("sum_same_bytes")
    same_gbps = same.bytes / times[same.name] if same is not None else None
    rows = []
    for variant in variants:
        us = times[variant.name]
        row = {
            **timed_row(KIND, case, shape, variant, us),
            "floor_us": round(floor_us(variant), 3),
            "vs_floor": round(us / floor_us(variant), 4),
            "vs_sum": round(variant.bytes / us / sum_gbps, 4),
            "vs_sum_same_bytes": round(variant.bytes / us / same_gbps, 4) if same_gbps else None,
            "vs_eager": round(us / times["eager"], 4),
            "vs_compile": round(us / times["compile"], 4) if "compile" in times else None,
        }
        if variant.name == "ours":
            compile_slow = "compile" in times and times["compile"] > COMPILE_SLOW * floor_us(by_name["compile"])
            row["vs_compile_slow"] = row["vs_compile"] if compile_slow else None
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------
# Printing

ROW_FORMAT = "{:<20} {:<9} {:<13} {:>4} {:>5} {:>12} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9}"
# The ratio columns after weighted_sum_report.COLUMNS: the row field, and its column's title.
RATIOS = {
    "vs_floor": "vs floor",
    "vs_sum": "vs sum",
    "vs_sum_same_bytes": "vs same",
    "vs_eager": "vs eager",
    "vs_compile": "vs compile",
}


def print_header(threads, dtype, layout):
    first.print_header(threads, dtype, layout, ROW_FORMAT, RATIOS)


def print_rows(rows):
    first.print_rows(rows, ROW_FORMAT, RATIOS, LABELS)


# ----------------------------------------------------------------------------------------------
# The targets


def _ours(text, device, metric, bound, at_least, layouts, min_log2, **extra) -> Target:
    return Target(text, device, KIND, "ours", metric, bound, at_least, tuple(layouts), min_log2=min_log2, **extra)


def targets() -> list[Target]:
    found = []
    for layout, bound, floor in (
        ("full", 1.05, "2-stream"),
        ("rows_c1024", 1.05, "2-stream"),
        ("rows_c16384", 1.05, "2-stream"),
        ("columns", 1.15, "2-stream"),
        ("broadcast_row", 1.05, "1-stream (x)"),
    ):
        found.append(
            _ours(
                f"GPU {layout} n>=2^26, every dtype: ours <= {bound}x the {floor} floor",
                "cuda",
                "vs_floor",
                bound,
                False,
                (layout,),
                26,
            )
        )
    found.append(
        _ours(
            f"GPU n>=2^26, every dtype and layout: ours beats torch.compile where compile > {COMPILE_SLOW}x floor",
            "cuda",
            "vs_compile_slow",
            1.0,
            False,
            LAYOUTS,
            26,
            strict=True,
        )
    )
    found.append(
        _ours(
            "CPU n>=2^20, all threads, every dtype and layout: ours' GB/s >= 0.9x torch.sum(x)'s",
            "cpu",
            "vs_sum",
            0.9,
            True,
            LAYOUTS,
            20,
            all_threads=True,
        )
    )
    found.append(
        _ours(
            "CPU n>=2^20, all threads, every dtype and layout: ours' GB/s >= 0.9x torch.sum's over the same bytes",
            "cpu",
            "vs_sum_same_bytes",
            0.9,
            True,
            LAYOUTS,
            20,
            all_threads=True,
        )
    )
    found.append(
        _ours(
            "CPU n>=2^20, all threads, every dtype and layout: ours >= 1.5x faster than eager",
            "cpu",
            "vs_eager",
            1 / 1.5,
            False,
            LAYOUTS,
            20,
            all_threads=True,
        )
    )
    return found


def _vacuous(target: Target, rows) -> bool:
    """The compile target has no rows where torch.compile stayed within COMPILE_SLOW x the floor
    at every size: then it holds, as long as compile was measured at those sizes at all."""
    return target.metric == "vs_compile_slow" and any(
        row["kind"] == KIND
        and row["variant"] == "ours"
        and row.get("vs_compile") is not None
        and row["log2n"] >= target.min_log2
        for row in rows
    )


def evaluate_all(rows, device, all_threads) -> list[dict]:
    results = []
    for target in targets():
        result = evaluate(target, rows, device, all_threads)
        if result is None:
            continue
        if result["status"] == "n/a" and _vacuous(target, rows):
            result = {**result, "status": "PASS", "note": f"compile within {COMPILE_SLOW}x the floor at every size"}
        results.append(result)
    return results


def summarize(rows, device, all_threads) -> list[dict]:
    return first.print_summary(evaluate_all(rows, device, all_threads))


# ----------------------------------------------------------------------------------------------
# Files


def output_path(args, meta) -> pathlib.Path:
    """bench/results/<date>-<device>-square-sum-<commit>.json under --output-dir, or --output:
    a JSON path, or a directory (an existing one, or a path not ending in .json) to put that
    name in."""
    commit = (meta.get("git_commit") or "")[:7]
    name = f"{meta['date']}-{meta['device']}-square-sum" + (f"-{commit}" if commit else "") + ".json"
    if args.output is None:
        return args.output_dir / "bench" / "results" / name
    if args.output.is_dir() or args.output.suffix != ".json":
        return args.output / name
    return args.output
