# SPDX-License-Identifier: BSD-3-Clause
"""The `custom` operators on DTensors: custom_ops.sharding's rules, on 2 ranks, for every operator of
the table (operators.py), by its kind.

One test per operator and backend spawns 2 processes (gloo on CPU; nccl on 2 GPUs) that set up one
process group and run every case of that operator, then report back, so process start-up is paid
once (dtensor_harness.run_on_ranks). For each pair of placements of input and weight among
Shard(0), Shard(1), Replicate() and Partial() on a 1-D mesh of 2, and for several broadcast
shapes, a case checks that

  * the forward, and the gradients of input and weight (autograd through the op's backward, which
    calls its term's backward op on DTensors), equal the composite and its gradients computed on
    full tensors;
  * where the placements already fit a rule (Shard on lined-up dims, Replicate, a Partial weight
    with a Replicate input), forward and backward run with no collective (CommDebugMode), and the
    output and gradients have the expected placements (dtensor_harness.expected_placements);

and, for some shapes, that second derivatives (create_graph=True) match too. Failures of all cases
are reported together. Each kind adds cases of its own:

  elementwise          the term's backward operator called directly for every placement of grad, input
                       and weight, with output_masks that leave a gradient out (None) and then
                       [True, True] for the same placements (a cached sharding of one mask must
                       not be reused for another).
  reduction            several `dim`s per shape (keepdim alternating): the output is
                       Partial("sum") when the sharded dim is summed over, else Shard on that
                       dim's position in the output. Placements that fit a rule run with one dim
                       after another, and with dtype=float32 after dtype=None (a sharding cached
                       for one call must not serve another); placements that need a
                       redistribution run with one dim.

The library is $CUSTOM_OPS_LIBRARY, else build/libcustom_ops.so (as in environment.py); the rules come
from the installed custom_ops package when it imports, else from python/custom_ops/sharding.py.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

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
    term_facts,
)
from operators import BY_NAME, ELEMENTWISE, OPERATORS

DEADLINE_S = 300  # for one operator's whole spawned run

# ---------------------------------------------------------------------------------------------
# Elementwise operators (and their term's backward operator)
# ---------------------------------------------------------------------------------------------

# name -> (input shape, weight shape)
ELEMENTWISE_SHAPES = {
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
ELEMENTWISE_SECOND_ORDER_SHAPES = ("same", "weight_C")


def run_backward_case(op_name, shape_name, pg_name, px_name, pw_name, mask, seed, *, mesh, device):
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.debug import CommDebugMode

    names = placement_names()
    pg, px, pw = names[pg_name], names[px_name], names[pw_name]
    op = BY_NAME[op_name]
    x_shape, w_shape = ELEMENTWISE_SHAPES[shape_name]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, generator=gen, dtype=torch.float64).to(device)
    w = torch.randn(w_shape, generator=gen, dtype=torch.float64).to(device)
    g = torch.randn(torch.broadcast_shapes(x_shape, w_shape), generator=gen, dtype=torch.float64).to(device)
    gd, xd, wd = make_dtensor(g, pg, mesh), make_dtensor(x, px, mesh), make_dtensor(w, pw, mesh)
    with CommDebugMode() as mode:
        gx, gw = getattr(torch.ops.custom, op.backward)(gd, xd, wd, mask)
    record = {"comms": comm_counts(mode)}
    # The gradients of the composite (autograd's derivative of the term's value, summed back).
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ex, ew = torch.autograd.grad(op.composite(xr, wr), [xr, wr], g)
    for wanted, actual, expected, what in ((mask[0], gx, ex, "grad input"), (mask[1], gw, ew, "grad weight")):
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


def elementwise_cases(op_name):
    """(name, run) for each case, run on every rank by dtensor_harness.run_on_ranks."""
    op = BY_NAME[op_name]
    facts = term_facts(op.term)
    seed = 0
    for shape_name, (x_shape, w_shape) in ELEMENTWISE_SHAPES.items():
        for px_name, px, pw_name, pw in placement_pairs(x_shape, w_shape):
            seed += 1
            run = functools.partial(
                run_op_case,
                getattr(torch.ops.custom, op.name),
                op.composite,
                x_shape,
                w_shape,
                px,
                pw,
                seed,
                expected=expected_placements(x_shape, w_shape, px, pw, facts=facts),
                second_order=shape_name in ELEMENTWISE_SECOND_ORDER_SHAPES,
            )
            yield f"{shape_name} input={px_name} weight={pw_name}", run
    combo = 0
    for shape_name in BACKWARD_SHAPES:
        x_shape, w_shape = ELEMENTWISE_SHAPES[shape_name]
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
                    run = functools.partial(
                        run_backward_case, op.name, shape_name, pg_name, px_name, pw_name, mask, seed
                    )
                    yield f"backward op {shape_name} grad={pg_name} input={px_name} weight={pw_name} mask={mask}", run


# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------

# name -> (input shape, weight shape, the dims to sum over, in turn). The elementwise cases run even
# and uneven splits and both kinds of size-1 broadcast dim through the elementwise rule; here each
# shape is one way the operands line up, with uneven splits where the sizes allow.
SQUARE_SUM_SHAPES = {
    "same": ((5, 3), (5, 3), (None, [0], [-1])),  # 5 rows and 3 columns split 3 + 2 and 2 + 1
    "weight_C": ((4, 6), (6,), (None, [0], [1])),  # weight dim 0 lines up with output dim 1
    "input_C": ((6,), (4, 6), ([0], [-1])),  # the input is the broadcast one
    "3d_weight_C1": ((2, 4, 6), (4, 1), ([1], [0, 2], [2])),  # weight dims 0, 1 are output dims 1, 2; 1 is size-1
}
# Shapes whose cases also take a second derivative (the term's backward op's own autograd), for the
# placements that fit a rule, with their first dim.
SQUARE_SUM_SECOND_ORDER_SHAPES = ("same", "weight_C")


def summed_dims(ndim, dim):
    if not dim:
        return set(range(ndim))
    return {d % ndim for d in dim}


def square_sum(op, dim, keepdim, dtype):
    return lambda x, w: getattr(torch.ops.custom, op.name)(x, w, dim, keepdim, dtype=dtype)


def square_sum_composite(op, dim, keepdim):
    return lambda x, w: op.composite(x, w, dim, keepdim)


def square_sum_calls(shape_name, dims, fits_a_rule):
    """(dim, dtype) of each call for one pair of placements, in turn. Placements that fit a rule:
    every dim; for the first shape, the second dim also with dtype=float32 (a keyword argument)
    after dtype=None. Placements that need a redistribution: the first dim."""
    if not fits_a_rule:
        return [(dims[0], None)]
    calls = [(dim, None) for dim in dims]
    if shape_name == "same":
        calls.insert(2, (dims[1], torch.float32))
    return calls


def reduction_cases(op_name):
    """(name, run) for each case, run on every rank by dtensor_harness.run_on_ranks."""
    op = BY_NAME[op_name]
    facts = term_facts(op.term)
    seed = 0
    for shape_name, (x_shape, w_shape, dims) in SQUARE_SUM_SHAPES.items():
        n = len(torch.broadcast_shapes(x_shape, w_shape))
        for px_name, px, pw_name, pw in placement_pairs(x_shape, w_shape):
            fits_a_rule = expected_placements(x_shape, w_shape, px, pw, facts=facts) is not None  # any dim
            for i, (dim, dtype) in enumerate(square_sum_calls(shape_name, dims, fits_a_rule)):
                seed += 1
                keepdim = seed % 2 == 0
                name = f"{shape_name} input={px_name} weight={pw_name} dim={dim} keepdim={keepdim}"
                if dtype is not None:
                    name += f" dtype={dtype}"
                run = functools.partial(
                    run_op_case,
                    square_sum(op, dim, keepdim, dtype),
                    square_sum_composite(op, dim, keepdim),
                    x_shape,
                    w_shape,
                    px,
                    pw,
                    seed,
                    dtype=dtype,
                    expected=expected_placements(x_shape, w_shape, px, pw, summed_dims(n, dim), keepdim, facts),
                    second_order=shape_name in SQUARE_SUM_SECOND_ORDER_SHAPES and fits_a_rule and i == 0,
                )
                yield name, run


def check_square_sum(matching):
    # Both kinds of result the rule gives for a sharded dim were seen with no collective: Partial
    # for a summed one, Shard for a kept one.
    outs = {c["out"] for c in matching if "=S" in c["name"]}  # an input or the weight sharded
    assert "[Partial(sum)]" in outs and any(out.startswith("[Shard(") for out in outs), outs


# ---------------------------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sharded:
    name: str
    cases: Callable  # a module-level generator (bound to the op's name): the spawned ranks import it
    min_matching: int  # cases whose placements fit a rule, at least
    check: Callable | None = None  # more checks of those cases


def sharded(op):
    # A term not linear in the weight fits no rule with a Partial weight: fewer cases can match.
    linear = term_facts(op.term).value_linear
    if op.kind == ELEMENTWISE:
        return Sharded(op.name, functools.partial(elementwise_cases, op.name), min_matching=20 if linear else 10)
    return Sharded(
        op.name, functools.partial(reduction_cases, op.name), min_matching=80 if linear else 40, check=check_square_sum
    )


SHARDED = [sharded(op) for op in OPERATORS]


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
@pytest.mark.parametrize("op", SHARDED, ids=[op.name for op in SHARDED])
def test_dtensor_sharding(op, backend):
    results = run_on_ranks(op.cases, backend, f"custom::{op.name}", DEADLINE_S)
    matching = check_results(results, min_matching=op.min_matching)
    if op.check is not None:
        op.check(matching)
