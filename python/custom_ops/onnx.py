"""ONNX export of the `custom` operators, in standard ONNX ops (Cast, Mul).

Optional: needs onnxscript (not a dependency of custom_ops). ``import custom_ops.onnx`` registers
the translation with onnxscript's torch_lib registry, which ``torch.onnx.export(..., dynamo=True)``
reads, so models that call the op export with no extra argument; ``translation_table()`` gives it
for ``custom_translation_table=``. The deprecated TorchScript exporter (``dynamo=False``) gets a
symbolic as well. Only the functional overloads export (use the op, not out= or in place, in models
to export).

The translation follows the op's dtype rules: the result dtype is torch.result_type(input, weight)
(a 0-dim operand does not promote a dimensioned one of its category), each operand is cast to it,
float16/bfloat16 compute in float32 and round once, and float32/float64 compute ``w * (x * x)``.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.registration import torch_op

import custom_ops  # noqa: F401  (loads the operators)

__all__ = ["translation_table"]

_HALF = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
# Higher rank = wins promotion among float types (float16 with bfloat16 gives float32).
_ORDER = {
    onnx.TensorProto.FLOAT16: 0,
    onnx.TensorProto.BFLOAT16: 0,
    onnx.TensorProto.FLOAT: 1,
    onnx.TensorProto.DOUBLE: 2,
}


def _promote(a: int, b: int) -> int:
    if a == b:
        return a
    if {a, b} == set(_HALF):
        return onnx.TensorProto.FLOAT
    return a if _ORDER[a] > _ORDER[b] else b


def _result_dtype(a: int, a_rank: int, b: int, b_rank: int) -> int:
    """torch.result_type for two float tensors: a 0-dim one yields to a dimensioned one."""
    if (a_rank == 0) != (b_rank == 0):
        return a if b_rank == 0 else b
    return _promote(a, b)


def _weighted_square(x, w, dtype: int):
    compute = onnx.TensorProto.FLOAT if dtype in _HALF else dtype
    x = op.Cast(op.Cast(x, to=dtype), to=compute)
    w = op.Cast(op.Cast(w, to=dtype), to=compute)
    return op.Cast(op.Mul(w, op.Mul(x, x)), to=dtype)


def _onnx_dtype(value) -> int:
    return int(value.dtype)


def _rank(value) -> int:
    return len(value.shape) if value.shape is not None else -1


@torch_op("custom::weighted_sum", trace_only=True)
def weighted_sum(input, weight):
    dtype = _result_dtype(_onnx_dtype(input), _rank(input), _onnx_dtype(weight), _rank(weight))
    return _weighted_square(input, weight, dtype)


@torch_op("custom::weighted_sum.Scalar", trace_only=True)
def weighted_sum_scalar(input, weight: float):
    # A number keeps a float input's dtype; it is rounded to that dtype, as the op rounds it.
    dtype = _onnx_dtype(input)
    number = op.Constant(value=onnx.numpy_helper.from_array(np.array(float(weight), dtype=np.float64)))
    return _weighted_square(input, number, dtype)


def translation_table() -> dict:
    """{op overload: onnxscript function} for torch.onnx.export(..., custom_translation_table=...)."""
    return {
        torch.ops.custom.weighted_sum.default: weighted_sum,
        torch.ops.custom.weighted_sum.Scalar: weighted_sum_scalar,
    }


# --- the deprecated TorchScript-based exporter (dynamo=False) ---------------------------------

_TORCH_TO_ONNX = {
    torch.float16: onnx.TensorProto.FLOAT16,
    torch.bfloat16: onnx.TensorProto.BFLOAT16,
    torch.float32: onnx.TensorProto.FLOAT,
    torch.float64: onnx.TensorProto.DOUBLE,
}


def _symbolic_weighted_sum(g, input, weight):
    x_type, w_type = input.type(), weight.type()
    dtype = _result_dtype(_TORCH_TO_ONNX[x_type.dtype()], x_type.dim(), _TORCH_TO_ONNX[w_type.dtype()], w_type.dim())
    compute = onnx.TensorProto.FLOAT if dtype in _HALF else dtype

    def to(value, target):
        return g.op("Cast", value, to_i=target)

    x = to(to(input, dtype), compute)
    w = to(to(weight, dtype), compute)
    return to(g.op("Mul", w, g.op("Mul", x, x)), dtype)


torch.onnx.register_custom_op_symbolic("custom::weighted_sum", _symbolic_weighted_sum, 9)
