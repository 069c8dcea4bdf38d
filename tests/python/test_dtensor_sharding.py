"""custom::weighted_sum on DTensors: the sharding rules of custom_ops.sharding, on 2 ranks.

One test spawns 2 processes (gloo on CPU; the CUDA variant nccl on 2 GPUs) that run every case
and report back, so process start-up is paid once (dtensor_harness.run_on_ranks). For each pair
of placements of input and weight among Shard(0), Shard(1), Replicate() and Partial() on a 1-D
mesh of 2, and for several broadcast shapes, a case checks that

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

import functools

import pytest
import torch

from dtensor_harness import (
    check_results,
    comm_counts,
    expected_placements,
    fits,
    make_dtensor,
    placement_names,
    placement_pairs,
    run_on_ranks,
    run_op_case,
)
from reference import sum_to

DEADLINE_S = 300  # for the whole spawned run

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


# ---------------------------------------------------------------------------------------------
# What each rank runs
# ---------------------------------------------------------------------------------------------


def composite(x, w):
    return w * x**2


def run_backward_case(shape_name, pg_name, px_name, pw_name, mask, seed, *, mesh, device):
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
        gx, gw = torch.ops.custom.weighted_sum_backward(gd, xd, wd, mask)
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


def cases():
    """(name, run) for each case, run on every rank by dtensor_harness.run_on_ranks."""
    seed = 0
    for shape_name, (x_shape, w_shape) in SHAPES.items():
        for px_name, px, pw_name, pw in placement_pairs(x_shape, w_shape):
            seed += 1
            run = functools.partial(
                run_op_case,
                torch.ops.custom.weighted_sum,
                composite,
                x_shape,
                w_shape,
                px,
                pw,
                seed,
                expected=expected_placements(x_shape, w_shape, px, pw),
                second_order=shape_name in SECOND_ORDER_SHAPES,
            )
            yield f"{shape_name} input={px_name} weight={pw_name}", run
    combo = 0
    for shape_name in BACKWARD_SHAPES:
        x_shape, w_shape = SHAPES[shape_name]
        out_shape = torch.broadcast_shapes(x_shape, w_shape)
        names = placement_names()
        for pg_name in names:
            for px_name, _px, pw_name, _pw in placement_pairs(x_shape, w_shape):
                if not fits(names[pg_name], out_shape):
                    continue
                # One of the single-gradient masks in turn, then [True, True]; now and then
                # [False, False] first. The same placements with another mask must not reuse the
                # cached sharding, whose left-out gradient has no placement.
                combo += 1
                masks = [[True, False] if combo % 2 else [False, True], [True, True]]
                if combo % 16 == 0:
                    masks.insert(0, [False, False])
                for mask in masks:
                    seed += 1
                    run = functools.partial(run_backward_case, shape_name, pg_name, px_name, pw_name, mask, seed)
                    yield f"backward op {shape_name} grad={pg_name} input={px_name} weight={pw_name} mask={mask}", run


# ---------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_dtensor_sharding(backend):
    check_results(run_on_ranks(cases, backend, "custom::weighted_sum", DEADLINE_S), min_matching=20)
