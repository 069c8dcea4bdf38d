#!/usr/bin/env python3
"""Issue 39's sweep: every variant of the CUDA reduction engine (CUSTOM_OPS_REDUCTION_VARIANT,
kernels/cuda/reduction_plan.h) in one build, each in its own process (the variable is read once):
first its bits (run after run, under CUDA graph capture and replay, on two streams at once: the
same bits as a plain call), then bench_weighted_square_sum.py's full and partial rows (its float64
check runs before timing, so a wrong variant aborts). torch.compile rows only for variant 0 (they
do not change). Prints variant x row, measured against predicted, and writes one JSON under --out.

    python3 bench/sweep_reduction.py --library install/lib/libcustom_ops.so --out "$OUT"
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
LAYOUTS = "full,square_inner,square_outer,tall_inner,wide_outer"
VARIANTS = {
    0: "landed: memset per total",
    1: "counter slots, no memset",
    2: "1 + L2 evict-first loads",
    3: "2 + 16-bit: 8 loads in flight",
}

# Predicted time over the floor (x and w once at the copy's bandwidth), before measuring: variant
# 0 is issue 39's measurement at 748a400 (2^25 and 2^27: the line through 2^24 and 2^26/2^28);
# 1 saves the ~2 us memset of a total; 2 saves the write-back of the flush's dirty L2 lines that
# our loads would evict (~4 us: do_bench's dirty flush against a clean one, docs/benchmarks.md);
# 3 saves 4% of the byte time in 16-bit types (bfloat16 ran 5% further from the floor than
# float32 at 2^28 with half the loads in flight).
FLOOR_US = {"float32": 31.6, "bfloat16": 15.8}  # at 2^24; doubles with each power of two
BASE = {  # (layout, dtype, log2n) -> variant 0's time over the floor
    **{("full", "float32", k): r for k, r in {24: 1.43, 25: 1.19, 26: 1.07, 27: 1.01, 28: 0.97}.items()},
    **{("full", "bfloat16", k): r for k, r in {24: 1.74, 25: 1.45, 26: 1.21, 27: 1.10, 28: 1.02}.items()},
    ("square_inner", "float32", 26): 1.05,
    ("square_outer", "float32", 26): 1.09,
    ("tall_inner", "float32", 26): 1.04,
    ("wide_outer", "float32", 26): 1.05,
    ("square_inner", "bfloat16", 26): 1.17,
    ("square_outer", "bfloat16", 26): 1.23,
    ("tall_inner", "bfloat16", 26): 1.14,
    ("wide_outer", "bfloat16", 26): 1.25,
}
MEMSET_US, DIRTY_US, DEEP_SHARE = 2.0, 4.0, 0.04


def predicted_us(variant: int, layout: str, dtype: str, log2n: int) -> float | None:
    base = BASE.get((layout, dtype, log2n))
    if base is None:
        return None
    floor = FLOOR_US[dtype] * 2 ** (log2n - 24)
    us = base * floor
    if variant >= 1 and layout == "full":
        us -= MEMSET_US
    if variant >= 2:
        us -= DIRTY_US
    if variant >= 3 and dtype == "bfloat16":
        us -= DEEP_SHARE * floor
    return us


# ----------------------------------------------------------------------------------------------
# Worker: one variant, in its own process


def check_bits(library: str) -> tuple[list[str], dict]:
    """Failures (empty: every check passed): the same bits run after run, under graph replay and
    from two streams at once, for totals (Rows, Tiles, the shared weight row) and partial sums;
    and each case's digest, which the parent compares across variants (the same bits too)."""
    import hashlib

    import torch

    torch.ops.load_library(library)
    op = torch.ops.custom.weighted_square_sum
    torch.manual_seed(1)
    cases = []
    for dtype in (torch.float32, torch.bfloat16):
        make = {"dtype": dtype, "device": "cuda"}
        big = torch.randn(1 << 24, **make)
        cases += [
            (f"{dtype} full 2^24", big, torch.randn(1 << 24, **make), None),
            (f"{dtype} [2048, 8192] dim 1", big.view(2048, 8192), torch.randn(2048, 8192, **make), [1]),
            (f"{dtype} [2048, 8192] dim 0", big.view(2048, 8192), torch.randn(2048, 8192, **make), [0]),
            (f"{dtype} [1024, 16384] dim 0", big.view(1024, 16384), torch.randn(1024, 16384, **make), [0]),
            (f"{dtype} x.t() total", big.view(4096, 4096).t(), torch.randn(4096, 4096, **make).t(), None),
            (f"{dtype} w [1024] total", big.view(-1, 1024), torch.randn(1024, **make), None),
            (f"{dtype} 1000 x 4097 total", torch.randn(1000, 4097, **make), torch.randn(1000, 4097, **make), None),
        ]
    failures = []

    def same(name, got, want):
        if not torch.equal(got.view(-1).view(torch.uint8), want.view(-1).view(torch.uint8)):
            failures.append(f"{name}: {got.view(-1)[:4].tolist()} != {want.view(-1)[:4].tolist()}")

    first = {name: op(x, w, dims) for name, x, w, dims in cases}
    for _ in range(3):
        for name, x, w, dims in cases:
            same(f"{name}, again", op(x, w, dims), first[name])
    # Graph: every case captured in one graph (each total a slot of its own), replayed, with eager
    # calls on the capturing stream between replays; then graphs made and dropped (slots returned).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for name, x, w, dims in cases:
            op(x, w, dims)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = {name: op(x, w, dims) for name, x, w, dims in cases}
    for replay in range(3):
        for value in captured.values():
            value.fill_(float("nan"))
        graph.replay()
        for name, x, w, dims in cases[:2]:
            same(f"{name}, eager between replays", op(x, w, dims), first[name])
        torch.cuda.synchronize()
        for name in captured:
            same(f"{name}, graph replay {replay}", captured[name], first[name])
    for _ in range(20):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = op(*cases[0][1:3], cases[0][3])
        g.replay()
        torch.cuda.synchronize()
        same("a graph made and dropped", out, first[cases[0][0]])
        del g
    # Two streams at once, and a graph replayed on a third while they run.
    streams = [torch.cuda.Stream() for _ in range(2)]
    results = [[], []]
    torch.cuda.synchronize()
    graph_stream = torch.cuda.Stream()
    for _ in range(10):
        for k, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                for name, x, w, dims in cases[k::2]:
                    results[k].append((name, op(x, w, dims)))
        with torch.cuda.stream(graph_stream):
            graph.replay()
    torch.cuda.synchronize()
    for k in range(2):
        for name, value in results[k]:
            same(f"{name}, stream {k} of 2", value, first[name])
    for name in captured:
        same(f"{name}, replay beside two streams", captured[name], first[name])
    digests = {
        name: hashlib.sha256(value.contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]
        for name, value in first.items()
    }
    return failures, digests


def worker(args) -> int:
    os.environ["CUSTOM_OPS_REDUCTION_VARIANT"] = str(args.worker)
    started = time.perf_counter()
    failures, digests = check_bits(str(args.library))
    checked = {"passed": not failures, "failures": failures[:20], "digests": digests}
    checked["seconds"] = round(time.perf_counter() - started, 1)
    (args.out / f"variant-{args.worker}-bits.json").write_text(json.dumps(checked, indent=1))
    print(f"variant {args.worker}: bits {'PASS' if not failures else 'FAIL'} ({checked['seconds']} s)")
    for failure in failures[:20]:
        print("  " + failure)
    if failures:
        return 1
    sys.path.insert(0, str(HERE))
    import bench_weighted_square_sum as bench

    compiled = args.worker == 0 and not args.no_compile
    argv = [
        "--library", str(args.library),
        "--dtypes", "float32,bfloat16",
        "--min-log2", str(args.min_log2), "--max-log2", str(args.max_log2),
        "--layouts", args.layouts,
        "--variants", "copy,ours" + (",compile" if compiled else ""),
        "--output", str(args.out / f"variant-{args.worker}.json"),
    ]  # fmt: skip
    if not compiled:
        argv.append("--no-compile")
    if args.git_commit:
        argv += ["--git-commit", f"{args.git_commit}-v{args.worker}"]
    return bench.main(argv)


# ----------------------------------------------------------------------------------------------
# Parent: every variant, then the table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--library", type=pathlib.Path, required=True)
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path(os.environ.get("OUT", "sweep-out")))
    p.add_argument("--variants", default=",".join(map(str, VARIANTS)))
    p.add_argument("--layouts", default=LAYOUTS)
    p.add_argument("--min-log2", type=int, default=24)
    p.add_argument("--max-log2", type=int, default=28)
    p.add_argument("--no-compile", action="store_true", help="no torch.compile rows, even for variant 0")
    p.add_argument("--git-commit", default=os.environ.get("CUSTOM_OPS_GIT_COMMIT"))
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.library = args.library.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.worker is not None:
        return worker(args)

    variants = [int(v) for v in args.variants.split(",")]
    status, runs = 0, {}
    for variant in variants:
        command = [sys.executable, __file__, "--worker", str(variant)]
        command += ["--library", str(args.library), "--out", str(args.out), "--layouts", args.layouts]
        command += ["--min-log2", str(args.min_log2), "--max-log2", str(args.max_log2)]
        command += ["--no-compile"] * args.no_compile + (["--git-commit", args.git_commit] if args.git_commit else [])
        started = time.perf_counter()
        log = args.out / f"variant-{variant}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(log, "w") as handle:
            rc = subprocess.call(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
        seconds = round(time.perf_counter() - started, 1)
        print(f"variant {variant} ({VARIANTS[variant]}): rc {rc}, {seconds} s, log {log.name}", flush=True)
        if rc:
            status = 1
            print("".join(open(log).readlines()[-8:]))
        result = args.out / f"variant-{variant}.json"
        bits = args.out / f"variant-{variant}-bits.json"
        runs[variant] = {
            "rc": rc,
            "seconds": seconds,
            "bits": json.loads(bits.read_text()) if bits.exists() else None,
            "rows": json.loads(result.read_text())["rows"] if result.exists() else [],
        }

    # variant x row: measured us (over the floor), predicted us
    table, keys = [], []
    for run in runs.values():
        for row in run["rows"]:
            key = (row["layout"], row["dtype"], row["log2n"])
            if key not in keys:
                keys.append(key)
    print(f"\n{'row':<28}" + "".join(f"{f'v{v} us (floor x) pred':>30}" for v in variants) + f"{'compile x':>11}")
    for key in keys:
        line, compile_ratio = f"{key[0]} {key[1]} 2^{key[2]}", None
        line = f"{line:<28}"
        for variant in variants:
            rows = {r["variant"]: r for r in runs[variant]["rows"] if (r["layout"], r["dtype"], r["log2n"]) == key}
            ours, pred = rows.get("ours"), predicted_us(variant, *key)
            if "compile" in rows:
                compile_ratio = rows["compile"]["vs_floor"]
            cell = "-" if ours is None else f"{ours['median_us']:.1f} ({ours['vs_floor']:.3f}x)"
            cell += " " + ("?" if pred is None else f"{pred:.1f}")
            line += f"{cell:>30}"
            table.append({
                "layout": key[0], "dtype": key[1], "log2n": key[2], "variant": variant,
                "median_us": ours and ours["median_us"], "floor_us": ours and ours["floor_us"],
                "vs_floor": ours and ours["vs_floor"], "predicted_us": pred and round(pred, 2),
            })  # fmt: skip
        print(line + (f"{compile_ratio:>10.3f}x" if compile_ratio else f"{'-':>11}"))
    reference = next((run["bits"]["digests"] for run in runs.values() if run["bits"]), None)
    for variant in variants:
        bits = runs[variant]["bits"]
        if bits is None:
            print(f"variant {variant}: bits ?")
            continue
        differ = [name for name, digest in bits["digests"].items() if reference.get(name) != digest]
        print(
            f"variant {variant}: bits {'PASS' if bits['passed'] else 'FAIL'} (run after run, graph, streams);"
            f" same bits as variant {variants[0]}: {'yes' if not differ else 'NO: ' + ', '.join(differ)}"
        )
        status |= bool(differ) or not bits["passed"]
    path = args.out / "sweep-reduction.json"
    path.write_text(json.dumps({"variants": VARIANTS, "runs": runs, "table": table}, indent=1))
    print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
