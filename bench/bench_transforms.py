#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Per-call CPU time of custom::weighted_sum under torch.func transforms and eager autograd, against
the composite w * x.square(): per-sample gradients (vmap(grad(...)) of a shared weight, and of both
arguments) and eager calls without grad, with grad, and forward plus autograd.grad, at [B, D]."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import torch
from torch.func import grad, vmap

import bench_harness as harness
from bench_harness import Variant


def composite(x, w):
    return w * x.square()


def ours(x, w):
    return torch.ops.custom.weighted_sum(x, w)


def workloads(batch, features):
    """{name: make(f)}, make giving the call of a workload through f (ours or the composite)."""
    x, w, ws = torch.randn(batch, features), torch.randn(features), torch.randn(batch, features)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()

    def per_sample(f):
        g = vmap(grad(lambda w, x: f(x, w).sum()), in_dims=(None, 0))
        return lambda: g(w, x)

    def per_sample_both(f):
        g = vmap(grad(lambda x, w: f(x, w).sum(), argnums=(0, 1)))
        return lambda: g(x, ws)

    return {
        "per_sample_grads": per_sample,
        "per_sample_grads_both": per_sample_both,
        "forward_no_grad": lambda f: lambda: f(x, w),
        "forward_grad": lambda f: lambda: f(xg, wg),
        "forward_backward": lambda f: lambda: torch.autograd.grad(f(xg, wg).sum(), (xg, wg)),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--library", type=pathlib.Path, help="libcustom_ops.so (default $CUSTOM_OPS_LIBRARY, build/)")
    p.add_argument("--git-commit", "--commit", dest="git_commit", default=os.environ.get("CUSTOM_OPS_GIT_COMMIT"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--rounds", type=int, default=21, help="rounds in which ours and the composite take turns")
    p.add_argument("--min-run-time", type=float, default=0.42, help="seconds per variant and workload")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1: steadiest on a shared VM)")
    p.add_argument("--output-dir", type=pathlib.Path, default=harness.REPO, help="root of bench/results/")
    p.add_argument(
        "--output", "--json", dest="output", type=pathlib.Path, help="the JSON's path, or a directory for it"
    )
    args = p.parse_args(argv)

    library = harness.load_library(args.library)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    meta = harness.metadata("transforms", args, torch.device("cpu"), library, harness.cpu_timing(args))
    meta |= {"threads": args.threads, "batch": args.batch, "features": args.features}
    timer = harness.cpu_timer(args, args.threads)
    rows = []
    print(f"{'workload':24s} {'ours (us)':>12s} {'composite (us)':>15s} {'ours/composite':>15s}")
    for name, make in workloads(args.batch, args.features).items():
        variants = [Variant("composite", make(composite), None, 0)]
        try:
            variants.append(Variant("ours", make(ours), None, 0))
            variants[-1].call()
            error = None
        except Exception as exc:  # a transform the library does not support: reported, not timed
            variants.pop()
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        if error is None:  # a fast wrong result is no result
            torch.testing.assert_close(variants[1].call(), variants[0].call())
        times = timer(variants)
        ours_us, composite_us = times.get("ours"), times["composite"]
        ratio = ours_us / composite_us if ours_us else None
        rows.append(
            {"workload": name, "ours_us": ours_us, "composite_us": composite_us, "ratio": ratio, "error": error}
        )
        ours_text = f"{ours_us:12.1f}" if ours_us else f"{'raises':>12s}"
        print(
            f"{name:24s} {ours_text} {composite_us:15.1f} {ratio or float('nan'):15.2f}"
            + (f"  ({error})" if error else "")
        )
    path = harness.output_path(args, meta)
    harness.write_json(path, {**meta, "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
