"""Per-call time of custom::weighted_sum under torch.func transforms and eager autograd, against
the composite `w * x.square()` it replaces, on the CPU.

    python bench/bench_transforms.py --library install/lib/libcustom_ops.so [--label main] [--json]

Rows (median of --repeats blocks, each the mean of its calls; ours and the composite in
alternating blocks, the ratio the median of the blocks' ratios):
- per_sample_grads: vmap(grad(loss), in_dims=(None, 0)) of loss(w, x) = f(x, w).sum() at B x D,
  the gradient of a shared weight for every example (Opacus-style).
- per_sample_grads_both: the same for both arguments, x and w batched.
- forward_no_grad / forward_grad / forward_backward: eager calls at [B, D] with nothing
  requiring grad, with inputs requiring grad (the graph is recorded), and forward plus
  torch.autograd.grad.
A transform the library does not support is reported as such (with its error), not timed.
`--json` writes bench/results/<date>-cpu-transforms-<label>.json.
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import time

import torch
from torch.func import grad, vmap

REPO = pathlib.Path(__file__).resolve().parents[1]


def composite(x, w):
    return w * x.square()


def ours(x, w):
    return torch.ops.custom.weighted_sum(x, w)


def calls_per_block(fn, min_block_seconds):
    """How many calls of fn take at least min_block_seconds (after a warm-up call), so the
    clock's resolution does not matter."""
    fn()
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - start >= min_block_seconds:
            return calls
        calls *= 2


def block_seconds(fn, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def compare(ours_fn, composite_fn, repeats, min_block_seconds=0.02):
    """(median seconds per call of ours, of the composite, median of their per-block ratios).
    Blocks alternate between the two, so load from other processes on a shared machine falls on
    both alike and the ratio stays steadier than either time."""
    ours_calls = calls_per_block(ours_fn, min_block_seconds)
    composite_calls = calls_per_block(composite_fn, min_block_seconds)
    ours_times, composite_times = [], []
    for _ in range(repeats):
        ours_times.append(block_seconds(ours_fn, ours_calls))
        composite_times.append(block_seconds(composite_fn, composite_calls))
    ratios = [a / b for a, b in zip(ours_times, composite_times)]
    return statistics.median(ours_times), statistics.median(composite_times), statistics.median(ratios)


def workloads(batch, features):
    torch.manual_seed(0)
    x = torch.randn(batch, features)
    w = torch.randn(features)
    xg = x.clone().requires_grad_()
    wg = w.clone().requires_grad_()

    def per_sample(f):
        g = vmap(grad(lambda w, x: f(x, w).sum()), in_dims=(None, 0))
        return lambda: g(w, x)

    def per_sample_both(f):
        ws = torch.randn(batch, features)
        g = vmap(grad(lambda x, w: f(x, w).sum(), argnums=(0, 1)))
        return lambda: g(x, ws)

    def forward_no_grad(f):
        return lambda: f(x, w)

    def forward_grad(f):
        return lambda: f(xg, wg)

    def forward_backward(f):
        return lambda: torch.autograd.grad(f(xg, wg).sum(), (xg, wg))

    return {
        "per_sample_grads": per_sample,
        "per_sample_grads_both": per_sample_both,
        "forward_no_grad": forward_no_grad,
        "forward_grad": forward_grad,
        "forward_backward": forward_backward,
    }


def git_commit():
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--library", default=os.environ.get("CUSTOM_OPS_LIBRARY", str(REPO / "build" / "libcustom_ops.so"))
    )
    parser.add_argument("--label", default="", help="names the library in the results (e.g. main, a branch)")
    parser.add_argument(
        "--commit", default=None, help="the commit the library was built from (default: this checkout's HEAD)"
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1: steadiest on a shared VM)")
    parser.add_argument(
        "--json", nargs="?", const="", default=None, help="write results JSON (default path under bench/results)"
    )
    args = parser.parse_args()

    torch.ops.load_library(args.library)
    torch.set_num_threads(args.threads)
    rows = []
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), B={args.batch}, D={args.features},",
        f"library {args.library}",
    )
    print(f"{'workload':24s} {'ours (us)':>12s} {'composite (us)':>15s} {'ours/composite':>15s}")
    for name, make in workloads(args.batch, args.features).items():
        try:
            ours_s, composite_s, ratio = compare(make(ours), make(composite), args.repeats)
            error = None
        except Exception as exc:  # an unsupported transform: reported, not timed
            ours_s, ratio, error = None, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            composite_s = compare(make(composite), make(composite), args.repeats)[0]
        rows.append(
            {
                "workload": name,
                "ours_us": ours_s and ours_s * 1e6,
                "composite_us": composite_s * 1e6,
                "ratio": ratio,
                "error": error,
            }
        )
        ours_text = f"{ours_s * 1e6:12.1f}" if ours_s is not None else f"{'raises':>12s}"
        ratio_text = f"{ratio:15.2f}" if ratio is not None else f"{'-':>15s}"
        print(f"{name:24s} {ours_text} {composite_s * 1e6:15.1f} {ratio_text}" + (f"  ({error})" if error else ""))

    if args.json is not None:
        date = datetime.date.today().isoformat()
        path = (
            pathlib.Path(args.json)
            if args.json
            else REPO / "bench" / "results" / f"{date}-cpu-transforms-{args.label or 'run'}.json"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "benchmark": "bench_transforms.py",
                    "date": date,
                    "label": args.label,
                    "commit": args.commit or git_commit(),
                    "torch": torch.__version__,
                    "machine": platform.machine(),
                    "processor": platform.processor(),
                    "threads": args.threads,
                    "batch": args.batch,
                    "features": args.features,
                    "repeats": args.repeats,
                    "rows": rows,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
