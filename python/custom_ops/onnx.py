"""ONNX export of the `custom` operators, in standard ONNX ops (Cast, Mul, ReduceSum).

Opt-in, with the ``onnx`` extra (``pip install 'custom-ops[onnx]'``: onnx, onnxscript and, to run
the models, onnxruntime). ``import custom_ops.onnx`` registers the translation with onnxscript's
torch_lib registry, which ``torch.onnx.export(..., dynamo=True)`` reads, so models that call the
op export with no extra argument; ``translation_table()`` gives it for
``custom_translation_table=``. The deprecated TorchScript exporter (``dynamo=False``) gets a
symbolic as well. Only the functional overloads export (use the op, not out= or in place, in
models to export).

The translation follows the op's dtype rules: the result dtype is torch.result_type(input, weight)
(a 0-dim operand does not promote a dimensioned one of its category), each operand is cast to it,
float16/bfloat16 compute in float32 and round once, and float32/float64 compute ``w * (x * x)``.
weighted_square_sum is those terms summed with ReduceSum (every axis when ``dim`` is None or
empty) in float32, or float64 where the promoted or the requested dtype is float64, then cast
once to ``dtype`` if given, else to the promoted dtype. ReduceSum adds in the runtime's order, so
its values agree with the op's to a few roundings of the accumulation dtype, not bit for bit.
"""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

import custom_ops  # noqa: F401  (loads the operators)

try:
    import numpy as np
    import onnx
    from onnxscript import opset18 as op
    from onnxscript.function_libs.torch_lib.registration import torch_op
except ModuleNotFoundError as error:
    if error.name is None or error.name.split(".")[0] not in ("numpy", "onnx", "onnxscript"):
        raise  # something else is broken: its own message says what
    raise ImportError(
        "custom_ops.onnx needs onnx and onnxscript (and onnxruntime to run models): pip install 'custom-ops[onnx]'"
    ) from None

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


def _compute_dtype(dtype: int) -> int:
    return onnx.TensorProto.FLOAT if dtype in _HALF else dtype


def _weighted_square_terms(x, w, dtype: int):
    """``w * (x * x)`` of the operands cast to `dtype`, in its compute dtype (not rounded back)."""
    compute = _compute_dtype(dtype)
    x = op.Cast(op.Cast(x, to=dtype), to=compute)
    w = op.Cast(op.Cast(w, to=dtype), to=compute)
    return op.Mul(w, op.Mul(x, x))


def _weighted_square(x, w, dtype: int):
    return op.Cast(_weighted_square_terms(x, w, dtype), to=dtype)


def _square_sum_dtypes(promoted: int, dtype) -> tuple[int, int]:
    """(operand dtype, result dtype) of weighted_square_sum: the operands stay in the promoted
    dtype unless the result is float64, then both are float64."""
    result = promoted if dtype is None or dtype == -1 else int(dtype)
    if result not in _ORDER:
        raise ValueError(f"custom::weighted_square_sum: dtype must be a floating type, got ONNX type {result}")
    return (onnx.TensorProto.DOUBLE if result == onnx.TensorProto.DOUBLE else promoted), result


def _dims(dim) -> list[int]:
    """`int[1]? dim` as a list: [] for None or [] (every axis)."""
    if dim is None:
        return []
    if isinstance(dim, int):
        return [dim]
    return [int(d) for d in dim]


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


@torch_op("custom::weighted_square_sum", trace_only=True)
def weighted_square_sum(input, weight, dim=None, keepdim: bool = False, dtype: int = -1):
    promoted = _result_dtype(_onnx_dtype(input), _rank(input), _onnx_dtype(weight), _rank(weight))
    operands, result = _square_sum_dtypes(promoted, dtype)
    terms = _weighted_square_terms(input, weight, operands)
    dims = _dims(dim)
    if max(_rank(input), _rank(weight)) == 0:
        summed = terms  # a 0-dim shape: one term, whatever dim (0 or -1) says
    elif not dims:
        summed = op.ReduceSum(terms, keepdims=int(keepdim))  # no axes: every axis
    else:
        axes = op.Constant(value=onnx.numpy_helper.from_array(np.array(dims, dtype=np.int64)))
        summed = op.ReduceSum(terms, axes, keepdims=int(keepdim))
    return op.Cast(summed, to=result)


def translation_table() -> dict:
    """{op overload: onnxscript function} for torch.onnx.export(..., custom_translation_table=...)."""
    return {
        torch.ops.custom.weighted_sum.default: weighted_sum,
        torch.ops.custom.weighted_sum.Scalar: weighted_sum_scalar,
        torch.ops.custom.weighted_square_sum.default: weighted_square_sum,
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


# c10::ScalarType's numbers (stable: they are in serialized TorchScript) of the dtypes the op takes.
_SCALAR_TYPE_TO_ONNX = {
    5: onnx.TensorProto.FLOAT16,
    6: onnx.TensorProto.FLOAT,
    7: onnx.TensorProto.DOUBLE,
    15: onnx.TensorProto.BFLOAT16,
}


@symbolic_helper.parse_args("v", "v", "is", "b", "i")
def _symbolic_weighted_square_sum(g, input, weight, dim, keepdim, dtype):
    x_type, w_type = input.type(), weight.type()
    promoted = _result_dtype(_TORCH_TO_ONNX[x_type.dtype()], x_type.dim(), _TORCH_TO_ONNX[w_type.dtype()], w_type.dim())
    if dtype is not None and dtype not in _SCALAR_TYPE_TO_ONNX:
        raise ValueError(f"custom::weighted_square_sum: dtype must be a floating type, got ScalarType {dtype}")
    operands, result = _square_sum_dtypes(promoted, None if dtype is None else _SCALAR_TYPE_TO_ONNX[dtype])
    compute = _compute_dtype(operands)

    def to(value, target):
        return g.op("Cast", value, to_i=target)

    x = to(to(input, operands), compute)
    w = to(to(weight, operands), compute)
    terms = g.op("Mul", w, g.op("Mul", x, x))
    dims = _dims(dim)
    if max(x_type.dim(), w_type.dim()) == 0:
        summed = terms
    elif not dims:
        summed = g.op("ReduceSum", terms, keepdims_i=int(keepdim))
    elif g.opset < 13:  # axes an attribute before opset 13, an input since
        summed = g.op("ReduceSum", terms, axes_i=dims, keepdims_i=int(keepdim))
    else:
        axes = g.op("Constant", value_t=torch.tensor(dims, dtype=torch.int64))
        summed = g.op("ReduceSum", terms, axes, keepdims_i=int(keepdim))
    return to(summed, result)


torch.onnx.register_custom_op_symbolic("custom::weighted_sum", _symbolic_weighted_sum, 9)
torch.onnx.register_custom_op_symbolic("custom::weighted_square_sum", _symbolic_weighted_square_sum, 9)
