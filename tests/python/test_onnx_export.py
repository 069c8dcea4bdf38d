"""ONNX export through `import custom_ops.onnx` (translation in standard ONNX ops), of every
operator, checked with onnx.checker and onnxruntime at several batch sizes of a dynamic batch
dimension, for both exporters (onnx_harness).

An elementwise operator is compared bit for bit. A reduction's ReduceSum adds in onnxruntime's
order, not our kernel's: dtypes and shapes are compared exactly, values up to the two orders'
rounding (onnx_harness's "sum" check). Its weights are positive, so every term is and a relative
bound holds: with mixed signs the sum can cancel to near zero.

Needs onnx, onnxscript and onnxruntime (skipped without them) and the package (the `site` fixture
of conftest.py): each export runs in a fresh interpreter.
"""

import json

import pytest

from onnx_harness import EXPORTS, export_and_run
from operators import each_operator
from test_package import run_python

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow

# op name -> (ONNX ops the graph must have, how many cases, Python source that defines CASES:
# name -> (model, input dtype, input shape without the batch dim))
CASES = {
    "weighted_sum": (
        {"Mul"},
        4,
        """
class Model(torch.nn.Module):
    def __init__(self, weight_dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(5, dtype=weight_dtype))
    def forward(self, x):
        return torch.relu(torch.ops.custom.weighted_sum(x, self.weight)) * 3

CASES = {
    f"{x_dtype}-{w_dtype}": (Model(w_dtype), x_dtype, (5,))
    for x_dtype, w_dtype in [(torch.float32, torch.float32), (torch.float64, torch.float64),
                             (torch.float16, torch.float32), (torch.float32, torch.float16)]
}
""",
    ),
    "weighted_square_sum": (
        {"ReduceSum"},
        10,
        """
class Model(torch.nn.Module):
    def __init__(self, weight_shape, weight_dtype, dim, keepdim, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(weight_shape, dtype=weight_dtype) + 0.5)
        self.dim, self.keepdim, self.dtype = dim, keepdim, dtype
    def forward(self, x):
        return torch.ops.custom.weighted_square_sum(x, self.weight, self.dim, self.keepdim, dtype=self.dtype) * 3

ARGUMENTS = {  # name: (input dtype, weight shape, weight dtype, dim, keepdim, dtype)
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
}
CASES = {
    name: (Model(w_shape, w_dtype, dim, keepdim, dtype), x_dtype, (3, 5))
    for name, (x_dtype, w_shape, w_dtype, dim, keepdim, dtype) in ARGUMENTS.items()
}
""",
    ),
}


@pytest.mark.parametrize("how", list(EXPORTS))
@each_operator
def test_export_runs_in_onnxruntime_like_the_op(site, op, how):
    expected_ops, count, cases = CASES[op.name]
    report = export_and_run(site, how, "equal" if op.bitwise else "sum", cases)
    assert len(report) == count
    for case, entry in report.items():
        assert entry["checks"] == ["ok"] * 4, (case, entry)
        assert expected_ops <= set(entry["ops"]), (case, entry)
        assert not any("weighted" in name for name in entry["ops"]), (case, entry)  # standard ops only


@each_operator
def test_translation_table_has_the_op(site, op):
    result = run_python(
        f"""
        import json, torch, custom_ops, custom_ops.onnx
        table = custom_ops.onnx.translation_table()
        print(json.dumps(table.get(torch.ops.custom.{op.name}.default) is custom_ops.onnx.{op.name}))
        """,
        site,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) is True
