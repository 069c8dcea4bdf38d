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
to a printed table and to bench/results/<date>-<device>.json; see bench/README.md.
"""

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
from collections.abc import Sequence
from typing import Callable

import torch
import torch._dynamo
import torch._inductor.config
import torch.utils.benchmark

BENCH_DIR = pathlib.Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LAYOUTS = ("contiguous", "broadcast", "transposed")
# Per-channel weights (issue 15), forward+backward always, each at a fixed channel count C:
# row_cC: x [n/C, C], w [C]; column_cC: x [n/C, C], w [n/C, 1]; nchw_cC: x [N, C, H, W],
# w [C, 1, 1] with H * W = min(256, n / 2C). Not in the default sweep: `--layouts per-channel`.
CHANNEL_COUNTS = (1024, 4096, 16384)
PER_CHANNEL_LAYOUTS = tuple(f"{kind}_c{c}" for kind in ("row", "column", "nchw") for c in CHANNEL_COUNTS)
FWD_BWD_VARIANTS = (
    "ours_fwd_bwd",
    "eager_fwd_bwd",
    "compile_fwd_bwd",
    "ours_fwd_bwd_graph",
    "eager_fwd_bwd_graph",
    "add_fwd_bwd",
)
LABELS = {
    "copy": "y.copy_(x)",
    "add_out": "torch.add(out=)",
    "eager": "eager w*x.pow(2)",
    "compile": "compile w*x*x",
    "ours": "ours",
    "ours_out": "ours(out=)",
    "ours_fwd_bwd": "ours fwd+bwd",
    "eager_fwd_bwd": "eager fwd+bwd",
    "compile_fwd_bwd": "compile fwd+bwd",
    "ours_fwd_bwd_graph": "ours fwd+bwd graph",
    "eager_fwd_bwd_graph": "eager fwd+bwd graph",
    "add_fwd_bwd": "torch.add fwd+bwd",
    "add": "torch.add(x, w)",
}


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
# Environment: the library, the device and where the results go


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


# ----------------------------------------------------------------------------------------------
# Inputs


@dataclasses.dataclass(frozen=True)
class Case:
    """One point of the sweep; its tensors are made by make_inputs."""

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


def matrix_shape(log2n: int) -> tuple[int, int]:
    """[N, C] with N * C = 2^log2n and N >= 2C: never square, because for N == C dynamo's duck
    sizing would give both dimensions one symbol and recompile at the next non-square size."""
    c = 1 << ((log2n - 1) // 2)
    return (1 << log2n) // c, c


def per_channel_shapes(layout: str, log2n: int) -> tuple[tuple, tuple] | None:
    """(x shape, w shape) of a per-channel layout at 2^log2n elements; None where n < 2C (a
    size-1 dimension, which torch.compile would specialize) or for the other layouts."""
    if layout not in PER_CHANNEL_LAYOUTS:
        return None
    kind, channels = layout.split("_c")
    c, n = int(channels), 1 << log2n
    if n < 2 * c:
        return None
    if kind == "row":
        return (n // c, c), (c,)
    if kind == "column":
        return (n // c, c), (n // c, 1)
    plane = min(256, n // (2 * c))
    width = 1 << ((plane.bit_length() - 1) // 2)
    return (n // (c * plane), c, plane // width, width), (c, 1, 1)


def make_inputs(case: Case, device: torch.device):
    """Fresh randn x and w (never zeros: zeros would hide wrong arithmetic) and an output y.

    contiguous: x, w, y of shape [n].
    broadcast:  x [N, C], w [C] broadcast over the rows, y [N, C].
    transposed: x = randn(C, N).t() (strides (1, N)), w [N, C] contiguous, y [N, C].
    """
    dtype = DTYPES[case.dtype]
    make = {"dtype": dtype, "device": device}
    rows, cols = matrix_shape(case.log2n)
    per_channel = per_channel_shapes(case.layout, case.log2n)
    if per_channel is not None:
        x, w = torch.randn(per_channel[0], **make), torch.randn(per_channel[1], **make)
    elif case.layout == "contiguous":
        x, w = torch.randn(case.n, **make), torch.randn(case.n, **make)
    elif case.layout == "broadcast":
        x, w = torch.randn(rows, cols, **make), torch.randn(cols, **make)
    else:
        x, w = torch.randn(cols, rows, **make).t(), torch.randn(rows, cols, **make)
    y = torch.empty(x.shape, **make)
    return x, w, y


def nbytes(*tensors: torch.Tensor) -> int:
    """Bytes of each tensor's elements (a broadcast weight counts once, at its own size)."""
    return sum(t.numel() * t.element_size() for t in tensors)


# ----------------------------------------------------------------------------------------------
# The variants. Each returns what it computed, so the same callable is checked and timed.


def eager_composite(x, w):
    return w * x.pow(2)


def compile_composite(x, w):
    # x * x rather than x.pow(2): the form Inductor is sure to fuse into one pointwise kernel.
    return w * x * x


@dataclasses.dataclass
class Variant:
    name: str
    call: Callable[[], object]  # runs once, returns its result tensor(s)
    expected: Callable[[], tuple]  # float64 reference of those results
    bytes: int  # bytes the variant must move at least


def forward_variants(x, w, y, compiled) -> list[Variant]:
    def copy():
        return y.copy_(x)

    def add_out():
        return torch.add(x, w, out=y)

    def ours_out():
        torch.ops.custom.weighted_sum.out(x, w, out=y)
        return y

    def product():
        return (w.double() * x.double() ** 2,)

    io = nbytes(x, w, y)
    variants = [
        Variant("copy", copy, lambda: (x.double(),), nbytes(x, y)),
        Variant("add_out", add_out, lambda: (x.double() + w.double(),), io),
        # The functional form allocates its output: on the CPU, fresh pages (zeroed by the kernel
        # at first touch) can cost more than the arithmetic; `ours` pays the same.
        Variant("add", lambda: torch.add(x, w), lambda: (x.double() + w.double(),), io),
        Variant("eager", lambda: eager_composite(x, w), product, io),
    ]
    if compiled is not None:
        variants.append(Variant("compile", lambda: compiled(x, w), product, io))
    variants += [
        Variant("ours", lambda: torch.ops.custom.weighted_sum(x, w), product, io),
        Variant("ours_out", ours_out, product, io),
    ]
    return variants


def fwd_bwd_variants(x, w, compiled) -> list[Variant]:
    """Forward + backward through autograd: returns (y, grad_x, grad_w) for one upstream grad g."""
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    g = torch.randn_like(x)

    def through(forward):
        def run():
            y = forward(xg, wg)
            return (y, *torch.autograd.grad(y, (xg, wg), g))

        return run

    def expected():
        x64, w64, g64 = x.double(), w.double(), g.double()
        return (w64 * x64**2, 2 * w64 * x64 * g64, summed_to(x64**2 * g64, w.shape))

    # The 8-stream floor: read x, w; write y; read g, x, w; write grad_x, grad_w (a broadcast
    # weight and its gradient count at their own size: 5 full-size streams).
    floor_bytes = 2 * nbytes(x, w) + nbytes(x, g, x, w)
    forwards = {"ours_fwd_bwd": torch.ops.custom.weighted_sum, "eager_fwd_bwd": eager_composite}
    if compiled is not None:
        forwards["compile_fwd_bwd"] = compiled
    variants = [Variant(name, through(forward), expected, floor_bytes) for name, forward in forwards.items()]
    if x.is_cuda:
        for name in ("ours_fwd_bwd", "eager_fwd_bwd"):
            variants.append(Variant(f"{name}_graph", graphed(through(forwards[name])), expected, floor_bytes))

    def add_expected():
        x64, w64, g64 = x.double(), w.double(), g.double()
        return (x64 + w64, g64, summed_to(g64, w.shape))

    # Against the same floor as the others: its ratio is what the host alone costs per step.
    variants.append(Variant("add_fwd_bwd", through(torch.add), add_expected, floor_bytes))
    return variants


def summed_to(terms: torch.Tensor, shape) -> object:
    """A broadcast weight's gradient: the terms summed back to its shape. Where that sums
    anything, a Summed, so the check bounds the error by the size of the terms, not of the sum."""
    if terms.shape == torch.Size(shape):
        return terms
    return Summed(terms.sum_to_size(shape), terms.abs().sum_to_size(shape))


@dataclasses.dataclass
class Summed:
    value: torch.Tensor
    scale: torch.Tensor  # the sum of the terms' absolute values


def graphed(step: Callable[[], tuple]) -> Callable[[], tuple]:
    """`step` captured once in a CUDA graph; each call replays it and returns the same output
    tensors. A replay is one launch, so its time is the kernels' alone: the part of a fwd+bwd
    step that the library's kernels decide, apart from the host's per-step overhead."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    for output in outputs:  # capture computes nothing; the check must see what a replay wrote
        output.detach().fill_(math.nan)

    def replay():
        graph.replay()
        return outputs

    return replay


class Compiler:
    """torch.compile of the composite for one dtype and layout, sizes taken largest first.

    From 2^compile_static_from up, a static graph per size: what a model with fixed shapes gets,
    and on the GPU markedly faster than dynamic=True's kernels (bfloat16 ~0.6x torch.add with
    dynamic shapes, ~1.0x static, on an H200). Below, where launch and host time dominate, one
    dynamic=True graph serves every size: a compile per size there would cost minutes."""

    def __init__(self, args):
        self.enabled = not args.no_compile
        self.static_from = args.compile_static_from
        self.dynamic = None

    def for_size(self, log2n: int):
        if not self.enabled:
            return None
        if log2n >= self.static_from:
            torch._dynamo.reset()  # drop the previous size's graphs: no recompile pile-up
            return torch.compile(compile_composite, dynamic=False)
        if self.dynamic is None:
            torch._dynamo.reset()
            self.dynamic = torch.compile(compile_composite, dynamic=True)
        return self.dynamic


# ----------------------------------------------------------------------------------------------
# Correctness


def tolerance(dtype: str) -> dict:
    """Every output is a product, so its relative error is at most (roundings) x eps/2: 2 eps for
    the four roundings of the longest composite path. 4 eps doubles that margin; the check is
    there to stop wrong kernels (wrong broadcast, stale output, wrong formula), not last ulps."""
    return {"rtol": 4 * torch.finfo(DTYPES[dtype]).eps, "atol": 1e-5}


def check(variant: Variant, case: Case, out: torch.Tensor):
    """Aborts the run when a variant's values are wrong: a fast wrong kernel is no result."""
    out.fill_(math.nan)  # an out= variant that writes nothing must fail
    got = variant.call()
    got = got if isinstance(got, tuple) else (got,)
    expected = variant.expected()
    try:
        for index, (actual, reference) in enumerate(zip(got, expected, strict=True)):
            if isinstance(reference, Summed):  # rounding errors of a sum scale with its terms
                bound = tolerance(case.dtype)
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
                actual.double(), reference, **tolerance(case.dtype), msg=lambda m, i=index: f"output {i}: {m}"
            )
    except (AssertionError, ValueError) as error:
        sys.exit(f"bench: {LABELS[variant.name]} computes wrong values for {case}:\n{error}")


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
# Sweep


def measure_case(case: Case, device, timer, compiled, with_fwd_bwd: bool) -> list[dict]:
    x, w, y = make_inputs(case, device)
    variants = forward_variants(x, w, y, compiled)
    if with_fwd_bwd:
        variants += fwd_bwd_variants(x, w, compiled)
    for variant in variants:  # every check before any timing
        check(variant, case, y)
    times = timer(variants)

    rows = []
    copy = next(v for v in variants if v.name == "copy")
    for variant in variants:
        us = times[variant.name]
        row = {
            "kind": "fwd_bwd" if variant.name in FWD_BWD_VARIANTS else "forward",
            "variant": variant.name,
            "dtype": case.dtype,
            "layout": case.layout,
            "log2n": case.log2n,
            "n": case.n,
            "shape": list(x.shape),
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


def sweep(args, device, timer_for) -> list[dict]:
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
                print_header(threads, dtype, layout)
                for log2n in range(args.max_log2, args.min_log2 - 1, -1):
                    if layout in PER_CHANNEL_LAYOUTS and per_channel_shapes(layout, log2n) is None:
                        continue
                    case = Case(layout, dtype, log2n, threads)
                    with_fwd_bwd = (
                        layout in args.fwd_bwd_layouts or layout in PER_CHANNEL_LAYOUTS
                    ) and not args.no_fwd_bwd
                    case_rows = measure_case(case, device, timer, compiler.for_size(log2n), with_fwd_bwd)
                    print_rows(case_rows)
                    rows += case_rows
    return rows


def host_overhead(args, device) -> list[dict]:
    """Per-call wall time of small float32 calls: ours vs torch.add(x, w) vs eager w*x.pow(2).
    Batches of the three variants alternate, so drift of the machine hits all of them alike."""
    rows = []
    calls, batches = 1000, 7
    for log2n in range(args.min_log2, min(args.host_max_log2, args.max_log2) + 1):
        x = torch.randn(1 << log2n, device=device)
        w = torch.randn(1 << log2n, device=device)
        fns = {
            "ours": lambda: torch.ops.custom.weighted_sum(x, w),
            "add": lambda: torch.add(x, w),
            "eager": lambda: w * x.pow(2),
        }
        samples = {name: [] for name in fns}
        gc.disable()
        try:
            for fn in fns.values():
                host_time_us(fn, device, calls)  # warm-up
            for _ in range(batches):
                for name, fn in fns.items():
                    samples[name].append(host_time_us(fn, device, calls))
        finally:
            gc.enable()
        medians = {name: statistics.median(values) for name, values in samples.items()}
        for name, us in medians.items():
            rows.append(
                {
                    "kind": "host",
                    "variant": name,
                    "dtype": "float32",
                    "layout": "contiguous",
                    "log2n": log2n,
                    "n": 1 << log2n,
                    "threads": torch.get_num_threads() if device.type == "cpu" else None,
                    "per_call_us": round(us, 3),
                    "vs_add": round(us / medians["add"], 4),
                    "vs_eager": round(us / medians["eager"], 4),
                }
            )
    return rows


# ----------------------------------------------------------------------------------------------
# Printing

ROW_FORMAT = "{:<19} {:<9} {:<11} {:>4} {:>5} {:>12} {:>9} {:>7} {:>8}"


def print_header(threads, dtype, layout):
    print()
    print(f"== {dtype} {layout}" + (f", {threads} threads" if threads else ""))
    print(ROW_FORMAT.format("variant", "dtype", "layout", "thr", "n", "median us", "GB/s", "vs add", "vs floor"))


def _ratio(value):
    return "" if value is None else f"{value:.3f}x"


def print_rows(rows):
    for row in rows:
        print(
            ROW_FORMAT.format(
                LABELS[row["variant"]],
                row["dtype"],
                row["layout"],
                row["threads"] or "-",
                f"2^{row['log2n']}",
                f"{row['median_us']:.2f}",
                f"{row['gbps']:.1f}",
                _ratio(row["vs_add"]),
                _ratio(row["vs_floor"]),
            ),
            flush=True,
        )


def print_host_rows(rows):
    print("\n== per-call Python wall time, float32 contiguous (lower is better)")
    print("{:<17} {:>5} {:>12} {:>8} {:>9}".format("variant", "n", "us / call", "vs add", "vs eager"))
    for row in rows:
        print(
            "{:<17} {:>5} {:>12.2f} {:>8} {:>9}".format(
                LABELS[row["variant"]],
                f"2^{row['log2n']}",
                row["per_call_us"],
                _ratio(row["vs_add"]),
                _ratio(row["vs_eager"]),
            )
        )


# ----------------------------------------------------------------------------------------------
# The targets


@dataclasses.dataclass(frozen=True)
class Target:
    text: str
    device: str | None  # "cuda", "cpu", or None for both
    kind: str
    variant: str
    metric: str  # a ratio column of the rows
    bound: float
    at_least: bool  # True: metric >= bound, False: metric <= bound (< bound when strict)
    layouts: tuple = ("contiguous",)
    min_log2: int = 0
    max_log2: int = 99
    all_threads: bool = False  # CPU: only the rows at the default (all) thread count
    strict: bool = False


def targets() -> list[Target]:
    found = []
    for variant in ("ours", "ours_out"):
        label = LABELS[variant]
        found.append(
            Target(
                f"GPU forward contiguous n>=2^24, every dtype: {label} >= 0.97x torch.add(out=)",
                "cuda",
                "forward",
                variant,
                "vs_add",
                0.97,
                True,
                min_log2=24,
            )
        )
        for layout in ("broadcast", "transposed"):
            found.append(
                Target(
                    f"GPU forward {layout} n>=2^24, every dtype: {label} >= 0.9x torch.add(out=)",
                    "cuda",
                    "forward",
                    variant,
                    "vs_add",
                    0.9,
                    True,
                    (layout,),
                    min_log2=24,
                )
            )
    found.append(
        Target(
            "GPU fwd+bwd contiguous n>=2^24, every dtype: ours <= 1.1x the 8-stream floor",
            "cuda",
            "fwd_bwd",
            "ours_fwd_bwd",
            "vs_floor",
            1.1,
            False,
            min_log2=24,
        )
    )
    # Not the target but its explanation: the same bound on the kernels alone, and on
    # a step whose kernels hardly count (one 3-stream kernel): what the host alone allows.
    found.append(
        Target(
            "GPU fwd+bwd contiguous n>=2^24, CUDA-graph replay: ours <= 1.1x the 8-stream floor",
            "cuda",
            "fwd_bwd",
            "ours_fwd_bwd_graph",
            "vs_floor",
            1.1,
            False,
            min_log2=24,
        )
    )
    found.append(
        Target(
            "GPU fwd+bwd contiguous n>=2^24, host floor: torch.add fwd+bwd <= 1.1x the 8-stream floor",
            "cuda",
            "fwd_bwd",
            "add_fwd_bwd",
            "vs_floor",
            1.1,
            False,
            min_log2=24,
        )
    )
    found.append(
        Target(
            "GPU fwd+bwd per-channel (w [C], [R, 1], [C, 1, 1]) n>=2^26: ours <= 1.15x the 5-stream floor",
            "cuda",
            "fwd_bwd",
            "ours_fwd_bwd",
            "vs_floor",
            1.15,
            False,
            PER_CHANNEL_LAYOUTS,
            min_log2=26,
        )
    )
    found.append(
        Target(
            "GPU fwd+bwd per-channel n>=2^26, CUDA-graph replay: ours <= 1.15x the 5-stream floor",
            "cuda",
            "fwd_bwd",
            "ours_fwd_bwd_graph",
            "vs_floor",
            1.15,
            False,
            PER_CHANNEL_LAYOUTS,
            min_log2=26,
        )
    )
    found.append(
        Target(
            "GPU fwd+bwd per-channel n>=2^26: ours faster than torch.compile's step",
            "cuda",
            "fwd_bwd",
            "ours_fwd_bwd",
            "vs_compile",
            1.0,
            False,
            PER_CHANNEL_LAYOUTS,
            min_log2=26,
            strict=True,
        )
    )
    found.append(
        Target(
            "CPU fwd+bwd per-channel n>=2^20, all threads: ours <= 1/1.5 of eager's step",
            "cpu",
            "fwd_bwd",
            "ours_fwd_bwd",
            "vs_eager",
            1 / 1.5,
            False,
            PER_CHANNEL_LAYOUTS,
            min_log2=20,
            all_threads=True,
        )
    )
    found.append(
        Target(
            "CPU fwd+bwd per-channel n>=2^20, all threads: ours <= torch.compile's step",
            "cpu",
            "fwd_bwd",
            "ours_fwd_bwd",
            "vs_compile",
            1.0,
            False,
            PER_CHANNEL_LAYOUTS,
            min_log2=20,
            all_threads=True,
        )
    )
    found.append(
        Target(
            "small n<=2^14 per-call Python time: ours <= 1.5x torch.add(x, w)",
            None,
            "host",
            "ours",
            "vs_add",
            1.5,
            False,
            max_log2=14,
        )
    )
    found.append(
        Target(
            "small n<=2^14 per-call Python time: ours below eager w*x.pow(2)",
            None,
            "host",
            "ours",
            "vs_eager",
            1.0,
            False,
            max_log2=14,
            strict=True,
        )
    )
    for variant in ("ours", "ours_out"):
        for layout in LAYOUTS:
            found.append(
                Target(
                    f"CPU {layout} n>=2^20, all threads, every dtype: {LABELS[variant]} >= 0.9x torch.add(out=)",
                    "cpu",
                    "forward",
                    variant,
                    "vs_add",
                    0.9,
                    True,
                    (layout,),
                    min_log2=20,
                    all_threads=True,
                )
            )
    return found


def _meets(target: Target, value: float) -> bool:
    if target.at_least:
        return value >= target.bound
    return value < target.bound if target.strict else value <= target.bound


def _target_rows(target: Target, rows: list[dict], all_threads: int | None, any_size=False) -> list[dict]:
    return [
        row
        for row in rows
        if row["kind"] == target.kind
        and row["variant"] == target.variant
        and row["layout"] in target.layouts
        and row.get(target.metric) is not None
        and (any_size or target.min_log2 <= row["log2n"] <= target.max_log2)
        and not (target.all_threads and row["threads"] != all_threads)
    ]


def _holds_from(target: Target, rows: list[dict]) -> int | None:
    """The smallest measured log2n from which the target holds at every larger size too."""
    failing = [row["log2n"] for row in rows if not _meets(target, row[target.metric])]
    sizes = [row["log2n"] for row in rows if not failing or row["log2n"] > max(failing)]
    return min(sizes, default=None)


def evaluate(target: Target, rows: list[dict], device: str, all_threads: int | None) -> dict | None:
    """The worst ratio over the target's rows and whether it meets the bound; None if the target
    is for the other device."""
    if target.device not in (None, device):
        return None
    selected = _target_rows(target, rows, all_threads)
    result = {"target": target.text, "bound": target.bound, "rows": len(selected), "sized": bool(target.min_log2)}
    if not selected:
        return {**result, "status": "n/a", "worst": None, "at": None, "holds_from_log2": None}
    worst = (min if target.at_least else max)(selected, key=lambda row: row[target.metric])
    return {
        **result,
        "status": "PASS" if _meets(target, worst[target.metric]) else "MISS",
        "worst": round(worst[target.metric], 4),
        "at": f"{worst['dtype']} {worst['layout']} n=2^{worst['log2n']}",
        # Where the target has a size threshold: the size from which it would hold.
        "holds_from_log2": _holds_from(target, _target_rows(target, rows, all_threads, any_size=True)),
    }


def summarize(rows, device, all_threads) -> list[dict]:
    results = [evaluate(target, rows, device, all_threads) for target in targets()]
    results = [result for result in results if result is not None]
    print("\n== targets (worst case over the selected rows)")
    for result in results:
        if result["worst"] is None:
            print(f"n/a   {result['target']}: no measured rows in range")
            continue
        line = f"{result['status']}  {result['target']}: worst {result['worst']:.3f}x at {result['at']}"
        if result["status"] == "MISS" and result["sized"]:
            k = result["holds_from_log2"]
            line += f"; holds from n=2^{k} up" if k is not None else "; holds at no measured size"
        print(line + f" ({result['rows']} rows)")
    return results


# ----------------------------------------------------------------------------------------------
# Main


def metadata(args, device, library, timing) -> dict:
    import importlib.util

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


def load_average() -> float | None:
    """1-minute load average: other work on the machine skews CPU timings and host overheads."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def warn_if_busy(meta):
    load, cpus = meta["loadavg_start"], meta["cpu_count"] or 1
    if load is not None and load > 0.5 + 0.1 * cpus:
        print(
            f"bench: warning: load average {load} on {meta['cpu_count']} CPUs before the start: other work "
            "running now skews the CPU timings (multi-threaded ones most) and the per-call host times"
        )


def results_json(results: dict) -> str:
    """Indented, except one line per row: readable, and a re-run's diff stays row by row."""
    head = json.dumps({key: value for key, value in results.items() if key != "rows"}, indent=1)
    rows = ",\n".join("  " + json.dumps(row) for row in results["rows"])
    return head[: -len("\n}")] + ',\n "rows": [\n' + rows + "\n ]\n}\n"


def output_path(args, meta) -> pathlib.Path:
    return args.output or args.output_dir / "bench" / "results" / f"{meta['date']}-{meta['device']}.json"


def configure_dynamo():
    # Every dtype, layout and grad mode is a guard of its own; never fall back to eager silently.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.fail_on_recompile_limit_hit = True


def main(argv=None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    library = load_library(args.library)
    device = pick_device(args)
    configure_dynamo()
    torch.manual_seed(0)

    if device.type == "cuda":
        gpu_time, timing = gpu_timer(args)
        timer_for = lambda threads: lambda variants: {v.name: gpu_time(v.call) for v in variants}  # noqa: E731
    else:
        timing = f"torch.utils.benchmark.Timer.blocked_autorange, variants in turn, median of {args.rounds} rounds"
        timer_for = lambda threads: cpu_timer(args, threads)  # noqa: E731
    all_threads = torch.get_num_threads()
    meta = metadata(args, device, library, timing)
    print(
        f"custom::weighted_sum benchmark on {meta['device_name']} ({meta['device']}), torch {meta['torch']}, "
        f"commit {meta['git_commit']}, timing: {timing}"
    )
    warn_if_busy(meta)

    rows = sweep(args, device, timer_for)
    torch.set_num_threads(all_threads)
    host_rows = host_overhead(args, device)
    print_host_rows(host_rows)
    summary = summarize(rows + host_rows, device.type, all_threads if device.type == "cpu" else None)

    path = output_path(args, meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta["elapsed_s"] = round(time.perf_counter() - started, 1)
    meta["loadavg_end"] = load_average()
    path.write_text(results_json({**meta, "summary": summary, "rows": rows + host_rows}))
    print(f"\nwrote {path} ({meta['elapsed_s']} s)")
    if args.plot:
        plot(path, args.output_dir / "docs" / f"bandwidth-{meta['device']}.png")
    return 0


def plot(results: pathlib.Path, png: pathlib.Path):
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import plot_results
    except ImportError as error:  # matplotlib is optional for the measurement itself
        print(f"bench: no plot ({error})")
        return
    print(f"wrote {plot_results.plot_file(results, png)}")


if __name__ == "__main__":
    sys.exit(main())
