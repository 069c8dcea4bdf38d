#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Fusion under torch.compile: relu(weighted_sum(a + b, w)) * 3 compiled with our op decomposed
(model_ours) and opaque to Inductor (model_opaque), against the compiled composite
relu(w * (a + b).square()) * 3; and the op alone compiled (op_compiled) against our eager kernel."""

from __future__ import annotations

import functools
import importlib
import sys
import types

import torch

import bench_harness as harness
from bench_harness import Variant

RATIOS = {
    "model_ours / model_composite": ("model_ours", "model_composite"),
    "model_opaque / model_composite": ("model_opaque", "model_composite"),
    "op_compiled / op_eager": ("op_compiled", "op_eager"),
}


def model_ours(a, b, w):
    return torch.relu(torch.ops.custom.weighted_sum(a + b, w)) * 3


def model_composite(a, b, w):
    return torch.relu(w * (a + b).square()) * 3


def model_opaque(a, b, w):  # model_ours under its own name: compiled and cached with the op opaque
    return model_ours(a, b, w)


def op_alone(x, w):
    return torch.ops.custom.weighted_sum(x, w)


def decomposition_switch(library):
    """custom_ops.set_inductor_decomposition, or with --library this checkout's _inductor.py's."""
    if library is None:
        import custom_ops

        return custom_ops.set_inductor_decomposition, custom_ops.library_path()
    library = harness.load_library(library)
    # This checkout's package sources, without its __init__ (which loads the installed library).
    sources = types.ModuleType("custom_ops_sources")
    sources.__path__ = [str(harness.REPO / "python/custom_ops")]
    sys.modules.setdefault(sources.__name__, sources)
    module = importlib.import_module("custom_ops_sources._inductor")
    module.install("bench")
    return module.set_enabled, library


def main(argv=None) -> int:
    p = harness.parser(__doc__, {"cuda": (24, 28), "cpu": (16, 20)}, ("contiguous",))
    p.set_defaults(dtypes="float32,bfloat16", rounds=3, min_run_time=0.6, timer="events", warmup_ms=25.0, rep_ms=100.0)
    args = harness.parse(p, argv, compile_static_from=0)
    device = harness.pick_device(args, [])
    set_decomposition, library = decomposition_switch(args.library)
    if args.cpu:
        timer, timing = harness.cpu_timer(args, torch.get_num_threads()), harness.cpu_timing(args)
    else:
        timer, timing = harness.gpu_timer(args)
    meta = harness.metadata("fusion", args, device, library, timing)
    rows = []
    for dtype in args.dtypes:
        for log2n in range(args.min_log2, args.max_log2 + 1):
            a, b, w = (torch.randn(1 << log2n, device=device, dtype=harness.DTYPES[dtype]) for _ in range(3))
            variants = []
            for name, fn, decompose, inputs in [
                ("model_composite", model_composite, True, (a, b, w)),
                ("model_ours", model_ours, True, (a, b, w)),
                ("model_opaque", model_opaque, False, (a, b, w)),
                ("op_compiled", op_alone, True, (a, w)),
            ]:
                setup = functools.partial(set_decomposition, decompose)  # part of the guards
                setup()
                compiled = torch.compile(fn, fullgraph=True, dynamic=False)
                # Against eager (our kernel); Inductor keeps a + b in float32.
                tolerance = {"rtol": 2e-2, "atol": 1e-1} if dtype == "bfloat16" else {}
                torch.testing.assert_close(compiled(*inputs), fn(*inputs), **tolerance)
                variants.append(Variant(name, functools.partial(compiled, *inputs), None, 0, setup=setup))
            variants.append(Variant("op_eager", functools.partial(op_alone, a, w), None, 0))
            times = timer(variants)
            set_decomposition(True)
            ratios = {key: times[top] / times[bottom] for key, (top, bottom) in RATIOS.items()}
            rows.append({"dtype": dtype, "log2_n": log2n, "n": 1 << log2n, "median_us": times, "ratios": ratios})
            print(
                f"{dtype:8s} 2^{log2n:<2d} "
                + "  ".join(f"{k} {v:9.1f}us" for k, v in times.items())
                + "  |  "
                + "  ".join(f"{k} {v:.3f}" for k, v in ratios.items()),
                flush=True,
            )
    path = harness.output_path(args, meta)
    harness.write_json(path, {**meta, "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
