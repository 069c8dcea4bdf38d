"""What bench_weighted_square_sum.py times: the sweep's layouts and their inputs, and the variants
of one case (our reduction, the composites it replaces eager, in two steps and compiled, torch.sum
of x alone, and the copy that sets the floor), each with the float64 reference it is checked
against and the bytes it must move."""

from __future__ import annotations

import math

import torch

import weighted_sum_variants
from bench_harness import Case, Summed, Variant, nbytes

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# x and w of one shape except broadcast_row (w [C], read once); each reduces `dims`:
#   full           x, w [n]                          all elements
#   rows_cC        x, w [n/C, C]                     dim -1: one sum per row
#   columns        x, w [n/1024, 1024]               dim 0: one sum per column
#   broadcast_row  x [n/1024, 1024], w [1024]        all elements
LAYOUTS = ("full", "rows_c1024", "rows_c16384", "columns", "broadcast_row")
COLUMNS = 1024  # C of `columns` and `broadcast_row`
# The variants in the order they are timed (each size: every variant in turn on the CPU).
VARIANTS = ("copy", "sum_x", "sum_same_bytes", "eager", "two_step", "compile", "ours")
# Inputs are randn * X_SCALE: a float16 result must not overflow. With x ~ N(0, s^2) and
# w ~ N(0, 1), a full sum over n terms has a standard deviation of sqrt(3 n) s^2: at n = 2^28 and
# s = 1 that is 28,000, so 65,504 (float16's largest) is 2.3 sigma away and some seed overflows;
# at s = 0.5, 9 sigma. broadcast_row is scaled down further (x_scale).
X_SCALE = 0.5
# broadcast_row keeps X_SCALE up to this many rows, and scales x down beyond (x_scale).
BROADCAST_ROWS = 512


# ----------------------------------------------------------------------------------------------
# Inputs (a bench_harness.Case each)


def shapes(layout: str, log2n: int) -> tuple[tuple, tuple, list | None] | None:
    """(x shape, w shape, dims) of a layout at 2^log2n elements; None where the layout has no
    shape of at least two rows (n < 2C): a size-1 dim, which torch.compile would specialize."""
    n = 1 << log2n
    if layout == "full":
        return (n,), (n,), None
    c = int(layout.split("_c")[1]) if layout.startswith("rows_c") else COLUMNS
    if n < 2 * c:
        return None
    if layout.startswith("rows_c"):
        return (n // c, c), (n // c, c), [-1]
    if layout == "columns":
        return (n // c, c), (n // c, c), [0]
    if layout == "broadcast_row":
        return (n // c, c), (c,), None
    raise ValueError(f"unknown layout {layout!r}")


def x_scale(layout: str, log2n: int) -> float:
    """The standard deviation of x: X_SCALE, and for broadcast_row beyond BROADCAST_ROWS rows
    X_SCALE * sqrt(BROADCAST_ROWS / rows), so that a float16 result stays well inside its range.

    broadcast_row's sum is sum_j w_j S_j with S_j = sum_i x_ij^2 over the R rows: every S_j is
    about R s^2 (squares do not cancel), and the one w [C] weights all rows alike, so the rows'
    sums do not cancel either; only the C = 1024 terms w_j S_j do. Its standard deviation is
    about sqrt(C) R s^2 = 32 R s^2, which at R = 2^18 (n = 2^28) and s = 0.5 is 2.1 million, far
    beyond float16's 65,504. With s^2 = X_SCALE^2 * BROADCAST_ROWS / R beyond 512 rows it is at
    most 32 * 512 * 0.25 = 4,096 at every size, so 65,504 is 16 sigma away or more. The terms
    w x^2 are then about 4e-4 at 2^28, normal float16 numbers (from 6.1e-5) for most of them.
    Up to 512 rows (n <= 2^19) x keeps X_SCALE, as the other layouts do at every size."""
    if layout != "broadcast_row":
        return X_SCALE
    rows = (1 << log2n) // COLUMNS
    return X_SCALE * math.sqrt(min(1.0, BROADCAST_ROWS / rows))


def make_inputs(case: Case, device: torch.device):
    """Fresh randn x and w (never zeros: zeros would hide wrong arithmetic), the dims to reduce,
    and y of x's shape for the copy that measures the floor."""
    x_shape, w_shape, dims = shapes(case.layout, case.log2n)
    make = {"dtype": DTYPES[case.dtype], "device": device}
    x = torch.randn(x_shape, **make).mul_(x_scale(case.layout, case.log2n))
    w = torch.randn(w_shape, **make)
    y = torch.empty(x_shape, **make)
    return x, w, dims, y


# ----------------------------------------------------------------------------------------------
# The variants. Each returns what it computed, so the same callable is checked and timed.


def eager_composite(x, w, dims):
    return (w * x.pow(2)).sum(dims)


def compile_composite(x, w, dims):
    # x * x rather than x.pow(2), as bench_weighted_sum.py compiles it: the form Inductor is sure to
    # fuse; its reduction then reads x and w once.
    return (w * x * x).sum(dims)


def variants(x, w, dims, y, compiled) -> list[Variant]:
    """The variants of one case. Each one's bytes are what it must read (x and w once, a broadcast
    w at its own size; sum_x x alone; sum_same_bytes, on the CPU, x and w as one tensor) and write
    (its result), so ours' floor in
    weighted_square_sum_report.timed_rows is 2 streams (x and w), and 1 for broadcast_row."""

    def weighted():
        x64, w64 = x.double(), w.double()
        terms = w64 * x64 * x64
        return (Summed(terms.sum(dims), terms.abs().sum(dims)),)

    def plain():
        x64 = x.double()
        return (Summed(x64.sum(dims), x64.abs().sum(dims)),)

    result = torch.empty(torch.broadcast_shapes(x.shape, w.shape), dtype=x.dtype, device="meta").sum(dims)
    result_bytes = nbytes(result)
    reads = nbytes(x, w) + result_bytes
    found = [
        # The floor: copy_ moves 2 streams of x's size (read x, write y) at the bandwidth the
        # device reaches here, the way bench_weighted_sum.py's forward+backward floor does.
        Variant("copy", lambda: y.copy_(x), lambda: (x.double(),), nbytes(x, y)),
        Variant("sum_x", lambda: torch.sum(x, dims), plain, nbytes(x) + result_bytes),
    ]
    if x.device.type == "cpu":
        # torch.sum over as many bytes as ours reads (x and w in one tensor, summed whole): a
        # 1-stream reduction with ours' working set, where torch.sum(x)'s half-size input may
        # still fit a cache that x and w together do not.
        both = torch.cat([x.reshape(-1), w.reshape(-1)])

        def plain_both():
            both64 = both.double()
            return (Summed(both64.sum(), both64.abs().sum()),)

        found.append(Variant("sum_same_bytes", lambda: torch.sum(both), plain_both, nbytes(both) + both.element_size()))
    found += [
        Variant("eager", lambda: eager_composite(x, w, dims), weighted, reads),
        Variant("two_step", lambda: torch.ops.custom.weighted_sum(x, w).sum(dims), weighted, reads),
    ]
    if compiled is not None:
        found.append(Variant("compile", lambda: compiled(x, w), weighted, reads))
    found.append(Variant("ours", lambda: torch.ops.custom.weighted_square_sum(x, w, dims), weighted, reads))
    return found


class Compiler(weighted_sum_variants.Compiler):
    """torch.compile of the composite, reducing `dims`, for one dtype and layout, sizes taken
    largest first: as bench_weighted_sum.py's (weighted_sum_variants.Compiler).

    From 2^compile_static_from up, a graph per size (dynamic=False): what a model with fixed
    shapes gets, and on the GPU the default at every size. Below, one dynamic=True graph serves
    every size: the CPU's default, where each C++ compile takes seconds."""

    def __init__(self, args, dims):
        super().__init__(args)
        self.dims = dims

    def _compile(self, dynamic: bool):
        dims = self.dims

        def composite(x, w):
            return compile_composite(x, w, dims)

        return torch.compile(composite, dynamic=dynamic)
