#!/usr/bin/env python3
"""Issue 40's sweep: every variant of the CUDA per-channel backward (CUSTOM_OPS_PER_CHANNEL_VARIANT,
kernels/cuda/backward_per_channel.h), each in a process of its own, over bench_weighted_sum.py's
per-channel forward+backward rows; one JSON and a table of measured against predicted.

    python3 bench/sweep_per_channel.py --library PATH/libcustom_ops.so --out "$OUT"

Per variant: the bit checks below, then row_c4096 at 2^24..2^28 and (unless --main-only) the other
per-channel shapes at 2^26, float32 and bfloat16, timing only y.copy_(x) (the floor),
ours_fwd_bwd and ours_fwd_bwd_graph; the harness checks every timed variant against float64
before timing it and exits on a wrong value (a fast wrong kernel never wins)."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
VARIANTS = (1, 2, 3, 4)  # 0 is landed main (the issue: measured already; add it with --variants)
MAIN = "row_c4096"
OTHERS = "row_c1024,row_c16384,nchw_c1024,nchw_c4096"  # column weights: along_runs, the same in every variant
KEEP = {"copy", "ours_fwd_bwd", "ours_fwd_bwd_graph"}

# ---------------------------------------------------------------------------------------------
# The prediction, written before any timing (issue 40; METHOD.md). Time of a step over the 5-stream
# floor F (read x, write y; read g, x, write grad_x at y.copy_(x)'s bandwidth):
#   forward   0.4 F * 1.06   (the broadcast kernel at ~94% of copy: docs/benchmarks.md, 4.11/4.36 TB/s)
#   backward  0.6 F * 1.02   (first pass, 2 reads : 1 write, 16-byte loads)
#   partials  written once and read once, at copy bandwidth
#   stage 2   variant 0: one thread per channel walks every row block, latency-bound: ~0.12 us per
#             row block (fits the table: the same ~75 us at 2^26 and ~250 us at 2^28 in both
#             dtypes, i.e. set by the row count, not the bytes); variants 1-4: max(bytes, batches of
#             8 dependent loads at ~0.8 us) + 2 us
#   launches  ~3 us of gaps between the three kernels
#   host      ours_fwd_bwd >= ~100 us a step (the issue: host-bound at 2^24)
BANDWIDTH = 4.25e6  # bytes per us: the floor of the table (1.342 GB in 316 us)
HOST_US = 100.0
ELEMENT = {"float32": 4, "bfloat16": 2}
VEC = {"float32": 4, "bfloat16": 8}
TARGET_BLOCKS = {0: 0, 1: 0, 2: 1024, 3: 512, 4: 256}
WIDE = {0: False, 1: True, 2: True, 3: True, 4: True}


def row_blocks(variant: int, dtype: str, rows: int, width: int) -> int:
    """kernels/cuda/backward_per_channel.h's down_rows_geometry, for the prediction."""
    vectors = width // VEC[dtype]
    tile = 1
    while tile < 256 and tile < vectors:
        tile *= 2
    lanes, tiles = 256 // tile, -(-vectors // tile)
    per_block = lanes * 32
    if TARGET_BLOCKS[variant]:
        wanted = max(1, TARGET_BLOCKS[variant] // tiles)
        step = lanes * 4
        per_block = max(per_block, -(-(-(-rows // wanted)) // step) * step)
    return -(-rows // per_block)


def predict(variant: int, dtype: str, log2n: int, channels: int = 4096) -> dict:
    """Predicted GPU time (us) and vs_floor of ours_fwd_bwd and of its graph replay, w [C] over [R, C]."""
    n = 1 << log2n
    rows = n // channels
    floor = 5 * n * ELEMENT[dtype] / BANDWIDTH
    groups = row_blocks(variant, dtype, rows, channels)
    partial_bytes = groups * channels * 4
    if WIDE[variant] and groups >= 16:
        stage2 = max(partial_bytes / BANDWIDTH, math.ceil(groups / 256) * 0.8) + 2.0
    else:
        stage2 = 0.12 * groups + 2.0
    gpu = floor * (0.4 * 1.06 + 0.6 * 1.02) + 2 * partial_bytes / BANDWIDTH + stage2 + 3.0
    return {
        "row_blocks": groups,
        "partial_mb": round(partial_bytes / 2**20, 2),
        "gpu_us": round(gpu, 1),
        "graph_vs_floor": round(gpu / floor, 3),
        "vs_floor": round(max(gpu, HOST_US) / floor, 3),
    }


# ---------------------------------------------------------------------------------------------
# One variant (a child process: the library reads CUSTOM_OPS_PER_CHANNEL_VARIANT once)


def bit_digests(torch) -> dict:
    """sha256 of grad_input and grad_weight for fixed inputs (every variant must give the same
    grad_input bits; grad_weight may differ between variants, never between runs), and whether
    three runs gave the same bits."""
    out, same = {}, True
    cases = {"row_4099x96": ((4099, 96), (96,)), "row_4096x4096": ((4096, 4096), (4096,)),
             "nchw_9x16x33x31": ((9, 16, 33, 31), (16, 1, 1)), "column_24x9000": ((24, 9000), (24, 1))}
    for dtype in (torch.float32, torch.bfloat16):
        for name, (x_shape, w_shape) in cases.items():
            gen = torch.Generator(device="cuda").manual_seed(40)
            x = torch.randn(x_shape, device="cuda", generator=gen).to(dtype)
            w = torch.randn(w_shape, device="cuda", generator=gen).to(dtype)
            g = torch.randn(x_shape, device="cuda", generator=gen).to(dtype)
            runs = [torch.ops.custom.weighted_sum_backward(g, x, w, [True, True]) for _ in range(3)]
            for gi, gw in runs[1:]:
                same = same and torch.equal(gi, runs[0][0]) and torch.equal(gw, runs[0][1])
            key = f"{name}_{str(dtype).split('.')[-1]}"
            for label, tensor in zip(("grad_input", "grad_weight"), runs[0]):
                raw = tensor.contiguous().view(torch.uint8).cpu().numpy()
                out[f"{key}_{label}"] = hashlib.sha256(raw.tobytes()).hexdigest()[:16]
    return {"deterministic": same, "digests": out}


def child(args) -> int:
    sys.path.insert(0, str(HERE))
    import bench_weighted_sum as bws
    import torch

    forward_variants, fwd_bwd_variants = bws.forward_variants, bws.fwd_bwd_variants
    bws.forward_variants = lambda *a: [v for v in forward_variants(*a) if v.name in KEEP]
    bws.fwd_bwd_variants = lambda *a: [v for v in fwd_bwd_variants(*a) if v.name in KEEP]
    common = ["--library", str(args.library), "--dtypes", args.dtypes, "--no-compile", "--git-commit", args.commit]
    common += ["--warmup-ms", str(args.warmup_ms), "--rep-ms", str(args.rep_ms)]
    out = pathlib.Path(args.out)
    status = bws.main([*common, "--layouts", MAIN, "--min-log2", "24", "--max-log2", "28",
                       "--output", str(out / f"variant{args.variant}-main.json")])
    if status == 0 and args.others:
        status = bws.main([*common, "--layouts", args.others, "--min-log2", "26", "--max-log2", "26",
                           "--output", str(out / f"variant{args.variant}-others.json")])
    bits = bit_digests(torch)
    (out / f"variant{args.variant}-bits.json").write_text(json.dumps(bits, indent=1))
    return status


# ---------------------------------------------------------------------------------------------
# The sweep


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--library", type=pathlib.Path, required=True)
    p.add_argument("--out", default=os.environ.get("OUT", "sweep-per-channel-out"))
    p.add_argument("--variants", default=",".join(map(str, VARIANTS)))
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--others", default=OTHERS, help="per-channel layouts timed at 2^26 only ('' for none)")
    p.add_argument("--main-only", action="store_true", help="the same as --others ''")
    p.add_argument("--warmup-ms", type=float, default=10.0)
    p.add_argument("--rep-ms", type=float, default=40.0)
    p.add_argument("--commit", default=os.environ.get("CUSTOM_OPS_GIT_COMMIT", "sweep"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", type=int, help=argparse.SUPPRESS)
    p.add_argument("--predict", action="store_true", help="print the predictions and exit (no GPU)")
    args = p.parse_args()
    args.others = "" if args.main_only else args.others
    args.library = args.library.resolve()
    if args.child:
        return child(args)
    variants = [int(v) for v in args.variants.split(",")]
    dtypes = args.dtypes.split(",")
    predictions = {f"{v} {d} {k}": predict(v, d, k) for v in variants for d in dtypes for k in (24, 26, 28)}
    if args.predict:
        print_table(variants, dtypes, predictions, {})
        return 0
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    status, started, logs = 0, time.perf_counter(), {}
    for v in variants:
        env = {**os.environ, "CUSTOM_OPS_PER_CHANNEL_VARIANT": str(v), "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, __file__, "--child", "--variant", str(v), "--library", str(args.library),
               "--out", str(out), "--dtypes", args.dtypes, "--others", args.others, "--commit", args.commit,
               "--warmup-ms", str(args.warmup_ms), "--rep-ms", str(args.rep_ms)]
        t0 = time.perf_counter()
        with open(out / f"variant{v}.log", "w") as log:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        logs[v] = {"rc": rc, "seconds": round(time.perf_counter() - t0, 1)}
        print(f"variant {v}: rc {rc}, {logs[v]['seconds']} s", flush=True)
        if rc != 0:
            status = 1
            print((out / f"variant{v}.log").read_text()[-1500:])
    rows, bits = [], {}
    for v in variants:
        for part in ("main", "others"):
            path = out / f"variant{v}-{part}.json"
            if path.is_file():
                for row in json.loads(path.read_text())["rows"]:
                    if row["variant"] in ("ours_fwd_bwd", "ours_fwd_bwd_graph"):
                        rows.append({"per_channel_variant": v, **row})
        path = out / f"variant{v}-bits.json"
        bits[v] = json.loads(path.read_text()) if path.is_file() else None
    measured = {(r["per_channel_variant"], r["variant"], r["dtype"], r["layout"], r["log2n"]): r for r in rows}
    print_table(variants, dtypes, predictions, measured)
    print_others(variants, dtypes, measured)
    status |= print_bits(variants, bits)
    result = {"variants": variants, "logs": logs, "predictions": predictions, "bits": bits, "rows": rows,
              "elapsed_s": round(time.perf_counter() - started, 1)}
    (out / "sweep_per_channel.json").write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out / 'sweep_per_channel.json'} ({result['elapsed_s']} s)")
    return status


def print_table(variants, dtypes, predictions, measured):
    print(f"\n== w [4096] over [R, 4096], forward+backward over the 5-stream floor: measured (predicted)")
    print(f"{'var':>3} {'dtype':<9} {'n':<4} {'floor us':>9} {'ours us':>9} {'ours':>15} {'graph':>15} "
          f"{'row blocks':>10} {'partials MB':>11}")
    for v in variants:
        for d in dtypes:
            for k in (24, 26, 28):
                pr = predictions[f"{v} {d} {k}"]
                ours = measured.get((v, "ours_fwd_bwd", d, MAIN, k))
                graph = measured.get((v, "ours_fwd_bwd_graph", d, MAIN, k))
                fmt = lambda row, key: f"{row['vs_floor']:.3f}" if row else "  -  "  # noqa: E731
                print(f"{v:>3} {d:<9} 2^{k:<2} {ours['floor_us'] if ours else '-':>9} "
                      f"{ours['median_us'] if ours else '-':>9} {fmt(ours, 0):>6} ({pr['vs_floor']:.3f})"
                      f" {fmt(graph, 0):>6} ({pr['graph_vs_floor']:.3f}) {pr['row_blocks']:>10} {pr['partial_mb']:>11}")


def print_others(variants, dtypes, measured):
    layouts = sorted({key[3] for key in measured if key[3] != MAIN})
    if not layouts:
        return
    print("\n== other per-channel shapes at 2^26, ours_fwd_bwd vs floor (graph replay)")
    print(f"{'layout':<14} {'dtype':<9} " + " ".join(f"{'var ' + str(v):>15}" for v in variants))
    for layout in layouts:
        for d in dtypes:
            cells = []
            for v in variants:
                ours = measured.get((v, "ours_fwd_bwd", d, layout, 26))
                graph = measured.get((v, "ours_fwd_bwd_graph", d, layout, 26))
                cells.append(f"{ours['vs_floor']:.3f} ({graph['vs_floor']:.3f})" if ours and graph else "-")
            print(f"{layout:<14} {d:<9} " + " ".join(f"{c:>15}" for c in cells))


def print_bits(variants, bits) -> int:
    """1 unless every variant is deterministic run to run and gives the first variant's grad_input bits."""
    print("\n== bits: deterministic over 3 runs; grad_input the same as the first variant's; grad_weight same?")
    first = next((bits[v] for v in variants if bits.get(v)), None)
    status = 0
    for v in variants:
        b = bits.get(v)
        if b is None:
            print(f"variant {v}: no bit check")
            status = 1
            continue
        inputs = [k for k in b["digests"] if k.endswith("grad_input")]
        weights = [k for k in b["digests"] if k.endswith("grad_weight")]
        same_input = all(b["digests"][k] == first["digests"][k] for k in inputs)
        same_weight = [k.removesuffix("_grad_weight") for k in weights if b["digests"][k] == first["digests"][k]]
        print(f"variant {v}: deterministic {b['deterministic']}, grad_input same {same_input}, "
              f"grad_weight same in {len(same_weight)}/{len(weights)}")
        status |= int(not b["deterministic"] or not same_input)
    return status


if __name__ == "__main__":
    sys.exit(main())
