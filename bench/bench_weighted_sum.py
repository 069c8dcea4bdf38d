#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Bandwidth of torch.ops.custom.weighted_sum (y = w * x**2) against PyTorch's ceilings, forward
and forward+backward, on the GPU or --cpu, with the per-call host time of small calls; bench/README.md
lists the variants and targets."""

from __future__ import annotations

import math
import sys

import torch

import bench_harness as harness
from bench_harness import Summed, Target, Variant, nbytes

OP = "custom::weighted_sum"
LAYOUTS = ("contiguous", "broadcast", "transposed")
# Per-channel weights (issue 15), forward+backward always, at C channels: row_cC x [n/C, C], w [C];
# column_cC x [n/C, C], w [n/C, 1]; nchw_cC x [N, C, H, W], w [C, 1, 1], H * W = min(256, n / 2C).
PER_CHANNEL = tuple(f"{kind}_c{c}" for kind in ("row", "column", "nchw") for c in (1024, 4096, 16384))
# Conv-style weights over issue 46's range (C 64-4096, H * W 49-4096): conv_cC_hwP x [N, C, H, W],
# H * W = P, N = n / (C * P) rounded down (n is then approximate; bytes and floors are exact).
CONV = (*(f"conv_c{c}_hw{p}" for c in (64, 1024, 4096) for p in (49, 4096)), "conv_c256_hw256")
FWD_BWD = (
    "ours_fwd_bwd",
    "eager_fwd_bwd",
    "compile_fwd_bwd",
    "ours_fwd_bwd_graph",
    "eager_fwd_bwd_graph",
    "add_fwd_bwd",
)
RATIOS = {
    "forward": {"vs_add": ("add_out", "speedup")},  # above 1: faster than torch.add(out=)
    "fwd_bwd": {"vs_eager": ("eager_fwd_bwd", "time"), "vs_compile": ("compile_fwd_bwd", "time")},
}
TARGETS = [
    Target("cuda", "forward", "ours ours_out", ("contiguous",), 24, "vs_add >= 0.97"),
    Target("cuda", "forward", "ours ours_out", ("broadcast",), 24, "vs_add >= 0.9"),
    Target("cuda", "forward", "ours ours_out", ("transposed",), 24, "vs_add >= 0.9"),
    Target("cuda", "fwd_bwd", "ours_fwd_bwd", ("contiguous",), 24, "vs_floor <= 1.1"),
    # Not targets but their explanation: the kernels alone, and a step with one 3-stream kernel.
    Target("cuda", "fwd_bwd", "ours_fwd_bwd_graph", ("contiguous",), 24, "vs_floor <= 1.1"),
    Target("cuda", "fwd_bwd", "add_fwd_bwd", ("contiguous",), 24, "vs_floor <= 1.1"),
    Target("cuda", "fwd_bwd", "ours_fwd_bwd ours_fwd_bwd_graph", PER_CHANNEL, 26, "vs_floor <= 1.15"),
    Target("cuda", "fwd_bwd", "ours_fwd_bwd", PER_CHANNEL, 26, "vs_compile < 1"),
    Target("cuda", "fwd_bwd", "ours_fwd_bwd", CONV, 26, "vs_floor <= 1.1"),
    Target("cuda", "forward", "ours ours_out", CONV, 26, "vs_floor <= 1.1"),
    Target("cpu", "forward", "ours ours_out", LAYOUTS, 20, "vs_add >= 0.9"),
    Target("cpu", "fwd_bwd", "ours_fwd_bwd", PER_CHANNEL, 20, "vs_eager <= 0.6667"),  # 1.5x faster
    Target("cpu", "fwd_bwd", "ours_fwd_bwd", PER_CHANNEL, 20, "vs_compile <= 1"),
    Target("any", "host", "ours", ("contiguous",), 0, "vs_add <= 1.5", max_log2=14),
    Target("any", "host", "ours", ("contiguous",), 0, "vs_eager < 1", max_log2=14),
]


def parse_args(argv=None):
    p = harness.parser(__doc__, {"cuda": (10, 28), "cpu": (10, 22)}, LAYOUTS, PER_CHANNEL + CONV, threads="all,1")
    p.add_argument("--no-fwd-bwd", action="store_true", help="skip forward+backward")
    p.add_argument("--fwd-bwd-layouts", default="contiguous,broadcast", help="layouts with forward+backward too")
    p.add_argument("--host-max-log2", type=int, default=14, help="largest size of the per-call host timing")
    args = harness.parse(p, argv, compile_static_from=20, aliases={"per-channel": PER_CHANNEL, "conv": CONV})
    per_channel = list(PER_CHANNEL + CONV)
    args.fwd_bwd_layouts = harness.subset(p, "--fwd-bwd-layouts", args.fwd_bwd_layouts, LAYOUTS) + per_channel
    return args


def shapes(layout: str, log2n: int):
    """(x shape, w shape); [N, C] has N = 2C or 4C, never square (dynamo's duck sizing would give
    N == C one symbol). None where a per-channel layout has n < 2C (a size-1 dimension)."""
    n = 1 << log2n
    c = 1 << ((log2n - 1) // 2)
    if layout == "contiguous":
        return (n,), (n,)
    if layout in ("broadcast", "transposed"):
        return (n // c, c), ((c,) if layout == "broadcast" else (n // c, c))
    if layout.startswith("conv_"):
        c, plane = (int(part.lstrip("chw")) for part in layout.split("_")[1:])
        batch = n // (c * plane)
        side = math.isqrt(plane)  # 49: 7 x 7; 4096: 64 x 64; 256: 16 x 16
        return ((batch, c, side, plane // side), (c, 1, 1)) if batch >= 2 else None
    kind, channels = layout.split("_c")
    c = int(channels)
    if n < 2 * c:
        return None
    if kind != "nchw":
        return (n // c, c), ((c,) if kind == "row" else (n // c, 1))
    plane = min(256, n // (2 * c))
    width = 1 << ((plane.bit_length() - 1) // 2)
    return (n // (c * plane), c, plane // width, width), (c, 1, 1)


def make_inputs(case, device):
    """randn x and w (zeros would hide wrong arithmetic), y; transposed: x = randn(C, N).t()."""
    make = {"dtype": harness.DTYPES[case.dtype], "device": device}
    x_shape, w_shape = shapes(case.layout, case.log2n)
    x = torch.randn(x_shape[::-1], **make).t() if case.layout == "transposed" else torch.randn(x_shape, **make)
    return x, torch.randn(w_shape, **make), torch.empty(x_shape, **make)


def eager(x, w):
    return w * x.pow(2)


def composite(x, w):  # x * x: the form Inductor is sure to fuse into one pointwise kernel
    return w * x * x


def forward_variants(x, w, y, compiled):
    def product():
        return (w.double() * x.double() ** 2,)

    def ours_out():
        torch.ops.custom.weighted_sum.out(x, w, out=y)
        return y

    io = nbytes(x, w, y)
    found = [
        Variant("copy", lambda: y.copy_(x), lambda: (x.double(),), nbytes(x, y)),
        Variant("add_out", lambda: torch.add(x, w, out=y), lambda: (x.double() + w.double(),), io),
        # Allocates its output as `ours` does: on the CPU, first touches of fresh pages can cost more.
        Variant("add", lambda: torch.add(x, w), lambda: (x.double() + w.double(),), io),
        Variant("eager", lambda: eager(x, w), product, io),
        Variant("ours", lambda: torch.ops.custom.weighted_sum(x, w), product, io),
        Variant("ours_out", ours_out, product, io),
    ]
    if compiled is not None:
        found.insert(4, Variant("compile", lambda: compiled(x, w), product, io))
    return found


def summed_to(terms, shape):
    """A broadcast weight's gradient; where that sums terms, a Summed bounds its error by them."""
    return (
        terms if terms.shape == torch.Size(shape) else Summed(terms.sum_to_size(shape), terms.abs().sum_to_size(shape))
    )


def fwd_bwd_variants(x, w, compiled):
    """(y, grad_x, grad_w) through autograd for one upstream g, against the 8-stream floor: read x,
    w; write y; read g, x, w; write grad_x, grad_w (a broadcast w and its grad at their own size)."""
    xg, wg, g = x.detach().requires_grad_(), w.detach().requires_grad_(), torch.randn_like(x)
    x64, w64, g64 = x.double(), w.double(), g.double()
    floor_bytes = 2 * nbytes(x, w) + nbytes(x, x, x, w)

    def step(forward):
        def run():
            y = forward(xg, wg)
            return (y, *torch.autograd.grad(y, (xg, wg), g))

        return run

    def expected():
        return (w64 * x64**2, 2 * w64 * x64 * g64, summed_to(x64**2 * g64, w.shape))

    forwards = {"ours_fwd_bwd": torch.ops.custom.weighted_sum, "eager_fwd_bwd": eager, "compile_fwd_bwd": compiled}
    found = [Variant(name, step(f), expected, floor_bytes, "fwd_bwd") for name, f in forwards.items() if f is not None]
    if x.is_cuda:  # the kernels' time alone, without the host's per-step cost
        found += [
            Variant(f"{name}_graph", graphed(step(forwards[name])), expected, floor_bytes, "fwd_bwd")
            for name in ("ours_fwd_bwd", "eager_fwd_bwd")
        ]
    # One forward kernel and a backward that launches none: beyond its kernel, the host's own cost.
    add_expected = lambda: (x64 + w64, g64, summed_to(g64, w.shape))  # noqa: E731
    return [*found, Variant("add_fwd_bwd", step(torch.add), add_expected, floor_bytes, "fwd_bwd")]


def graphed(step):
    """`step` captured in a CUDA graph; each call replays it and returns the same outputs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # capture wants a warm-up off the default stream
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    for output in outputs:  # capture computes nothing: the check must see what a replay wrote
        output.detach().fill_(math.nan)
    return lambda: (graph.replay(), outputs)[1]


def measure_all(args, device, group_done):
    compilers = {}

    def measure(case, timer):
        key = (case.threads, case.dtype, case.layout)
        compiled = compilers.setdefault(key, harness.Compiler(args, composite)).for_size(case.log2n)
        x, w, y = make_inputs(case, device)
        variants = forward_variants(x, w, y, compiled)
        if case.layout in args.fwd_bwd_layouts and not args.no_fwd_bwd:
            variants += fwd_bwd_variants(x, w, compiled)
        for variant in variants:  # every check before any timing
            harness.check(variant, case, harness.DTYPES[case.dtype], y)
        rows = harness.rows_of(case, x.shape, variants, timer(variants), RATIOS)
        harness.print_rows(rows, ["vs_add", "vs_floor"])
        return rows

    harness.print_header(["vs_add", "vs_floor"])
    rows = harness.sweep(args, device, measure, group_done, lambda layout, k: shapes(layout, k) is not None)
    return rows + host_rows(args, device)


def host_rows(args, device):
    """Per-call wall time of small float32 calls: ours vs torch.add(x, w) vs eager w * x.pow(2)."""
    rows = []
    print("\n== per-call Python wall time, float32 contiguous")
    print(f"{'variant':<8} {'n':>5} {'us/call':>9} {'vs add':>8} {'vs eager':>8}")
    for log2n in range(args.min_log2, min(args.host_max_log2, args.max_log2) + 1):
        x, w = torch.randn(1 << log2n, device=device), torch.randn(1 << log2n, device=device)
        fns = {
            "ours": lambda: torch.ops.custom.weighted_sum(x, w),
            "add": lambda: torch.add(x, w),
            "eager": lambda: w * x.pow(2),
        }
        times = harness.host_times(fns, device)
        for name, us in times.items():
            row = {
                "kind": "host",
                "variant": name,
                "dtype": "float32",
                "layout": "contiguous",
                "log2n": log2n,
                "n": 1 << log2n,
            }
            row |= {"threads": torch.get_num_threads() if args.cpu else None, "per_call_us": round(us, 3)}
            row |= {"vs_add": round(us / times["add"], 4), "vs_eager": round(us / times["eager"], 4)}
            print(f"{name:<8} 2^{log2n:<3} {us:>9.2f} {row['vs_add']:>7.3f}x {row['vs_eager']:>7.3f}x")
            rows.append(row)
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    return harness.run("weighted_sum", args, [OP], measure_all, TARGETS, png="bandwidth-{device}.png")


if __name__ == "__main__":
    sys.exit(main())
