# SPDX-License-Identifier: BSD-3-Clause
"""custom::weighted_sum on DTensors, across ranks: forward, backward, and what they communicate.

    torchrun --nproc-per-node 2 examples/dtensor/weighted_sum_dtensor.py             # CPU (gloo), or GPUs
    python examples/dtensor/weighted_sum_dtensor.py [--nproc 2]                      # starts the ranks itself
    options: --device cpu|cuda (default: cuda with nccl when every rank has a GPU, else cpu with gloo)
             --library PATH    (default: $CUSTOM_OPS_LIBRARY, else build/libcustom_ops.so in this checkout)

Each rank loads the operator library and registers the operators' DTensor sharding rules: in a
program of yours, `import custom_ops.sharding` does both; in this checkout, where the package is
not built, the library is loaded by path and python/custom_ops/sharding.py imported by path and
its register() called. Then, on a 1-D mesh of all ranks, rank 0 prints for
a few placements of input (batch, features) and weight (features,) the output's and the
gradients' placements and the collectives that ran, and every rank checks the values against
the same computation on full tensors.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import socket
import sys

import torch
import torch.distributed as dist

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARDING_SOURCE = REPO / "python" / "custom_ops" / "sharding.py"


def load_library(library: str | None) -> str:
    path = pathlib.Path(library or os.environ.get("CUSTOM_OPS_LIBRARY") or REPO / "build" / "libcustom_ops.so")
    path = path.resolve()
    if not path.is_file():
        raise FileNotFoundError(
            f"libcustom_ops.so not found at {path}: build it, set CUSTOM_OPS_LIBRARY or pass --library"
        )
    if str(path) not in torch.ops.loaded_libraries:
        torch.ops.load_library(str(path))
    return str(path)


def load_sharding():
    """custom_ops.sharding, from this checkout's sources (the package there is not built), else
    installed (its import registers the rules; register() again returns True)."""
    if SHARDING_SOURCE.is_file():
        spec = importlib.util.spec_from_file_location("_custom_ops_sharding", SHARDING_SOURCE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    from custom_ops import sharding

    return sharding


def show(title, out, grads, comms_forward, comms_backward):
    if dist.get_rank() != 0:
        return
    print(f"{title}\n  out {list(out.placements)}, forward collectives {dict(comms_forward) or 'none'}")
    print(
        f"  grad input {list(grads[0].placements)}, grad weight {list(grads[1].placements)}, "
        f"backward collectives {dict(comms_backward) or 'none'}"
    )


def run(args) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.debug import CommDebugMode

    rank, world = dist.get_rank(), dist.get_world_size()
    device_type = args.device
    mesh = init_device_mesh(device_type, (world,))
    device = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")

    batch, features = 4 * world, 6 * world
    gen = torch.Generator().manual_seed(0)  # the same full tensors on every rank
    x = torch.randn(batch, features, generator=gen).to(device)
    w = torch.randn(features, generator=gen).to(device)

    def counts(mode):
        return {str(op).split(".")[-1]: n for op, n in mode.get_comm_counts().items() if n}

    cases = [  # (title, input placement, weight placement)
        ("data parallel: input Shard(0), weight Replicate()", Shard(0), Replicate()),
        (
            "feature parallel: input Shard(1), weight Shard(0) (its dim 0 lines up with output dim 1)",
            Shard(1),
            Shard(0),
        ),
        (
            "input Replicate(), weight Partial(): the op is linear in weight, the output stays Partial",
            Replicate(),
            Partial(),
        ),
        ("input Partial(): not linear in input, so DTensor reduces it first", Partial(), Replicate()),
    ]
    for title, px, pw in cases:
        xd = make(x, px, mesh).requires_grad_()
        wd = make(w, pw, mesh).requires_grad_()
        with CommDebugMode() as forward_mode:
            out = torch.ops.custom.weighted_sum(xd, wd)
        with CommDebugMode() as backward_mode:
            grads = torch.autograd.grad(out, [xd, wd], torch.ones_like(out))
        show(title, out, grads, counts(forward_mode), counts(backward_mode))

        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        expected = wr * xr**2
        expected_grads = torch.autograd.grad(expected, [xr, wr], torch.ones_like(expected))
        torch.testing.assert_close(out.full_tensor(), expected)
        for grad, expected_grad in zip(grads, expected_grads):
            torch.testing.assert_close(grad.full_tensor(), expected_grad)
    if rank == 0:
        print(f"all {len(cases)} cases match the single-process result on {world} ranks ({device_type})")


def make(full, placement, mesh):
    """A leaf DTensor of global value `full` with the one placement `placement`."""
    from torch.distributed.tensor import DTensor, Partial, distribute_tensor

    if isinstance(placement, Partial):  # rank r holds an uneven share; the shares sum to `full`
        rank, world = mesh.get_local_rank(), mesh.size()
        local = full * ((rank + 1) / (world * (world + 1) / 2))
        return DTensor.from_local(local, mesh, [placement], run_check=False, shape=full.shape, stride=full.stride())
    return distribute_tensor(full, mesh, [placement])


def main(args) -> None:
    load_library(args.library)
    if not load_sharding().register():
        raise SystemExit("this torch has no torch.distributed / DTensor")
    if args.device is None:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        has_cuda = torch.cuda.device_count() >= local_world and torch._C._dispatch_has_kernel_for_dispatch_key(
            "custom::weighted_sum", "CUDA"
        )
        args.device = "cuda" if has_cuda and dist.is_nccl_available() else "cpu"
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    try:
        run(args)
    finally:
        dist.destroy_process_group()


def _spawned(rank, args, port, nproc):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(nproc),
    )
    main(args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--library", default=None)
    parser.add_argument("--nproc", type=int, default=2, help="ranks to start when not run under torchrun")
    args = parser.parse_args()
    if "RANK" in os.environ:  # torchrun
        main(args)
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.multiprocessing.spawn(_spawned, args=(args, port, args.nproc), nprocs=args.nproc)
