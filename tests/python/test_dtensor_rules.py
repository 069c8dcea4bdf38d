# SPDX-License-Identifier: BSD-3-Clause
"""custom_ops.sharding in one process: register() and the rules' placement lists.

The rules are plain functions of the arguments' shapes and placements (and of a reduction's dim and
keepdim), checked here without a process group; test_dtensor_sharding.py runs them on 2 ranks.
Everything is parametrized by the table (operators.py): what every forward rule does alike
(operands lined up right-aligned, Partial only through the weight and only where the term is
linear in it) for each operator; each term's backward op's rule; a reduction's summed dims.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist

from dtensor_harness import P, fresh_sharding_module, spec, term_facts
from operators import ELEMENTWISE, OPERATORS, each_reduction_operator

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="needs torch.distributed")

NO_TENSOR = [None, None, None]  # a reduction's dim, keepdim, dtype


@pytest.fixture(scope="module")
def sharding():
    return fresh_sharding_module()


# ---------------------------------------------------------------------------------------------
# The operators, from the table (operators.py)
# ---------------------------------------------------------------------------------------------


def rule_of(sharding, name):
    return sharding._RULES[f"custom::{name}"]


@dataclasses.dataclass(frozen=True)
class ForwardRule:
    name: str
    op: object  # operators.py's row
    # (sharding module, input spec, weight spec) -> the rule's list, each entry (out, [input, weight])
    rules: Callable
    # the output's placement when broadcast dim d of an n-dim broadcast shape is sharded
    sharded_out: Callable[[int, int], object]


def _reduction_over_last_dim(name):
    def rules(sharding, x, w):
        entries = rule_of(sharding, name)(x, w, [-1])
        assert all(inputs[2:] == NO_TENSOR for _out, inputs in entries), entries
        return [(out, inputs[:2]) for out, inputs in entries]

    return rules


def _summed_over_last_dim(d, n):
    Shard, _R, Partial = P()
    return Partial("sum") if d == n - 1 else Shard(d)


def forward_rule(op):
    if op.kind == ELEMENTWISE:
        return ForwardRule(op.name, op, lambda s, x, w: rule_of(s, op.name)(x, w), lambda d, n: P()[0](d))
    return ForwardRule(op.name, op, _reduction_over_last_dim(op.name), _summed_over_last_dim)


FORWARD_RULES = [forward_rule(op) for op in OPERATORS]

# Every operator with rules -> the index of its first non-tensor argument, which DTensor's sharding
# cache must hash (None: it has none), and the keyword arguments it must hash: by kind, and each
# term's backward op (output_mask).
REGISTERED = {
    **{op.name: (None, ()) if op.kind == ELEMENTWISE else (2, ("dtype",)) for op in OPERATORS},
    **{op.backward: (3, ()) for op in OPERATORS},
}

# One operator per term: its backward op's rule, named by the term's backward op.
FIRST_OF_EACH_TERM = list({op.backward: op for op in reversed(OPERATORS)}.values())[::-1]
each_backward = pytest.mark.parametrize("op", FIRST_OF_EACH_TERM, ids=lambda op: op.backward)


def forward_rules():
    return pytest.mark.parametrize("op", FORWARD_RULES, ids=[op.name for op in FORWARD_RULES])


# ---------------------------------------------------------------------------------------------
# register() (`import custom_ops.sharding` calls it: test_library_loading.py)
# ---------------------------------------------------------------------------------------------


def test_register_is_idempotent(sharding):
    assert sharding.register() is True
    assert sharding.is_registered()
    assert sharding.register() is True


@pytest.mark.parametrize("name", REGISTERED)
def test_register_reaches_dtensor_and_hashes_the_non_tensor_arguments(sharding, name):
    from torch.distributed.tensor import DTensor

    assert sharding.register() is True
    propagator = DTensor._op_dispatcher.sharding_propagator
    op = getattr(torch.ops.custom, name).default
    assert op in propagator.op_strategy_funcs
    first, keywords = REGISTERED[name]
    if first is not None:
        # register_sharding alone would start at the first *int* argument (weighted_square_sum's
        # keyword dtype), or at none (the backward's bool[2] output_mask).
        info = propagator.op_to_schema_info[op]
        assert info.static_argnum <= first
        assert set(keywords) <= set(info.static_kwargkey or [])


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


@pytest.mark.parametrize("name", REGISTERED)
def test_register_needs_each_operator(monkeypatch, name):
    module = fresh_sharding_module()
    assert f"custom::{name}" in module._OPERATORS
    others = tuple(op if op != f"custom::{name}" else "custom::no_such_operator" for op in module._OPERATORS)
    monkeypatch.setattr(module, "_OPERATORS", others)
    with pytest.raises(RuntimeError, match="custom::no_such_operator is not registered"):
        module.register()
    assert not module.is_registered()


# ---------------------------------------------------------------------------------------------
# Every forward rule
# ---------------------------------------------------------------------------------------------


@forward_rules()
def test_same_shape(sharding, op):
    Shard, R, _Partial = P()
    assert op.rules(sharding, spec((4, 6), R), spec((4, 6), R)) == [
        ([R], [R, R]),
        ([op.sharded_out(0, 2)], [Shard(0), Shard(0)]),
        ([op.sharded_out(1, 2)], [Shard(1), Shard(1)]),
    ]


@forward_rules()
def test_broadcast_operands_line_up_right_aligned(sharding, op):
    Shard, R, _Partial = P()
    # weight (C,): its dim 0 is output dim 1; along output dim 0 it is broadcast (replicated).
    rules = op.rules(sharding, spec((4, 6), R), spec((6,), R))
    assert ([op.sharded_out(0, 2)], [Shard(0), R]) in rules
    assert ([op.sharded_out(1, 2)], [Shard(1), Shard(0)]) in rules
    # weight (4, 1) against input (2, 4, 6): dims 0, 1 are output dims 1, 2; dim 1 is size-1.
    assert op.rules(sharding, spec((2, 4, 6), R), spec((4, 1), R)) == [
        ([R], [R, R]),
        ([op.sharded_out(0, 3)], [Shard(0), R]),
        ([op.sharded_out(1, 3)], [Shard(1), Shard(0)]),
        ([op.sharded_out(2, 3)], [Shard(2), R]),
    ]
    # the input the broadcast one
    rules = op.rules(sharding, spec((6,), R), spec((4, 6), R))
    assert ([op.sharded_out(0, 2)], [R, Shard(0)]) in rules
    assert ([op.sharded_out(1, 2)], [Shard(0), Shard(1)]) in rules


@forward_rules()
def test_never_shards_a_size_one_broadcast_dim(sharding, op):
    Shard, R, _Partial = P()
    rules = op.rules(sharding, spec((4, 6), R), spec((1, 6), R))
    assert ([op.sharded_out(0, 2)], [Shard(0), R]) in rules
    assert Shard(0) not in [inputs[1] for _out, inputs in rules]
    # the input broadcast instead
    rules = op.rules(sharding, spec((1, 6), R), spec((4, 6), R))
    assert ([op.sharded_out(0, 2)], [R, Shard(0)]) in rules
    assert Shard(0) not in [inputs[0] for _out, inputs in rules]


@forward_rules()
def test_zero_dim_arguments(sharding, op):
    Shard, R, _Partial = P()
    assert op.rules(sharding, spec((), R), spec((), R)) == [([R], [R, R])]
    assert op.rules(sharding, spec((5,), R), spec((), R)) == [([R], [R, R]), ([op.sharded_out(0, 1)], [Shard(0), R])]


@forward_rules()
def test_partial_only_through_weight(sharding, op):
    _Shard, R, Partial = P()
    rules = op.rules(sharding, spec((4, 6), R), spec((6,), Partial("avg")))
    # only where the value is linear in the weight (w * x**2 is; x / w is not)
    assert (([Partial("avg")], [R, Partial("avg")]) in rules) == term_facts(op.op.term).value_linear
    replicated = op.rules(sharding, spec((4, 6), R), spec((6,), R))
    # not linear in the input: a Partial input gets only the rules of a replicated one
    assert op.rules(sharding, spec((4, 6), Partial()), spec((6,), R)) == replicated
    # a reduction that does not distribute over the product (and sum) is redistributed
    assert op.rules(sharding, spec((4, 6), R), spec((6,), Partial("max"))) == replicated


# ---------------------------------------------------------------------------------------------
# Each term's backward op's rule
# ---------------------------------------------------------------------------------------------


@each_backward
def test_backward_broadcast_gradient_is_partial_sum_over_sharded_dims(sharding, op):
    Shard, R, Partial = P()
    backward = rule_of(sharding, op.backward)
    rules = backward(spec((4, 6), R), spec((4, 6), R), spec((6,), R), [True, True])
    assert rules == [
        ([R, R], [R, R, R, None]),
        # sharded along the dim weight is broadcast on: each rank sums its own rows
        ([Shard(0), Partial("sum")], [Shard(0), Shard(0), R, None]),
        ([Shard(1), Shard(0)], [Shard(1), Shard(1), Shard(0), None]),
    ]
    rules = backward(spec((4, 6), R), spec((1, 6), R), spec((4, 6), R), [True, True])
    assert ([Partial("sum"), Shard(0)], [Shard(0), R, Shard(0), None]) in rules


@each_backward
def test_backward_masked_gradients_have_no_placement(sharding, op):
    _Shard, R, _Partial = P()
    args = (spec((4, 6), R), spec((4, 6), R), spec((6,), R))
    for mask in ([True, False], [False, True], [False, False]):
        for outputs, inputs in rule_of(sharding, op.backward)(*args, mask):
            assert (outputs[0] is None) == (not mask[0]) and (outputs[1] is None) == (not mask[1])
            assert inputs[3] is None  # output_mask is no tensor


@each_backward
def test_backward_linear_in_grad_and_in_weight(sharding, op):
    _Shard, R, Partial = P()
    backward = rule_of(sharding, op.backward)
    rules = backward(spec((4, 6), Partial()), spec((4, 6), R), spec((6,), R), [True, True])
    assert ([Partial("sum"), Partial("sum")], [Partial("sum"), R, R, None]) in rules
    rules = backward(spec((4, 6), R), spec((4, 6), R), spec((6,), Partial("avg")), [True, True])
    # grad_input = sum_to(dx grad) keeps a Partial weight where dx is linear in it; grad_weight =
    # sum_to(dw grad) is replicated where dw does not read weight (x**2), Partial where linear in it.
    facts = term_facts(op.term)
    through_weight = [entry for entry in rules if entry[1] == [R, R, Partial("avg"), None]]
    if facts.dx_linear and (facts.dw_free or facts.dw_linear):
        assert through_weight == [
            ([Partial("avg"), R if facts.dw_free else Partial("avg")], [R, R, Partial("avg"), None])
        ]
    else:
        assert through_weight == []
    rules = backward(spec((4, 6), R), spec((4, 6), Partial()), spec((6,), R), [True, True])
    assert all(not isinstance(p, Partial) for out, inputs in rules for p in inputs if p is not None)


# ---------------------------------------------------------------------------------------------
# Each reduction's rule: which dims are summed
# ---------------------------------------------------------------------------------------------


def square_sum_rule(sharding, op, x_shape, w_shape, *args, x_placement=None, w_placement=None, **kwargs):
    _Shard, R, _Partial = P()
    return rule_of(sharding, op.name)(spec(x_shape, x_placement or R), spec(w_shape, w_placement or R), *args, **kwargs)


@each_reduction_operator
def test_square_sum_summed_dim_gives_partial_sum_kept_dim_stays_sharded(sharding, op):
    Shard, R, Partial = P()
    assert square_sum_rule(sharding, op, (4, 6), (4, 6), [1]) == [
        ([R], [R, R, *NO_TENSOR]),
        ([Shard(0)], [Shard(0), Shard(0), *NO_TENSOR]),  # kept: out dim 0
        ([Partial("sum")], [Shard(1), Shard(1), *NO_TENSOR]),  # summed: each rank its own columns
    ]
    assert square_sum_rule(sharding, op, (4, 6), (4, 6), [0]) == [
        ([R], [R, R, *NO_TENSOR]),
        ([Partial("sum")], [Shard(0), Shard(0), *NO_TENSOR]),
        ([Shard(0)], [Shard(1), Shard(1), *NO_TENSOR]),  # input dim 1 is output dim 0
    ]
    # summed over the dim only the weight has (the input the broadcast one)
    rules = square_sum_rule(sharding, op, (6,), (4, 6), [0])
    assert ([Partial("sum")], [R, Shard(0), *NO_TENSOR]) in rules
    assert ([Shard(0)], [Shard(0), Shard(1), *NO_TENSOR]) in rules
    # summed over the size-1 dim of the weight
    rules = square_sum_rule(sharding, op, (4, 6), (1, 6), [0])
    assert ([Partial("sum")], [Shard(0), R, *NO_TENSOR]) in rules


@each_reduction_operator
def test_square_sum_kept_dim_position_counts_the_summed_dims_before_it(sharding, op):
    Shard, R, Partial = P()
    # (2, 4, 6, 8) summed over dims 0 and 2: dims 1 and 3 are output dims 0 and 1.
    rules = square_sum_rule(sharding, op, (2, 4, 6, 8), (8,), [0, -2])
    assert rules == [
        ([R], [R, R, *NO_TENSOR]),
        ([Partial("sum")], [Shard(0), R, *NO_TENSOR]),
        ([Shard(0)], [Shard(1), R, *NO_TENSOR]),
        ([Partial("sum")], [Shard(2), R, *NO_TENSOR]),
        ([Shard(1)], [Shard(3), Shard(0), *NO_TENSOR]),
    ]
    # keepdim: every dim keeps its position.
    rules = square_sum_rule(sharding, op, (2, 4, 6, 8), (8,), [0, -2], True)
    assert ([Shard(1)], [Shard(1), R, *NO_TENSOR]) in rules
    assert ([Shard(3)], [Shard(3), Shard(0), *NO_TENSOR]) in rules
    assert ([Partial("sum")], [Shard(2), R, *NO_TENSOR]) in rules


@each_reduction_operator
def test_square_sum_every_dim_summed_by_default(sharding, op):
    Shard, R, Partial = P()
    for args, kwargs in (((), {}), ((None,), {}), (([],), {}), (([], True), {"dtype": torch.float64})):
        rules = square_sum_rule(sharding, op, (4, 6), (6,), *args, **kwargs)
        assert rules == [
            ([R], [R, R, *NO_TENSOR]),
            ([Partial("sum")], [Shard(0), R, *NO_TENSOR]),
            ([Partial("sum")], [Shard(1), Shard(0), *NO_TENSOR]),
        ], (args, kwargs)
    rules = square_sum_rule(sharding, op, (4, 6), (6,), None, w_placement=Partial("sum"))
    assert (([Partial("sum")], [R, Partial("sum"), *NO_TENSOR]) in rules) == term_facts(op.term).value_linear


@each_reduction_operator
def test_square_sum_zero_dim_shape_with_any_dim(sharding, op):
    _Shard, R, _Partial = P()
    for dim in (None, [0], [-1]):
        assert square_sum_rule(sharding, op, (), (), dim) == [([R], [R, R, *NO_TENSOR])]
