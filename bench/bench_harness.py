# SPDX-License-Identifier: BSD-3-Clause
"""What every benchmark shares: the command line, the correctness check before timing, the GPU and
CPU timers, the floor and ratio columns of the rows, the targets (data) and their one evaluator,
the printed table and the results JSON. The benchmarks bring only their variants and targets."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import math
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch._dynamo
import torch._inductor.config
import torch.utils.benchmark

REPO = pathlib.Path(__file__).resolve().parents[1]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclasses.dataclass(frozen=True)
class Case:
    layout: str
    dtype: str
    log2n: int
    threads: int | None  # CPU thread count, None on the GPU

    @property
    def n(self) -> int:
        return 1 << self.log2n

    def __str__(self):
        return f"{self.dtype} {self.layout} n=2^{self.log2n}" + (f", {self.threads} threads" if self.threads else "")


@dataclasses.dataclass
class Variant:
    name: str
    call: Callable[[], object]  # runs once, returns its result tensor(s)
    expected: Callable[[], tuple]  # float64 reference of those results
    bytes: int  # bytes the variant must move at least
    kind: str = "forward"
    setup: Callable[[], None] | None = None  # run before the variant is timed, untimed


@dataclasses.dataclass
class Summed:
    """An expected sum: check() bounds its error by the size of its terms, not of the sum."""

    value: torch.Tensor
    scale: torch.Tensor  # the sum of the terms' absolute values


@dataclasses.dataclass
class Within:
    """An expected value with the bound of a right result's error, elementwise (a term's error
    bound, carried through its formula)."""

    value: torch.Tensor
    bound: torch.Tensor


def nbytes(*tensors: torch.Tensor) -> int:
    """Bytes of each tensor's elements (a broadcast weight counts once, at its own size)."""
    return sum(t.numel() * t.element_size() for t in tensors)


# ----------------------------------------------------------------------------------------------
# Command line


def parser(doc: str, sizes: dict, layouts, more_layouts=(), threads: str = "all") -> argparse.ArgumentParser:
    """The options every sweep has; `sizes` is {"cuda": (min, max), "cpu": (min, max)} of log2 n,
    `layouts` the default ones, `more_layouts` those only asked for."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    add = p.add_argument
    add("--device", choices=("cuda", "cpu"), default="cuda", help="what to benchmark (default cuda)")
    add("--cpu", action="store_true", help="the same as --device cpu")
    add("--min-log2", type=int, help=f"smallest size as log2 n (default GPU {sizes['cuda'][0]}, CPU {sizes['cpu'][0]})")
    add("--max-log2", type=int, help=f"largest size as log2 n (default GPU {sizes['cuda'][1]}, CPU {sizes['cpu'][1]})")
    add("--dtypes", default=",".join(DTYPES), help="comma-separated subset of %(default)s")
    add("--layouts", default=",".join(layouts), help="comma-separated subset of %(default)s")
    add("--threads", default=threads, help="CPU: comma-separated thread counts, 'all' = torch's default")
    add("--no-compile", action="store_true", help="skip the torch.compile variants")
    add("--compile-static-from", type=int, help="a static compiled graph per size from 2^N up, dynamic below")
    add("--timer", choices=("auto", "triton", "events"), default="auto", help="GPU: do_bench or CUDA events")
    add(
        "--l2-flush", choices=("dirty", "clean"), default="dirty", help="GPU: clean also reads a buffer after the flush"
    )
    add("--warmup-ms", type=float, default=10.0, help="GPU warm-up per measurement")
    add("--rep-ms", type=float, default=40.0, help="GPU measuring time per measurement")
    add("--min-run-time", type=float, default=0.1, help="CPU seconds per variant and size")
    add("--rounds", type=int, default=5, help="CPU: rounds in which every variant takes its turn")
    add("--library", type=pathlib.Path, help="libcustom_ops.so (default $CUSTOM_OPS_LIBRARY, build/)")
    add("--git-commit", "--commit", dest="git_commit", default=os.environ.get("CUSTOM_OPS_GIT_COMMIT"))
    add("--output-dir", type=pathlib.Path, default=REPO, help="root of bench/results/ and docs/")
    add("--output", "--out", dest="output", type=pathlib.Path, help="the JSON's path, or a directory for it")
    add("--plot", action="store_true", help="draw the plot under --output-dir's docs/")
    p.set_defaults(sizes=sizes, all_layouts=tuple(layouts) + tuple(more_layouts))
    return p


def parse(p: argparse.ArgumentParser, argv, compile_static_from: int, aliases=None) -> argparse.Namespace:
    """Parses and checks; GPU compiles are static from `compile_static_from`, CPU ones never;
    `aliases` names groups of layouts."""
    args = p.parse_args(argv)
    args.cpu = args.cpu or args.device == "cpu"
    low, high = args.sizes["cpu" if args.cpu else "cuda"]
    args.min_log2 = low if args.min_log2 is None else args.min_log2
    args.max_log2 = max(high, args.min_log2) if args.max_log2 is None else args.max_log2
    if args.compile_static_from is None:  # a C++ compile per size would take minutes on the CPU
        args.compile_static_from = args.max_log2 + 1 if args.cpu else compile_static_from
    # Below 2^4 an [N, C] shape would have a size-1 dimension, which torch.compile specializes.
    if not 4 <= args.min_log2 <= args.max_log2 or args.rounds < 1:
        p.error("need 4 <= --min-log2 <= --max-log2 and --rounds >= 1")
    args.dtypes = subset(p, "--dtypes", args.dtypes, DTYPES)
    # Whole items only: "conv" names a group, and is also part of each of its layouts' names.
    groups = aliases or {}
    args.layouts = ",".join(",".join(groups.get(item.strip(), (item,))) for item in args.layouts.split(","))
    args.layouts = subset(p, "--layouts", args.layouts, args.all_layouts)
    args.threads = thread_counts(p, args.threads) if args.cpu else [None]
    return args


def subset(p, flag, text, allowed):
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    if not chosen or any(item not in allowed for item in chosen):
        p.error(f"{flag}: {text!r}, choose from {list(allowed)}")
    return chosen


def thread_counts(p, text):
    counts = [
        torch.get_num_threads() if item == "all" else int(item)
        for item in text.split(",")
        if item.isdigit() or item == "all"
    ]
    if len(counts) != len(text.split(",")) or min(counts) < 1:
        p.error(f"--threads: expected 'all' or positive integers, got {text!r}")
    return list(dict.fromkeys(counts))


def load_library(path: pathlib.Path | None) -> pathlib.Path:
    path = path or pathlib.Path(os.environ.get("CUSTOM_OPS_LIBRARY", REPO / "build" / "libcustom_ops.so"))
    if not path.is_file():
        sys.exit(f"bench: {path} not found; build the library (see README.md) or pass --library")
    torch.ops.load_library(str(path))
    return path


def pick_device(args, ops) -> torch.device:
    if args.cpu:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit("bench: no GPU visible to torch; run with --cpu")
    for op in ops:  # a CPU-only build would fail deep inside the dispatcher
        if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"):
            sys.exit(f"bench: the loaded library has no CUDA kernel of {op}; rebuild it with -DCUSTOM_OPS_CUDA=ON")
    return torch.device("cuda")


class Compiler:
    """torch.compile of `fn` for one dtype and layout, sizes taken largest first: a static graph per
    size from 2^static_from up (what a fixed-shape model gets; on the GPU markedly faster than
    dynamic=True's kernels), one dynamic graph below, where a compile per size would cost minutes."""

    def __init__(self, args, fn):
        self.fn, self.enabled, self.static_from, self.dynamic = fn, not args.no_compile, args.compile_static_from, None

    def for_size(self, log2n: int):
        if not self.enabled:
            return None
        if log2n >= self.static_from:
            torch._dynamo.reset()  # drop the previous size's graphs: no recompile pile-up
            return torch.compile(self.fn, dynamic=False)
        if self.dynamic is None:
            torch._dynamo.reset()
            self.dynamic = torch.compile(self.fn, dynamic=True)
        return self.dynamic


# ----------------------------------------------------------------------------------------------
# Correctness


def check(variant: Variant, case, dtype: torch.dtype, out: torch.Tensor | None = None):
    """Aborts the run where a variant's values are wrong: a fast wrong kernel is no result. The
    tolerance, 4 eps, is twice the error of the longest composite path (four roundings)."""
    rtol, atol = 4 * torch.finfo(dtype).eps, 1e-5
    if out is not None:
        out.fill_(math.nan)  # an out= variant that writes nothing must fail
    got = variant.call()
    got = got if isinstance(got, tuple) else (got,)
    try:
        for index, (actual, reference) in enumerate(zip(got, variant.expected(), strict=True)):
            if isinstance(reference, Within):
                excess = (actual.double() - reference.value).abs() - reference.bound
                if not (excess <= 0).all():  # a NaN fails too
                    raise AssertionError(f"output {index}: off by up to {float(excess.max())} over its bound")
            elif isinstance(reference, Summed):
                if actual.shape != reference.value.shape:
                    raise AssertionError(
                        f"output {index}: shape {tuple(actual.shape)}, not {tuple(reference.value.shape)}"
                    )
                excess = (actual.double() - reference.value).abs() - (rtol * reference.scale + atol)
                if not (excess <= 0).all():  # a NaN fails too
                    raise AssertionError(f"output {index}: off by up to {float(excess.max())} over its bound")
            else:
                torch.testing.assert_close(
                    actual.double(), reference, rtol=rtol, atol=atol, msg=lambda m, i=index: f"output {i}: {m}"
                )
    except (AssertionError, ValueError) as error:
        sys.exit(f"bench: {variant.name} computes wrong values for {case}:\n{error}")


# ----------------------------------------------------------------------------------------------
# Timers: {name: median us} of a list of variants


def gpu_timer(args) -> tuple[Callable[[list], dict], str]:
    """Median device time of one call, L2 flushed before each repetition: triton's do_bench, or
    its method by hand with CUDA events. The flush writes a buffer, leaving L2 full of dirty lines
    that a read-only kernel pays to evict; --l2-flush clean then reads a second buffer."""
    clean = args.l2_flush == "clean"
    if args.timer != "events" and not clean:
        try:
            from triton.testing import do_bench

            def one(fn):
                return do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median") * 1e3

            return times_of(one), "triton.testing.do_bench (median, L2 flushed)"
        except ImportError:
            if args.timer == "triton":
                sys.exit("bench: --timer triton, but triton is not importable")
    elif args.timer == "triton":
        sys.exit("bench: --l2-flush clean needs --timer events or auto")
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    flush = torch.empty(max(256 << 20, 2 * l2), dtype=torch.int8, device="cuda")
    source = torch.ones(flush.numel() // 4, device="cuda") if clean else None

    def flush_l2():
        flush.zero_()
        if source is not None:
            source.amax()

    def event(fn):
        def timed(reps, flushed=True):
            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            for start, end in pairs:
                if flushed:
                    flush_l2()
                start.record()
                fn()
                end.record()
            torch.cuda.synchronize()
            return [start.elapsed_time(end) for start, end in pairs]

        estimate_ms = max(statistics.median(timed(5)), 1e-3)
        timed(max(1, int(args.warmup_ms / estimate_ms)), flushed=False)
        return statistics.median(timed(max(1, int(args.rep_ms / estimate_ms)))) * 1e3

    return times_of(event), "CUDA events (median, L2 flushed" + (" and left clean)" if clean else ")")


def times_of(one: Callable[[Callable], float]) -> Callable[[list], dict]:
    def times(variants):
        result = {}
        for variant in variants:
            if variant.setup:
                variant.setup()
            result[variant.name] = one(variant.call)
        return result

    return times


def cpu_timer(args, threads: int) -> Callable[[list], dict]:
    """The variants take turns, round after round (blocked_autorange each), and each keeps the
    median of its rounds: a slow phase of a shared machine hits all of them alike, so the ratios
    within a size hold where absolute times drift."""

    def times(variants):
        rounds = {variant.name: [] for variant in variants}
        for _ in range(args.rounds):
            for variant in variants:
                if variant.setup:
                    variant.setup()
                timer = torch.utils.benchmark.Timer(stmt="fn()", globals={"fn": variant.call}, num_threads=threads)
                rounds[variant.name].append(
                    timer.blocked_autorange(min_run_time=args.min_run_time / args.rounds).median
                )
        return {name: statistics.median(values) * 1e6 for name, values in rounds.items()}

    return times


def cpu_timing(args) -> str:
    return f"torch.utils.benchmark.Timer.blocked_autorange, variants in turn, median of {args.rounds} rounds"


def host_times(fns: dict, device: torch.device, calls: int = 1000, batches: int = 7) -> dict:
    """Per-call wall time in us of back-to-back calls (Python, dispatcher, launch), batches of the
    variants alternating; the median batch of each."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    samples = {name: [] for name in fns}
    gc.disable()
    try:
        for batch in range(batches + 1):  # the first batch warms up
            for name, fn in fns.items():
                sync()
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                sync()
                if batch:
                    samples[name].append((time.perf_counter() - start) / calls * 1e6)
    finally:
        gc.enable()
    return {name: statistics.median(values) for name, values in samples.items()}


def sweep(args, device, measure, group_done, first_shape=lambda layout, log2n: True):
    """Rows of measure(case, timer) for every thread count, dtype, layout and size (largest first:
    a dynamic graph is then tuned on the largest size it serves); group_done(rows) after each group."""
    rows, all_threads = [], torch.get_num_threads()
    for threads in args.threads:
        if device.type == "cuda":
            timer, _ = gpu_timer(args)
        else:
            timer = cpu_timer(args, threads)
            torch.set_num_threads(threads)
            torch._inductor.config.cpp.threads = threads  # baked into Inductor's C++ kernels
        for dtype in args.dtypes:
            for layout in args.layouts:
                sizes = [k for k in range(args.max_log2, args.min_log2 - 1, -1) if first_shape(layout, k)]
                if sizes:
                    print(f"\n== {dtype} {layout}" + (f", {threads} threads" if threads else ""))
                for log2n in sizes:
                    rows += measure(Case(layout, dtype, log2n, threads), timer)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                group_done(rows)
    torch.set_num_threads(all_threads)
    return rows


# ----------------------------------------------------------------------------------------------
# Rows: a variant's time, bandwidth, floor and ratios


def rows_of(case, shape, variants: list[Variant], times: dict, ratios: dict) -> list[dict]:
    """One row per variant. The floor is the variant's bytes at the bandwidth `copy` (y.copy_(x))
    reached here. `ratios` is {kind: {field: (reference variant, how)}}, how: "speedup" (its time
    / this one's), "time" (this time / its), "bandwidth" (this GB/s / its); null without it."""
    by_name = {variant.name: variant for variant in variants}
    rows = []
    for variant in variants:
        us = times[variant.name]
        floor_us = times["copy"] * variant.bytes / by_name["copy"].bytes
        row = {
            "kind": variant.kind,
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
            "floor_us": round(floor_us, 3),
            "vs_floor": round(us / floor_us, 4),
        }
        for field, (reference, how) in ratios.get(variant.kind, {}).items():
            ref_us = times.get(reference)
            if ref_us is None:
                row[field] = None
                continue
            if how == "bandwidth":
                value = (variant.bytes / us) / (by_name[reference].bytes / ref_us)
            else:
                value = ref_us / us if how == "speedup" else us / ref_us
            row[field] = round(value, 4)
        rows.append(row)
    return rows


def print_rows(rows, fields):
    for row in rows:
        ratios = " ".join("{:>9}".format("" if row.get(f) is None else f"{row[f]:.3f}x") for f in fields)
        print(
            f"{row['variant']:<20} {row['dtype']:<9} {row['layout']:<13} {row['threads'] or '-':>3} 2^{row['log2n']:<3}"
            f" {row['median_us']:>11.2f} us {row['gbps']:>8.1f} GB/s {ratios}",
            flush=True,
        )


def print_header(fields):
    print(
        f"{'variant':<20} {'dtype':<9} {'layout':<13} thr {'n':<4} {'median':>14} {'bandwidth':>13} "
        + " ".join(f"{f:>9}" for f in fields)
    )


# ----------------------------------------------------------------------------------------------
# Targets: one row of data each, one evaluator


@dataclasses.dataclass(frozen=True)
class Target:
    """`test` is "<field> <op> <bound>" over the rows of `variants` (space-separated) in `layouts`
    from 2^min_log2 up (to 2^max_log2), "... if <field>" to judge only rows where that field is
    true; `device` "cuda", "cpu" or "any"; CPU targets read only the all-threads rows."""

    device: str
    kind: str
    variants: str
    layouts: tuple
    min_log2: int
    test: str
    max_log2: int = 99

    @property
    def text(self):
        device = {"cuda": "GPU", "cpu": "CPU", "any": "any device"}[self.device]
        sizes = f"n>=2^{self.min_log2}" if self.max_log2 >= 99 else f"n<=2^{self.max_log2}"
        sizes = f"2^{self.min_log2}<={sizes}" if self.min_log2 and self.max_log2 < 99 else sizes
        layouts = (
            ",".join(self.layouts) if len(self.layouts) < 3 else f"{len(self.layouts)} layouts {self.layouts[0]}.."
        )
        return f"{device} {self.kind} {layouts} {sizes}, every dtype: {self.variants} {self.test}"


OPS = {">=": float.__ge__, "<=": float.__le__, "<": float.__lt__}


def evaluate(targets, rows, device: str, all_threads: int | None) -> list[dict]:
    """Each target of this device: PASS/MISS by its worst row, where that is, and (where it misses)
    the smallest size from which it would hold; n/a without rows."""
    results = []
    for target in targets:
        if target.device not in (device, "any"):
            continue
        field, op, bound, *condition = target.test.replace(" if ", " ").split()
        bound = float(bound)
        ok = lambda row: OPS[op](float(row[field]), bound)  # noqa: E731
        chosen = [
            row
            for row in rows
            if row["kind"] == target.kind
            and row["variant"] in target.variants.split()
            and row["layout"] in target.layouts
            and row.get(field) is not None
            and (device == "cuda" or row["threads"] == all_threads)
            and (not condition or row.get(condition[0]) is not None)
        ]
        in_range = [row for row in chosen if target.min_log2 <= row["log2n"] <= target.max_log2]
        judged = [row for row in in_range if not condition or row[condition[0]]]
        result = {"target": target.text, "test": target.test, "layouts": list(target.layouts), "rows": len(judged)}
        result |= {"worst": None, "at": None}
        if not judged:
            status = "PASS" if in_range else "n/a"  # a condition that never held: nothing to beat
            results.append({**result, "status": status, "note": f"no row where {condition[0]}" if in_range else None})
            continue
        worst = (min if op == ">=" else max)(judged, key=lambda row: row[field])
        failing = [row["log2n"] for row in chosen if (not condition or row[condition[0]]) and not ok(row)]
        holds = [row["log2n"] for row in chosen if not failing or row["log2n"] > max(failing)]
        result |= {"worst": worst[field], "at": f"{worst['dtype']} {worst['layout']} n=2^{worst['log2n']}"}
        results.append(
            {**result, "status": "PASS" if ok(worst) else "MISS", "holds_from_log2": min(holds, default=None)}
        )
    return results


def print_summary(results):
    print("\n== targets (worst case over the selected rows)")
    for r in results:
        if r["worst"] is None:
            print(f"{r['status']:<5} {r['target']}: {r['note'] or 'no measured rows in range'}")
            continue
        line = f"{r['status']:<5} {r['target']}: worst {r['worst']:.3f}x at {r['at']} ({r['rows']} rows)"
        if r["status"] == "MISS":
            k = r["holds_from_log2"]
            line += f"; holds from n=2^{k} up" if k is not None else "; holds at no measured size"
        print(line)


# ----------------------------------------------------------------------------------------------
# The results file


def git_commit(given: str | None) -> str | None:
    """A commit given on the command line wins: a tree copied to the GPU machine has no .git."""
    if given:
        return given
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def device_name(device: torch.device) -> tuple[str, str]:
    """('h200', 'NVIDIA H200'), ('cpu', the model name): the file-name slug and the full name."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        slug = re.sub(r"[^a-z0-9]+", "-", re.sub(r"\b(nvidia|geforce|tesla)\b", " ", name.lower())).strip("-")
        return slug or "gpu", name
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    models = (
        [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        if cpuinfo.exists()
        else []
    )
    return "cpu", (models or [platform.processor() or "cpu"])[0]


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def metadata(benchmark: str, args, device, library, timing) -> dict:
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    slug, name = device_name(device)
    meta = {
        "benchmark": benchmark,
        "date": datetime.date.today().isoformat(),
        "device": slug,
        "device_name": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "python": platform.python_version(),
        "git_commit": git_commit(args.git_commit),
        "library": str(library),
        "timing": timing,
        "all_threads": torch.get_num_threads() if device.type == "cpu" else None,
        "cpu_count": os.cpu_count(),
        "loadavg_start": load_average(),
        "argv": sys.argv[1:],
    }
    print(f"{benchmark} on {name} ({slug}), torch {meta['torch']}, commit {meta['git_commit']}, timing: {timing}")
    if meta["loadavg_start"] and meta["loadavg_start"] > 0.5 + 0.1 * (os.cpu_count() or 1):
        print(f"bench: warning: load average {meta['loadavg_start']}: other work skews CPU and per-call host timings")
    return meta


def output_path(args, meta) -> pathlib.Path:
    """bench/results/<date>-<device>-<benchmark>[-<commit>].json under --output-dir, or --output
    (a .json path, or a directory to put that name in)."""
    commit = (meta["git_commit"] or "")[:7]
    name = f"{meta['date']}-{meta['device']}-{meta['benchmark']}" + (f"-{commit}" if commit else "") + ".json"
    if args.output is None:
        return args.output_dir / "bench" / "results" / name
    return args.output / name if args.output.is_dir() or args.output.suffix != ".json" else args.output


def write_json(path: pathlib.Path, results: dict):
    """Indented, one line per row (a re-run's diff stays row by row), replaced in one step."""
    head = json.dumps({key: value for key, value in results.items() if key != "rows"}, indent=1)
    rows = ",\n".join("  " + json.dumps(row) for row in results.get("rows", []))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(head[: -len("\n}")] + ',\n "rows": [\n' + rows + "\n ]\n}\n")
    partial.replace(path)


def run(benchmark: str, args, ops, measure_all, targets, png: str | None = None) -> int:
    """A sweep's main: the library and device, measure_all(args, device, group_done) -> rows, the
    JSON rewritten after each group ("complete": false until the end, so a run cut short keeps what
    it measured), the targets' summary, and the plot on --plot (`png` under docs/, {device} in it)."""
    started = time.perf_counter()
    library = load_library(args.library)
    device = pick_device(args, ops)
    # Every dtype, layout and grad mode is a guard of its own; never fall back to eager silently.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    torch.manual_seed(0)
    all_threads = torch.get_num_threads() if device.type == "cpu" else None
    meta = metadata(benchmark, args, device, library, cpu_timing(args) if args.cpu else gpu_timer(args)[1])
    path = output_path(args, meta)

    def write(rows, complete):
        summary = evaluate(targets, rows, device.type, all_threads)
        meta.update(elapsed_s=round(time.perf_counter() - started, 1), loadavg_end=load_average())
        write_json(path, {**meta, "complete": complete, "summary": summary, "rows": rows})
        return summary

    rows = measure_all(args, device, lambda rows: write(rows, False))
    print_summary(write(rows, True))
    print(f"\nwrote {path} ({meta['elapsed_s']} s)")
    if args.plot and png:
        try:
            import plot_results
        except ImportError as error:  # matplotlib is optional for the measurement itself
            print(f"bench: no plot ({error})")
        else:
            print(
                f"wrote {plot_results.plot_file([path], args.output_dir / 'docs' / png.format(device=meta['device']))}"
            )
    return 0
