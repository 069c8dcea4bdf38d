# SPDX-License-Identifier: BSD-3-Clause
"""ONNX export through `import custom_ops.onnx` (translation in standard ONNX ops), of every
operator, checked with onnx.checker and onnxruntime at several batch sizes of a dynamic batch
dimension, for both exporters (onnx_harness).

Parametrized by the table (operators.py): each kind has its cases, with the operator's name filled
in, and the graph must hold its term's arithmetic. An elementwise operator is compared bit for
bit. A reduction's ReduceSum adds in onnxruntime's order, not our kernel's:
dtypes and shapes are compared exactly, values up to the two orders'
rounding (onnx_harness's "sum" check). Its weights are positive, so every term is and a relative
bound holds: with mixed signs the sum can cancel to near zero.

Needs onnx, onnxscript and onnxruntime (skipped without them) and the package (the `site` fixture
of conftest.py): each export runs in a fresh interpreter.
"""

import json

import pytest

from onnx_harness import EXPORTS, export_and_run
from operators import ELEMENTWISE, each_operator, table
from test_package import run_python

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow

# kind -> (how many cases, Python source that defines CASES: name -> (model, input dtype, input
# shape without the batch dim), with {name} the operator's name)
CASES = {
    "elementwise": (
        4,
        """
class Model(torch.nn.Module):
    def __init__(self, weight_dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(5, dtype=weight_dtype))
    def forward(self, x):
        return torch.relu(torch.ops.custom.{name}(x, self.weight)) * 3

CASES = {{
    f"{{x_dtype}}-{{w_dtype}}": (Model(w_dtype), x_dtype, (5,))
    for x_dtype, w_dtype in [(torch.float32, torch.float32), (torch.float64, torch.float64),
                             (torch.float16, torch.float32), (torch.float32, torch.float16)]
}}
""",
    ),
    "reduction": (
        10,
        """
class Model(torch.nn.Module):
    def __init__(self, weight_shape, weight_dtype, dim, keepdim, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(weight_shape, dtype=weight_dtype) + 0.5)
        self.dim, self.keepdim, self.dtype = dim, keepdim, dtype
    def forward(self, x):
        return torch.ops.custom.{name}(x, self.weight, self.dim, self.keepdim, dtype=self.dtype) * 3

ARGUMENTS = {{  # name: (input dtype, weight shape, weight dtype, dim, keepdim, dtype)
    "all_dims": (torch.float32, (5,), torch.float32, None, False, None),
    "empty_dim_list_keepdim": (torch.float32, (5,), torch.float32, [], True, None),
    "batch_dim_keepdim": (torch.float32, (3, 1), torch.float32, [0], True, None),
    "last_negative": (torch.float64, (5,), torch.float64, [-1], False, None),
    "two_dims": (torch.float32, (3, 5), torch.float32, [2, 1], False, None),
    "half_to_float32": (torch.float16, (5,), torch.float16, [1], False, torch.float32),
    "float32_to_half": (torch.float32, (5,), torch.float32, [1, 2], False, torch.float16),
    "float32_to_float64": (torch.float32, (5,), torch.float32, [2], False, torch.float64),
    "mixed_half_float32": (torch.float16, (5,), torch.float32, [2], True, None),
    "zero_dim_weight": (torch.float16, (), torch.float32, [2], False, None),
}}
CASES = {{
    name: (Model(w_shape, w_dtype, dim, keepdim, dtype), x_dtype, (3, 5))
    for name, (x_dtype, w_shape, w_dtype, dim, keepdim, dtype) in ARGUMENTS.items()
}}
""",
    ),
}


class _Nodes:
    """Stands for a value in a term's formula; collects the ONNX ops its + - * / and functions need
    where the value varies with the input: an op of the weight alone (sigmoid(w)) may be folded into
    a constant by the exporter's optimizer, since the weight is an initializer."""

    def __init__(self, varies, ops=frozenset()):
        self.varies, self.ops = varies, ops

    def _node(self, kind, other=None):
        varies = self.varies or getattr(other, "varies", False)
        ops = self.ops | getattr(other, "ops", frozenset())
        return _Nodes(varies, ops | {kind} if varies else ops)

    def __add__(self, other):
        return self._node("Add", other)

    def __sub__(self, other):
        return self._node("Sub", other)

    def __mul__(self, other):
        return self._node("Mul", other)

    def __truediv__(self, other):
        return self._node("Div", other)

    __radd__, __rmul__ = __add__, __mul__

    def __rsub__(self, other):
        return self._node("Sub", other)

    def __rtruediv__(self, other):
        return self._node("Div", other)

    def __neg__(self):
        return self._node("Neg")

    def term_function(self, function, *constant):
        # A standard operator, or the formula of others that stands for it (log1p: Log, Add).
        if function.onnx_operator is None:
            return function.onnx_formula(self)
        return self._node(function.onnx_operator)


def expected_ops(op):
    """The ONNX ops the translation of `op` must have: its term's arithmetic on the input, and a
    reduction's ReduceSum."""
    ops = getattr(op.term.value(_Nodes(varies=True), _Nodes(varies=False)), "ops", set())
    return set(ops) | ({"ReduceSum"} if op.kind != ELEMENTWISE else set())


# The standard operators a term's functions translate to (Erf, Sigmoid, ...): where onnxruntime's CPU
# kernels lack one for a dtype (Erf has float32 alone), that case cannot run there.
FUNCTION_OPERATORS = {f.onnx_operator for f in table.FUNCTIONS.values() if f.onnx_operator}


@pytest.mark.parametrize("how", list(EXPORTS))
@each_operator
def test_export_runs_in_onnxruntime_like_the_op(site, op, how):
    count, cases = CASES[op.kind]
    report = export_and_run(site, how, "equal" if op.bitwise else "sum", cases.format(name=op.name))
    assert len(report) == count
    unsupported = {case: entry.pop("unsupported") for case, entry in report.items() if "unsupported" in entry}
    for case, message in unsupported.items():
        assert any(f"for {name}(" in message for name in FUNCTION_OPERATORS), (case, message)
    assert len(unsupported) < count, unsupported
    for case, entry in report.items():
        if case in unsupported:
            continue
        assert entry["checks"] == ["ok"] * 4, (case, entry)
        assert expected_ops(op) <= set(entry["ops"]), (case, entry)
        assert not any(op.name in name or "custom" in name for name in entry["ops"]), (case, entry)  # standard ops


@each_operator
def test_translation_table_has_the_op(site, op):
    overloads = [op.name] + ([f"{op.name}.Scalar"] if op.kind == ELEMENTWISE else [])
    result = run_python(
        f"""
        import json, torch, custom_ops, custom_ops.onnx
        table = custom_ops.onnx.translation_table()
        found = []
        for name in {overloads!r}:
            packet, _, overload = name.partition(".")
            key = getattr(getattr(torch.ops.custom, packet), overload or "default")
            found.append(table.get(key) is custom_ops.onnx.TRANSLATIONS[name] is not None)
        print(json.dumps(found))
        """,
        site,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [True] * len(overloads)
