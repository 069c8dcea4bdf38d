# SPDX-License-Identifier: BSD-3-Clause
"""Never slower than the composite: weighted_sum and weighted_square_sum on randomly drawn cases,
timed against the eager composite they replace (and torch.compile's), one row per case and variant.

Each case draws, as the property tests do, its operator, a broadcast shape of 1 to 4 dims at a
medium size (2^min-log2 to 2^max-log2 elements, sizes off powers of two), which dims each operand
broadcasts along (some or none, the weight often with fewer dims), each operand's layout
(contiguous, transposed, strided, or a channels-last-like permutation), the dtype and, for the sum,
the reduced dims and keepdim. The draws follow --seed alone: a run repeats its cases. The summary
names the worst case of each ratio; the target is that no case is slower than eager.

    python bench/bench_random_shapes.py --cases 48 --seed 0 [--no-compile] [--cpu]
"""

from __future__ import annotations

import random
import sys

import torch

import bench_harness as harness
from bench_harness import Case, Summed, Target, Variant, nbytes

OPS = ("custom::weighted_sum", "custom::weighted_square_sum")
RATIOS = {"random": {"vs_eager": ("eager", "time"), "vs_compile": ("compile", "time")}}
TARGETS = [
    Target("cuda", "random", "ours", ("random",), 0, "vs_eager < 1"),
    Target("cpu", "random", "ours", ("random",), 0, "vs_eager < 1"),
]


def parse_args(argv=None):
    p = harness.parser(__doc__, {"cuda": (16, 22), "cpu": (12, 18)}, ("random",))
    p.add_argument("--cases", type=int, default=48, help="cases drawn per dtype (default 48)")
    p.add_argument("--seed", type=int, default=0, help="the draws' seed (default 0)")
    return harness.parse(p, argv, compile_static_from=0)


def split_size(rng: random.Random, log2n: int, rank: int) -> list[int]:
    """`rank` sizes whose product is about 2^log2n, each at least 2, most off a power of two."""
    bits = [1] * rank
    for _ in range(log2n - rank):
        bits[rng.randrange(rank)] += 1
    return [max(2, (1 << b) + rng.choice((0, 0, -1, 1, 3)) * (b > 2)) for b in bits]


def operand(rng: random.Random, shape: list[int], dtype, device, layout: str) -> torch.Tensor:
    """A tensor of `shape` (size-1 dims broadcast) laid out as `layout`."""
    if layout == "strided":  # every other element along the last dim of a wider tensor
        wide = torch.randn([*shape[:-1], 2 * shape[-1]], dtype=dtype, device=device)
        return wide[..., ::2]
    if layout in ("transposed", "permuted") and len(shape) >= 2:
        order = list(range(len(shape)))
        if layout == "transposed":
            order[-2], order[-1] = order[-1], order[-2]
        else:  # channels-last-like: the second dim innermost
            order = [0, *range(2, len(shape)), 1]
        stored = torch.randn([shape[d] for d in order], dtype=dtype, device=device)
        return stored.permute([order.index(d) for d in range(len(shape))])
    return torch.randn(shape, dtype=dtype, device=device)


def draw(rng: random.Random, dtype, device, min_log2: int, max_log2: int) -> dict:
    """One case: the operator, its operands and arguments, and a line that describes it."""
    reduction = rng.random() < 0.5
    rank = rng.randint(1, 4)
    log2n = rng.randint(max(min_log2, rank), max(max_log2, rank))
    shape = split_size(rng, log2n, rank)
    # Which dims each operand has: x most, w fewer; never both broadcast along one dim.
    x_shape, w_shape = list(shape), list(shape)
    for d in range(rank):
        roll = rng.random()
        if roll < 0.15:
            x_shape[d] = 1
        elif roll < 0.55:
            w_shape[d] = 1
    w_dims = rng.choice(range(rank + 1)) if rng.random() < 0.5 else rank  # leading dims dropped
    w_shape = w_shape[rank - w_dims :]
    layouts = ["contiguous", "contiguous", "transposed", "strided", "permuted"]
    x_layout, w_layout = rng.choice(layouts), rng.choice(layouts)
    w_dtype = torch.float32 if dtype != torch.float32 and rng.random() < 0.15 else dtype
    x = operand(rng, x_shape, dtype, device, x_layout)
    w = operand(rng, w_shape, w_dtype, device, w_layout) if w_shape else torch.randn((), dtype=w_dtype, device=device)
    args = ()
    if reduction:
        dims = None if rng.random() < 0.25 else sorted(rng.sample(range(rank), rng.randint(1, rank)))
        args = (dims, rng.random() < 0.3)
    name = "weighted_square_sum" if reduction else "weighted_sum"
    wd = "" if w_dtype == dtype else f" {str(w_dtype).removeprefix('torch.')}"
    text = f"{name} x{x_shape}:{x_layout} w{w_shape}:{w_layout}{wd}" + (
        f" dims={args[0]} keep={args[1]}" if args else ""
    )
    return {"name": name, "x": x, "w": w, "args": args, "text": text, "log2n": log2n}


def composite(name, x, w, *args):
    y = w * x.square()
    return y if name == "weighted_sum" else y.sum(args[0], args[1])


def variants(case: dict, compiled):
    name, x, w, args = case["name"], case["x"], case["w"], case["args"]
    op = getattr(torch.ops.custom, name)
    result = composite(name, x, w, *args)
    moved = nbytes(x, w, result)
    copy_from = x.contiguous()
    copy_to = torch.empty_like(copy_from)

    def expected():
        terms = w.double() * x.double().square()
        if name == "weighted_sum":
            return (terms,)
        return (Summed(terms.sum(args[0], args[1]), terms.abs().sum(args[0], args[1])),)

    found = [
        Variant("copy", lambda: copy_to.copy_(copy_from), lambda: (copy_from.double(),), nbytes(copy_from) * 2, "copy"),
        Variant("eager", lambda: composite(name, x, w, *args), expected, moved, "random"),
    ]
    if compiled is not None:
        found.append(Variant("compile", lambda: compiled(x, w), expected, moved, "random"))
    found.append(Variant("ours", lambda: op(x, w, *args), expected, moved, "random"))
    return found


def measure_all(args, device, group_done):
    rows = []
    threads = args.threads[0]  # the CPU's first thread count; None on the GPU
    if threads:
        torch.set_num_threads(threads)
    timer = harness.gpu_timer(args)[0] if device.type == "cuda" else harness.cpu_timer(args, threads)
    fields = ["vs_eager", "vs_compile"]
    harness.print_header(fields)
    for dtype_name in args.dtypes:
        rng = random.Random(f"{args.seed}-{dtype_name}")
        dtype = harness.DTYPES[dtype_name]
        print(f"\n== {dtype_name}")
        for index in range(args.cases):
            case = draw(rng, dtype, device, args.min_log2, args.max_log2)
            compiled = None
            if not args.no_compile:
                torch._dynamo.reset()
                name, extra = case["name"], case["args"]
                compiled = torch.compile(lambda x, w: composite(name, x, w, *extra), dynamic=False)
            bench_case = Case("random", dtype_name, case["log2n"], threads)
            found = variants(case, compiled)
            for variant in found:
                harness.check(variant, bench_case, dtype)
            shape = torch.broadcast_shapes(case["x"].shape, case["w"].shape)
            case_rows = harness.rows_of(bench_case, shape, found, timer(found), RATIOS)
            for row in case_rows:
                row["case"] = f"{dtype_name} #{index}: {case['text']}"
            print(f"#{index}: {case['text']}")
            harness.print_rows([row for row in case_rows if row["variant"] != "copy"], fields)
            rows += case_rows
            if device.type == "cuda":
                torch.cuda.empty_cache()
        group_done(rows)
    worst(rows, "vs_eager")
    worst(rows, "vs_compile")
    return rows


def worst(rows, field, count=5):
    """Prints the `count` cases where ours compares worst by `field`."""
    ours = sorted((r for r in rows if r["variant"] == "ours" and r.get(field) is not None), key=lambda r: -r[field])
    if ours:
        print(f"\n== worst {field}")
        for row in ours[:count]:
            print(f"{row[field]:.3f}x  {row['median_us']:.2f} us  {row['case']}")


def main(argv=None) -> int:
    args = parse_args(argv)
    return harness.run("random_shapes", args, OPS, measure_all, TARGETS)


if __name__ == "__main__":
    sys.exit(main())
