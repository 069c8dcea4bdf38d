#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Any operator of the table, named by --op (a generated one, the gallery's say), against the
composite it stands for (its term's Python twin, eager and under torch.compile) and the copy-based
floor, on the GPU or --cpu: an elementwise operator's forward also against torch.add(out=), a
reduction's full sum against its two-stream floor. bench/README.md lists the targets.

The operator comes from python/custom_ops/_operators.py of this checkout, loaded by path (the
package's __init__ does not run: the library under test is the one loaded here). Only ours is
checked before timing, against its term's error bound (tests/python/term_error.py: each operation's
rounding and each function's documented ulps); the others are PyTorch's own references.
"""

from __future__ import annotations

import importlib.util
import math
import sys

import torch

import bench_harness as harness
from bench_harness import Target, Variant, Within, nbytes


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


TABLE = load(harness.REPO / "python" / "custom_ops" / "_operators.py", "custom_ops_operators")
TERM_ERROR = load(harness.REPO / "tests" / "python" / "term_error.py", "custom_ops_term_error")

LAYOUTS = ("contiguous",)
RATIOS = {
    "forward": {
        "vs_add": ("add_out", "speedup"),  # above 1: faster than torch.add(out=)
        "vs_eager": ("eager", "time"),
        "vs_compile": ("compile", "time"),
    },
    "sum": {"vs_eager": ("eager", "time"), "vs_compile": ("compile", "time")},
}
# Issue 45's: as weighted_sum's and weighted_square_sum's floors, whatever the term calls.
TARGETS = [
    Target("cuda", "forward", "ours ours_out", LAYOUTS, 24, "vs_add >= 0.97"),
    Target("cuda", "forward", "ours", LAYOUTS, 24, "vs_compile < 1"),
    Target("cuda", "sum", "ours", LAYOUTS, 26, "vs_floor <= 1.1"),
    Target("cuda", "sum", "ours", LAYOUTS, 26, "vs_compile < 1"),
    *(
        Target("cpu", kind, "ours", LAYOUTS, 20, test)
        for kind in ("forward", "sum")
        for test in ("vs_eager < 1", "vs_compile <= 1")
    ),
]


def parse_args(argv=None):
    p = harness.parser(__doc__, {"cuda": (20, 28), "cpu": (16, 22)}, LAYOUTS)
    p.add_argument("--op", required=True, help="the operator's name in the table (scripts/new_op.py's NAME)")
    # A full sum of 2^24 terms of order 1 passes float16's 65,504: float32 and bfloat16, as the targets.
    p.set_defaults(dtypes="float32,bfloat16")
    args = harness.parse(p, argv, compile_static_from=0)
    operators = {row.name: row for row in TABLE.OPERATORS}
    if args.op not in operators:
        p.error(f"--op: {args.op!r} is not in the table: {sorted(operators)}")
    args.operator = operators[args.op]
    return args


def composite(term, x, w):
    """The term's value on tensors, x's shape (a term that ignores an operand still has it)."""
    return term.value(x, w) + torch.zeros((), dtype=x.dtype, device=x.device)


def expected(operator, x, w, dtype):
    """Ours' value within its term's error bound (a reduction's: each term's, the float32 sum's
    relative to the terms' absolute values, and the result's rounding), from float64 operands."""
    x64, w64 = x.double(), w.double()
    kind = x.device.type
    if operator.kind == "elementwise":
        value, bound = TERM_ERROR.result_error(operator.term, x64, w64, dtype, kind)
        return lambda: (Within(value, bound),)
    value, error = TERM_ERROR.value_error(operator.term, x64, w64, torch.float32, kind)
    growth = 2 * (math.ceil(math.log2(x.numel() + 1)) + 8) * TERM_ERROR.UNIT[torch.float32]
    unit, tiny = TERM_ERROR.ROUNDING[dtype]
    total = value.sum()
    bound = error.sum() + growth * value.abs().sum() + unit * total.abs() + tiny
    return lambda: (Within(total, bound),)


def variants(operator, x, w, y, compiled):
    op = getattr(torch.ops.custom, operator.name)
    ours_expected = expected(operator, x, w, x.dtype)
    result = lambda: (x.double(),)  # noqa: E731  the references are not checked
    found = [Variant("copy", lambda: y.copy_(x), result, nbytes(x, y), "forward")]
    if operator.kind == "elementwise":
        streams = nbytes(x, w, y)
        found += [
            Variant("add_out", lambda: torch.add(x, w, out=y), result, streams),
            Variant("eager", lambda: composite(operator.term, x, w), result, streams),
        ]
        if compiled is not None:
            found.append(Variant("compile", lambda: compiled(x, w), result, streams))

        def ours_out():
            op.out(x, w, out=y)
            return y

        return [
            *found,
            Variant("ours", lambda: op(x, w), ours_expected, streams),
            Variant("ours_out", ours_out, ours_expected, streams),
        ]
    streams = nbytes(x, w) + x.element_size()
    found += [
        Variant("sum_x", lambda: torch.sum(x), result, nbytes(x) + x.element_size(), "sum"),
        Variant("eager", lambda: composite(operator.term, x, w).sum(), result, streams, "sum"),
    ]
    if compiled is not None:
        found.append(Variant("compile", lambda: compiled(x, w), result, streams, "sum"))
    return [*found, Variant("ours", lambda: op(x, w, None), ours_expected, streams, "sum")]


def measure_all(args, device, group_done):
    operator, compilers = args.operator, {}
    fields = ["vs_floor", "vs_add", "vs_eager", "vs_compile"]

    def compiled_composite(x, w):
        value = composite(operator.term, x, w)
        return value if operator.kind == "elementwise" else value.sum()

    def measure(case, timer):
        key = (case.threads, case.dtype)
        compiler = compilers.setdefault(key, harness.Compiler(args, compiled_composite))
        make = {"dtype": harness.DTYPES[case.dtype], "device": device}
        x, w, y = (torch.randn(case.n, **make) for _ in range(3))
        if operator.domain is not None:  # a term defined on part of the line: sample it there
            low, high = operator.domain
            x.uniform_(low, high), w.uniform_(low, high)
        found = variants(operator, x, w, y, compiler.for_size(case.log2n))
        for variant in found:
            if variant.name.startswith("ours"):  # checked before any timing
                harness.check(variant, case, make["dtype"], y if variant.name == "ours_out" else None)
        rows = harness.rows_of(case, x.shape, found, timer(found), RATIOS)
        harness.print_rows(rows, fields)
        return rows

    harness.print_header(fields)
    return harness.sweep(args, device, measure, group_done)


def main(argv=None) -> int:
    args = parse_args(argv)
    return harness.run(f"term-{args.op}", args, [f"custom::{args.op}"], measure_all, TARGETS)


if __name__ == "__main__":
    sys.exit(main())
