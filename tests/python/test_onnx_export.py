"""ONNX export through `import custom_ops.onnx` (translation in standard ONNX ops), checked with
onnx.checker and onnxruntime at several batch sizes of a dynamic batch dimension.

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
    def __init__(self, weight_dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(5, dtype=weight_dtype))
    def forward(self, x):
        return torch.relu(torch.ops.custom.weighted_sum(x, self.weight)) * 3

results = {{}}
for x_dtype, w_dtype in [(torch.float32, torch.float32), (torch.float64, torch.float64),
                         (torch.float16, torch.float32), (torch.float32, torch.float16)]:
    model = Model(w_dtype).eval()
    x = torch.randn(4, 5, dtype=x_dtype)
    path = pathlib.Path(tempfile.mkdtemp()) / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        {export}
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    equal = []
    for batch in (1, 4, 7, 33):
        xb = torch.randn(batch, 5, dtype=x_dtype)
        got = session.run(None, {{name: xb.numpy()}})[0]
        expected = model(xb).detach()
        equal.append(got.dtype == expected.numpy().dtype and np.array_equal(got, expected.numpy()))
    ops = sorted({{node.op_type for node in onnx.load(str(path)).graph.node}})
    results[f"{{x_dtype}}-{{w_dtype}}"] = {{"equal": equal, "ops": ops}}
print(json.dumps(results))
"""

DYNAMO = (
    'torch.onnx.export(model, (x,), str(path), dynamo=True, {table}dynamic_shapes=({{0: torch.export.Dim("batch")}},))'
)
LEGACY = (
    'torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"], dynamic_axes={{"x": {{0: "batch"}}}})'
)


@pytest.mark.parametrize("how", ["registered", "table", "legacy"])
def test_export_runs_in_onnxruntime_like_the_op(site, how):
    export = {
        "registered": DYNAMO.format(table=""),
        "table": DYNAMO.format(table="custom_translation_table=custom_ops.onnx.translation_table(), "),
        "legacy": LEGACY.format(),
    }[how]
    result = run_python(EXPORT_AND_RUN.format(export=export), site)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for case, entry in report.items():
        assert entry["equal"] == [True] * 4, (case, entry)
        assert not any("weighted_sum" in op for op in entry["ops"]), (case, entry)  # standard ops only
