"""custom::weighted_sum on DTensors: the sharding rules of custom_ops.sharding, on 2 ranks.

One test spawns 2 processes (gloo on CPU; the CUDA variant nccl on 2 GPUs) that run every case
and report back, so process start-up is paid once. For each pair of placements of input and weight
among Shard(0), Shard(1), Replicate() and Partial() on a 1-D mesh of 2, and for several broadcast
shapes, a case checks that

  * the forward, and the gradients of input and weight (autograd through the op's backward
    operator, on DTensors), equal the single-process result;
  * where the placements already fit a rule (Shard on lined-up dims, Replicate, a Partial weight
    with a Replicate input), forward and backward run with no collective (CommDebugMode), and
    the output and gradients have the expected placements;

and, for some shapes, that second derivatives (create_graph=True) match too. It also calls the
backward operator directly for every placement of grad, input and weight, with output_masks that
leave a gradient out (None) and then [True, True] for the same placements (so a cached sharding
of one mask must not be reused for another). Failures of all cases are reported together.

The library is $CUSTOM_OPS_LIBRARY, else build/libcustom_ops.so (as in environment.py); the rules come
from the installed custom_ops package when it imports, else from python/custom_ops/sharding.py.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import pathlib
import socket
import sys
import tempfile
import time
import traceback

import pytest
import torch
import torch.distributed as dist

from reference import sum_to

REPO = pathlib.Path(__file__).resolve().parents[2]
LIBRARY = pathlib.Path(os.environ.get("CUSTOM_OPS_LIBRARY", REPO / "build" / "libcustom_ops.so")).resolve()
SHARDING_SOURCE = REPO / "python" / "custom_ops" / "sharding.py"

WORLD_SIZE = 2
DEADLINE_S = 300  # for the whole spawned run; a hung collective fails the test instead of hanging it

# name -> (input shape, weight shape)
SHAPES = {
    "same": ((4, 6), (4, 6)),
    "uneven": ((5, 3), (5, 3)),  # 5 rows and 3 columns split 3 + 2 and 2 + 1
    "weight_C": ((4, 6), (6,)),  # weight dim 0 lines up with output dim 1
    "weight_1C": ((4, 6), (1, 6)),  # weight dim 0 is a size-1 broadcast dim
    "input_C": ((6,), (4, 6)),  # the input is the broadcast one
    "3d_weight_C1": ((2, 4, 6), (4, 1)),  # weight dims 0, 1 line up with output dims 1, 2
}
# For the direct calls of the backward operator (every grad placement and output_mask).
BACKWARD_SHAPES = ("same", "weight_C", "input_C")
# Shapes whose cases also take a second derivative (the backward operator's own autograd).
SECOND_ORDER_SHAPES = ("same", "weight_C")


def load_sharding():
    """custom_ops.sharding from the installed package, else from this checkout's sources."""
    try:
        from custom_ops import sharding

        return sharding
    except ImportError:
        pass
    name = "_custom_ops_sharding"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SHARDING_SOURCE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# What each rank runs
# ---------------------------------------------------------------------------------------------


def placement_names():
    from torch.distributed.tensor import Partial, Replicate, Shard

    return {"S0": Shard(0), "S1": Shard(1), "R": Replicate(), "P": Partial()}


def make_dtensor(full, placement, mesh):
    """A leaf DTensor of global value `full` with the one placement `placement`.

    Partial(): rank r holds full * (r + 1) / (1 + 2 + ... + world), which sum to `full`.
    """
    from torch.distributed.tensor import DTensor, Partial, distribute_tensor

    if isinstance(placement, Partial):
        rank, world = mesh.get_local_rank(), mesh.size()
        local = full * ((rank + 1) / (world * (world + 1) / 2))
        return DTensor.from_local(local, mesh, [placement], run_check=False, shape=full.shape, stride=full.stride())
    return distribute_tensor(full, mesh, [placement])


def fits(placement, shape):
    from torch.distributed.tensor import Shard

    return not isinstance(placement, Shard) or placement.dim < len(shape)


def expected_forward(x_shape, w_shape, px, pw):
    """(out placement, input grad placement, weight grad placement) where (px, pw) already fit a
    rule, so forward and backward need no collective; None where some redistribution is needed.
    """
    from torch.distributed.tensor import Partial, Replicate, Shard

    out_shape = tuple(torch.broadcast_shapes(x_shape, w_shape))
    n = len(out_shape)
    if isinstance(px, Partial):
        return None
    if isinstance(pw, Partial):
        # linear in weight: Partial out; the backward gets a Replicate grad (see run_case).
        return (pw, pw, Replicate()) if isinstance(px, Replicate) else None
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
        dim = d - (n - len(shape))
        if dim < 0 or shape[dim] != out_shape[d]:
            return Partial("sum")  # broadcast along the sharded dim: a sum over it, per rank
        return Shard(dim)

    return (Shard(d), grad_placement(x_shape), grad_placement(w_shape))


def comm_counts(mode):
    return {str(op).split(".")[-1]: count for op, count in mode.get_comm_counts().items() if count}


def run_case(ops, mesh, device, shape_name, px_name, pw_name, seed):
    from torch.distributed.tensor import Partial, Replicate
    from torch.distributed.tensor.debug import CommDebugMode

    names = placement_names()
    px, pw = names[px_name], names[pw_name]
    x_shape, w_shape = SHAPES[shape_name]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, generator=gen, dtype=torch.float64).to(device)
    w = torch.randn(w_shape, generator=gen, dtype=torch.float64).to(device)
    out_shape = torch.broadcast_shapes(x_shape, w_shape)
    g = torch.randn(out_shape, generator=gen, dtype=torch.float64).to(device)
    record = {}

    # Forward, no autograd.
    xd, wd = make_dtensor(x, px, mesh), make_dtensor(w, pw, mesh)
    with CommDebugMode() as mode:
        out = ops.weighted_sum(xd, wd)
    record["forward_comms"] = comm_counts(mode)
    record["out"] = str(list(out.placements))
    torch.testing.assert_close(out.full_tensor(), w * x**2, msg=lambda m: f"forward values: {m}")
    assert out.shape == out_shape and out.dtype == torch.float64

    # Forward and backward through the op's autograd (which calls weighted_sum_backward).
    xd = make_dtensor(x, px, mesh).requires_grad_()
    wd = make_dtensor(w, pw, mesh).requires_grad_()
    out = ops.weighted_sum(xd, wd)
    assert out.requires_grad and out.grad_fn is not None
    grad_placement = Replicate() if any(isinstance(p, Partial) for p in out.placements) else out.placements[0]
    gd = make_dtensor(g, grad_placement, mesh)
    with CommDebugMode() as mode:
        gx, gw = torch.autograd.grad(out, [xd, wd], gd)
    record["backward_comms"] = comm_counts(mode)
    record["grads"] = f"{list(gx.placements)} {list(gw.placements)}"
    torch.testing.assert_close(gx.full_tensor(), sum_to(2 * w * x * g, x_shape), msg=lambda m: f"grad input: {m}")
    torch.testing.assert_close(gw.full_tensor(), sum_to(x**2 * g, w_shape), msg=lambda m: f"grad weight: {m}")

    if shape_name in SECOND_ORDER_SHAPES:
        check_second_order(ops, mesh, x, w, g, px, pw)

    expected = expected_forward(x_shape, w_shape, px, pw)
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


def check_second_order(ops, mesh, x, w, g, px, pw):
    """d/d(input, weight) of sum(grad_input**2) + sum(grad_weight), through create_graph=True."""
    from torch.distributed.tensor import Replicate

    xd = make_dtensor(x, px, mesh).requires_grad_()
    wd = make_dtensor(w, pw, mesh).requires_grad_()
    gd = make_dtensor(g, Replicate(), mesh)
    gx, gw = torch.autograd.grad(ops.weighted_sum(xd, wd), [xd, wd], gd, create_graph=True)
    hx, hw = torch.autograd.grad((gx * gx).sum() + gw.sum(), [xd, wd])

    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    rx, rw = torch.autograd.grad(wr * xr**2, [xr, wr], g, create_graph=True)
    ex, ew = torch.autograd.grad((rx * rx).sum() + rw.sum(), [xr, wr])
    torch.testing.assert_close(hx.full_tensor(), ex, msg=lambda m: f"second order, input: {m}")
    torch.testing.assert_close(hw.full_tensor(), ew, msg=lambda m: f"second order, weight: {m}")


def run_backward_case(ops, mesh, device, shape_name, pg_name, px_name, pw_name, mask, seed):
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.debug import CommDebugMode

    names = placement_names()
    pg, px, pw = names[pg_name], names[px_name], names[pw_name]
    x_shape, w_shape = SHAPES[shape_name]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, generator=gen, dtype=torch.float64).to(device)
    w = torch.randn(w_shape, generator=gen, dtype=torch.float64).to(device)
    g = torch.randn(torch.broadcast_shapes(x_shape, w_shape), generator=gen, dtype=torch.float64).to(device)
    gd, xd, wd = make_dtensor(g, pg, mesh), make_dtensor(x, px, mesh), make_dtensor(w, pw, mesh)
    with CommDebugMode() as mode:
        gx, gw = ops.weighted_sum_backward(gd, xd, wd, mask)
    record = {"comms": comm_counts(mode)}
    for wanted, actual, expected, what in (
        (mask[0], gx, sum_to(2 * w * x * g, x_shape), "grad input"),
        (mask[1], gw, sum_to(x**2 * g, w_shape), "grad weight"),
    ):
        if not wanted:
            assert actual is None, f"{what} is {type(actual).__name__}, but output_mask leaves it out"
            continue
        assert actual.shape == expected.shape, f"{what} shape {actual.shape}, expected {expected.shape}"
        torch.testing.assert_close(actual.full_tensor(), expected, msg=lambda m, what=what: f"{what}: {m}")

    # All three replicated, or sharded on the same dim of equal shapes; or a Partial grad with the
    # rest replicated (linear in grad): no collective.
    aligned = pg == px == pw and (isinstance(pg, Replicate) or (isinstance(pg, Shard) and x_shape == w_shape))
    linear = isinstance(pg, Partial) and px == pw == Replicate()
    if (aligned or linear) and record["comms"]:
        raise AssertionError(f"communicated: {record['comms']}")
    return record


def worker(rank, port, backend, device_type, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE))
    torch.set_num_threads(1)
    results = {"cases": [], "failures": []}
    started = time.perf_counter()
    torch.ops.load_library(str(LIBRARY))
    sharding = load_sharding()
    results["registered"] = sharding.register()
    results["registered_again"] = sharding.register()  # idempotent
    if device_type == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=WORLD_SIZE, timeout=datetime.timedelta(seconds=60))
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device_type, (WORLD_SIZE,))
        device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
        ops = torch.ops.custom
        seed = 0
        for shape_name, (x_shape, w_shape) in SHAPES.items():
            for px_name, px in placement_names().items():
                for pw_name, pw in placement_names().items():
                    if not (fits(px, x_shape) and fits(pw, w_shape)):
                        continue
                    seed += 1
                    name = f"{shape_name} input={px_name} weight={pw_name}"
                    try:
                        record = run_case(ops, mesh, device, shape_name, px_name, pw_name, seed)
                        results["cases"].append({"name": name, **record})
                    except Exception as error:
                        results["failures"].append({"name": name, "error": _describe(error)})
        combo = 0
        for shape_name in BACKWARD_SHAPES:
            x_shape, w_shape = SHAPES[shape_name]
            out_shape = torch.broadcast_shapes(x_shape, w_shape)
            names = placement_names()
            for pg_name in names:
                for px_name in names:
                    for pw_name in names:
                        if not (
                            fits(names[pg_name], out_shape)
                            and fits(names[px_name], x_shape)
                            and fits(names[pw_name], w_shape)
                        ):
                            continue
                        # One of the single-gradient masks in turn, then [True, True]; now and
                        # then [False, False] first. The same placements with another mask must
                        # not reuse the cached sharding, whose left-out gradient has no placement.
                        combo += 1
                        masks = [[True, False] if combo % 2 else [False, True], [True, True]]
                        if combo % 16 == 0:
                            masks.insert(0, [False, False])
                        for mask in masks:
                            seed += 1
                            name = (
                                f"backward op {shape_name} grad={pg_name} input={px_name} weight={pw_name} mask={mask}"
                            )
                            try:
                                record = run_backward_case(
                                    ops, mesh, device, shape_name, pg_name, px_name, pw_name, mask, seed
                                )
                                results["cases"].append({"name": name, **record})
                            except Exception as error:
                                results["failures"].append({"name": name, "error": _describe(error)})
    finally:
        results["seconds"] = time.perf_counter() - started
        pathlib.Path(result_dir, f"rank{rank}.json").write_text(json.dumps(results, indent=1))
        # Both ranks done with every collective before either tears its group down: a rank that
        # destroyed its gloo group while the other was still in it aborted the other once in CI
        # ("terminate called without an active exception").
        dist.barrier()
        dist.destroy_process_group()


def _describe(error):
    """The error, then where it was raised (the last 3 frames)."""
    frames = traceback.format_tb(error.__traceback__)[-3:]
    return f"{type(error).__name__}: {error}\n" + "".join(frames).rstrip()


# ---------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_and_collect(backend, device_type):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as result_dir:
        context = mp.start_processes(
            worker,
            args=(free_port(), backend, device_type, result_dir),
            nprocs=WORLD_SIZE,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + DEADLINE_S
        while not context.join(timeout=5):
            if time.monotonic() > deadline:
                for process in context.processes:
                    if process.is_alive():
                        process.terminate()
                pytest.fail(f"the {WORLD_SIZE} ranks did not finish within {DEADLINE_S} s")
        return [json.loads(pathlib.Path(result_dir, f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]


def check_results(results):
    rank0 = results[0]
    print(f"\n{len(rank0['cases'])} cases passed, {len(rank0['failures'])} failed, {rank0['seconds']:.1f} s on rank 0")
    for case in rank0["cases"]:
        if "forward_comms" in case:
            print(
                f"  {case['name']:34} out={case['out']:14} grads={case['grads']:34} "
                f"forward comms={case['forward_comms'] or 0} backward comms={case['backward_comms'] or 0}"
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
    assert len(matching) >= 20, f"only {len(matching)} matching cases ran"


def test_dtensor_sharding_gloo_cpu():
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("needs torch.distributed with gloo")
    check_results(spawn_and_collect("gloo", "cpu"))


def test_dtensor_sharding_nccl_cuda():
    if not (dist.is_available() and dist.is_nccl_available()):
        pytest.skip("needs torch.distributed with nccl")
    if torch.cuda.device_count() < WORLD_SIZE:
        pytest.skip(f"needs {WORLD_SIZE} GPUs")
    torch.ops.load_library(str(LIBRARY))
    if not torch._C._dispatch_has_kernel_for_dispatch_key("custom::weighted_sum", "CUDA"):
        pytest.skip("the library has no CUDA kernels")
    check_results(spawn_and_collect("nccl", "cuda"))
