# SPDX-License-Identifier: BSD-3-Clause
"""ONNX export of the `custom` operators, in standard ONNX ops (Cast, Mul, ReduceSum).

Opt-in, with the ``onnx`` extra (``pip install 'custom-ops[onnx]'``: onnx, onnxscript and, to run
the models, onnxruntime). ``import custom_ops.onnx`` registers the translation with onnxscript's
torch_lib registry, which ``torch.onnx.export(..., dynamo=True)`` reads, so models that call the
op export with no extra argument; ``translation_table()`` gives it for
``custom_translation_table=``. The deprecated TorchScript exporter (``dynamo=False``) gets a
symbolic as well. Only the functional overloads export (use the op, not out= or in place, in
models to export).

Every operator of the table (_operators.py) has one, written from its term: the term's ``value``
evaluated on the operands' ONNX values, its ``+ - * /`` as Add, Sub, Mul and Div, its numbers
as constants of the compute dtype and each function as its row of FUNCTIONS says (``onnx``: a
standard operator, Tanh, Erf, Sigmoid, ..., or a formula of others where ONNX has none, log1p as
``log(1 + e)``). It follows the op's dtype rules: the result dtype is
torch.result_type(input, weight) (a 0-dim operand does not promote a dimensioned one of its
category), each operand is cast to it, float16/bfloat16 compute in float32 and round once,
float32/float64 compute in their own dtype (for ``w * (x * x)`` the op's bits). A reduction is
those terms summed with ReduceSum (every axis when ``dim`` is None or empty) in float32, or
float64 where the promoted or the requested dtype is float64, then cast once to ``dtype`` if
given, else to the promoted dtype. ReduceSum adds in the runtime's order, so its values agree
with the op's to a few roundings of the accumulation dtype, not bit for bit.
"""

from __future__ import annotations

import torch
from torch.onnx import symbolic_helper

import custom_ops  # noqa: F401  (loads the operators)
from custom_ops._operators import ELEMENTWISE, OPERATORS

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

__all__ = ["TRANSLATIONS", "translation_table"]

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


class _Graph:
    """Where a term's formula builds its nodes: onnxscript's opset (the dynamo exporter) or a
    TorchScript graph `g` (the deprecated exporter), in the compute dtype `compute`."""

    def __init__(self, compute: int, g=None):
        self.compute, self.g = compute, g

    def node(self, kind: str, *inputs):
        return self.g.op(kind, *inputs) if self.g is not None else getattr(op, kind)(*inputs)

    def constant(self, number: float):
        if self.g is not None:
            return self.g.op("Constant", value_t=torch.tensor(number, dtype=_ONNX_TO_TORCH[self.compute]))
        array = np.array(number, dtype=np.float64 if self.compute == onnx.TensorProto.DOUBLE else np.float32)
        return op.Constant(value=onnx.numpy_helper.from_array(array))


def _binary(kind: str):
    """The operator and its reflected form (a number on the left) of a _Value, as nodes of `kind`."""
    return (lambda self, other: self._node(kind, self, other), lambda self, other: self._node(kind, other, self))


class _Value:
    """An ONNX value in a term's formula: ``+ - * /`` with another or with a number add a node
    (numbers become constants of the compute dtype). `uses`: the operands it was computed from."""

    def __init__(self, value, graph: _Graph, uses: frozenset):
        self.value, self.graph, self.uses = value, graph, uses

    def _node(self, kind, a, b):
        a, b = (v if isinstance(v, _Value) else _Value(self.graph.constant(v), self.graph, frozenset()) for v in (a, b))
        return _Value(self.graph.node(kind, a.value, b.value), self.graph, a.uses | b.uses)

    __add__, __radd__ = _binary("Add")
    __sub__, __rsub__ = _binary("Sub")
    __mul__, __rmul__ = _binary("Mul")
    __truediv__, __rtruediv__ = _binary("Div")

    def __neg__(self):
        return _Value(self.graph.node("Neg", self.value), self.graph, self.uses)

    def __pos__(self):
        return self

    def term_function(self, function, *constant):
        """A function of the term (FUNCTIONS): its ONNX operator, or its formula of others."""
        if function.onnx_operator is None:
            return function.onnx_formula(self)
        constants = [self.graph.constant(c) for c in constant]
        return _Value(self.graph.node(function.onnx_operator, self.value, *constants), self.graph, self.uses)


def _terms(term, x, w, dtype: int, g=None):
    """``term.value`` of the operands cast to `dtype`, in its compute dtype (not rounded back), of
    their broadcast shape (Expand where the formula leaves an operand out)."""
    graph = _Graph(_compute_dtype(dtype), g)

    def cast(value, target):
        return g.op("Cast", value, to_i=target) if g is not None else op.Cast(value, to=target)

    operands = {name: cast(cast(value, dtype), graph.compute) for name, value in (("x", x), ("w", w))}
    result = term.value(*(_Value(value, graph, frozenset((name,))) for name, value in operands.items()))
    if not isinstance(result, _Value):  # a constant term
        result = _Value(graph.constant(result), graph, frozenset())
    value = result.value
    for name in sorted(set(operands) - result.uses):
        value = graph.node("Expand", value, graph.node("Shape", operands[name]))
    return value


def _elementwise(term, x, w, dtype: int, g=None):
    terms = _terms(term, x, w, dtype, g)
    return g.op("Cast", terms, to_i=dtype) if g is not None else op.Cast(terms, to=dtype)


def _square_sum_dtypes(name: str, promoted: int, dtype) -> tuple[int, int]:
    """(operand dtype, result dtype) of a reduction: the operands stay in the promoted dtype
    unless the result is float64, then both are float64."""
    result = promoted if dtype is None or dtype == -1 else int(dtype)
    if result not in _ORDER:
        raise ValueError(f"custom::{name}: dtype must be a floating type, got ONNX type {result}")
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


def _elementwise_translations(name: str, term) -> dict:
    def functional(input, weight):
        dtype = _result_dtype(_onnx_dtype(input), _rank(input), _onnx_dtype(weight), _rank(weight))
        return _elementwise(term, input, weight, dtype)

    def scalar(input, weight: float):
        # A number keeps a float input's dtype; it is rounded to that dtype, as the op rounds it.
        dtype = _onnx_dtype(input)
        number = op.Constant(value=onnx.numpy_helper.from_array(np.array(float(weight), dtype=np.float64)))
        return _elementwise(term, input, number, dtype)

    return {
        name: _translation(f"custom::{name}", functional, name),
        f"{name}.Scalar": _translation(f"custom::{name}.Scalar", scalar, f"{name}_scalar"),
    }


def _reduction_translations(name: str, term) -> dict:
    def reduction(input, weight, dim=None, keepdim: bool = False, dtype: int = -1):
        promoted = _result_dtype(_onnx_dtype(input), _rank(input), _onnx_dtype(weight), _rank(weight))
        operands, result = _square_sum_dtypes(name, promoted, dtype)
        terms = _terms(term, input, weight, operands)
        dims = _dims(dim)
        if max(_rank(input), _rank(weight)) == 0:
            summed = terms  # a 0-dim shape: one term, whatever dim (0 or -1) says
        elif not dims:
            summed = op.ReduceSum(terms, keepdims=int(keepdim))  # no axes: every axis
        else:
            axes = op.Constant(value=onnx.numpy_helper.from_array(np.array(dims, dtype=np.int64)))
            summed = op.ReduceSum(terms, axes, keepdims=int(keepdim))
        return op.Cast(summed, to=result)

    return {name: _translation(f"custom::{name}", reduction, name)}


def _translation(qualified_name: str, function, name: str):
    function.__name__ = function.__qualname__ = name
    return torch_op(qualified_name, trace_only=True)(function)


def _translations() -> dict:
    translations = {}
    for operator in OPERATORS:
        make = _elementwise_translations if operator.kind == ELEMENTWISE else _reduction_translations
        translations.update(make(operator.name, operator.term))
    return translations


#: {schema name ("weighted_sum.Scalar", say): its onnxscript translation}, for every operator's
#: functional overloads (registered with onnxscript's torch_lib registry on import).
TRANSLATIONS = _translations()


def translation_table() -> dict:
    """{op overload: onnxscript function} for torch.onnx.export(..., custom_translation_table=...)."""
    table = {}
    for schema_name, function in TRANSLATIONS.items():
        name, _, overload = schema_name.partition(".")
        table[getattr(getattr(torch.ops.custom, name), overload or "default")] = function
    return table


# --- the deprecated TorchScript-based exporter (dynamo=False) ---------------------------------

_TORCH_TO_ONNX = {
    torch.float16: onnx.TensorProto.FLOAT16,
    torch.bfloat16: onnx.TensorProto.BFLOAT16,
    torch.float32: onnx.TensorProto.FLOAT,
    torch.float64: onnx.TensorProto.DOUBLE,
}


_ONNX_TO_TORCH = {value: key for key, value in _TORCH_TO_ONNX.items()}


def _symbolic_elementwise(term):
    def symbolic(g, input, weight):
        x_type, w_type = input.type(), weight.type()
        dtype = _result_dtype(
            _TORCH_TO_ONNX[x_type.dtype()], x_type.dim(), _TORCH_TO_ONNX[w_type.dtype()], w_type.dim()
        )
        return _elementwise(term, input, weight, dtype, g)

    return symbolic


# c10::ScalarType's numbers (stable: they are in serialized TorchScript) of the dtypes the op takes.
_SCALAR_TYPE_TO_ONNX = {
    5: onnx.TensorProto.FLOAT16,
    6: onnx.TensorProto.FLOAT,
    7: onnx.TensorProto.DOUBLE,
    15: onnx.TensorProto.BFLOAT16,
}


def _symbolic_reduction(name, term):
    @symbolic_helper.parse_args("v", "v", "is", "b", "i")
    def symbolic(g, input, weight, dim, keepdim, dtype):
        x_type, w_type = input.type(), weight.type()
        promoted = _result_dtype(
            _TORCH_TO_ONNX[x_type.dtype()], x_type.dim(), _TORCH_TO_ONNX[w_type.dtype()], w_type.dim()
        )
        if dtype is not None and dtype not in _SCALAR_TYPE_TO_ONNX:
            raise ValueError(f"custom::{name}: dtype must be a floating type, got ScalarType {dtype}")
        operands, result = _square_sum_dtypes(name, promoted, None if dtype is None else _SCALAR_TYPE_TO_ONNX[dtype])
        terms = _terms(term, input, weight, operands, g)
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
        return g.op("Cast", summed, to_i=result)

    return symbolic


for _operator in OPERATORS:
    torch.onnx.register_custom_op_symbolic(
        f"custom::{_operator.name}",
        _symbolic_elementwise(_operator.term)
        if _operator.kind == ELEMENTWISE
        else _symbolic_reduction(_operator.name, _operator.term),
        9,
    )
