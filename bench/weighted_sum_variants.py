"""What bench_weighted_sum.py times: the sweep's cases and their inputs, and the variants of one
case (our op, PyTorch's ceilings, the composite eager and compiled, forward+backward), each with
the float64 reference it is checked against and the bytes it must move."""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch._dynamo

from bench_harness import Case, Summed, Variant, nbytes

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


# ----------------------------------------------------------------------------------------------
# Inputs (a bench_harness.Case each)


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


# ----------------------------------------------------------------------------------------------
# The variants. Each returns what it computed, so the same callable is checked and timed.


def eager_composite(x, w):
    return w * x.pow(2)


def compile_composite(x, w):
    # x * x rather than x.pow(2): the form Inductor is sure to fuse into one pointwise kernel.
    return w * x * x


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


def fwd_bwd_floor_bytes(x, w) -> int:
    """The 8-stream floor: read x, w; write y; read g, x, w; write grad_x, grad_w (a broadcast
    weight and its gradient count at their own size: 5 full-size streams)."""
    return 2 * nbytes(x, w) + nbytes(x, x, x, w)  # g has x's shape and dtype


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

    floor_bytes = fwd_bwd_floor_bytes(x, w)
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
    dynamic=True graph serves every size: a compile per size there would cost minutes.
    weighted_square_sum_variants.Compiler is this one with its own composite (_compile)."""

    def __init__(self, args):
        self.enabled = not args.no_compile
        self.static_from = args.compile_static_from
        self.dynamic = None

    def _compile(self, dynamic: bool):
        return torch.compile(compile_composite, dynamic=dynamic)

    def for_size(self, log2n: int):
        if not self.enabled:
            return None
        if log2n >= self.static_from:
            torch._dynamo.reset()  # drop the previous size's graphs: no recompile pile-up
            return self._compile(dynamic=False)
        if self.dynamic is None:
            torch._dynamo.reset()
            self.dynamic = self._compile(dynamic=True)
        return self.dynamic


def host_variants(x, w) -> dict[str, Callable[[], object]]:
    """The small calls whose per-call Python time is measured: ours, torch.add and the composite."""
    return {
        "ours": lambda: torch.ops.custom.weighted_sum(x, w),
        "add": lambda: torch.add(x, w),
        "eager": lambda: w * x.pow(2),  # inline: a call of eager_composite would add a frame
    }
