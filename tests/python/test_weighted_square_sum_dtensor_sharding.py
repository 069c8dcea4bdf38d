"""custom::weighted_square_sum on DTensors: custom_ops.sharding's rule for it, on 2 ranks.

As test_dtensor_sharding.py does for weighted_sum: one test spawns 2 processes (gloo on CPU; the
CUDA variant nccl on 2 GPUs) that run every case and report back. For each pair of placements of
input and weight among Shard(0), Shard(1), Replicate() and Partial() on a 1-D mesh of 2, for
several broadcast shapes and several `dim`s (keepdim alternating), a case checks that

  * the forward, and the gradients of input and weight (the op's autograd, which calls
    weighted_sum_backward on the grad broadcast over the summed dims, on DTensors), equal the
    composite `(w * x**2).sum(dim, keepdim)` and its gradients computed on full tensors;
  * where the placements already fit a rule, forward and backward run with no collective
    (CommDebugMode), and the output is Partial("sum") when the sharded dim is summed over, else
    Shard on that dim's position in the output (Partial(op) for a Partial weight with a Replicate
    input), with the gradients' placements of weighted_sum's backward rule;

and, for some shapes, that second derivatives match too. The same placements run with one `dim`
after another, and with dtype=float32 after dtype=None: a sharding cached for one call must not
serve another. Failures of all cases are reported together.

The library is $CUSTOM_OPS_LIBRARY, else build/libcustom_ops.so; the rules come from the installed
custom_ops package when it imports, else from python/custom_ops/sharding.py.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import tempfile
import time

import pytest
import torch
import torch.distributed as dist

from test_dtensor_sharding import (
    LIBRARY,
    WORLD_SIZE,
    _describe,
    comm_counts,
    fits,
    free_port,
    load_sharding,
    make_dtensor,
    placement_names,
)

DEADLINE_S = 420  # for the whole spawned run; a hung collective fails the test instead of hanging it

# name -> (input shape, weight shape, the dims to sum over, in turn)
SHAPES = {
    "same": ((4, 6), (4, 6), (None, [0], [-1])),
    "uneven": ((5, 3), (5, 3), ([0], [1])),  # 5 rows and 3 columns split 3 + 2 and 2 + 1
    "weight_C": ((4, 6), (6,), (None, [0], [1])),  # weight dim 0 lines up with output dim 1
    "weight_1C": ((4, 6), (1, 6), ([0], [1])),  # weight dim 0 is a size-1 broadcast dim
    "input_C": ((6,), (4, 6), ([0], [-1])),  # the input is the broadcast one
    "3d_weight_C1": ((2, 4, 6), (4, 1), ([1], [0, 2], [2])),  # weight dims 0, 1 are output dims 1, 2
}
# Shapes whose cases also take a second derivative (weighted_sum_backward's own autograd).
SECOND_ORDER_SHAPES = ("same", "weight_C")


def summed_dims(ndim, dim):
    if not dim:
        return set(range(ndim))
    return {d % ndim for d in dim}


def composite(x, w, dim, keepdim):
    return (w * x**2).sum(dim, keepdim)


def expected_placements(x_shape, w_shape, px, pw, dim, keepdim):
    """(out placement, input grad placement, weight grad placement) where (px, pw) already fit a
    rule, so forward and backward need no collective; None where some redistribution is needed."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    out_shape = tuple(torch.broadcast_shapes(x_shape, w_shape))
    n = len(out_shape)
    summed = summed_dims(n, dim)
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
        arg_dim = d - (n - len(shape))
        if arg_dim < 0 or shape[arg_dim] != out_shape[d]:
            return Partial("sum")  # broadcast along the sharded dim: a sum over it, per rank
        return Shard(arg_dim)

    kept_index = d if keepdim else d - sum(1 for s in summed if s < d)
    out = Partial("sum") if d in summed else Shard(kept_index)
    return (out, grad_placement(x_shape), grad_placement(w_shape))


def run_case(ops, mesh, device, shape_name, px_name, pw_name, dim, keepdim, dtype, seed):
    from torch.distributed.tensor import Partial, Replicate
    from torch.distributed.tensor.debug import CommDebugMode

    names = placement_names()
    px, pw = names[px_name], names[pw_name]
    x_shape, w_shape, _ = SHAPES[shape_name]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, generator=gen, dtype=torch.float64).to(device)
    w = torch.randn(w_shape, generator=gen, dtype=torch.float64).to(device)
    expected = composite(x, w, dim, keepdim)
    if dtype is not None:
        expected = expected.to(dtype)
    g = torch.randn(expected.shape, generator=gen, dtype=expected.dtype).to(device)
    record = {}

    # Forward, no autograd.
    xd, wd = make_dtensor(x, px, mesh), make_dtensor(w, pw, mesh)
    with CommDebugMode() as mode:
        out = ops.weighted_square_sum(xd, wd, dim, keepdim, dtype=dtype)
    record["forward_comms"] = comm_counts(mode)
    record["out"] = str(list(out.placements))
    assert out.shape == expected.shape and out.dtype == expected.dtype, (
        f"shape/dtype {tuple(out.shape)} {out.dtype}, expected {tuple(expected.shape)} {expected.dtype}"
    )
    torch.testing.assert_close(out.full_tensor(), expected, msg=lambda m: f"forward values: {m}")

    # Forward and backward through the op's autograd (which calls weighted_sum_backward).
    xd = make_dtensor(x, px, mesh).requires_grad_()
    wd = make_dtensor(w, pw, mesh).requires_grad_()
    out = ops.weighted_square_sum(xd, wd, dim, keepdim, dtype=dtype)
    assert out.requires_grad and out.grad_fn is not None
    partial_out = any(isinstance(p, Partial) for p in out.placements)
    grad_placement = Replicate() if partial_out or out.ndim == 0 else out.placements[0]
    gd = make_dtensor(g, grad_placement, mesh)
    with CommDebugMode() as mode:
        gx, gw = torch.autograd.grad(out, [xd, wd], gd)
    record["backward_comms"] = comm_counts(mode)
    record["grads"] = f"{list(gx.placements)} {list(gw.placements)}"
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ex, ew = torch.autograd.grad(composite(xr, wr, dim, keepdim), [xr, wr], g.to(torch.float64))
    torch.testing.assert_close(gx.full_tensor(), ex, msg=lambda m: f"grad input: {m}")
    torch.testing.assert_close(gw.full_tensor(), ew, msg=lambda m: f"grad weight: {m}")

    if shape_name in SECOND_ORDER_SHAPES and dtype is None:
        check_second_order(ops, mesh, x, w, g, px, pw, dim, keepdim)

    placements = expected_placements(x_shape, w_shape, px, pw, dim, keepdim)
    record["matching"] = placements is not None
    if placements is not None:
        out_p, gx_p, gw_p = placements
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


def check_second_order(ops, mesh, x, w, g, px, pw, dim, keepdim):
    """d/d(input, weight) of sum(grad_input**2) + sum(grad_weight), through create_graph=True."""
    from torch.distributed.tensor import Replicate

    xd = make_dtensor(x, px, mesh).requires_grad_()
    wd = make_dtensor(w, pw, mesh).requires_grad_()
    gd = make_dtensor(g, Replicate(), mesh)
    gx, gw = torch.autograd.grad(ops.weighted_square_sum(xd, wd, dim, keepdim), [xd, wd], gd, create_graph=True)
    hx, hw = torch.autograd.grad((gx * gx).sum() + gw.sum(), [xd, wd])

    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    rx, rw = torch.autograd.grad(composite(xr, wr, dim, keepdim), [xr, wr], g, create_graph=True)
    ex, ew = torch.autograd.grad((rx * rx).sum() + rw.sum(), [xr, wr])
    torch.testing.assert_close(hx.full_tensor(), ex, msg=lambda m: f"second order, input: {m}")
    torch.testing.assert_close(hw.full_tensor(), ew, msg=lambda m: f"second order, weight: {m}")


def worker(rank, port, backend, device_type, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE))
    torch.set_num_threads(1)
    results = {"cases": [], "failures": []}
    started = time.perf_counter()
    torch.ops.load_library(str(LIBRARY))
    sharding = load_sharding()
    results["registered"] = sharding.register()
    if device_type == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=WORLD_SIZE, timeout=datetime.timedelta(seconds=60))
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device_type, (WORLD_SIZE,))
        device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
        ops = torch.ops.custom
        seed = 0
        for shape_name, (x_shape, w_shape, dims) in SHAPES.items():
            for px_name, px in placement_names().items():
                for pw_name, pw in placement_names().items():
                    if not (fits(px, x_shape) and fits(pw, w_shape)):
                        continue
                    # One dim after another for the same placements; for the first shape, each
                    # dim also with dtype=float32 (a keyword argument) after dtype=None.
                    calls = [(dim, dtype) for dim in dims for dtype in (None, torch.float32)]
                    if shape_name != "same":
                        calls = [(dim, None) for dim in dims]
                    for dim, dtype in calls:
                        seed += 1
                        keepdim = seed % 2 == 0
                        name = f"{shape_name} input={px_name} weight={pw_name} dim={dim} keepdim={keepdim}"
                        if dtype is not None:
                            name += f" dtype={dtype}"
                        try:
                            record = run_case(
                                ops, mesh, device, shape_name, px_name, pw_name, dim, keepdim, dtype, seed
                            )
                            results["cases"].append({"name": name, **record})
                        except Exception as error:
                            results["failures"].append({"name": name, "error": _describe(error)})
    finally:
        results["seconds"] = time.perf_counter() - started
        pathlib.Path(result_dir, f"rank{rank}.json").write_text(json.dumps(results, indent=1))
        dist.barrier()  # both ranks done with every collective before either tears its group down
        dist.destroy_process_group()


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
        print(
            f"  {case['name']:62} out={case['out']:16} grads={case['grads']:34} "
            f"comms={case['forward_comms'] or 0}/{case['backward_comms'] or 0}"
            f"{'  (matching)' if case['matching'] else ''}"
        )
    assert all(r["registered"] for r in results), "sharding.register() returned False"
    failures = [f"rank {rank}: {f['name']}:\n{f['error']}" for rank, r in enumerate(results) for f in r["failures"]]
    shown = 30
    assert not failures, f"{len(failures)} DTensor cases failed (the first {min(shown, len(failures))}):\n" + "\n".join(
        failures[:shown]
    )
    matching = [c for c in rank0["cases"] if c.get("matching")]
    assert len(matching) >= 40, f"only {len(matching)} matching cases ran"
    # Both kinds of result the rule gives for a sharded dim were seen with no collective.
    outs = {c["out"] for c in matching}
    assert "[Partial(sum)]" in outs and any(out.startswith("[Shard(") for out in outs), outs


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
    if not torch._C._dispatch_has_kernel_for_dispatch_key("custom::weighted_square_sum", "CUDA"):
        pytest.skip("the library has no CUDA kernels")
    check_results(spawn_and_collect("nccl", "cuda"))
