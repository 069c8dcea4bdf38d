"""Writes the TorchScript module that torchscript_load_test.cpp loads from C++.

Usage: make_scripted_module.py LIBRARY OUTPUT
  LIBRARY  the built libcustom_ops.so, loaded so that torch.ops.custom.weighted_sum exists
  OUTPUT   where to torch.jit.save the scripted module

The module holds a weight parameter of shape (4,); its forward returns
torch.ops.custom.weighted_sum(x, self.weight), and its method square_sum(x, dim, keepdim, dtype)
returns torch.ops.custom.weighted_square_sum(x, self.weight, dim, keepdim, dtype=dtype), every
argument passed from C++. The C++ test reads the weight back from the file.
"""

import sys
from typing import Optional

import torch


class WeightedSquare(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(-1.5, 2.0, 4, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.custom.weighted_sum(x, self.weight)

    @torch.jit.export
    def square_sum(
        self, x: torch.Tensor, dim: Optional[list[int]], keepdim: bool, dtype: Optional[torch.dtype]
    ) -> torch.Tensor:
        return torch.ops.custom.weighted_square_sum(x, self.weight, dim, keepdim, dtype=dtype)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    library, output = sys.argv[1], sys.argv[2]
    torch.ops.load_library(library)
    module = torch.jit.script(WeightedSquare())
    # Check here too, so a wrong module fails the fixture rather than the C++ test.
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(module(x), module.weight * x.square())
        torch.testing.assert_close(
            module.square_sum(x, [1], False, torch.float64), (module.weight.double() * x.double().square()).sum(1)
        )
    torch.jit.save(module, output)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
