# SPDX-License-Identifier: BSD-3-Clause
"""Export a model that uses custom::weighted_sum to ONNX and run it with onnxruntime.

    pip install onnx onnxscript onnxruntime
    python examples/onnx/export_weighted_sum.py [out.onnx]

`import custom_ops.onnx` registers the op's translation (standard ONNX Cast and Mul), so
torch.onnx.export needs no extra argument; the batch dimension stays dynamic.
"""

import sys

import numpy as np
import onnxruntime
import torch

import custom_ops
import custom_ops.onnx  # registers the translation


class ScaledSquare(torch.nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = torch.nn.Linear(features, features)
        self.weight = torch.nn.Parameter(torch.rand(features))

    def forward(self, x):
        return custom_ops.weighted_sum(self.linear(x), self.weight).relu()


def main(path: str = "weighted_sum.onnx") -> None:
    model = ScaledSquare(8).eval()
    example = torch.randn(4, 8)
    torch.onnx.export(model, (example,), path, dynamo=True, dynamic_shapes=({0: torch.export.Dim("batch")},))
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    for batch in (1, 3, 16):
        x = torch.randn(batch, 8)
        got = session.run(None, {name: x.numpy()})[0]
        expected = model(x).detach().numpy()
        print(f"batch {batch}: max |onnxruntime - torch| = {np.abs(got - expected).max():.3g}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
