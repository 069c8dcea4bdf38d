"""ONNX export of custom::weighted_square_sum through `import custom_ops.onnx` (Cast, Mul and
ReduceSum), checked with onnx.checker and onnxruntime at several batch sizes of a dynamic batch
dimension, for both exporters, as test_onnx_export.py checks weighted_sum.

ReduceSum adds in onnxruntime's order, not our kernel's: values are compared with the op's up to
the rounding of the result dtype (torch.testing.assert_close's defaults), dtypes and shapes exactly.

Needs onnx, onnxscript and onnxruntime (skipped without them) and the package (the `site` fixture
of conftest.py): each export runs in a fresh interpreter.
"""

import json

import pytest

from test_package import run_python

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow

EXPORT_AND_RUN = """
import json, pathlib, tempfile, warnings
import numpy as np, onnx, onnxruntime, torch
import custom_ops, custom_ops.onnx

class Model(torch.nn.Module):
    def __init__(self, weight_shape, weight_dtype, dim, keepdim, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(weight_shape, dtype=weight_dtype))
        self.dim, self.keepdim, self.dtype = dim, keepdim, dtype
    def forward(self, x):
        return torch.ops.custom.weighted_square_sum(x, self.weight, self.dim, self.keepdim, dtype=self.dtype) * 3

CASES = {{  # name: (input dtype, weight shape, weight dtype, dim, keepdim, dtype)
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
results = {{}}
for case, (x_dtype, w_shape, w_dtype, dim, keepdim, dtype) in CASES.items():
    model = Model(w_shape, w_dtype, dim, keepdim, dtype).eval()
    x = torch.randn(4, 3, 5, dtype=x_dtype)
    path = pathlib.Path(tempfile.mkdtemp()) / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        {export}
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    checks = []
    for batch in (1, 4, 7, 33):
        xb = torch.randn(batch, 3, 5, dtype=x_dtype)
        got = torch.from_numpy(session.run(None, {{name: xb.numpy()}})[0])
        expected = model(xb).detach()
        try:
            torch.testing.assert_close(got, expected)  # dtype and shape exactly, values to rounding
            checks.append("ok")
        except AssertionError as error:
            checks.append(str(error))
    ops = sorted({{node.op_type for node in onnx.load(str(path)).graph.node}})
    results[case] = {{"checks": checks, "ops": ops}}
print(json.dumps(results))
"""

DYNAMO = (
    'torch.onnx.export(model, (x,), str(path), dynamo=True, {table}dynamic_shapes=({{0: torch.export.Dim("batch")}},))'
)
LEGACY = (
    'torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"], dynamic_axes={{"x": {{0: "batch"}}}}'
    "{opset})"
)


@pytest.mark.parametrize("how", ["registered", "table", "legacy", "legacy_opset11"])
def test_export_runs_in_onnxruntime_like_the_op(site, how):
    export = {
        "registered": DYNAMO.format(table=""),
        "table": DYNAMO.format(table="custom_translation_table=custom_ops.onnx.translation_table(), "),
        "legacy": LEGACY.format(opset=""),
        # ReduceSum takes its axes as an attribute before opset 13, as an input since.
        "legacy_opset11": LEGACY.format(opset=", opset_version=11"),
    }[how]
    result = run_python(EXPORT_AND_RUN.format(export=export), site)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(report) == 10
    for case, entry in report.items():
        assert entry["checks"] == ["ok"] * 4, (case, entry)
        assert "ReduceSum" in entry["ops"], (case, entry)
        assert not any("weighted" in op for op in entry["ops"]), (case, entry)  # standard ops only


def test_translation_table_has_the_op(site):
    result = run_python(
        """
        import json, torch, custom_ops, custom_ops.onnx
        table = custom_ops.onnx.translation_table()
        op = torch.ops.custom.weighted_square_sum.default
        print(json.dumps({"has": op in table, "ours": table.get(op) is custom_ops.onnx.weighted_square_sum,
                          "weighted_sum_kept": torch.ops.custom.weighted_sum.default in table}))
        """,
        site,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"has": True, "ours": True, "weighted_sum_kept": True}
