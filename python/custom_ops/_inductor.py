# SPDX-License-Identifier: BSD-3-Clause
"""Lets torch.compile (Inductor) fuse the `custom` operators with the ops around them.

Inductor runs a custom op as an opaque call, so `relu(weighted_sum(a + b, w)) * 3` compiles to
kernels around our call instead of one kernel. Here every overload of every operator of the table
(_operators.py) gets an entry in Inductor's decomposition table, written from the operator's term:
``term.value`` in the C++ kernels' op-math rules (float16/bfloat16 compute in float32 and round
once; float32/float64 compute in their own dtype), so an elementwise operator's fused code gives
the same forward values as our kernels, bit for bit; its out= and in-place overloads the same,
copied. A reduction becomes that math and a ``sum`` in the kernels' accumulation dtype, one
reduction fused with its neighbours (equal to our kernel up to the order of the additions). Each
term's backward operator becomes ``sum_to(term.dx * grad)`` and ``sum_to(term.dw * grad)``. Only
Inductor reads that table: eager calls, TorchScript, the C++ API and torch.export graphs keep the
op.

Registration is lazy: importing torch._inductor costs seconds, so `import custom_ops` has the
entries written when Inductor's decomposition module is first imported (at once when it already
is), through _post_import.when_imported. The state and the library version are appended to
``torch.compiler.config.cache_key_tag``: Inductor's and AOTAutograd's on-disk caches do not hash the
decomposition table, and must not serve code compiled under the other state or another version.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from . import _operators

_DECOMPOSITION_MODULE = "torch._inductor.decomposition"
_ENV_VAR = "CUSTOM_OPS_INDUCTOR_DECOMPOSE"

_lock = threading.RLock()
_enabled = os.environ.get(_ENV_VAR, "1").strip().lower() not in ("0", "false", "off", "no")
_version = "unknown"
_tag_segment = ""  # what this module last appended to cache_key_tag


# --- the math, in the C++ kernels' order ---------------------------------------------------------


def _opmath(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels compute in (at::opmath_type): float32 for the half types."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _common_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """TensorIterator's common dtype (torch.result_type over all operands, 0-dim rules included)."""
    return elementwise_dtypes(*tensors, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]


def _in_opmath(tensor: torch.Tensor, common: torch.dtype) -> torch.Tensor:
    """TensorIterator casts each input to the common dtype, the loop then widens it to opmath.

    One difference remains: Inductor computes a cast to a half type inside a fused kernel in
    float32, so an operand rounded *down* to a half-type common dtype (a float32/float64 0-dim
    tensor with a bfloat16 input, or float16 against bfloat16) is not rounded there: the result can
    differ from our kernel's by one rounding (it is the more accurate one).
    """
    return tensor.to(common).to(_opmath(common))


def _value(term, input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    common = _common_dtype(input, weight)
    x, w = _in_opmath(input, common), _in_opmath(weight, common)
    return term.value(x, w).to(common)


def _sum_to(full: torch.Tensor, shape) -> torch.Tensor:
    """at::sum_to: sums the dimensions `full` was broadcast along back to `shape`."""
    leading = full.dim() - len(shape)
    dims = list(range(leading)) + [
        leading + i for i, size in enumerate(shape) if size == 1 and full.shape[leading + i] != 1
    ]
    if not dims:
        return full
    return full.sum(dims, keepdim=True).view(shape)


def _gradient(argument, shape, formula, operands) -> torch.Tensor:
    """One gradient as the C++ frontend computes it: over the full output shape in TensorIterator's
    common dtype of the operands, stored in the argument's dtype (or, when the argument was
    broadcast, in the promoted dtype, summed back, then cast)."""
    common = _common_dtype(*operands)
    value = formula(*(_in_opmath(operand, common) for operand in operands)).to(common)
    broadcast = tuple(argument.shape) != tuple(shape)
    if not broadcast:
        return value.to(argument.dtype)
    stored = argument.dtype
    for operand in operands:
        stored = torch.promote_types(stored, operand.dtype)
    return _sum_to(value.to(stored), argument.shape).to(argument.dtype)


def _named(function, name):
    function.__name__ = function.__qualname__ = name
    return function


def _elementwise(name, term):
    """The decompositions of an elementwise operator's functional, out= and in-place overloads."""

    def functional(input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return _value(term, input, weight)

    def out_variant(input: torch.Tensor, weight: torch.Tensor, *, out: torch.Tensor) -> None:
        from torch._prims_common.wrappers import _maybe_resize_out

        result = _value(term, input, weight)
        _maybe_resize_out(out, result.shape)  # ATen's out= rule, as the C++ frontend applies it
        out.copy_(result)

    def inplace(self: torch.Tensor, weight: torch.Tensor) -> None:
        self.copy_(_value(term, self, weight))

    return {
        name: _named(functional, name),
        f"{name}.out": _named(out_variant, f"{name}_out"),
        f"{name}_": _named(inplace, f"{name}_inplace"),
    }


def _backward(term):
    """The term's backward operator: (sum_to(dx * grad, input), sum_to(dw * grad, weight))."""

    def backward(grad, input, weight, output_mask):
        shape = torch.broadcast_shapes(input.shape, weight.shape)
        grad_input = grad_weight = None
        if output_mask[0]:
            grad_input = _gradient(input, shape, lambda g, x, w: term.dx(x, w) * g, (grad, input, weight))
        if output_mask[1]:
            # In the dtype the forward promoted to, weight's included (the C++ frontend's rule);
            # weight an operand only where dw reads it, as the kernels' loop.
            x = input.to(_common_dtype(grad, input, weight))
            if term.dw_reads_weight:
                grad_weight = _gradient(weight, shape, lambda g, x, w: term.dw(x, w) * g, (grad, x, weight))
            else:
                grad_weight = _gradient(weight, shape, lambda g, x: term.dw(x, None) * g, (grad, x))
        return grad_input, grad_weight

    return _named(backward, term.backward)


def _reduction(name, term):
    def reduction(input, weight, dim=None, keepdim=False, *, dtype=None):
        """The kernels' reduction: operands in the promoted dtype (float64 when the result is),
        each term and the sum in the accumulation dtype (float32, float64 for float64 operands),
        then one rounding to the result dtype. A pointwise producer and a sum, which Inductor
        fuses into one reduction with the ops around it; the additions may run in another order
        than our kernel's, so the values agree to a few roundings of the accumulation dtype (and
        an operand rounded down to a half-type common dtype is not rounded, see _in_opmath). The
        backward needs no entry: the op's autograd calls the term's backward op, which has one."""
        common = _common_dtype(input, weight)
        result = common if dtype is None else dtype
        operands = torch.float64 if result == torch.float64 else common
        x, w = _in_opmath(input, operands), _in_opmath(weight, operands)
        terms = term.value(x, w)
        # None or [] sums every dim (torch.sum's rule); dims of a 0-dim shape (0 or -1) sum nothing.
        dims = list(dim) if dim else list(range(terms.dim()))
        return terms.sum(dims, keepdim=keepdim).to(result)

    return {name: _named(reduction, name)}


def _decompositions() -> dict[str, Callable]:
    """{schema name ("weighted_sum.out", say): its decomposition}, for every row of the table."""
    functions = {}
    for operator in _operators.OPERATORS:
        if operator.kind == _operators.ELEMENTWISE:
            functions.update(_elementwise(operator.name, operator.term))
        else:
            functions.update(_reduction(operator.name, operator.term))
        if operator.term.backward not in functions:
            functions[operator.term.backward] = _backward(operator.term)
    return functions


#: {schema name: decomposition}: every overload of every operator but .Scalar, and each term's
#: backward operator.
DECOMPOSITIONS = _decompositions()


def _overload(schema_name: str):
    name, _, overload = schema_name.partition(".")
    return getattr(getattr(torch.ops.custom, name), overload or "default")


def _table():
    return {_overload(name): function for name, function in DECOMPOSITIONS.items()}


# --- registration ----------------------------------------------------------------------------


def _apply() -> None:
    """Writes or removes the table entries to match the state; needs Inductor's module imported."""
    module = sys.modules.get(_DECOMPOSITION_MODULE)
    if module is None or getattr(module, "decompositions", None) is None:
        return
    with _lock:
        for op, function in _table().items():
            if _enabled:
                module.decompositions[op] = function
            else:
                module.decompositions.pop(op, None)
        # select_decomp_table() returns a cached merge of the table: a stale one would keep the
        # old state, and a compile would then find both a fallback and a decomposition for the op.
        cached = getattr(module, "fast_random_decomps", None)
        if cached is not None and hasattr(cached, "cache_clear"):
            cached.cache_clear()


def _update_cache_key_tag() -> None:
    global _tag_segment
    import torch.compiler.config as compiler_config

    with _lock:
        current = compiler_config.cache_key_tag or ""
        parts = [part for part in current.split("|") if part and part != _tag_segment]
        _tag_segment = f"custom_ops-{_version}-inductor-decomposition-{'on' if _enabled else 'off'}"
        compiler_config.cache_key_tag = "|".join([*parts, _tag_segment])


def install(version: str, when_imported: Callable[[str, Callable[[], None]], None] | None = None) -> None:
    """Called by `import custom_ops` (again by a reload: the watch stays one), with
    _post_import.when_imported: registers now if Inductor's decomposition module is loaded, else
    when it is imported. Without `when_imported` (this file loaded on its own, by path) that module
    is imported now."""
    global _version
    with _lock:
        _version = version
        _update_cache_key_tag()
    if when_imported is None:
        import torch._inductor.decomposition  # noqa: F401

        _apply()
    else:
        when_imported(_DECOMPOSITION_MODULE, _apply)


def set_enabled(enabled: bool) -> None:
    global _enabled
    with _lock:
        _enabled = bool(enabled)
        _update_cache_key_tag()
        _apply()


def is_enabled() -> bool:
    return _enabled
