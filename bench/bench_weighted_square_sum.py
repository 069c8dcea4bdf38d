#!/usr/bin/env python3
"""Bandwidth benchmark of torch.ops.custom.weighted_square_sum ((w * x**2).sum(dims) in one pass).

One process measures, side by side, on the GPU (or with --device cpu on the CPU):

  ours       torch.ops.custom.weighted_square_sum(x, w, dims)
  eager      (w * x.pow(2)).sum(dims)                 the eager composite (two kernels, a temporary)
  two_step   torch.ops.custom.weighted_sum(x, w).sum(dims)   our first op, then torch.sum
  compile    torch.compile((w * x * x).sum(dims)): on the GPU one static graph per shape
  sum_x      torch.sum(x, dims)                      the 1-stream reduction of x alone
  sum_same_bytes  torch.sum of x and w as one tensor  (CPU only) a 1-stream reduction of ours' bytes
  copy       y.copy_(x)                              sets the floor: ours' bytes (x and w once) at
                                                     the bandwidth copy_ reaches at this size

for the layouts full (x, w [n], reduce all), rows_c1024 and rows_c16384 (x, w [n/C, C], dim -1),
columns (x, w [n/1024, 1024], dim 0) and broadcast_row (x [n/1024, 1024], w [1024], reduce all),
dtypes float32/bfloat16/float16, sizes 2^min-log2 .. 2^max-log2. Every variant is checked against a
float64 reference before it is timed. Results go to a printed table and to
bench/results/<date>-<device>-square-sum-<commit>.json, rewritten after each dtype and layout with
"complete": false until the run ends; see bench/README.md.

The measuring (checks, timers, environment, the library, the thread counts and the results file)
is bench_harness.py's, as for bench_weighted_sum.py;
weighted_square_sum_variants.py has the cases and what is timed, weighted_square_sum_report.py the
rows, tables, targets, the JSON file and the plot.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from collections.abc import Sequence

import torch

import bench_harness as harness
import weighted_square_sum_report as report
from weighted_square_sum_variants import DTYPES, LAYOUTS, Case, Compiler, make_inputs, shapes, variants

REPO = pathlib.Path(__file__).resolve().parents[1]
SIZES = {"cuda": (24, 28), "cpu": (16, 22)}  # default --min-log2, --max-log2
OP = "custom::weighted_square_sum"
PNG = "bandwidth-square-sum-{device}.png"  # the plot, under --output-dir's docs/


# ----------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="what to benchmark (default cuda)")
    parser.add_argument("--cpu", action="store_true", help="the same as --device cpu")
    parser.add_argument(
        "--min-log2", type=int, default=None, help="smallest size, log2 of the element count (default: 24 GPU, 16 CPU)"
    )
    parser.add_argument(
        "--max-log2", type=int, default=None, help="largest size, log2 of the element count (default: 28 GPU, 22 CPU)"
    )
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated subset of %(default)s")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated subset of %(default)s")
    parser.add_argument(
        "--threads",
        default="all",
        help="CPU only: comma-separated thread counts, 'all' = torch's default (%(default)s)",
    )
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    parser.add_argument(
        "--compile-static-from",
        type=int,
        default=None,
        help="torch.compile a static graph per size from 2^N up, one dynamic=True graph per dtype/layout "
        "below (default: every size static on the GPU; on the CPU dynamic everywhere, as each C++ compile "
        "takes seconds)",
    )
    harness.add_timing_arguments(parser)
    parser.add_argument("--library", type=pathlib.Path, default=None, help="libcustom_ops.so to load")
    parser.add_argument(
        "--git-commit",
        "--commit",
        dest="git_commit",
        default=os.environ.get("CUSTOM_OPS_GIT_COMMIT"),
        help="commit to record (and name the file by) where the checkout has no .git, as on a copied tree "
        "(default $CUSTOM_OPS_GIT_COMMIT, else git rev-parse HEAD)",
    )
    parser.add_argument(
        "--output-dir",
        type=pathlib.Path,
        default=REPO,
        help="where bench/results/<date>-<device>-square-sum-<commit>.json and "
        "docs/bandwidth-square-sum-<device>.png go (default: this checkout)",
    )
    parser.add_argument(
        "--output",
        "--out",
        dest="output",
        type=pathlib.Path,
        default=None,
        help="the JSON's path, overriding --output-dir; a directory (or a path not ending in .json) gets the "
        "default file name inside it",
    )
    parser.add_argument(
        "--plot", action="store_true", help="draw docs/bandwidth-square-sum-<device>.png when matplotlib exists"
    )
    args = parser.parse_args(argv)

    if args.cpu:
        args.device = "cpu"
    args.cpu = args.device == "cpu"
    low, high = SIZES[args.device]
    args.min_log2 = low if args.min_log2 is None else args.min_log2
    args.max_log2 = max(high, args.min_log2) if args.max_log2 is None else args.max_log2
    if args.compile_static_from is None:  # as bench_weighted_sum.py: each C++ compile takes seconds
        args.compile_static_from = args.max_log2 + 1 if args.cpu else 0
    harness.check_arguments(parser, args, DTYPES)
    args.layouts = harness.subset(parser, "--layouts", args.layouts, LAYOUTS)
    args.threads = harness.thread_counts(parser, args.threads) if args.cpu else [None]
    return args


# ----------------------------------------------------------------------------------------------
# The device


def pick_device(args) -> torch.device:
    # two_step needs the first op's CUDA kernel too.
    return harness.pick_device(args, [OP, "custom::weighted_sum"], "--device cpu")


# ----------------------------------------------------------------------------------------------
# Sweep


def measure_case(case: Case, device, timer, compiled) -> list[dict]:
    x, w, dims, y = make_inputs(case, device)
    found = variants(x, w, dims, y, compiled)
    for variant in found:  # every check before any timing
        harness.check(variant, report.LABELS[variant.name], case, DTYPES[case.dtype], y)
    return report.timed_rows(case, x.shape, found, timer(found))


def sweep(args, device, timer_for, group_done=None) -> list[dict]:
    """Every case's rows; group_done(rows so far), where given, after each (dtype, layout)."""
    rows = []
    for threads, timer in harness.thread_settings(args, timer_for):
        for dtype in args.dtypes:
            for layout in args.layouts:
                sizes = [k for k in range(args.max_log2, args.min_log2 - 1, -1) if shapes(layout, k) is not None]
                if not sizes:
                    continue
                # Largest first: a dynamic graph (below --compile-static-from) is then tuned on the
                # largest size it serves.
                compiler = Compiler(args, shapes(layout, sizes[0])[2])
                report.print_header(threads, dtype, layout)
                for log2n in sizes:
                    case = Case(layout, dtype, log2n, threads)
                    case_rows = measure_case(case, device, timer, compiler.for_size(log2n))
                    report.print_rows(case_rows)
                    rows += case_rows
                if device.type == "cuda":
                    torch.cuda.empty_cache()  # the next layout's shapes: no fragmented pool
                if group_done is not None:
                    group_done(rows)
    return rows


# ----------------------------------------------------------------------------------------------
# Main


def describe(meta: dict) -> dict:
    """The results' metadata: the first benchmark's, with which benchmark and how its floor is set."""
    return {
        "benchmark": report.BENCHMARK,
        **meta,
        "floor": "ours' bytes (x and w read once, w at its own size) at the bandwidth y.copy_(x) reaches at "
        "the same dtype and size: copy's time for 2 streams of x's size, half of it for broadcast_row",
    }


def main(argv=None) -> int:
    return harness.run(OP, argv, parse_args, pick_device, sweep, report, PNG, describe=describe)


if __name__ == "__main__":
    sys.exit(main())
