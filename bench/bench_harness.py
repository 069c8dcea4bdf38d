"""The benchmark harness: correctness checks before timing, the timers and their medians, the
rows and environment that go into the results JSON. It knows nothing of weighted_sum: the
variants come from weighted_sum_variants.py, the tables and targets from weighted_sum_report.py."""

from __future__ import annotations

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
import torch.utils.benchmark

REPO = pathlib.Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------
# What a benchmark hands the harness


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
    if args.timer in ("auto", "triton"):
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
    # before each repetition, and CUDA events bracket the call alone.
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    flush = torch.empty(max(256 << 20, 2 * l2), dtype=torch.int8, device="cuda")

    def event_time(fn):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            flush.zero_()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)
        for _ in range(max(1, int(args.warmup_ms / estimate_ms))):
            fn()
        reps = max(1, int(args.rep_ms / estimate_ms))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for start, end in events:
            flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in events) * 1e3

    return event_time, "CUDA events (median, L2 flushed)"


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


def timed_rows(case, shape, variants: list[Variant], times: dict, fwd_bwd_names) -> list[dict]:
    """One row per variant of a case, with the ratios the targets read. Forward rows are judged
    against the variant `add_out`, forward+backward rows (names in `fwd_bwd_names`) against a
    floor that moves their bytes at the bandwidth the variant `copy` achieved."""
    rows = []
    copy = next(v for v in variants if v.name == "copy")
    for variant in variants:
        us = times[variant.name]
        row = {
            "kind": "fwd_bwd" if variant.name in fwd_bwd_names else "forward",
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


def warn_if_busy(meta):
    load, cpus = meta["loadavg_start"], meta["cpu_count"] or 1
    if load is not None and load > 0.5 + 0.1 * cpus:
        print(
            f"bench: warning: load average {load} on {meta['cpu_count']} CPUs before the start: other work "
            "running now skews the CPU timings (multi-threaded ones most) and the per-call host times"
        )
