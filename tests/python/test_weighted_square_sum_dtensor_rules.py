"""custom_ops.sharding's rule for custom::weighted_square_sum, in one process: register() and the
rule's placement lists, as test_dtensor_rules.py checks weighted_sum's.

The rule is a plain function of the arguments' shapes and placements and of dim and keepdim,
checked here without a process group; test_weighted_square_sum_dtensor_sharding.py runs it on 2
ranks.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from dtensor_harness import P, fresh_sharding_module, spec

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="needs torch.distributed")

NO_TENSOR = [None, None, None]  # dim, keepdim, dtype


@pytest.fixture(scope="module")
def sharding():
    return fresh_sharding_module()


def rule(sharding, x_shape, w_shape, *args, x_placement=None, w_placement=None, **kwargs):
    _Shard, R, _Partial = P()
    return sharding._weighted_square_sum_sharding(
        spec(x_shape, x_placement or R), spec(w_shape, w_placement or R), *args, **kwargs
    )


# ---------------------------------------------------------------------------------------------
# register()
# ---------------------------------------------------------------------------------------------


def test_register_reaches_dtensor_and_hashes_dim_and_keepdim(sharding):
    from torch.distributed.tensor import DTensor

    assert sharding.register() is True
    assert sharding.register() is True
    propagator = DTensor._op_dispatcher.sharding_propagator
    op = torch.ops.custom.weighted_square_sum.default
    assert op in propagator.op_strategy_funcs
    info = propagator.op_to_schema_info[op]
    # dim (argument 2) and keepdim (3) are part of the sharding cache key; register_sharding alone
    # would start at the first int argument, the keyword dtype (4). dtype is keyed as a keyword.
    assert info.static_argnum <= 2
    assert "dtype" in (info.static_kwargkey or [])
    # weighted_sum's rules are still in place beside it.
    assert torch.ops.custom.weighted_sum.default in propagator.op_strategy_funcs
    assert torch.ops.custom.weighted_sum_backward.default in propagator.op_strategy_funcs


def test_register_needs_the_new_operator(monkeypatch):
    module = fresh_sharding_module()
    assert "custom::weighted_square_sum" in module._OPERATORS
    monkeypatch.setattr(
        module, "_OPERATORS", ("custom::weighted_sum", "custom::weighted_sum_backward", "custom::no_such_sum")
    )
    with pytest.raises(RuntimeError, match="custom::no_such_sum is not registered"):
        module.register()
    assert not module.is_registered()


# ---------------------------------------------------------------------------------------------
# The rule
# ---------------------------------------------------------------------------------------------


def test_summed_dim_gives_partial_sum_kept_dim_stays_sharded(sharding):
    Shard, R, Partial = P()
    assert rule(sharding, (4, 6), (4, 6), [1]) == [
        ([R], [R, R, *NO_TENSOR]),
        ([Shard(0)], [Shard(0), Shard(0), *NO_TENSOR]),  # kept: out dim 0
        ([Partial("sum")], [Shard(1), Shard(1), *NO_TENSOR]),  # summed: each rank its own columns
    ]
    assert rule(sharding, (4, 6), (4, 6), [0]) == [
        ([R], [R, R, *NO_TENSOR]),
        ([Partial("sum")], [Shard(0), Shard(0), *NO_TENSOR]),
        ([Shard(0)], [Shard(1), Shard(1), *NO_TENSOR]),  # input dim 1 is output dim 0
    ]


def test_kept_dim_position_counts_the_summed_dims_before_it(sharding):
    Shard, R, Partial = P()
    # (2, 4, 6, 8) summed over dims 0 and 2: dims 1 and 3 are output dims 0 and 1.
    rules = rule(sharding, (2, 4, 6, 8), (8,), [0, -2])
    assert rules == [
        ([R], [R, R, *NO_TENSOR]),
        ([Partial("sum")], [Shard(0), R, *NO_TENSOR]),
        ([Shard(0)], [Shard(1), R, *NO_TENSOR]),
        ([Partial("sum")], [Shard(2), R, *NO_TENSOR]),
        ([Shard(1)], [Shard(3), Shard(0), *NO_TENSOR]),
    ]
    # keepdim: every dim keeps its position.
    rules = rule(sharding, (2, 4, 6, 8), (8,), [0, -2], True)
    assert ([Shard(1)], [Shard(1), R, *NO_TENSOR]) in rules
    assert ([Shard(3)], [Shard(3), Shard(0), *NO_TENSOR]) in rules
    assert ([Partial("sum")], [Shard(2), R, *NO_TENSOR]) in rules


def test_every_dim_summed_by_default(sharding):
    Shard, R, Partial = P()
    for args, kwargs in (((), {}), ((None,), {}), (([],), {}), (([], True), {"dtype": torch.float64})):
        rules = rule(sharding, (4, 6), (6,), *args, **kwargs)
        assert rules == [
            ([R], [R, R, *NO_TENSOR]),
            ([Partial("sum")], [Shard(0), R, *NO_TENSOR]),
            ([Partial("sum")], [Shard(1), Shard(0), *NO_TENSOR]),
        ], (args, kwargs)


def test_broadcast_operands_line_up_right_aligned(sharding):
    Shard, R, Partial = P()
    # weight (4, 1) against input (2, 4, 6): dims 0, 1 are output dims 1, 2; dim 1 is size-1.
    rules = rule(sharding, (2, 4, 6), (4, 1), [2])
    assert rules == [
        ([R], [R, R, *NO_TENSOR]),
        ([Shard(0)], [Shard(0), R, *NO_TENSOR]),
        ([Shard(1)], [Shard(1), Shard(0), *NO_TENSOR]),
        ([Partial("sum")], [Shard(2), R, *NO_TENSOR]),  # summed over the dim the weight is broadcast on
    ]
    # the input the broadcast one, summed over the dim only the weight has
    rules = rule(sharding, (6,), (4, 6), [0])
    assert ([Partial("sum")], [R, Shard(0), *NO_TENSOR]) in rules
    assert ([Shard(0)], [Shard(0), Shard(1), *NO_TENSOR]) in rules
    # a size-1 broadcast dim is never sharded
    rules = rule(sharding, (4, 6), (1, 6), [0])
    assert ([Partial("sum")], [Shard(0), R, *NO_TENSOR]) in rules
    assert Shard(0) not in [inputs[1] for _out, inputs in rules]


def test_zero_dim_shape(sharding):
    _Shard, R, _Partial = P()
    for dim in (None, [0], [-1]):
        assert rule(sharding, (), (), dim) == [([R], [R, R, *NO_TENSOR])]


def test_partial_only_through_weight(sharding):
    _Shard, R, Partial = P()
    rules = rule(sharding, (4, 6), (6,), [1], w_placement=Partial("avg"))
    assert ([Partial("avg")], [R, Partial("avg"), *NO_TENSOR]) in rules
    rules = rule(sharding, (4, 6), (6,), None, w_placement=Partial("sum"))
    assert ([Partial("sum")], [R, Partial("sum"), *NO_TENSOR]) in rules
    # not linear in the input: no rule takes a Partial input
    rules = rule(sharding, (4, 6), (6,), [1], x_placement=Partial())
    assert all(not isinstance(p, Partial) for _out, inputs in rules for p in inputs if p is not None)
    # max does not distribute over the sum of products: redistributed
    rules = rule(sharding, (4, 6), (6,), [1], w_placement=Partial("max"))
    assert all(not isinstance(p, Partial) for _out, inputs in rules for p in inputs if p is not None)
