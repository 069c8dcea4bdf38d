# SPDX-License-Identifier: BSD-3-Clause
"""Writes the TorchScript modules that torchscript_load_test.cpp loads from C++: one per operator
of the table (python/custom_ops/_operators.py), OUTPUT_DIR/NAME.pt.

Usage: make_scripted_module.py LIBRARY OUTPUT_DIR
  LIBRARY     the built libcustom_ops.so, loaded so that torch.ops.custom.NAME exists
  OUTPUT_DIR  where to torch.jit.save the scripted modules

Each module holds a weight parameter of shape (4,). An elementwise operator's forward(x) returns
torch.ops.custom.NAME(x, self.weight); a reduction's forward(x, dim, keepdim, dtype) returns
torch.ops.custom.NAME(x, self.weight, dim, keepdim, dtype=dtype), every argument passed from C++.
The C++ test reads the weight back from the file.
"""

import importlib
import importlib.util
import pathlib
import sys
import tempfile
import types

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]

# Each kind's module, NAME standing for the operator's name. TorchScript compiles a class from
# its source file, so each is written to a file and imported.
SOURCES = {
    "elementwise": """
import torch


class Scripted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(-1.5, 2.0, 4, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.custom.NAME(x, self.weight)


def check(module):
    x = torch.randn(3, 4)
    torch.testing.assert_close(module(x), torch.ops.custom.NAME(x, module.weight), rtol=0, atol=0)
""",
    "reduction": """
from typing import Optional

import torch


class Scripted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(-1.5, 2.0, 4, dtype=torch.float32))

    def forward(
        self, x: torch.Tensor, dim: Optional[list[int]], keepdim: bool, dtype: Optional[torch.dtype]
    ) -> torch.Tensor:
        return torch.ops.custom.NAME(x, self.weight, dim, keepdim, dtype=dtype)


def check(module):
    x = torch.randn(3, 4)
    expected = torch.ops.custom.NAME(x, module.weight, [1], False, dtype=torch.float64)
    torch.testing.assert_close(module(x, [1], False, torch.float64), expected, rtol=0, atol=0)
""",
}


def operator_table():
    """python/custom_ops/_operators.py, imported without the package's __init__ (which needs a
    built package)."""
    package = types.ModuleType("custom_ops_sources")
    package.__path__ = [str(REPO / "python" / "custom_ops")]
    sys.modules.setdefault("custom_ops_sources", package)
    return importlib.import_module("custom_ops_sources._operators")


def script(name, kind, scratch):
    path = pathlib.Path(scratch) / f"scripted_{name}.py"
    path.write_text(SOURCES[kind].replace("NAME", name))
    spec = importlib.util.spec_from_file_location(f"scripted_{name}", path)
    source = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = source
    spec.loader.exec_module(source)
    module = torch.jit.script(source.Scripted())
    # Check here too, so a wrong module fails the fixture rather than the C++ test.
    with torch.no_grad():
        source.check(module)
    return module


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    library, output = sys.argv[1], pathlib.Path(sys.argv[2])
    torch.ops.load_library(library)
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for row in operator_table().OPERATORS:
            path = output / f"{row.name}.pt"
            torch.jit.save(script(row.name, row.kind, scratch), str(path))
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
