"""custom::weighted_square_sum on DTensors: custom_ops.sharding's rule for it, on 2 ranks.

As test_dtensor_sharding.py does for weighted_sum: one test spawns 2 processes (gloo on CPU; the
CUDA variant nccl on 2 GPUs) that set up one process group and run every case, then report back
(dtensor_harness.run_on_ranks). For each pair of placements of input and weight among Shard(0),
Shard(1), Replicate() and Partial() on a 1-D mesh of 2, for several broadcast shapes and several
`dim`s (keepdim alternating), a case checks that

  * the forward, and the gradients of input and weight (the op's autograd, which calls
    weighted_sum_backward on the grad broadcast over the summed dims, on DTensors), equal the
    composite `(w * x**2).sum(dim, keepdim)` and its gradients computed on full tensors;
  * where the placements already fit a rule, forward and backward run with no collective
    (CommDebugMode), and the output is Partial("sum") when the sharded dim is summed over, else
    Shard on that dim's position in the output (Partial(op) for a Partial weight with a Replicate
    input), with the gradients' placements of weighted_sum's backward rule;

and, for some, that second derivatives match too. Placements that fit a rule run with one
`dim` after another, and with dtype=float32 after dtype=None: a sharding cached for one call must
not serve another. Placements that need a redistribution run with one `dim` (DTensor redistributes
them to placements of the rule, which the cases that fit it check dim by dim). Failures of all
cases are reported together.

The library is $CUSTOM_OPS_LIBRARY, else build/libcustom_ops.so; the rules come from the installed
custom_ops package when it imports, else from python/custom_ops/sharding.py.
"""

from __future__ import annotations

import functools

import pytest
import torch

from dtensor_harness import check_results, expected_placements, placement_pairs, run_on_ranks, run_op_case

DEADLINE_S = 300  # for the whole spawned run

# name -> (input shape, weight shape, the dims to sum over, in turn). test_dtensor_sharding.py runs
# even and uneven splits and both kinds of size-1 broadcast dim through weighted_sum's rule; here
# each shape is one way the operands line up, with uneven splits where the sizes allow.
SHAPES = {
    "same": ((5, 3), (5, 3), (None, [0], [-1])),  # 5 rows and 3 columns split 3 + 2 and 2 + 1
    "weight_C": ((4, 6), (6,), (None, [0], [1])),  # weight dim 0 lines up with output dim 1
    "input_C": ((6,), (4, 6), ([0], [-1])),  # the input is the broadcast one
    "3d_weight_C1": ((2, 4, 6), (4, 1), ([1], [0, 2], [2])),  # weight dims 0, 1 are output dims 1, 2; 1 is size-1
}
# Shapes whose cases also take a second derivative (weighted_sum_backward's own autograd), for the
# placements that fit a rule, with their first dim.
SECOND_ORDER_SHAPES = ("same", "weight_C")


def summed_dims(ndim, dim):
    if not dim:
        return set(range(ndim))
    return {d % ndim for d in dim}


def square_sum(dim, keepdim, dtype):
    return lambda x, w: torch.ops.custom.weighted_square_sum(x, w, dim, keepdim, dtype=dtype)


def composite(dim, keepdim):
    return lambda x, w: (w * x**2).sum(dim, keepdim)


def calls(shape_name, dims, fits_a_rule):
    """(dim, dtype) of each call for one pair of placements, in turn. Placements that fit a rule:
    every dim; for the first shape, the second dim also with dtype=float32 (a keyword argument)
    after dtype=None. Placements that need a redistribution: the first dim."""
    if not fits_a_rule:
        return [(dims[0], None)]
    calls = [(dim, None) for dim in dims]
    if shape_name == "same":
        calls.insert(2, (dims[1], torch.float32))
    return calls


def cases():
    """(name, run) for each case, run on every rank by dtensor_harness.run_on_ranks."""
    seed = 0
    for shape_name, (x_shape, w_shape, dims) in SHAPES.items():
        n = len(torch.broadcast_shapes(x_shape, w_shape))
        for px_name, px, pw_name, pw in placement_pairs(x_shape, w_shape):
            fits_a_rule = expected_placements(x_shape, w_shape, px, pw) is not None  # whatever is summed
            for i, (dim, dtype) in enumerate(calls(shape_name, dims, fits_a_rule)):
                seed += 1
                keepdim = seed % 2 == 0
                name = f"{shape_name} input={px_name} weight={pw_name} dim={dim} keepdim={keepdim}"
                if dtype is not None:
                    name += f" dtype={dtype}"
                run = functools.partial(
                    run_op_case,
                    square_sum(dim, keepdim, dtype),
                    composite(dim, keepdim),
                    x_shape,
                    w_shape,
                    px,
                    pw,
                    seed,
                    dtype=dtype,
                    expected=expected_placements(x_shape, w_shape, px, pw, summed_dims(n, dim), keepdim),
                    second_order=shape_name in SECOND_ORDER_SHAPES and fits_a_rule and i == 0,
                )
                yield name, run


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_dtensor_sharding(backend):
    matching = check_results(run_on_ranks(cases, backend, "custom::weighted_square_sum", DEADLINE_S), min_matching=80)
    # Both kinds of result the rule gives for a sharded dim were seen with no collective: Partial
    # for a summed one, Shard for a kept one.
    outs = {c["out"] for c in matching if "=S" in c["name"]}  # an input or the weight sharded
    assert "[Partial(sum)]" in outs and any(out.startswith("[Shard(") for out in outs), outs
