#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Bandwidth of torch.ops.custom.weighted_square_sum ((w * x**2).sum(dims) in one pass) against its
composites, torch.sum and a copy-based floor, on the GPU or --cpu; bench/README.md lists the
variants and targets."""

from __future__ import annotations

import math
import sys

import torch

import bench_harness as harness
from bench_harness import Summed, Target, Variant, Within, nbytes

OPS = ["custom::weighted_square_sum", "custom::weighted_sum"]  # two_step needs the first op too
# full: x, w [n], all dims; rows_cC: x, w [n/C, C], dim -1; columns: x, w [n/1024, 1024], dim 0;
# broadcast_row: x [n/1024, 1024], w [1024] read once, all dims (floor: 1 stream, not 2).
# Issue 39's partial reductions, at n = 2^PARTIAL_LOG2 only, x and w of one shape: square_inner
# [8192, 8192] dim 1, square_outer the same, dim 0, tall_inner [65536, 1024] dim 1, wide_outer
# [1024, 65536] dim 0.
PARTIAL_LOG2 = 26
PARTIALS = {
    "square_inner": ((8192, 8192), [1]),
    "square_outer": ((8192, 8192), [0]),
    "tall_inner": ((65536, 1024), [1]),
    "wide_outer": ((1024, 65536), [0]),
}
LAYOUTS = ("full", "rows_c1024", "rows_c16384", "columns", "broadcast_row", *PARTIALS)
# Issue 46's reductions over operands that broadcast against each other (a pairwise sum, as KeOps
# computes): pairs_nN_mM_dD is x [N, 1, D] with w [1, M, D] over dim -1, at n = N M D terms only;
# only asked for (--layouts pairs). matmul is `(x * x) @ w.T`, which only this term allows. Their
# floor is arithmetic, not bytes: one float32 FMA a term (x * x computed once a row of x), at the
# rate cuBLAS's float32 GEMM reaches on a square SGEMM_SIDE product on this GPU (TF32 off), the
# `sgemm` row; vs_fma_floor is a row's time over the row's terms at that rate.
SGEMM_SIDE = 8192
# The 2^28 ones are the CPU's rows (its eager composite needs an [N, M, D] temporary).
PAIRS = {
    f"pairs_n{n}_m{m}_d{d}": (n, m, d)
    for n, m, d in (
        (4096, 4096, 64),
        (4096, 4096, 256),
        (1024, 1024, 4096),
        (1024, 1024, 256),
        (4096, 4096, 16),
        (256, 256, 4096),
    )
}
COLUMNS = 1024
RATIOS = {
    "square_sum": {
        "vs_sum": ("sum_x", "bandwidth"),  # above 1: more bytes per second than torch.sum(x)
        "vs_sum_same_bytes": ("sum_same_bytes", "bandwidth"),  # CPU: torch.sum over ours' bytes
        "vs_eager": ("eager", "time"),
        "vs_compile": ("compile", "time"),
        "vs_matmul": ("matmul", "time"),
    }
}
COMPILE_SLOW = 1.05  # where compile's time is above this multiple of its floor, ours must beat it
FLOOR_BOUNDS = {
    "full": 1.05,
    "rows_c1024": 1.05,
    "rows_c16384": 1.05,
    "columns": 1.15,
    "broadcast_row": 1.05,
    **dict.fromkeys(PARTIALS, 1.1),  # issue 39
}
TARGETS = [
    *(
        Target("cuda", "square_sum", "ours", (layout,), 26, f"vs_floor <= {bound}")
        for layout, bound in FLOOR_BOUNDS.items()
    ),
    Target("cuda", "square_sum", "ours", ("full",), 24, "vs_floor <= 1.3", max_log2=25),  # issue 39
    Target("cuda", "square_sum", "ours", LAYOUTS, 26, "vs_compile < 1 if compile_slow"),
    Target("cpu", "square_sum", "ours", LAYOUTS, 20, "vs_sum >= 0.9"),
    Target("cpu", "square_sum", "ours", LAYOUTS, 20, "vs_sum_same_bytes >= 0.9"),
    Target("cpu", "square_sum", "ours", LAYOUTS, 20, "vs_eager <= 0.6667"),  # 1.5x faster
    Target("cuda", "square_sum", "ours", tuple(PAIRS), 30, "vs_compile < 1"),
    Target("cuda", "square_sum", "ours", tuple(PAIRS), 30, "vs_eager < 1"),
    Target("cuda", "square_sum", "ours", tuple(PAIRS), 30, "vs_fma_floor <= 1.5"),
    Target("cpu", "square_sum", "ours", tuple(PAIRS), 28, "vs_compile < 1"),
    Target("cpu", "square_sum", "ours", tuple(PAIRS), 28, "vs_eager < 1"),
]


def parse_args(argv=None):
    p = harness.parser(__doc__, {"cuda": (24, 28), "cpu": (16, 22)}, LAYOUTS, more_layouts=tuple(PAIRS))
    return harness.parse(p, argv, compile_static_from=0, aliases={"pairs": tuple(PAIRS)})


def shapes(layout: str, log2n: int):
    """(x shape, w shape, dims), None where there are fewer than two rows (n < 2C: a size-1
    dimension, which torch.compile would specialize)."""
    n = 1 << log2n
    if layout == "full":
        return (n,), (n,), None
    if layout in PAIRS:
        rows, cols, length = PAIRS[layout]
        return ((rows, 1, length), (1, cols, length), [-1]) if rows * cols * length == n else None
    if layout in PARTIALS:
        shape, dims = PARTIALS[layout]
        return (shape, shape, dims) if log2n == PARTIAL_LOG2 else None
    c = int(layout.split("_c")[1]) if layout.startswith("rows_c") else COLUMNS
    if n < 2 * c:
        return None
    return (
        (n // c, c),
        ((c,) if layout == "broadcast_row" else (n // c, c)),
        {"columns": [0], "broadcast_row": None}.get(layout, [-1]),
    )


def x_scale(layout: str, log2n: int) -> float:
    """x's standard deviation, so that a float16 sum stays far below 65,504: a full sum of n terms
    has a deviation of sqrt(3 n) s^2, 9 sigma away at n = 2^28 and s = 0.5. broadcast_row's rows add
    up instead of cancelling (one w for all rows: about sqrt(1024) R s^2), so beyond 512 rows s^2
    shrinks as 512 / R, keeping that at most 4,096 (16 sigma)."""
    rows = (1 << log2n) // COLUMNS
    return 0.5 * math.sqrt(min(1.0, 512 / rows)) if layout == "broadcast_row" else 0.5


def composite(x, w, dims):  # x * x, as Inductor surely fuses it; the reduction reads x and w once
    return (w * x * x).sum(dims)


def variants(x, w, dims, y, compiled):
    """Bytes: what each must read (x and w once, a broadcast w at its size) and write (its result)."""

    def summed(t):
        return (Summed(t.sum(dims), t.abs().sum(dims)),)

    found = [Variant("copy", lambda: y.copy_(x), lambda: (x.double(),), nbytes(x, y), "square_sum")]
    pairs = x.dim() == 3 and x.shape[1] == 1 and w.shape[0] == 1
    if pairs:  # no [N, M, D] float64 temporary; the matmul only this term allows instead of two_step
        squares, rows = x.double().squeeze(1).square(), w.double().squeeze(0)
        weighted = lambda: (Summed(squares @ rows.T, squares @ rows.abs().T),)  # noqa: E731
        reads = nbytes(x, w) + x.shape[0] * w.shape[1] * x.element_size()
        other = Variant("matmul", lambda: (x * x).squeeze(1) @ w.squeeze(0).T, weighted, reads, "square_sum")
        if x.is_cuda:
            found.append(sgemm_variant(x.device))
    else:
        shape = torch.broadcast_shapes(x.shape, w.shape)
        result_bytes = nbytes(torch.empty(shape, dtype=x.dtype, device="meta").sum(dims))
        reads = nbytes(x, w) + result_bytes
        weighted = lambda: summed(w.double() * x.double() * x.double())  # noqa: E731
        found.append(
            Variant(
                "sum_x", lambda: torch.sum(x, dims), lambda: summed(x.double()), nbytes(x) + result_bytes, "square_sum"
            )
        )
        if x.device.type == "cpu":  # where x alone still fits a cache that x and w do not
            both = torch.cat([x.reshape(-1), w.reshape(-1)])
            found.append(
                Variant(
                    "sum_same_bytes",
                    lambda: torch.sum(both),
                    lambda: (Summed(both.double().sum(), both.double().abs().sum()),),
                    nbytes(both) + both.element_size(),
                    "square_sum",
                )
            )
        two_step = lambda: torch.ops.custom.weighted_sum(x, w).sum(dims)  # noqa: E731
        other = Variant("two_step", two_step, weighted, reads, "square_sum")
    found += [Variant("eager", lambda: (w * x.pow(2)).sum(dims), weighted, reads, "square_sum"), other]
    if compiled is not None:
        found.append(Variant("compile", lambda: compiled(x, w), weighted, reads, "square_sum"))
    return [
        *found,
        Variant("ours", lambda: torch.ops.custom.weighted_square_sum(x, w, dims), weighted, reads, "square_sum"),
    ]


def sgemm_variant(device):
    """A square float32 product, its FMAs at full precision (TF32 off): the pairs rows' FMA rate."""
    make = {"dtype": torch.float32, "device": device}
    a, b = torch.randn(SGEMM_SIDE, SGEMM_SIDE, **make), torch.randn(SGEMM_SIDE, SGEMM_SIDE, **make)

    def call():
        assert torch.get_float32_matmul_precision() == "highest", "TF32 would not be float32's FMA rate"
        return a @ b

    def expected():  # a float32 sum's usual error: a few roundings of the root of its length
        bound = 4 * math.sqrt(SGEMM_SIDE) * torch.finfo(torch.float32).eps * (a.double().abs() @ b.double().abs())
        return (Within(a.double() @ b.double(), bound),)

    return Variant("sgemm", call, expected, 3 * a.numel() * a.element_size(), "fma")


def fma_floor(rows, terms):
    """vs_fma_floor of every row: its time over `terms` FMAs at the sgemm row's rate."""
    sgemm = next(row for row in rows if row["variant"] == "sgemm")
    floor_us = terms * sgemm["median_us"] / SGEMM_SIDE**3
    for row in rows:
        row["vs_fma_floor"] = round(row["median_us"] / floor_us, 4)


def measure_all(args, device, group_done):
    compilers = {}
    fields = ["vs_floor", "vs_sum", "vs_sum_same_bytes", "vs_eager", "vs_compile", "vs_matmul", "vs_fma_floor"]

    def measure(case, timer):
        x_shape, w_shape, dims = shapes(case.layout, case.log2n)
        key = (case.threads, case.dtype, case.layout)
        compiler = compilers.setdefault(key, harness.Compiler(args, lambda x, w: composite(x, w, dims)))
        make = {"dtype": harness.DTYPES[case.dtype], "device": device}
        x = torch.randn(x_shape, **make).mul_(x_scale(case.layout, case.log2n))
        w, y = torch.randn(w_shape, **make), torch.empty(x_shape, **make)
        found = variants(x, w, dims, y, compiler.for_size(case.log2n))
        for variant in found:  # every check before any timing
            harness.check(variant, case, make["dtype"], y)
        rows = harness.rows_of(case, x.shape, found, timer(found), RATIOS)
        by_name = {row["variant"]: row for row in rows}
        compile_row = by_name.get("compile")
        by_name["ours"]["compile_slow"] = compile_row["vs_floor"] > COMPILE_SLOW if compile_row else None
        if "sgemm" in by_name:
            fma_floor(rows, math.prod(torch.broadcast_shapes(x.shape, w.shape)))
        harness.print_rows(rows, fields)
        return rows

    harness.print_header(fields)
    return harness.sweep(args, device, measure, group_done, lambda layout, k: shapes(layout, k) is not None)


def main(argv=None) -> int:
    args = parse_args(argv)
    return harness.run("weighted_square_sum", args, OPS, measure_all, TARGETS, png="bandwidth-square-sum-{device}.png")


if __name__ == "__main__":
    sys.exit(main())
