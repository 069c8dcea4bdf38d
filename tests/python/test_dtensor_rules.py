"""custom_ops.sharding in one process: register() and the sharding rules' placement lists.

The rules are plain functions of the arguments' shapes and placements, checked here without a
process group; test_dtensor_sharding.py runs them on 2 ranks.
"""

from __future__ import annotations

import sys

import pytest
import torch
import torch.distributed as dist

from dtensor_harness import P, fresh_sharding_module, spec

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="needs torch.distributed")


@pytest.fixture(scope="module")
def sharding():
    return fresh_sharding_module()


# ---------------------------------------------------------------------------------------------
# register()
# ---------------------------------------------------------------------------------------------


def test_register_is_idempotent_and_reaches_dtensor(sharding):
    from torch.distributed.tensor import DTensor

    assert sharding.register() is True
    assert sharding.is_registered()
    assert sharding.register() is True
    propagator = DTensor._op_dispatcher.sharding_propagator
    for op in (torch.ops.custom.weighted_sum.default, torch.ops.custom.weighted_sum_backward.default):
        assert op in propagator.op_strategy_funcs
    # output_mask (argument 3) is part of the sharding cache key.
    assert propagator.op_to_schema_info[torch.ops.custom.weighted_sum_backward.default].static_argnum <= 3


def test_register_without_torch_distributed_does_nothing(monkeypatch):
    module = fresh_sharding_module()
    monkeypatch.setattr(torch.distributed, "is_available", lambda: False)
    assert module.register() is False
    assert not module.is_registered()


def test_register_without_dtensor_does_nothing(monkeypatch):
    module = fresh_sharding_module()
    monkeypatch.setitem(sys.modules, "torch.distributed.tensor.experimental", None)  # import fails
    assert module.register() is False
    assert not module.is_registered()


def test_register_needs_the_operators(monkeypatch):
    module = fresh_sharding_module()
    monkeypatch.setattr(module, "_OPERATORS", ("custom::weighted_sum", "custom::no_such_operator"))
    with pytest.raises(RuntimeError, match="custom::no_such_operator is not registered"):
        module.register()
    assert not module.is_registered()


# ---------------------------------------------------------------------------------------------
# The forward rule
# ---------------------------------------------------------------------------------------------


def test_forward_same_shape(sharding):
    Shard, R, _Partial = P()
    rules = sharding._weighted_sum_sharding(spec((4, 6), R), spec((4, 6), R))
    assert rules == [
        ([R], [R, R]),
        ([Shard(0)], [Shard(0), Shard(0)]),
        ([Shard(1)], [Shard(1), Shard(1)]),
    ]


def test_forward_broadcast_weight_lines_up_right_aligned(sharding):
    Shard, R, _Partial = P()
    # weight (C,): its dim 0 is output dim 1; along output dim 0 it is broadcast (replicated).
    rules = sharding._weighted_sum_sharding(spec((4, 6), R), spec((6,), R))
    assert ([Shard(0)], [Shard(0), R]) in rules
    assert ([Shard(1)], [Shard(1), Shard(0)]) in rules
    # weight (4, 1) against input (2, 4, 6): dims 0, 1 are output dims 1, 2; dim 1 is size-1.
    rules = sharding._weighted_sum_sharding(spec((2, 4, 6), R), spec((4, 1), R))
    assert rules == [
        ([R], [R, R]),
        ([Shard(0)], [Shard(0), R]),
        ([Shard(1)], [Shard(1), Shard(0)]),
        ([Shard(2)], [Shard(2), R]),
    ]


def test_forward_never_shards_a_size_one_broadcast_dim(sharding):
    Shard, R, _Partial = P()
    rules = sharding._weighted_sum_sharding(spec((4, 6), R), spec((1, 6), R))
    assert ([Shard(0)], [Shard(0), R]) in rules
    assert all(inputs[1] != Shard(0) or out == [Shard(1)] for out, inputs in rules)
    # the input broadcast instead
    rules = sharding._weighted_sum_sharding(spec((1, 6), R), spec((4, 6), R))
    assert ([Shard(0)], [R, Shard(0)]) in rules


def test_forward_zero_dim_arguments(sharding):
    Shard, R, _Partial = P()
    assert sharding._weighted_sum_sharding(spec((), R), spec((), R)) == [([R], [R, R])]
    assert sharding._weighted_sum_sharding(spec((5,), R), spec((), R)) == [([R], [R, R]), ([Shard(0)], [Shard(0), R])]


def test_forward_partial_only_through_weight(sharding):
    _Shard, R, Partial = P()
    rules = sharding._weighted_sum_sharding(spec((4, 6), R), spec((6,), Partial("avg")))
    assert ([Partial("avg")], [R, Partial("avg")]) in rules
    # not linear in the input: no rule keeps a Partial input
    rules = sharding._weighted_sum_sharding(spec((4, 6), Partial()), spec((6,), R))
    assert all(not isinstance(p, Partial) for out, inputs in rules for p in out + inputs)
    # a reduction that does not distribute over the product is redistributed
    rules = sharding._weighted_sum_sharding(spec((4, 6), R), spec((6,), Partial("max")))
    assert all(not isinstance(p, Partial) for out, inputs in rules for p in out + inputs)


# ---------------------------------------------------------------------------------------------
# The backward rule
# ---------------------------------------------------------------------------------------------


def test_backward_broadcast_gradient_is_partial_sum_over_sharded_dims(sharding):
    Shard, R, Partial = P()
    rules = sharding._weighted_sum_backward_sharding(spec((4, 6), R), spec((4, 6), R), spec((6,), R), [True, True])
    assert rules == [
        ([R, R], [R, R, R, None]),
        # sharded along the dim weight is broadcast on: each rank sums its own rows
        ([Shard(0), Partial("sum")], [Shard(0), Shard(0), R, None]),
        ([Shard(1), Shard(0)], [Shard(1), Shard(1), Shard(0), None]),
    ]
    rules = sharding._weighted_sum_backward_sharding(spec((4, 6), R), spec((1, 6), R), spec((4, 6), R), [True, True])
    assert ([Partial("sum"), Shard(0)], [Shard(0), R, Shard(0), None]) in rules


def test_backward_masked_gradients_have_no_placement(sharding):
    _Shard, R, _Partial = P()
    args = (spec((4, 6), R), spec((4, 6), R), spec((6,), R))
    for mask in ([True, False], [False, True], [False, False]):
        for outputs, inputs in sharding._weighted_sum_backward_sharding(*args, mask):
            assert (outputs[0] is None) == (not mask[0]) and (outputs[1] is None) == (not mask[1])
            assert inputs[3] is None  # output_mask is no tensor


def test_backward_linear_in_grad_and_in_weight(sharding):
    _Shard, R, Partial = P()
    rules = sharding._weighted_sum_backward_sharding(
        spec((4, 6), Partial()), spec((4, 6), R), spec((6,), R), [True, True]
    )
    assert ([Partial("sum"), Partial("sum")], [Partial("sum"), R, R, None]) in rules
    rules = sharding._weighted_sum_backward_sharding(
        spec((4, 6), R), spec((4, 6), R), spec((6,), Partial("avg")), [True, True]
    )
    # grad_weight = sum_to(x**2 grad) does not read weight: replicated
    assert ([Partial("avg"), R], [R, R, Partial("avg"), None]) in rules
    rules = sharding._weighted_sum_backward_sharding(
        spec((4, 6), R), spec((4, 6), Partial()), spec((6,), R), [True, True]
    )
    assert all(not isinstance(p, Partial) for out, inputs in rules for p in inputs if p is not None)
