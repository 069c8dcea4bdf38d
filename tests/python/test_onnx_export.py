"""ONNX export through `import custom_ops.onnx` (translation in standard ONNX ops), checked with
onnx.checker and onnxruntime at several batch sizes of a dynamic batch dimension (onnx_harness),
bit for bit like the op.

Needs onnx, onnxscript and onnxruntime (skipped without them) and the package (the `site` fixture
of conftest.py): each export runs in a fresh interpreter.
"""

import pytest

from onnx_harness import export_and_run

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow

CASES = """
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
"""


@pytest.mark.parametrize("how", ["registered", "table", "legacy"])
def test_export_runs_in_onnxruntime_like_the_op(site, how):
    report = export_and_run(site, how, "equal", CASES)
    assert len(report) == 4
    for case, entry in report.items():
        assert entry["checks"] == ["ok"] * 4, (case, entry)
        assert not any("weighted_sum" in op for op in entry["ops"]), (case, entry)  # standard ops only
