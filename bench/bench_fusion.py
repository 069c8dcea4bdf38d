"""Fusion under torch.compile: `relu(weighted_sum(a + b, w)) * 3` compiled, against the compiled
composite `relu(w * (a + b).square()) * 3`, and the op alone compiled against our eager kernel.

    python bench/bench_fusion.py                 # GPU: n = 2^24 .. 2^28, float32 and bfloat16
    python bench/bench_fusion.py --cpu --max-log2 20
    python bench/bench_fusion.py --git-commit abc1234   # a copied tree: name the commit that runs

Variants per dtype and size (contiguous [n], w [n]):
  model_ours        the model with our op, compiled (Inductor decomposes the op and fuses it)
  model_opaque      the same with the decomposition off (our kernel between two Inductor kernels)
  model_composite   the model written with the composite, compiled: the reference of the ratios
  op_compiled       torch.compile(weighted_sum) alone
  op_eager          our eager kernel
Prints medians (us) and ratios; writes JSON to bench/results/. The op comes from the installed
custom_ops package, or from --library plus python/custom_ops/_inductor.py of this checkout.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import os
import pathlib
import platform
import statistics
import sys

import torch
import torch.utils.benchmark

import bench_harness as harness

REPO = pathlib.Path(__file__).resolve().parents[1]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="benchmark the CPU instead of the GPU")
    parser.add_argument("--min-log2", type=int, default=None, help="default 24 (GPU), 16 (CPU)")
    parser.add_argument("--max-log2", type=int, default=None, help="default 28 (GPU), 20 (CPU)")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--library", type=pathlib.Path, default=None, help="libcustom_ops.so instead of the package")
    parser.add_argument("--warmup-ms", type=float, default=25.0)
    parser.add_argument("--rep-ms", type=float, default=100.0)
    parser.add_argument("--min-run-time", type=float, default=0.2, help="CPU seconds per variant and size")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the variants; their median")
    parser.add_argument(
        "--git-commit",
        default=os.environ.get("CUSTOM_OPS_GIT_COMMIT"),
        help="commit to record, for a copied tree whose .git is missing or stale "
        "(default $CUSTOM_OPS_GIT_COMMIT, else git rev-parse of this checkout)",
    )
    parser.add_argument("--output", type=pathlib.Path, default=None, help="JSON path (default bench/results/...)")
    return parser.parse_args(argv)


def load(library):
    """The decomposition switch: custom_ops.set_inductor_decomposition or the source module's."""
    if library is None:
        import custom_ops

        return custom_ops.set_inductor_decomposition, custom_ops.library_path()
    torch.ops.load_library(str(library))
    spec = importlib.util.spec_from_file_location("custom_ops_inductor", REPO / "python/custom_ops/_inductor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install("bench")
    return module.set_enabled, str(library)


def model_ours(a, b, w):
    return torch.relu(torch.ops.custom.weighted_sum(a + b, w)) * 3


def model_composite(a, b, w):
    return torch.relu(w * (a + b).square()) * 3


def model_opaque(a, b, w):  # model_ours under its own name: compiled (and cached) with the op opaque
    return model_ours(a, b, w)


def op_alone(x, w):
    return torch.ops.custom.weighted_sum(x, w)


def gpu_time(fn, args) -> float:
    """Median device time (us) of one call, L2 flushed before each repetition (CUDA events)."""
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    flush = torch.empty(max(256 << 20, 2 * l2), dtype=torch.int8, device="cuda")
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end), 1e-3)
    for _ in range(max(1, int(args.warmup_ms / estimate))):
        fn()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(max(5, int(args.rep_ms / estimate)))
    ]
    for s, e in events:
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e3


def cpu_time(fn, args) -> float:
    timer = torch.utils.benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=args.min_run_time).median * 1e6


def main(argv=None):
    args = parse_args(argv)
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_fusion: no GPU (use --cpu)")
    lo = args.min_log2 if args.min_log2 is not None else (16 if args.cpu else 24)
    hi = args.max_log2 if args.max_log2 is not None else (20 if args.cpu else 28)
    set_decomposition, library = load(args.library)
    timer = cpu_time if args.cpu else gpu_time
    rows = []
    for dtype_name in args.dtypes.split(","):
        dtype = DTYPES[dtype_name]
        for log2 in range(lo, hi + 1):
            n = 1 << log2
            a, b, w = (torch.randn(n, device=device, dtype=dtype) for _ in range(3))
            calls = {}
            for name, fn, decompose, call_args in [
                ("model_composite", model_composite, True, (a, b, w)),
                ("model_ours", model_ours, True, (a, b, w)),
                ("model_opaque", model_opaque, False, (a, b, w)),
                ("op_compiled", op_alone, True, (a, w)),
            ]:
                set_decomposition(decompose)  # read when the graph is compiled, on the first call
                compiled = torch.compile(fn, fullgraph=True, dynamic=False)  # one graph per size, as before
                result = compiled(*call_args)
                expected = fn(*call_args)  # eager (our kernel); Inductor keeps a + b in float32
                tolerance = {"rtol": 2e-2, "atol": 1e-1} if dtype == torch.bfloat16 else {}
                torch.testing.assert_close(result, expected, **tolerance)
                calls[name] = (decompose, functools.partial(compiled, *call_args))
            calls["op_eager"] = (True, functools.partial(op_alone, a, w))

            def measure(decompose, call):
                set_decomposition(decompose)  # as compiled: the switch is part of the guards
                return timer(call, args)

            # Every variant once per round, the rounds' median: a drift of the clocks or the
            # machine moves all variants alike instead of the one measured at that moment.
            rounds = [{name: measure(*call) for name, call in calls.items()} for _ in range(args.rounds)]
            times = {name: statistics.median(r[name] for r in rounds) for name in calls}
            set_decomposition(True)
            ratios = {
                "model_ours / model_composite": times["model_ours"] / times["model_composite"],
                "model_opaque / model_composite": times["model_opaque"] / times["model_composite"],
                "op_compiled / op_eager": times["op_compiled"] / times["op_eager"],
            }
            rows.append({"dtype": dtype_name, "log2_n": log2, "n": n, "median_us": times, "ratios": ratios})
            print(
                f"{dtype_name:8s} 2^{log2:<2d} "
                + "  ".join(f"{k} {v:9.1f}us" for k, v in times.items())
                + "  |  "
                + "  ".join(f"{k} {v:.3f}" for k, v in ratios.items()),
                flush=True,
            )
    commit = (harness.git_commit(args.git_commit)["git_commit"] or "unknown")[:7]
    label = "cpu" if args.cpu else torch.cuda.get_device_name().split()[-1].lower()
    output = args.output or REPO / "bench" / "results" / f"{datetime.date.today()}-fusion-{label}-{commit}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps(
            {
                "benchmark": "fusion",
                "device": torch.cuda.get_device_name() if not args.cpu else platform.processor(),
                "torch": torch.__version__,
                "commit": commit,
                "library": library,
                "timer": "CUDA events, median, L2 flushed"
                if not args.cpu
                else "torch.utils.benchmark blocked_autorange",
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
