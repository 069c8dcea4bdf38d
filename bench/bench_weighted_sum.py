#!/usr/bin/env python3
"""Bandwidth benchmark of torch.ops.custom.weighted_sum (y = w * x**2) against PyTorch's ceilings.

One process measures, side by side, on the GPU (or with --cpu on the CPU):

  copy            y.copy_(x)                   2-stream memory ceiling
  add_out         torch.add(x, w, out=y)       3-stream ceiling: what our op should match
  add             torch.add(x, w)              the same allocating its result, as `ours` does
  eager           w * x.pow(2)                 the eager composite
  compile         torch.compile(w * x * x)     what Inductor makes of the composite
  ours            torch.ops.custom.weighted_sum(x, w)
  ours_out        torch.ops.custom.weighted_sum.out(x, w, out=y)
  *_fwd_bwd       forward + backward of ours / eager / compile, against the 8-stream floor
                  (read x, w; write y; read g, x, w; write gx, gw) at the measured copy bandwidth
  *_fwd_bwd_graph GPU: the same step of ours / eager captured in a CUDA graph and replayed, so
                  the kernels' time without Python, dispatcher and autograd-engine overhead
  add_fwd_bwd     the same step through torch.add: one forward kernel and a backward that launches
                  none (AddBackward passes the grad on), so where it exceeds its 3-stream kernel
                  time it is the host's own cost of a forward + autograd.grad step: a host floor

over sizes 2^min-log2 .. 2^max-log2, dtypes float32/bfloat16/float16 and three layouts
(contiguous, weight [C] broadcast over [N, C], transposed input), plus the per-call Python time of
small calls. Every variant is checked against a float64 reference before it is timed. Results go
to a printed table and to bench/results/<date>-<device>.json, rewritten after each dtype and layout
with "complete": false until the run ends, so a run cut short keeps what it measured; see
bench/README.md.

The code is in four files: this one (command line and the sweep), bench_harness.py (checks,
timers, result rows, environment, and the options and main run every benchmark shares),
weighted_sum_variants.py (cases, inputs, what is timed) and weighted_sum_report.py (tables,
targets, the JSON file, the plot).
"""

from __future__ import annotations

import argparse
import gc
import os
import pathlib
import statistics
import sys
from collections.abc import Sequence

import torch

import bench_harness as harness
import weighted_sum_report as report
from weighted_sum_variants import (
    DTYPES,
    FWD_BWD_VARIANTS,
    LAYOUTS,
    PER_CHANNEL_LAYOUTS,
    Case,
    Compiler,
    forward_variants,
    fwd_bwd_variants,
    host_variants,
    make_inputs,
    per_channel_shapes,
)

REPO = pathlib.Path(__file__).resolve().parents[1]
OP = "custom::weighted_sum"
PNG = "bandwidth-{device}.png"  # the plot, under --output-dir's docs/


# ----------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="benchmark the CPU instead of the GPU")
    parser.add_argument("--min-log2", type=int, default=10, help="smallest size, as log2 of the element count")
    parser.add_argument(
        "--max-log2", type=int, default=None, help="largest size, log2 of the element count (default: 28 GPU, 22 CPU)"
    )
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated subset of %(default)s")
    parser.add_argument(
        "--layouts",
        default=",".join(LAYOUTS),
        help="comma-separated subset of %(default)s and the per-channel layouts "
        f"{','.join(PER_CHANNEL_LAYOUTS)} ('per-channel': all of these)",
    )
    parser.add_argument(
        "--threads", default="all,1", help="CPU only: comma-separated thread counts, 'all' = torch's default"
    )
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    parser.add_argument("--no-fwd-bwd", action="store_true", help="skip forward+backward")
    parser.add_argument(
        "--fwd-bwd-layouts",
        default="contiguous,broadcast",
        help="layouts that also get forward+backward, comma-separated (default %(default)s)",
    )
    parser.add_argument(
        "--compile-static-from",
        type=int,
        default=None,
        help="torch.compile a static graph per size from 2^N up, one dynamic=True graph per dtype/layout "
        "below (default: 20 on the GPU; on the CPU dynamic everywhere, as each C++ compile takes seconds)",
    )
    harness.add_timing_arguments(parser)
    parser.add_argument("--host-max-log2", type=int, default=14, help="largest size of the per-call host timing")
    parser.add_argument("--library", type=pathlib.Path, default=None, help="libcustom_ops.so to load")
    parser.add_argument(
        "--git-commit",
        default=os.environ.get("CUSTOM_OPS_GIT_COMMIT"),
        help="commit to record where the checkout has no .git, as on a copied tree (default $CUSTOM_OPS_GIT_COMMIT)",
    )
    parser.add_argument(
        "--output-dir",
        type=pathlib.Path,
        default=REPO,
        help="where bench/results/<date>-<device>.json and docs/bandwidth-<device>.png go (default: this checkout)",
    )
    parser.add_argument("--output", type=pathlib.Path, default=None, help="JSON path, overriding --output-dir")
    parser.add_argument("--plot", action="store_true", help="draw docs/bandwidth-<device>.png when matplotlib exists")
    args = parser.parse_args(argv)

    if args.max_log2 is None:
        args.max_log2 = 22 if args.cpu else 28
    if args.compile_static_from is None:
        args.compile_static_from = args.max_log2 + 1 if args.cpu else 20  # CPU: never static
    harness.check_arguments(parser, args, DTYPES)
    args.layouts = harness.subset(
        parser,
        "--layouts",
        args.layouts.replace("per-channel", ",".join(PER_CHANNEL_LAYOUTS)),
        LAYOUTS + PER_CHANNEL_LAYOUTS,
    )
    args.fwd_bwd_layouts = harness.subset(parser, "--fwd-bwd-layouts", args.fwd_bwd_layouts, LAYOUTS)
    args.threads = harness.thread_counts(parser, args.threads) if args.cpu else [None]
    return args


# ----------------------------------------------------------------------------------------------
# The device


def pick_device(args) -> torch.device:
    return harness.pick_device(args, [OP], "--cpu", no_kernel="no CUDA kernels")


# ----------------------------------------------------------------------------------------------
# Sweep


def measure_case(case: Case, device, timer, compiled, with_fwd_bwd: bool) -> list[dict]:
    x, w, y = make_inputs(case, device)
    variants = forward_variants(x, w, y, compiled)
    if with_fwd_bwd:
        variants += fwd_bwd_variants(x, w, compiled)
    for variant in variants:  # every check before any timing
        harness.check(variant, report.LABELS[variant.name], case, DTYPES[case.dtype], y)
    return harness.timed_rows(case, x.shape, variants, timer(variants), FWD_BWD_VARIANTS)


def sweep(args, device, timer_for, group_done=None) -> list[dict]:
    """Every case's rows; group_done(rows so far), where given, after each (dtype, layout)."""
    rows = []
    for threads, timer in harness.thread_settings(args, timer_for):
        for dtype in args.dtypes:
            for layout in args.layouts:
                # Largest first: the dynamic graph is then tuned on the largest size it serves.
                compiler = Compiler(args)
                report.print_header(threads, dtype, layout)
                for log2n in range(args.max_log2, args.min_log2 - 1, -1):
                    if layout in PER_CHANNEL_LAYOUTS and per_channel_shapes(layout, log2n) is None:
                        continue
                    case = Case(layout, dtype, log2n, threads)
                    with_fwd_bwd = (
                        layout in args.fwd_bwd_layouts or layout in PER_CHANNEL_LAYOUTS
                    ) and not args.no_fwd_bwd
                    case_rows = measure_case(case, device, timer, compiler.for_size(log2n), with_fwd_bwd)
                    report.print_rows(case_rows)
                    rows += case_rows
                if group_done is not None:
                    group_done(rows)
    return rows


def host_overhead(args, device) -> list[dict]:
    """Per-call wall time of small float32 calls: ours vs torch.add(x, w) vs eager w*x.pow(2).
    Batches of the three variants alternate, so drift of the machine hits all of them alike."""
    rows = []
    calls, batches = 1000, 7
    for log2n in range(args.min_log2, min(args.host_max_log2, args.max_log2) + 1):
        x = torch.randn(1 << log2n, device=device)
        w = torch.randn(1 << log2n, device=device)
        fns = host_variants(x, w)
        samples = {name: [] for name in fns}
        gc.disable()
        try:
            for fn in fns.values():
                harness.host_time_us(fn, device, calls)  # warm-up
            for _ in range(batches):
                for name, fn in fns.items():
                    samples[name].append(harness.host_time_us(fn, device, calls))
        finally:
            gc.enable()
        medians = {name: statistics.median(values) for name, values in samples.items()}
        threads = torch.get_num_threads() if device.type == "cpu" else None
        rows += harness.host_rows("float32", "contiguous", log2n, threads, medians)
    return rows


# ----------------------------------------------------------------------------------------------
# Main


def printed_host_overhead(args, device) -> list[dict]:
    rows = host_overhead(args, device)
    report.print_host_rows(rows)
    return rows


def main(argv=None) -> int:
    return harness.run(OP, argv, parse_args, pick_device, sweep, report, PNG, more_rows=printed_host_overhead)


if __name__ == "__main__":
    sys.exit(main())
