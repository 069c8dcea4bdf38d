# SPDX-License-Identifier: BSD-3-Clause
"""DTensor sharding rules for the `custom` operators.

Opt-in: ``import custom_ops.sharding`` registers them (and imports DTensor, about two seconds;
on a torch without DTensor it registers nothing, see :func:`is_registered`), as
``import custom_ops.onnx`` does the ONNX export; ``import custom_ops`` alone neither imports DTensor
nor watches for it. Then every operator of the table (_operators.py) runs on
:class:`torch.distributed.tensor.DTensor` arguments, forward and backward: DTensor runs the op on
each rank's local shards, and redistributes an argument only when no rule below accepts its
placement. The rules are registered with torch's own API,
:func:`torch.distributed.tensor.experimental.register_sharding`, by the operator's kind, and for
each term's backward operator. Which Partial rules apply follows from the term's math (checked
on its formulas at exact rational points): "linear in w" below means f(x, w) = w * g(x).

An elementwise operator, ``name(input, weight) -> out`` (``out = value(input, weight)``,
broadcast), per mesh dimension, one of

    * everything ``Replicate()``;
    * ``out`` ``Shard(d)`` for each output dim ``d``, with each argument ``Shard`` on the dim that
      lines up with ``d`` (broadcasting right-aligns: argument dim ``d - (out.ndim - arg.ndim)``),
      or ``Replicate()`` where that argument is broadcast along ``d`` (the dim is missing or of
      size 1: a size-1 broadcast dim is never sharded);
    * where ``value`` is linear in w (``w * x**2`` is): ``out`` ``Partial(op)`` from ``input``
      ``Replicate()`` and ``weight`` ``Partial(op)`` for op "sum" or "avg". No term is linear in
      ``input`` here, so a ``Partial`` input is always redistributed (to ``Shard`` or
      ``Replicate``, whichever DTensor finds cheaper).

    Matching ``Shard``/``Replicate`` placements therefore run with no communication at all.

A term's backward operator, ``backward(grad, input, weight, output_mask) -> (grad_input,
grad_weight)`` (called by the ops' autograd, on DTensors when the forward ran on DTensors), per
mesh dim:

    * everything ``Replicate()``;
    * ``grad`` ``Shard(d)``, ``input`` and ``weight`` as in the forward; a gradient is ``Shard``
      like its argument, or, where its argument is broadcast along ``d``, ``Partial("sum")``: the
      gradient of a broadcast argument sums over the broadcast dims, and each rank sums only its
      own slice of them;
    * ``grad`` ``Partial(op)`` (op "sum"/"avg"), the rest ``Replicate()``: both gradients are
      ``Partial(op)`` (linear in ``grad``);
    * where ``dx`` is linear in w and ``dw`` linear in w or free of it: ``weight``
      ``Partial(op)``, the rest ``Replicate()``: ``grad_input`` is ``Partial(op)``,
      ``grad_weight`` ``Partial(op)``, or ``Replicate()`` where ``dw`` does not read ``weight``
      (``2 * x * w`` and ``x * x``: ``Partial``, ``Replicate``).

    A gradient that ``output_mask`` leaves out is ``None``, with no placement.

A reduction, ``name(input, weight, dim, keepdim, *, dtype) -> out`` (``out = value(input,
weight).sum(dim, keepdim)`` over the broadcast shape), per mesh dim:

    * everything ``Replicate()``;
    * for each dim ``d`` of the broadcast shape, ``input`` and ``weight`` as in the elementwise
      ``Shard(d)`` rule (``Shard`` on the lined-up dim, ``Replicate()`` where broadcast), and
      ``out`` ``Partial("sum")`` when ``d`` is summed over (each rank sums its own slice of it),
      else ``Shard`` on ``d``'s position in ``out`` (``d`` less the summed dims before it, or
      ``d`` itself with ``keepdim``);
    * where ``value`` is linear in w: ``out`` ``Partial(op)`` from ``input`` ``Replicate()`` and
      ``weight`` ``Partial(op)`` (op "sum"/"avg"): a sum of terms linear in ``weight`` is linear
      in it.

    Its backward is its term's backward operator of the grad broadcast over the summed dims (views
    that DTensor shards itself), so it needs no rule of its own.

Only the functional ops and the backward operators have rules; an elementwise operator's out= and
in-place overloads on DTensors raise DTensor's "no sharding strategy registered" error.

Usage::

    import custom_ops.sharding  # loads the operators, registers the rules

With the library loaded by ``torch.ops.load_library`` instead, import this file by path and call
:func:`register`.
"""

from __future__ import annotations

import threading
import warnings
from fractions import Fraction

import torch

from ._operators import ELEMENTWISE, OPERATORS

__all__ = ["is_registered", "register"]

_lock = threading.Lock()
_registered = False


def is_registered() -> bool:
    """Whether :func:`register` has registered the rules in this process."""
    return _registered


def register() -> bool:
    """Registers the DTensor sharding rules of every operator of the table and of each term's
    backward operator.

    Idempotent: a second call does nothing. Returns True once the rules are registered, and
    False, registering nothing, where this torch has no torch.distributed, no DTensor or no
    ``register_sharding``. The operators must be registered already (the library loaded, e.g. by
    ``import custom_ops``); RuntimeError otherwise.
    """
    global _registered
    with _lock:
        if _registered:
            return True
        if not torch.distributed.is_available():
            return False
        try:
            from torch.distributed.tensor import DTensor  # noqa: F401
            from torch.distributed.tensor.experimental import register_sharding
        except ImportError:
            return False

        for name, overload in _operator_overloads():
            register_sharding(overload)(_RULES[name])
            _hash_non_tensor_arguments(overload)
        _registered = True
        return True


def _operator_overloads():
    for name in _OPERATORS:
        try:
            torch._C._dispatch_find_schema_or_throw(name, "")
        except RuntimeError:
            raise RuntimeError(
                f"custom_ops.sharding.register(): the operator {name} is not registered in this "
                "process; load libcustom_ops.so first (import custom_ops, or "
                "torch.ops.load_library(path))"
            ) from None
    return [(name, getattr(torch.ops.custom, name.split("::")[1]).default) for name in _OPERATORS]


def _hash_non_tensor_arguments(op) -> None:
    """Makes DTensor's sharding cache tell apart calls that differ in a non-tensor argument.

    register_sharding keys its cache on the tensor arguments' placements and shapes, and on the
    non-tensor arguments from the first *int* argument on (RuntimeSchemaInfo.static_argnum). A
    backward's only non-tensor argument is ``bool[2] output_mask``, so a sharding decided for one
    mask would be reused for another: a gradient that one mask leaves out (None, no placement)
    would then be given to a call that computes it ("output tensor should be scalar!"), or the
    reverse. A reduction's first int argument is its keyword ``dtype``: ``int[1]? dim`` and
    ``bool keepdim`` before it would be left out, and a sharding decided for one ``dim`` given to
    a call that sums over another. The rules' results depend on these arguments, so the key
    must hold them: hash every argument from the first non-tensor one on (keyword ones as
    register_sharding chose).
    """
    from torch.distributed.tensor import DTensor

    first = next(
        (i for i, arg in enumerate(op._schema.arguments) if not isinstance(arg.type, torch.TensorType)),
        None,
    )
    if first is None:
        return
    propagator = DTensor._op_dispatcher.sharding_propagator
    schema_infos = getattr(propagator, "op_to_schema_info", None)
    if schema_infos is None:
        warnings.warn(
            "custom_ops.sharding: this torch's DTensor has no ShardingPropagator.op_to_schema_info; "
            f"{op} on DTensors may reuse a sharding decided for another output_mask",
            stacklevel=3,
        )
        return
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

    info = schema_infos.get(op)
    if info is not None and info.static_argnum <= first:
        return  # register_sharding hashes it already
    schema_infos[op] = RuntimeSchemaInfo(
        static_argnum=first,
        static_kwargkey=info.static_kwargkey if info is not None else None,
        needs_pytree=True,
    )


# ---------------------------------------------------------------------------------------------
# The rules. register_sharding calls them with each DTensor argument replaced by its DTensorSpec
# (its global shape and current placements) and the other arguments as they are; each returns a
# list of (output placements, input placements) for one mesh dimension, which DTensor expands to
# every mesh dimension and picks from by redistribution cost (a choice that needs no
# redistribution first). None stands for a non-tensor argument or a None output.
# ---------------------------------------------------------------------------------------------


def _linear_reduce_ops():
    from torch.distributed.tensor import Partial

    return getattr(Partial, "LINEAR_REDUCE_OPS", ("sum", "avg"))


def _partial_ops_of(spec):
    """The linear reductions ("sum", "avg") that `spec` is Partial over, in mesh-dim order.

    A Partial rule is offered only for a reduction an argument already has: offered for every
    reduction, a Replicate argument would be 'redistributed' to Partial at no cost, giving a
    Partial output that costs its consumer an all-reduce.
    """
    from torch.distributed.tensor import Partial

    ops = []
    for placement in spec.placements:
        if (
            isinstance(placement, Partial)
            and placement.reduce_op in _linear_reduce_ops()
            and placement.reduce_op not in ops
        ):
            ops.append(placement.reduce_op)
    return ops


def _aligned_placement(shape, out_shape, out_dim):
    """The placement of an argument of `shape` when its broadcast result is Shard(out_dim).

    Broadcasting right-aligns dims: the argument's dim out_dim - (len(out_shape) - len(shape))
    lines up with out_dim. It is Shard on that dim, unless the argument has no such dim or has it
    of size 1 broadcast to more: then every output slice reads all of it, so it is Replicate.
    """
    from torch.distributed.tensor import Replicate, Shard

    dim = out_dim - (len(out_shape) - len(shape))
    if dim < 0 or shape[dim] != out_shape[out_dim]:
        return Replicate()
    return Shard(dim)


# What a term's math allows, from its formulas at exact rational points (x, w, another w): a
# rational function that vanishes at all of them is taken to be zero, which a formula of + - * /
# only escapes by chance.
_POINTS = (
    (Fraction(3, 7), Fraction(-5, 11), Fraction(13, 4)),
    (Fraction(-17, 9), Fraction(2, 13), Fraction(-7, 3)),
    (Fraction(11, 5), Fraction(9, 8), Fraction(5, 17)),
)


def _free_of_weight(f) -> bool:
    """f(x, w) does not change with w."""
    try:
        return all(f(x, w) == f(x, other) for x, w, other in _POINTS)
    except ZeroDivisionError:
        return False


def _linear_in_weight(f, df_dw) -> bool:
    """f(x, w) = w * g(x): zero at w = 0, and its derivative in w free of w. Then f of a Partial
    weight (a sum or average over ranks) is that sum or average of f, with input replicated."""
    try:
        return all(f(x, 0) == 0 for x, _, _ in _POINTS) and _free_of_weight(df_dw)
    except ZeroDivisionError:
        return False


def _elementwise_sharding(term):
    linear = _linear_in_weight(term.value, term.dw)

    def rule(input, weight):
        from torch.distributed.tensor import Partial, Replicate, Shard

        out_shape = torch.broadcast_shapes(input.shape, weight.shape)
        # (out placements, [input, weight] placements); DTensor drops those whose Shard does not
        # fit an argument's size (a dim smaller than the mesh dim).
        rules = [([Replicate()], [Replicate(), Replicate()])]
        for d in range(len(out_shape)):
            rules.append(
                (
                    [Shard(d)],
                    [_aligned_placement(input.shape, out_shape, d), _aligned_placement(weight.shape, out_shape, d)],
                )
            )
        for op in _partial_ops_of(weight) if linear else ():
            rules.append(([Partial(op)], [Replicate(), Partial(op)]))
        return rules

    return rule


def _backward_sharding(term):
    # grad_input = sum_to(dx grad), grad_weight = sum_to(dw grad): both linear in grad; through a
    # Partial weight where dx is linear in w and dw linear in w (Partial) or free of it (Replicate).
    dw_free = _free_of_weight(term.dw)
    through_weight = _linear_in_weight(term.dx, term.dxw) and (dw_free or _linear_in_weight(term.dw, term.dww))

    def rule(grad, input, weight, output_mask):
        from torch.distributed.tensor import Partial, Replicate, Shard

        input_wanted, weight_wanted = bool(output_mask[0]), bool(output_mask[1])

        def outputs(grad_input, grad_weight):
            return [grad_input if input_wanted else None, grad_weight if weight_wanted else None]

        out_shape = grad.shape
        rules = [(outputs(Replicate(), Replicate()), [Replicate(), Replicate(), Replicate(), None])]
        for d in range(len(out_shape)):
            input_placement = _aligned_placement(input.shape, out_shape, d)
            weight_placement = _aligned_placement(weight.shape, out_shape, d)
            # A broadcast argument's gradient sums the slices of dim d: each rank has its own.
            rules.append(
                (
                    outputs(
                        input_placement if isinstance(input_placement, Shard) else Partial("sum"),
                        weight_placement if isinstance(weight_placement, Shard) else Partial("sum"),
                    ),
                    [Shard(d), input_placement, weight_placement, None],
                )
            )
        for op in _partial_ops_of(grad):
            rules.append((outputs(Partial(op), Partial(op)), [Partial(op), Replicate(), Replicate(), None]))
        for op in _partial_ops_of(weight) if through_weight else ():
            grad_weight = Replicate() if dw_free else Partial(op)
            rules.append((outputs(Partial(op), grad_weight), [Replicate(), Replicate(), Partial(op), None]))
        return rules

    return rule


def _summed_dims(dim, ndim):
    """Which dims of a rank-`ndim` shape a reduction sums over: all for None or [], else `dim`
    wrapped like torch.sum's (the op has checked it already)."""
    if not dim:
        return set(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    return {d % ndim for d in dim} if ndim > 0 else set()


def _reduction_sharding(term):
    linear = _linear_in_weight(term.value, term.dw)

    def rule(input, weight, dim=None, keepdim=False, *, dtype=None):
        from torch.distributed.tensor import Partial, Replicate, Shard

        out_shape = torch.broadcast_shapes(input.shape, weight.shape)
        summed = _summed_dims(dim, len(out_shape))
        no_tensor = [None, None, None]  # dim, keepdim, dtype
        rules = [([Replicate()], [Replicate(), Replicate(), *no_tensor])]
        for d in range(len(out_shape)):
            kept_index = d if keepdim else d - sum(1 for s in summed if s < d)
            # A summed d: each rank's sum over its slice of d, and the sum of them is the total.
            out = Partial("sum") if d in summed else Shard(kept_index)
            rules.append(
                (
                    [out],
                    [
                        _aligned_placement(input.shape, out_shape, d),
                        _aligned_placement(weight.shape, out_shape, d),
                        *no_tensor,
                    ],
                )
            )
        for op in _partial_ops_of(weight) if linear else ():
            rules.append(([Partial(op)], [Replicate(), Partial(op), *no_tensor]))
        return rules

    return rule


def _rules() -> dict:
    """{qualified op name: its rule}: each operator's by its kind, then each term's backward's."""
    rules = {}
    for operator in OPERATORS:
        make = _elementwise_sharding if operator.kind == ELEMENTWISE else _reduction_sharding
        rules[f"custom::{operator.name}"] = make(operator.term)
    for operator in OPERATORS:
        rules.setdefault(f"custom::{operator.term.backward}", _backward_sharding(operator.term))
    return rules


_RULES = _rules()
_OPERATORS = tuple(_RULES)


# `import custom_ops.sharding` is the opt-in: its parent package has loaded the operators. Loaded by
# path (this checkout's tests and example), the file waits for register().
if __package__ == "custom_ops":
    register()
