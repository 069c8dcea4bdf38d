# SPDX-License-Identifier: BSD-3-Clause
"""Writes the model files that the C++ app (examples/cpp, weighted_sum_demo) and the tests run.

    python examples/python/export_models.py --out-dir out/models [--device cpu|cuda] [--library PATH]

writes
  weighted_sum.pt           TorchScript (torch.jit.script of CustomOpsModel, torch.jit.save);
                            device-independent: the C++ app runs it on every device it checks.
  weighted_sum_<device>.pt2 AOTInductor package (torch.export.export with dynamic batch and feature
                            sizes, then torch._inductor.aoti_compile_and_package); it runs only on
                            the device it was compiled for. On CPU, compiling needs a C++ compiler.

Both hold one model, which calls both operators: forward(input, weight) =
custom::weighted_sum(input, weight) + input + custom::weighted_square_sum(input, weight, [-1],
keepdim=True) of the operands in float64, a float64 tensor of shape (batch, features) for an input of
shape (batch, features) and a weight of shape (features,), every size at least 2.

The library must be loaded in every process that loads these files: Python callers load it with
torch.ops.load_library (or `import custom_ops`) before torch.jit.load or aoti_load_package; C++
callers link CustomOps::custom_ops.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import torch


class CustomOpsModel(torch.nn.Module):
    """Both operators: weighted_sum(input, weight) + input, plus each row's weighted_square_sum.

    The row sums are float64 (of float64 operands), so the callers' checks need no room for
    float32 rounding of a sum; the result is float64 too (type promotion of the addition). Not
    `dtype=torch.float64`: torch 2.11's AOTInductor passes a custom op's dtype argument as another
    dtype (pytorch/pytorch#169157, fixed by #173562 in later releases).
    """

    def forward(self, input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        row_sums = torch.ops.custom.weighted_square_sum(input.double(), weight.double(), [-1], keepdim=True)
        return torch.ops.custom.weighted_sum(input, weight) + input + row_sums


def reference(input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """What CustomOpsModel computes, with ATen alone: the operators' composites, the row sums in float64."""
    row_sums = (weight.double() * input.double().square()).sum(-1, keepdim=True)
    return weight * input * input + input + row_sums


def example_inputs(device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(8, 16, device=device), torch.randn(16, device=device)


def export_torchscript(path: str | os.PathLike) -> pathlib.Path:
    """torch.jit.script + torch.jit.save of CustomOpsModel.

    TorchScript is deprecated upstream (torch >= 2.14 warns with a FutureWarning); it still works
    with this library, but new C++ deployments should use export_aoti (torch.export + AOTInductor).
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(CustomOpsModel()), str(path))
    return path


def export_program(device: str | torch.device = "cpu") -> torch.export.ExportedProgram:
    """torch.export.export of CustomOpsModel with dynamic batch and feature sizes."""
    batch = torch.export.Dim("batch", min=2)
    features = torch.export.Dim("features", min=2)
    return torch.export.export(
        CustomOpsModel().to(device),
        example_inputs(device),
        dynamic_shapes={"input": {0: batch, 1: features}, "weight": {0: features}},
    )


def export_aoti(path: str | os.PathLike, device: str | torch.device = "cpu") -> pathlib.Path:
    """AOTInductor package (.pt2) of export_program(device)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = torch._inductor.aoti_compile_and_package(export_program(device), package_path=str(path))
    return pathlib.Path(written)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from load_library import cuda_usable, load_custom_ops

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=pathlib.Path, default=pathlib.Path("out/models"))
    parser.add_argument("--device", choices=["cpu", "cuda"], help="device of the .pt2 (default: cuda when usable)")
    parser.add_argument("--library", help="path of libcustom_ops.so (default: see load_library.py)")
    parser.add_argument("--no-aoti", action="store_true", help="write the TorchScript file only")
    args = parser.parse_args(argv)

    print(f"library: {load_custom_ops(args.library)}")
    device = args.device or ("cuda" if cuda_usable() else "cpu")
    if device == "cuda" and not cuda_usable():
        parser.error("--device cuda: no GPU visible, or the library has no CUDA kernels")

    print(export_torchscript(args.out_dir / "weighted_sum.pt"))
    if not args.no_aoti:
        print(export_aoti(args.out_dir / f"weighted_sum_{device}.pt2", device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
