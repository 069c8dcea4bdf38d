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
timers, result rows, environment), weighted_sum_variants.py (cases, inputs, what is timed) and
weighted_sum_report.py (tables, targets, the JSON file, the plot).
"""

from __future__ import annotations

import argparse
import gc
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Sequence

import torch
import torch._dynamo
import torch._inductor.config

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
    # Below 2^4 the [N, C] shapes would get a size-1 dimension, which torch.compile specializes.
    if not 4 <= args.min_log2 <= args.max_log2:
        parser.error(f"need 4 <= --min-log2 <= --max-log2, got {args.min_log2} and {args.max_log2}")
    if args.rounds < 1:
        parser.error(f"need --rounds >= 1, got {args.rounds}")
    args.dtypes = _subset(parser, "--dtypes", args.dtypes, DTYPES)
    args.layouts = _subset(
        parser,
        "--layouts",
        args.layouts.replace("per-channel", ",".join(PER_CHANNEL_LAYOUTS)),
        LAYOUTS + PER_CHANNEL_LAYOUTS,
    )
    args.fwd_bwd_layouts = _subset(parser, "--fwd-bwd-layouts", args.fwd_bwd_layouts, LAYOUTS)
    args.threads = _thread_counts(parser, args.threads) if args.cpu else [None]
    return args


def _subset(parser, flag, text, allowed):
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown or not chosen:
        parser.error(f"{flag}: unknown {unknown}, choose from {list(allowed)}")
    return chosen


def _thread_counts(parser, text):
    counts = []
    for item in text.split(","):
        item = item.strip()
        if item == "all":
            counts.append(torch.get_num_threads())
        elif item.isdigit() and int(item) > 0:
            counts.append(int(item))
        else:
            parser.error(f"--threads: expected 'all' or a positive integer, got {item!r}")
    return list(dict.fromkeys(counts))  # unique, in order


# ----------------------------------------------------------------------------------------------
# The library and the device


def load_library(path: pathlib.Path | None) -> pathlib.Path:
    """Loads libcustom_ops.so: --library, else $CUSTOM_OPS_LIBRARY, else build/ of this checkout."""
    path = path or pathlib.Path(os.environ.get("CUSTOM_OPS_LIBRARY", REPO / "build" / "libcustom_ops.so"))
    if not path.is_file():
        sys.exit(f"bench: {path} not found; build the library (see README.md) or pass --library")
    torch.ops.load_library(str(path))
    return path


def pick_device(args) -> torch.device:
    if args.cpu:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit("bench: no GPU visible to torch; run with --cpu for the CPU benchmark")
    # A CPU-only build would make every GPU call fail deep inside the dispatcher.
    if not torch._C._dispatch_has_kernel_for_dispatch_key("custom::weighted_sum", "CUDA"):
        sys.exit("bench: the loaded library has no CUDA kernels; rebuild it with -DCUSTOM_OPS_CUDA=ON")
    return torch.device("cuda")


def configure_dynamo():
    # Every dtype, layout and grad mode is a guard of its own; never fall back to eager silently.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.fail_on_recompile_limit_hit = True


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
    for threads in args.threads:
        timer = timer_for(threads)
        if threads is not None:
            torch.set_num_threads(threads)
            # Inductor bakes the thread count into its C++ kernels (and its cache key).
            torch._inductor.config.cpp.threads = threads
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


def main(argv=None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    library = load_library(args.library)
    device = pick_device(args)
    configure_dynamo()
    torch.manual_seed(0)

    if device.type == "cuda":
        gpu_time, timing = harness.gpu_timer(args)
        timer_for = lambda threads: lambda variants: {v.name: gpu_time(v.call) for v in variants}  # noqa: E731
    else:
        timing = f"torch.utils.benchmark.Timer.blocked_autorange, variants in turn, median of {args.rounds} rounds"
        timer_for = lambda threads: harness.cpu_timer(args, threads)  # noqa: E731
    all_threads = torch.get_num_threads()
    meta = harness.metadata(args, device, library, timing)
    print(
        f"custom::weighted_sum benchmark on {meta['device_name']} ({meta['device']}), torch {meta['torch']}, "
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
        found = (report.evaluate(target, rows, device.type, target_threads) for target in report.targets())
        write(rows, [result for result in found if result is not None], complete=False)

    rows = sweep(args, device, timer_for, group_done)
    torch.set_num_threads(all_threads)
    host_rows = host_overhead(args, device)
    report.print_host_rows(host_rows)
    summary = report.summarize(rows + host_rows, device.type, target_threads)
    write(rows + host_rows, summary, complete=True)
    print(f"\nwrote {path} ({meta['elapsed_s']} s)")
    if args.plot:
        report.plot(path, args.output_dir / "docs" / f"bandwidth-{meta['device']}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
