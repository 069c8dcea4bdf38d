#!/usr/bin/env python3
"""Bandwidth benchmark of torch.ops.custom.weighted_square_sum ((w * x**2).sum(dims) in one pass).

One process measures, side by side, on the GPU (or with --device cpu on the CPU):

  ours       torch.ops.custom.weighted_square_sum(x, w, dims)
  eager      (w * x.pow(2)).sum(dims)                 the eager composite (two kernels, a temporary)
  two_step   torch.ops.custom.weighted_sum(x, w).sum(dims)   our first op, then torch.sum
  compile    torch.compile((w * x * x).sum(dims)): on the GPU one static graph per shape
  sum_x      torch.sum(x, dims)                      the 1-stream reduction of x alone
  copy       y.copy_(x)                              sets the floor: ours' bytes (x and w once) at
                                                     the bandwidth copy_ reaches at this size

for the layouts full (x, w [n], reduce all), rows_c1024 and rows_c16384 (x, w [n/C, C], dim -1),
columns (x, w [n/1024, 1024], dim 0) and broadcast_row (x [n/1024, 1024], w [1024], reduce all),
dtypes float32/bfloat16/float16, sizes 2^min-log2 .. 2^max-log2. Every variant is checked against a
float64 reference before it is timed. Results go to a printed table and to
bench/results/<date>-<device>-square-sum-<commit>.json, rewritten after each dtype and layout with
"complete": false until the run ends; see bench/README.md.

The measuring (checks, timers, environment) is bench_harness.py's, as for bench_weighted_sum.py;
weighted_square_sum_variants.py has the cases and what is timed, weighted_square_sum_report.py the
rows, tables, targets, the JSON file and the plot.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from collections.abc import Sequence

import torch
import torch._inductor.config

import bench_harness as harness
import weighted_square_sum_report as report
from bench_weighted_sum import _subset, _thread_counts, configure_dynamo, load_library
from weighted_square_sum_variants import DTYPES, LAYOUTS, Case, Compiler, make_inputs, shapes, variants

REPO = pathlib.Path(__file__).resolve().parents[1]
SIZES = {"cuda": (24, 28), "cpu": (16, 22)}  # default --min-log2, --max-log2


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
    parser.add_argument(
        "--timer",
        choices=("auto", "triton", "events"),
        default="auto",
        help="GPU timing: triton.testing.do_bench, or the hand-written CUDA-event loop (auto: triton if importable)",
    )
    parser.add_argument("--warmup-ms", type=float, default=10.0, help="GPU warm-up time per measurement")
    parser.add_argument("--rep-ms", type=float, default=40.0, help="GPU measuring time per measurement")
    parser.add_argument("--min-run-time", type=float, default=0.1, help="CPU seconds per variant and size")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="CPU: rounds that time every variant in turn (the median of the rounds is kept)",
    )
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
    if not 4 <= args.min_log2 <= args.max_log2:
        parser.error(f"need 4 <= --min-log2 <= --max-log2, got {args.min_log2} and {args.max_log2}")
    if args.rounds < 1:
        parser.error(f"need --rounds >= 1, got {args.rounds}")
    args.dtypes = _subset(parser, "--dtypes", args.dtypes, DTYPES)
    args.layouts = _subset(parser, "--layouts", args.layouts, LAYOUTS)
    args.threads = _thread_counts(parser, args.threads) if args.cpu else [None]
    return args


# ----------------------------------------------------------------------------------------------
# The device


def pick_device(args) -> torch.device:
    if args.cpu:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit("bench: no GPU visible to torch; run with --device cpu for the CPU benchmark")
    # A CPU-only build would make every GPU call fail deep inside the dispatcher; two_step needs
    # the first op's kernel too.
    for op in ("custom::weighted_square_sum", "custom::weighted_sum"):
        if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"):
            sys.exit(f"bench: the loaded library has no CUDA kernel of {op}; rebuild it with -DCUSTOM_OPS_CUDA=ON")
    return torch.device("cuda")


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
    for threads in args.threads:
        timer = timer_for(threads)
        if threads is not None:
            torch.set_num_threads(threads)
            # Inductor bakes the thread count into its C++ kernels (and its cache key).
            torch._inductor.config.cpp.threads = threads
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


def main(argv=None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    library = load_library(args.library)
    device = pick_device(args)
    configure_dynamo()
    torch.manual_seed(0)

    if device.type == "cuda":
        gpu_time, timing = harness.gpu_timer(args)
        timer_for = lambda threads: lambda found: {v.name: gpu_time(v.call) for v in found}  # noqa: E731
    else:
        timing = f"torch.utils.benchmark.Timer.blocked_autorange, variants in turn, median of {args.rounds} rounds"
        timer_for = lambda threads: harness.cpu_timer(args, threads)  # noqa: E731
    all_threads = torch.get_num_threads()
    meta = {
        "benchmark": report.BENCHMARK,
        **harness.metadata(args, device, library, timing),
        "floor": "ours' bytes (x and w read once, w at its own size) at the bandwidth y.copy_(x) reaches at "
        "the same dtype and size: copy's time for 2 streams of x's size, half of it for broadcast_row",
    }
    print(
        f"custom::weighted_square_sum benchmark on {meta['device_name']} ({meta['device']}), torch {meta['torch']}, "
        f"commit {meta['git_commit']}, timing: {timing}"
    )
    harness.warn_if_busy(meta)
    path = report.output_path(args, meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    target_threads = all_threads if device.type == "cpu" else None

    def write(rows, summary, complete):
        """The results so far; rewritten after each (dtype, layout), so a run cut by a time
        limit keeps what it measured ("complete": false, its summary over those rows)."""
        meta["elapsed_s"] = round(time.perf_counter() - started, 1)
        meta["loadavg_end"] = harness.load_average()
        results = {**meta, "complete": complete, "summary": summary, "rows": rows}
        partial = path.with_name(path.name + ".partial")  # replaced in one step: never half written
        partial.write_text(report.results_json(results))
        partial.replace(path)

    def group_done(rows):
        write(rows, report.evaluate_all(rows, device.type, target_threads), complete=False)

    rows = sweep(args, device, timer_for, group_done)
    torch.set_num_threads(all_threads)
    summary = report.summarize(rows, device.type, target_threads)
    write(rows, summary, complete=True)
    print(f"\nwrote {path} ({meta['elapsed_s']} s)")
    if args.plot:
        report.plot(path, args.output_dir / "docs" / f"bandwidth-square-sum-{meta['device']}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
