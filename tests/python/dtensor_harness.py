# SPDX-License-Identifier: BSD-3-Clause
"""What the DTensor tests share: custom_ops.sharding under test, and a run of cases on 2 ranks.

Not a test module: test_dtensor_rules.py and test_dtensor_sharding.py import it (pytest puts this
directory on sys.path).

  load_sharding / fresh_sharding_module   the sharding module: installed, else from the sources
  spec, P                                 what a rule is called with, without a process group
  run_on_ranks(cases, backend, ...)       spawns 2 processes (gloo on CPU, nccl on 2 GPUs) that set
                                          up one process group and one mesh, run every case that
                                          `cases` yields and report back: process start-up is paid
                                          once per test, and the failures of all cases come together
  check_results                           that report, as assertions
  placement_names, make_dtensor, ...      for the cases, on each rank
  run_op_case, expected_placements        one case of an op on DTensors against its composite, and
                                          the placements it gives with no collective
  term_facts                              which Partial placements a term's math keeps, measured

The library is environment.LIBRARY ($CUSTOM_OPS_LIBRARY, else build/libcustom_ops.so); the rules
come from the installed custom_ops package when it is this checkout's and imports, else from
python/custom_ops/sharding.py.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import pathlib
import sys
import tempfile
import time
import traceback
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

import operators
from environment import LIBRARY, REPO, installed_package_is_this_checkout

SHARDING_SOURCE = REPO / "python" / "custom_ops" / "sharding.py"
WORLD_SIZE = 2


# ---------------------------------------------------------------------------------------------
# The module under test
# ---------------------------------------------------------------------------------------------


def load_sharding():
    """custom_ops.sharding from the installed package (its import registers the rules) where that is
    this checkout's current code, else from this checkout's sources."""
    if installed_package_is_this_checkout():
        try:
            from custom_ops import sharding

            return sharding
        except ImportError:
            pass
    name = "_custom_ops_sharding"
    return sys.modules[name] if name in sys.modules else fresh_sharding_module(name)


def fresh_sharding_module(name=None):
    """A new instance of python/custom_ops/sharding.py (its own 'registered' flag); put in
    sys.modules as `name` where one is given."""
    # In the checkout's stand-in package (operators.py), where its relative imports resolve.
    package = operators.package_module("_operators").__package__
    spec = importlib.util.spec_from_file_location(f"{package}.sharding_{id(object())}", SHARDING_SOURCE)
    module = importlib.util.module_from_spec(spec)
    if name is not None:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def spec(shape, *placements):
    """What register_sharding passes a rule for a DTensor argument: its shape and placements."""
    return SimpleNamespace(shape=torch.Size(shape), placements=tuple(placements))


def P():
    """(Shard, Replicate(), Partial): the placements, imported only where a test runs."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    return Shard, Replicate(), Partial


# ---------------------------------------------------------------------------------------------
# On each rank
# ---------------------------------------------------------------------------------------------


def placement_names():
    Shard, R, Partial = P()
    return {"S0": Shard(0), "S1": Shard(1), "R": R, "P": Partial()}


def fits(placement, shape):
    Shard, _R, _Partial = P()
    return not isinstance(placement, Shard) or placement.dim < len(shape)


def make_dtensor(full, placement, mesh):
    """A leaf DTensor of global value `full` (the same on every rank) with the one placement `placement`.

    Partial(): rank r holds full * (r + 1) / (1 + 2 + ... + world), which sum to `full`. Else each
    rank takes its own piece of its own `full`, with no collective (src_data_rank=None).
    """
    from torch.distributed.tensor import DTensor, Partial, distribute_tensor

    if isinstance(placement, Partial):
        rank, world = mesh.get_local_rank(), mesh.size()
        local = full * ((rank + 1) / (world * (world + 1) / 2))
        return DTensor.from_local(local, mesh, [placement], run_check=False, shape=full.shape, stride=full.stride())
    return distribute_tensor(full, mesh, [placement], src_data_rank=None)


def comm_counts(mode):
    return {str(op).split(".")[-1]: count for op, count in mode.get_comm_counts().items() if count}


def placement_pairs(x_shape, w_shape):
    """(input placement name, input placement, weight placement name, weight placement): every pair
    of placement_names() that fits the shapes."""
    names = placement_names()
    for px_name, px in names.items():
        for pw_name, pw in names.items():
            if fits(px, x_shape) and fits(pw, w_shape):
                yield px_name, px, pw_name, pw


def term_facts(term):
    """What a term's math lets a Partial weight keep, measured on random float64 values (not read
    from sharding.py): value_linear (value(x, a w1 + w2) = a value(x, w1) + value(x, w2)),
    dx_linear, dw_linear the same of dx and dw, dw_free (dw does not change with w)."""
    gen = torch.Generator().manual_seed(0)
    x, w1, w2 = (torch.randn(16, generator=gen, dtype=torch.float64) for _ in range(3))

    def at(f, w):
        return torch.as_tensor(f(x, w), dtype=torch.float64).expand(x.shape)

    def linear(f):
        return torch.allclose(at(f, 0.37 * w1 + w2), 0.37 * at(f, w1) + at(f, w2))

    return SimpleNamespace(
        value_linear=linear(term.value),
        dx_linear=linear(term.dx),
        dw_linear=linear(term.dw),
        dw_free=torch.allclose(at(term.dw, w1), at(term.dw, w2)),
    )


def expected_placements(x_shape, w_shape, px, pw, summed=(), keepdim=False, facts=None):
    """(out placement, input grad placement, weight grad placement) where (px, pw) already fit a rule,
    so forward and backward need no collective; None where some redistribution is needed (whatever
    is summed). For an op that multiplies input and weight elementwise (broadcast), then sums over
    the output dims `summed` (none: an elementwise op): a sharded dim that is summed gives
    Partial("sum"), a kept one stays sharded at its position in the output. A Partial weight
    stays Partial only as far as the term's `facts` (term_facts; None: w * x**2's) allow."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    out_shape = tuple(torch.broadcast_shapes(x_shape, w_shape))
    n = len(out_shape)
    if isinstance(px, Partial):
        return None
    if isinstance(pw, Partial):
        # linear in weight: Partial out; the backward gets a Replicate grad (see run_op_case), and
        # keeps a Partial weight where dx is linear in it and dw linear in it or free of it.
        facts = facts or SimpleNamespace(value_linear=True, dx_linear=True, dw_linear=False, dw_free=True)
        backward = facts.dx_linear and (facts.dw_free or facts.dw_linear)
        if not (isinstance(px, Replicate) and facts.value_linear and backward):
            return None
        return (pw, pw, Replicate() if facts.dw_free else pw)
    out_dims = set()
    for p, shape in ((px, x_shape), (pw, w_shape)):
        if isinstance(p, Shard):
            d = p.dim + n - len(shape)
            if shape[p.dim] != out_shape[d] or shape[p.dim] < WORLD_SIZE:
                return None  # a broadcast or too small dim: not shardable
            out_dims.add(d)
    if not out_dims:
        return (Replicate(), Replicate(), Replicate())
    if len(out_dims) > 1:
        return None
    (d,) = out_dims

    def grad_placement(shape):
        arg_dim = d - (n - len(shape))
        if arg_dim < 0 or shape[arg_dim] != out_shape[d]:
            return Partial("sum")  # broadcast along the sharded dim: a sum over it, per rank
        return Shard(arg_dim)

    kept_index = d if keepdim else d - sum(1 for s in summed if s < d)
    out = Partial("sum") if d in summed else Shard(kept_index)
    return (out, grad_placement(x_shape), grad_placement(w_shape))


def run_op_case(
    call, composite, x_shape, w_shape, px, pw, seed, *, mesh, device, dtype=None, expected=None, second_order=False
):
    """One case: `call(input, weight)` (the op, its other arguments bound) on DTensors placed px and
    pw, against `composite(input, weight)` on the full float64 tensors (its result cast to dtype,
    where given). Checks that

      * the forward, and the gradients of input and weight through the op's autograd, equal the
        composite's and its gradients;
      * with second_order, that second derivatives match too (check_second_order);
      * where `expected` (expected_placements) is given, forward and backward run with no
        collective (CommDebugMode), and the output and gradients have those placements.

    Returns the record to report."""
    from torch.distributed.tensor import Partial, Replicate
    from torch.distributed.tensor.debug import CommDebugMode

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, generator=gen, dtype=torch.float64).to(device)
    w = torch.randn(w_shape, generator=gen, dtype=torch.float64).to(device)
    reference = composite(x, w)
    if dtype is not None:
        reference = reference.to(dtype)
    g = torch.randn(reference.shape, generator=gen, dtype=reference.dtype).to(device)
    record = {}

    # Forward, no autograd.
    xd, wd = make_dtensor(x, px, mesh), make_dtensor(w, pw, mesh)
    with CommDebugMode() as mode:
        out = call(xd, wd)
    record["forward_comms"] = comm_counts(mode)
    record["out"] = str(list(out.placements))
    assert out.shape == reference.shape and out.dtype == reference.dtype, (
        f"shape/dtype {tuple(out.shape)} {out.dtype}, expected {tuple(reference.shape)} {reference.dtype}"
    )
    torch.testing.assert_close(out.full_tensor(), reference, msg=lambda m: f"forward values: {m}")

    # Forward and backward through the op's autograd.
    xd = make_dtensor(x, px, mesh).requires_grad_()
    wd = make_dtensor(w, pw, mesh).requires_grad_()
    out = call(xd, wd)
    assert out.requires_grad and out.grad_fn is not None
    partial_out = any(isinstance(p, Partial) for p in out.placements)
    gd = make_dtensor(g, Replicate() if partial_out or out.ndim == 0 else out.placements[0], mesh)
    with CommDebugMode() as mode:
        gx, gw = torch.autograd.grad(out, [xd, wd], gd)
    record["backward_comms"] = comm_counts(mode)
    record["grads"] = f"{list(gx.placements)} {list(gw.placements)}"
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ex, ew = torch.autograd.grad(composite(xr, wr), [xr, wr], g.to(torch.float64))
    torch.testing.assert_close(gx.full_tensor(), ex, msg=lambda m: f"grad input: {m}")
    torch.testing.assert_close(gw.full_tensor(), ew, msg=lambda m: f"grad weight: {m}")

    if second_order:
        check_second_order(call, composite, mesh, x, w, g, px, pw)

    record["matching"] = expected is not None
    if expected is not None:
        out_p, gx_p, gw_p = expected
        problems = []
        if record["forward_comms"]:
            problems.append(f"forward communicated: {record['forward_comms']}")
        if record["backward_comms"]:
            problems.append(f"backward communicated: {record['backward_comms']}")
        if list(out.placements) != [out_p]:
            problems.append(f"output {list(out.placements)}, expected [{out_p}]")
        if list(gx.placements) != [gx_p] or list(gw.placements) != [gw_p]:
            problems.append(f"grads {record['grads']}, expected [{gx_p}] [{gw_p}]")
        assert not problems, "; ".join(problems)
    return record


def check_second_order(call, composite, mesh, x, w, g, px, pw):
    """d/d(input, weight) of sum(grad_input**2) + sum(grad_weight), through create_graph=True: the
    op's backward's own autograd on DTensors, against the composite's on full tensors."""
    from torch.distributed.tensor import Replicate

    xd = make_dtensor(x, px, mesh).requires_grad_()
    wd = make_dtensor(w, pw, mesh).requires_grad_()
    gd = make_dtensor(g, Replicate(), mesh)
    gx, gw = torch.autograd.grad(call(xd, wd), [xd, wd], gd, create_graph=True)
    hx, hw = torch.autograd.grad((gx * gx).sum() + gw.sum(), [xd, wd])

    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    rx, rw = torch.autograd.grad(composite(xr, wr), [xr, wr], g, create_graph=True)
    ex, ew = torch.autograd.grad((rx * rx).sum() + rw.sum(), [xr, wr])
    torch.testing.assert_close(hx.full_tensor(), ex, msg=lambda m: f"second order, input: {m}")
    torch.testing.assert_close(hw.full_tensor(), ew, msg=lambda m: f"second order, weight: {m}")


def _rank_main(rank, backend, device_type, result_dir, cases, timeout_s):
    torch.set_num_threads(1)
    results = {"cases": [], "failures": []}
    started = time.perf_counter()
    torch.ops.load_library(str(LIBRARY))
    sharding = load_sharding()
    results["registered"] = sharding.register()
    results["registered_again"] = sharding.register()  # idempotent
    if device_type == "cuda":
        torch.cuda.set_device(rank)
    # A FileStore in the run's own directory, not a TCP port: a free port picked in the test could be
    # taken by another process before the ranks bind it. Every wait, the rendezvous with a rank still
    # starting on busy cores included, may take the whole run's deadline: the harness's deadline,
    # not a collective's timeout, is what ends a hung run.
    dist.init_process_group(
        backend,
        init_method=pathlib.Path(result_dir, "store").as_uri(),
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device_type, (WORLD_SIZE,))
        device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
        for name, run in cases():
            try:
                results["cases"].append({"name": name, **run(mesh=mesh, device=device)})
            except Exception as error:
                results["failures"].append({"name": name, "error": _describe(error)})
    except Exception as error:  # the mesh: reported with the cases, not lost with the process
        results["failures"].append({"name": "device mesh", "error": _describe(error)})
    finally:
        results["seconds"] = time.perf_counter() - started
        pathlib.Path(result_dir, f"rank{rank}.json").write_text(json.dumps(results, indent=1))
        # Both ranks done with every collective before either tears its group down: a rank that
        # destroyed its gloo group while the other was still in it aborted the other once in CI
        # ("terminate called without an active exception").
        dist.barrier()
        dist.destroy_process_group()
    # Gloo's worker threads can still be winding down when the interpreter finalizes, which aborts
    # the process the same way (seen after the barrier, on 2 busy cores): the results are written,
    # so the rank leaves without the interpreter's teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _describe(error):
    """The error, then where it was raised (the last 3 frames)."""
    frames = traceback.format_tb(error.__traceback__)[-3:]
    return f"{type(error).__name__}: {error}\n" + "".join(frames).rstrip()


# ---------------------------------------------------------------------------------------------
# In the test
# ---------------------------------------------------------------------------------------------


def run_on_ranks(cases, backend, op, deadline_s):
    """Every case of `cases()` (a module-level generator of (name, run): run(mesh=, device=) returns
    the record to report) on WORLD_SIZE spawned ranks of `backend` (gloo on CPU, nccl on CUDA; skipped
    where it cannot run, or the library has no CUDA kernel for `op`): each rank's report. A hung
    collective fails the test after deadline_s instead of hanging it."""
    import torch.multiprocessing as mp

    if not (dist.is_available() and getattr(dist, f"is_{backend}_available")()):
        pytest.skip(f"needs torch.distributed with {backend}")
    device_type = {"gloo": "cpu", "nccl": "cuda"}[backend]
    if device_type == "cuda":
        if torch.cuda.device_count() < WORLD_SIZE:
            pytest.skip(f"needs {WORLD_SIZE} GPUs")
        if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"):
            pytest.skip("the library has no CUDA kernels")
    with tempfile.TemporaryDirectory() as result_dir:
        context = mp.start_processes(
            _rank_main,
            args=(backend, device_type, result_dir, cases, deadline_s),
            nprocs=WORLD_SIZE,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + deadline_s
        while not context.join(timeout=5):
            if time.monotonic() > deadline:
                for process in context.processes:
                    if process.is_alive():
                        process.terminate()
                pytest.fail(f"the {WORLD_SIZE} ranks did not finish within {deadline_s} s")
        return [json.loads(pathlib.Path(result_dir, f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]


def check_results(results, min_matching):
    """Prints rank 0's cases; fails on any rank's failures, where register() returned False, or where
    fewer than min_matching cases ran whose placements fit a rule. Returns rank 0's matching cases."""
    rank0 = results[0]
    print(f"\n{len(rank0['cases'])} cases passed, {len(rank0['failures'])} failed, {rank0['seconds']:.1f} s on rank 0")
    for case in rank0["cases"]:
        if "forward_comms" in case:
            print(
                f"  {case['name']:62} out={case['out']:16} grads={case['grads']:34} "
                f"comms={case['forward_comms'] or 0}/{case['backward_comms'] or 0}"
                f"{'  (matching)' if case['matching'] else ''}"
            )
    assert all(r["registered"] and r["registered_again"] for r in results), "sharding.register() returned False"
    failures = [f"rank {rank}: {f['name']}:\n{f['error']}" for rank, r in enumerate(results) for f in r["failures"]]
    shown = 30
    assert not failures, f"{len(failures)} DTensor cases failed (the first {min(shown, len(failures))}):\n" + "\n".join(
        failures[:shown]
    )
    # The placements the matching cases were meant to cover were all run.
    matching = [c for c in rank0["cases"] if c.get("matching")]
    assert len(matching) >= min_matching, f"only {len(matching)} matching cases ran"
    return matching
