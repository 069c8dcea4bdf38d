"""DTensor sharding rules for the `custom` operators.

Opt-in: ``import custom_ops.sharding`` registers them (and imports DTensor, about two seconds;
on a torch without DTensor it registers nothing, see :func:`is_registered`), as
``import custom_ops.onnx`` does the ONNX export; ``import custom_ops`` alone neither imports DTensor
nor watches for it. Then ``torch.ops.custom.weighted_sum`` and ``weighted_square_sum`` run on
:class:`torch.distributed.tensor.DTensor` arguments, forward and backward: DTensor runs the op on
each rank's local shards, and redistributes an argument only when no rule below accepts its
placement. The rules are registered with torch's own API,
:func:`torch.distributed.tensor.experimental.register_sharding`, for

``custom::weighted_sum(input, weight) -> out``  (``out = weight * input**2``, broadcast)
    per mesh dimension, one of

    * everything ``Replicate()``;
    * ``out`` ``Shard(d)`` for each output dim ``d``, with each argument ``Shard`` on the dim that
      lines up with ``d`` (broadcasting right-aligns: argument dim ``d - (out.ndim - arg.ndim)``),
      or ``Replicate()`` where that argument is broadcast along ``d`` (the dim is missing or of
      size 1: a size-1 broadcast dim is never sharded);
    * ``out`` ``Partial(op)`` from ``input`` ``Replicate()`` and ``weight`` ``Partial(op)`` for
      op "sum" or "avg": the op is linear in ``weight``. It is not linear in ``input``, so a
      ``Partial`` input is always redistributed (to ``Shard`` or ``Replicate``, whichever DTensor
      finds cheaper).

    Matching ``Shard``/``Replicate`` placements therefore run with no communication at all.

``custom::weighted_sum_backward(grad, input, weight, output_mask) -> (grad_input, grad_weight)``
    (called by the op's autograd, on DTensors when the forward ran on DTensors), per mesh dim:

    * everything ``Replicate()``;
    * ``grad`` ``Shard(d)``, ``input`` and ``weight`` as in the forward; a gradient is ``Shard``
      like its argument, or, where its argument is broadcast along ``d``, ``Partial("sum")``: the
      gradient of a broadcast argument sums over the broadcast dims, and each rank sums only its
      own slice of them;
    * ``grad`` ``Partial(op)`` (op "sum"/"avg"), the rest ``Replicate()``: both gradients are
      ``Partial(op)`` (linear in ``grad``);
    * ``weight`` ``Partial(op)``, the rest ``Replicate()``: ``grad_input`` is ``Partial(op)``,
      ``grad_weight`` (which does not read ``weight``) ``Replicate()``.

    A gradient that ``output_mask`` leaves out is ``None``, with no placement.

``custom::weighted_square_sum(input, weight, dim, keepdim, *, dtype) -> out``
    (``out = (weight * input**2).sum(dim, keepdim)`` over the broadcast shape), per mesh dim:

    * everything ``Replicate()``;
    * for each dim ``d`` of the broadcast shape, ``input`` and ``weight`` as in weighted_sum's
      ``Shard(d)`` rule (``Shard`` on the lined-up dim, ``Replicate()`` where broadcast), and
      ``out`` ``Partial("sum")`` when ``d`` is summed over (each rank sums its own slice of it),
      else ``Shard`` on ``d``'s position in ``out`` (``d`` less the summed dims before it, or
      ``d`` itself with ``keepdim``);
    * ``out`` ``Partial(op)`` from ``input`` ``Replicate()`` and ``weight`` ``Partial(op)``
      (op "sum"/"avg"): a sum of terms linear in ``weight`` is linear in it.

    Its backward is ``weighted_sum_backward`` of the grad broadcast over the summed dims (views
    that DTensor shards itself), so it needs no rule of its own.

Only the functional ops and the backward have rules; ``weighted_sum.out`` and ``weighted_sum_``
on DTensors raise DTensor's "no sharding strategy registered" error.

Usage::

    import custom_ops.sharding  # loads the operators, registers the rules

With the library loaded by ``torch.ops.load_library`` instead, import this file by path and call
:func:`register`.
"""

from __future__ import annotations

import threading
import warnings

import torch

__all__ = ["is_registered", "register"]

_OPERATORS = ("custom::weighted_sum", "custom::weighted_sum_backward", "custom::weighted_square_sum")

_lock = threading.Lock()
_registered = False


def is_registered() -> bool:
    """Whether :func:`register` has registered the rules in this process."""
    return _registered


def register() -> bool:
    """Registers the DTensor sharding rules of custom::weighted_sum, its backward and
    custom::weighted_square_sum.

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

        forward, backward, square_sum = _operator_overloads()
        register_sharding(forward)(_weighted_sum_sharding)
        register_sharding(backward)(_weighted_sum_backward_sharding)
        register_sharding(square_sum)(_weighted_square_sum_sharding)
        _hash_non_tensor_arguments(backward)
        _hash_non_tensor_arguments(square_sum)
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
    custom = torch.ops.custom
    return custom.weighted_sum.default, custom.weighted_sum_backward.default, custom.weighted_square_sum.default


def _hash_non_tensor_arguments(op) -> None:
    """Makes DTensor's sharding cache tell apart calls that differ in a non-tensor argument.

    register_sharding keys its cache on the tensor arguments' placements and shapes, and on the
    non-tensor arguments from the first *int* argument on (RuntimeSchemaInfo.static_argnum). The
    backward's only non-tensor argument is ``bool[2] output_mask``, so a sharding decided for one
    mask would be reused for another: a gradient that one mask leaves out (None, no placement)
    would then be given to a call that computes it ("output tensor should be scalar!"), or the
    reverse. weighted_square_sum's first int argument is its keyword ``dtype``: ``int[1]? dim``
    and ``bool keepdim`` before it would be left out, and a sharding decided for one ``dim`` given
    to a call that sums over another. The rules' results depend on these arguments, so the key
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


def _weighted_sum_sharding(input, weight):
    from torch.distributed.tensor import Partial, Replicate, Shard

    out_shape = torch.broadcast_shapes(input.shape, weight.shape)
    # (out placements, [input, weight] placements); DTensor drops those whose Shard does not fit
    # an argument's size (a dim smaller than the mesh dim).
    rules = [([Replicate()], [Replicate(), Replicate()])]
    for d in range(len(out_shape)):
        rules.append(
            (
                [Shard(d)],
                [_aligned_placement(input.shape, out_shape, d), _aligned_placement(weight.shape, out_shape, d)],
            )
        )
    for op in _partial_ops_of(weight):
        rules.append(([Partial(op)], [Replicate(), Partial(op)]))
    return rules


def _weighted_sum_backward_sharding(grad, input, weight, output_mask):
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
    # grad_input = sum_to(2 w x grad) is linear in grad and in weight (one at a time);
    # grad_weight = sum_to(x**2 grad) is linear in grad and does not read weight.
    for op in _partial_ops_of(grad):
        rules.append((outputs(Partial(op), Partial(op)), [Partial(op), Replicate(), Replicate(), None]))
    for op in _partial_ops_of(weight):
        rules.append((outputs(Partial(op), Replicate()), [Replicate(), Replicate(), Partial(op), None]))
    return rules


def _summed_dims(dim, ndim):
    """Which dims of a rank-`ndim` shape weighted_square_sum sums over: all for None or [], else
    `dim` wrapped like torch.sum's (the op has checked it already)."""
    if not dim:
        return set(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    return {d % ndim for d in dim} if ndim > 0 else set()


def _weighted_square_sum_sharding(input, weight, dim=None, keepdim=False, *, dtype=None):
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
    for op in _partial_ops_of(weight):
        rules.append(([Partial(op)], [Replicate(), Partial(op), *no_tensor]))
    return rules


# `import custom_ops.sharding` is the opt-in: its parent package has loaded the operators. Loaded by
# path (this checkout's tests and example), the file waits for register().
if __package__ == "custom_ops":
    register()
