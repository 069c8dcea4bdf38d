"""The benchmark harness: correctness checks before timing, the timers and their medians, the
rows and environment that go into the results JSON, and what every benchmark's command line and
run share (the library, the options of the timers, the thread counts, the results file). It knows
nothing of the operators: the variants come from weighted_sum_variants.py and
weighted_square_sum_variants.py, the tables and targets from their *_report.py."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import math
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time
from typing import Callable

import torch
import torch._dynamo
import torch._inductor.config
import torch.utils.benchmark

REPO = pathlib.Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------
# What a benchmark hands the harness


@dataclasses.dataclass(frozen=True)
class Case:
    """One point of the sweep; its tensors are made by the benchmark's make_inputs."""

    layout: str
    dtype: str
    log2n: int
    threads: int | None  # CPU thread count, None on the GPU

    @property
    def n(self) -> int:
        return 1 << self.log2n

    def __str__(self):
        threads = f", {self.threads} threads" if self.threads else ""
        return f"{self.dtype} {self.layout} n=2^{self.log2n}{threads}"


@dataclasses.dataclass
class Variant:
    name: str
    call: Callable[[], object]  # runs once, returns its result tensor(s)
    expected: Callable[[], tuple]  # float64 reference of those results
    bytes: int  # bytes the variant must move at least


@dataclasses.dataclass
class Summed:
    """An expected value that is a sum: check() bounds its error by the size of the terms."""

    value: torch.Tensor
    scale: torch.Tensor  # the sum of the terms' absolute values


def nbytes(*tensors: torch.Tensor) -> int:
    """Bytes of each tensor's elements (a broadcast weight counts once, at its own size)."""
    return sum(t.numel() * t.element_size() for t in tensors)


# ----------------------------------------------------------------------------------------------
# The command line, the library and torch.compile


def add_timing_arguments(parser: argparse.ArgumentParser):
    """The options of the GPU and CPU timers (gpu_timer, cpu_timer)."""
    parser.add_argument(
        "--timer",
        choices=("auto", "triton", "events"),
        default="auto",
        help="GPU timing: triton.testing.do_bench, or the hand-written CUDA-event loop (auto: triton if importable)",
    )
    parser.add_argument(
        "--l2-flush",
        choices=("dirty", "clean"),
        default="dirty",
        help="GPU: how L2 is flushed before each repetition. dirty: a buffer is written (do_bench's way), "
        "which leaves L2 full of dirty lines that the timed call then writes back; clean: the hand-written "
        "event loop writes the buffer, then reads another as large, so that the call finds L2 clean",
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


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace, dtypes):
    """The checks every benchmark makes of its parsed options; args.dtypes becomes a list."""
    # Below 2^4 the [N, C] shapes would get a size-1 dimension, which torch.compile specializes.
    if not 4 <= args.min_log2 <= args.max_log2:
        parser.error(f"need 4 <= --min-log2 <= --max-log2, got {args.min_log2} and {args.max_log2}")
    if args.rounds < 1:
        parser.error(f"need --rounds >= 1, got {args.rounds}")
    args.dtypes = subset(parser, "--dtypes", args.dtypes, dtypes)


def subset(parser, flag, text, allowed):
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown or not chosen:
        parser.error(f"{flag}: unknown {unknown}, choose from {list(allowed)}")
    return chosen


def thread_counts(parser, text):
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


def load_library(path: pathlib.Path | None) -> pathlib.Path:
    """Loads libcustom_ops.so: --library, else $CUSTOM_OPS_LIBRARY, else build/ of this checkout."""
    path = path or pathlib.Path(os.environ.get("CUSTOM_OPS_LIBRARY", REPO / "build" / "libcustom_ops.so"))
    if not path.is_file():
        sys.exit(f"bench: {path} not found; build the library (see README.md) or pass --library")
    torch.ops.load_library(str(path))
    return path


def pick_device(args, ops, cpu_option: str, no_kernel: str = "no CUDA kernel of {op}") -> torch.device:
    """The CPU with args.cpu; else the GPU, where torch sees one and the loaded library has a
    CUDA kernel of each of `ops` (`no_kernel` says which is missing)."""
    if args.cpu:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit(f"bench: no GPU visible to torch; run with {cpu_option} for the CPU benchmark")
    # A CPU-only build would make every GPU call fail deep inside the dispatcher.
    for op in ops:
        if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"):
            missing = no_kernel.format(op=op)
            sys.exit(f"bench: the loaded library has {missing}; rebuild it with -DCUSTOM_OPS_CUDA=ON")
    return torch.device("cuda")


def configure_dynamo():
    # Every dtype, layout and grad mode is a guard of its own; never fall back to eager silently.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.fail_on_recompile_limit_hit = True


# ----------------------------------------------------------------------------------------------
# Correctness


def tolerance(dtype: torch.dtype) -> dict:
    """Every output is a product, so its relative error is at most (roundings) x eps/2: 2 eps for
    the four roundings of the longest composite path. 4 eps doubles that margin; the check is
    there to stop wrong kernels (wrong broadcast, stale output, wrong formula), not last ulps."""
    return {"rtol": 4 * torch.finfo(dtype).eps, "atol": 1e-5}


def check(variant: Variant, label: str, case: object, dtype: torch.dtype, out: torch.Tensor):
    """Aborts the run when a variant's values are wrong: a fast wrong kernel is no result."""
    out.fill_(math.nan)  # an out= variant that writes nothing must fail
    got = variant.call()
    got = got if isinstance(got, tuple) else (got,)
    expected = variant.expected()
    try:
        for index, (actual, reference) in enumerate(zip(got, expected, strict=True)):
            if isinstance(reference, Summed):  # rounding errors of a sum scale with its terms
                bound = tolerance(dtype)
                bound = bound["rtol"] * reference.scale + bound["atol"]
                if actual.shape != reference.value.shape:
                    raise AssertionError(
                        f"output {index}: shape {tuple(actual.shape)}, expected {tuple(reference.value.shape)}"
                    )
                error = (actual.double() - reference.value).abs()
                if not (error <= bound).all():  # a NaN fails too
                    raise AssertionError(f"output {index}: off by up to {float((error - bound).max())} over its bound")
                continue
            torch.testing.assert_close(
                actual.double(), reference, **tolerance(dtype), msg=lambda m, i=index: f"output {i}: {m}"
            )
    except (AssertionError, ValueError) as error:
        sys.exit(f"bench: {label} computes wrong values for {case}:\n{error}")


# ----------------------------------------------------------------------------------------------
# Timing


def gpu_timer(args) -> tuple[Callable[[Callable], float], str]:
    """Median device time in us of one call, with L2 flushed before each repetition."""
    clean = args.l2_flush == "clean"
    if clean and args.timer == "triton":
        sys.exit("bench: --l2-flush clean needs the event timer (--timer events or auto)")
    if args.timer in ("auto", "triton") and not clean:
        try:
            from triton.testing import do_bench
        except ImportError:
            if args.timer == "triton":
                sys.exit("bench: --timer triton, but triton is not importable")
        else:

            def triton_time(fn):
                return do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median") * 1e3

            return triton_time, "triton.testing.do_bench (median, L2 flushed)"

    # do_bench's method by hand: a flush buffer of twice the L2 (at least 256 MiB) is written
    # before each repetition, and CUDA events bracket the call alone. With a clean flush, a second
    # buffer as large is then read: L2 holds clean lines, which the call evicts for free.
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    flush = torch.empty(max(256 << 20, 2 * l2), dtype=torch.int8, device="cuda")
    clean_source = torch.ones(flush.numel() // 4, dtype=torch.float32, device="cuda") if clean else None

    def flush_l2():
        flush.zero_()
        if clean_source is not None:
            clean_source.amax()

    def event_time(fn):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            flush_l2()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)
        for _ in range(max(1, int(args.warmup_ms / estimate_ms))):
            fn()
        reps = max(1, int(args.rep_ms / estimate_ms))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for start, end in events:
            flush_l2()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in events) * 1e3

    return event_time, "CUDA events (median, L2 flushed" + (" and left clean)" if clean else ")")


def cpu_timer(args, threads: int) -> Callable[[list], dict]:
    """Median time in us of each variant, at `threads` threads. The variants take turns, round
    after round (torch.utils.benchmark's blocked_autorange each), and each keeps the median of its
    rounds: a slow phase of a shared machine then hits all of them alike instead of the one
    measured during it, so the ratios within a size hold even where the absolute times drift."""

    def cpu_times(variants):
        rounds = {variant.name: [] for variant in variants}
        for _ in range(args.rounds):
            for variant in variants:
                timer = torch.utils.benchmark.Timer(stmt="fn()", globals={"fn": variant.call}, num_threads=threads)
                rounds[variant.name].append(
                    timer.blocked_autorange(min_run_time=args.min_run_time / args.rounds).median
                )
        return {name: statistics.median(times) * 1e6 for name, times in rounds.items()}

    return cpu_times


def timers(args, device: torch.device) -> tuple[Callable[[int | None], Callable[[list], dict]], str]:
    """timer_for(threads), which gives the timer of the variants of one case (their median times in
    us by name), and how it times, for the results."""
    if device.type == "cuda":
        gpu_time, timing = gpu_timer(args)
        return (lambda threads: lambda variants: {v.name: gpu_time(v.call) for v in variants}), timing
    timing = f"torch.utils.benchmark.Timer.blocked_autorange, variants in turn, median of {args.rounds} rounds"
    return (lambda threads: cpu_timer(args, threads)), timing


def thread_settings(args, timer_for):
    """(threads, timer) for each of args.threads (None on the GPU), with torch and Inductor set to
    that thread count while the caller measures at it."""
    for threads in args.threads:
        timer = timer_for(threads)
        if threads is not None:
            torch.set_num_threads(threads)
            # Inductor bakes the thread count into its C++ kernels (and its cache key).
            torch._inductor.config.cpp.threads = threads
        yield threads, timer


def host_time_us(fn: Callable, device: torch.device, calls: int) -> float:
    """Wall time per call of `calls` back-to-back calls, synchronized at the end: the Python and
    dispatcher overhead whenever the kernel itself is shorter than the launch."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


# ----------------------------------------------------------------------------------------------
# Rows of the results JSON


def timed_row(kind: str, case, shape, variant: Variant, us: float) -> dict:
    """The fields every timed row has: what was timed, its median time and its bandwidth."""
    return {
        "kind": kind,
        "variant": variant.name,
        "dtype": case.dtype,
        "layout": case.layout,
        "log2n": case.log2n,
        "n": case.n,
        "shape": list(shape),
        "threads": case.threads,
        "median_us": round(us, 3),
        "bytes": variant.bytes,
        "gbps": round(variant.bytes / us / 1e3, 2),
    }


def timed_rows(case, shape, variants: list[Variant], times: dict, fwd_bwd_names) -> list[dict]:
    """One row per variant of a case, with the ratios the targets read. Forward rows are judged
    against the variant `add_out`, forward+backward rows (names in `fwd_bwd_names`) against a
    floor that moves their bytes at the bandwidth the variant `copy` achieved."""
    rows = []
    copy = next(v for v in variants if v.name == "copy")
    for variant in variants:
        us = times[variant.name]
        row = {
            **timed_row("fwd_bwd" if variant.name in fwd_bwd_names else "forward", case, shape, variant, us),
            "vs_add": None,
            "floor_us": None,
            "vs_floor": None,
        }
        if row["kind"] == "forward":
            # > 1: faster than torch.add(out=) on the same operands.
            row["vs_add"] = round(times["add_out"] / us, 4)
        else:
            # The floor moves the fwd+bwd bytes at the bandwidth copy_ achieved here.
            floor_us = times["copy"] * variant.bytes / copy.bytes
            row["floor_us"] = round(floor_us, 3)
            row["vs_floor"] = round(us / floor_us, 4)
            # < 1: faster than that step of eager / torch.compile (the per-channel targets).
            for other in ("eager", "compile"):
                if f"{other}_fwd_bwd" in times:
                    row[f"vs_{other}"] = round(us / times[f"{other}_fwd_bwd"], 4)
        rows.append(row)
    return rows


def host_rows(dtype: str, layout: str, log2n: int, threads: int | None, medians: dict) -> list[dict]:
    """One row per variant of the per-call host timing, against the variants `add` and `eager`."""
    return [
        {
            "kind": "host",
            "variant": name,
            "dtype": dtype,
            "layout": layout,
            "log2n": log2n,
            "n": 1 << log2n,
            "threads": threads,
            "per_call_us": round(us, 3),
            "vs_add": round(us / medians["add"], 4),
            "vs_eager": round(us / medians["eager"], 4),
        }
        for name, us in medians.items()
    ]


# ----------------------------------------------------------------------------------------------
# The environment, recorded with the results


def device_slug(device: torch.device) -> str:
    """'h200' for 'NVIDIA H200', 'cpu' for the CPU: the name used in the result file names."""
    if device.type == "cpu":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    name = re.sub(r"\b(nvidia|geforce|tesla)\b", " ", name)
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "gpu"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def git_commit(given: str | None) -> dict:
    """HEAD and whether tracked files differ from it; None where this is no git checkout. A commit
    given on the command line wins: a tree copied to the GPU machine has no .git."""
    if given:
        return {"git_commit": given, "git_dirty": None}

    def git(*cmd):
        result = subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True, timeout=30)
        return result.stdout.strip() if result.returncode == 0 else None

    try:
        commit = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def load_average() -> float | None:
    """1-minute load average: other work on the machine skews CPU timings and host overheads."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def metadata(args, device, library, timing) -> dict:
    triton_version = None
    if importlib.util.find_spec("triton") is not None:
        import triton

        triton_version = triton.__version__
    return {
        "date": datetime.date.today().isoformat(),
        "device": device_slug(device),
        "device_name": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "python": platform.python_version(),
        **git_commit(args.git_commit),
        "library": str(library),
        "timing": timing,
        "all_threads": torch.get_num_threads() if device.type == "cpu" else None,
        "cpu_count": os.cpu_count(),
        "loadavg_start": load_average(),
        "argv": sys.argv[1:],
    }


def announce(op: str, meta: dict):
    """The run's first lines: what is measured where, and a warning where the machine is busy."""
    print(
        f"{op} benchmark on {meta['device_name']} ({meta['device']}), torch {meta['torch']}, "
        f"commit {meta['git_commit']}, timing: {meta['timing']}"
    )
    warn_if_busy(meta)


class ResultsFile:
    """The results JSON: `meta` and the rows so far, with their summary. Rewritten after each
    (dtype, layout), so a run cut by a time limit keeps what it measured ("complete": false, its
    summary over those rows)."""

    def __init__(self, path: pathlib.Path, meta: dict, started: float, to_json: Callable[[dict], str]):
        self.path, self.meta, self.started, self.to_json = path, meta, started, to_json
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, rows: list[dict], summary: list[dict], complete: bool):
        self.meta["elapsed_s"] = round(time.perf_counter() - self.started, 1)
        self.meta["loadavg_end"] = load_average()
        results = {**self.meta, "complete": complete, "summary": summary, "rows": rows}
        partial = self.path.with_name(self.path.name + ".partial")  # replaced in one step: never half written
        partial.write_text(self.to_json(results))
        partial.replace(self.path)


def run(
    op: str,
    argv,
    parse_args: Callable,
    pick_device: Callable,
    sweep: Callable,
    report,
    png: str,
    describe: Callable[[dict], dict] = lambda meta: meta,
    more_rows: Callable | None = None,
) -> int:
    """A benchmark's main: parse_args(argv), the library, pick_device(args), then
    sweep(args, device, timer_for, group_done) with the results file rewritten after each group,
    more_rows(args, device) after the sweep where given, the summary, and the plot on --plot.

    `report` is the benchmark's report module: output_path(args, meta), results_json(results),
    evaluate_all(rows, device, all_threads), summarize(rows, device, all_threads), plot(json, png).
    `describe` adds the benchmark's own fields to the metadata; `png` is the plot's file name under
    docs/, with {device} for the device's name."""
    started = time.perf_counter()
    args = parse_args(argv)
    library = load_library(args.library)
    device = pick_device(args)
    configure_dynamo()
    torch.manual_seed(0)

    timer_for, timing = timers(args, device)
    all_threads = torch.get_num_threads()
    meta = describe(metadata(args, device, library, timing))
    announce(op, meta)
    results = ResultsFile(report.output_path(args, meta), meta, started, report.results_json)
    target_threads = all_threads if device.type == "cpu" else None

    def group_done(rows):
        results.write(rows, report.evaluate_all(rows, device.type, target_threads), complete=False)

    rows = sweep(args, device, timer_for, group_done)
    torch.set_num_threads(all_threads)
    if more_rows is not None:
        rows = rows + more_rows(args, device)
    summary = report.summarize(rows, device.type, target_threads)
    results.write(rows, summary, complete=True)
    print(f"\nwrote {results.path} ({meta['elapsed_s']} s)")
    if args.plot:
        report.plot(results.path, args.output_dir / "docs" / png.format(device=meta["device"]))
    return 0


def warn_if_busy(meta):
    load, cpus = meta["loadavg_start"], meta["cpu_count"] or 1
    if load is not None and load > 0.5 + 0.1 * cpus:
        print(
            f"bench: warning: load average {load} on {meta['cpu_count']} CPUs before the start: other work "
            "running now skews the CPU timings (multi-threaded ones most) and the per-call host times"
        )
