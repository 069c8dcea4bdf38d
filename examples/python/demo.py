# SPDX-License-Identifier: BSD-3-Clause
"""The `custom` operators from Python: eager on CPU (and CUDA), autograd, torch.compile, and,
given the C++ app, the same operator from a process without Python.

    python examples/python/demo.py [--library PATH] [--cpp-app PATH/weighted_sum_demo] [--out-dir DIR]

--library: libcustom_ops.so to load (default: $CUSTOM_OPS_LIBRARY, the installed custom_ops package,
or build/libcustom_ops.so). --cpp-app: the program of examples/cpp; the demo then writes a
TorchScript file and an AOTInductor package with export_models.py and runs the program on them.
Exits non-zero when any result differs from its ATen reference (weight * input**2, summed for
weighted_square_sum).
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import subprocess
import sys
import tempfile
import warnings

# Third-party messages that ask nothing of a user, silenced at their source (each by its text, so
# anything else still shows): torch without numpy warns on import (nothing here uses numpy), and
# torch.utils.cpp_extension logs "No CUDA runtime is found" when Inductor compiles the CPU package
# on a machine without a GPU.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)

import torch  # noqa: E402 (after the filter)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import export_models  # noqa: E402 (beside this file)
from load_library import cuda_usable, load_custom_ops  # noqa: E402


def check(what: str, actual: torch.Tensor, expected: torch.Tensor) -> bool:
    ok = actual.shape == expected.shape and torch.allclose(actual, expected, rtol=1e-5, atol=1e-6)
    print(f"  {'ok      ' if ok else 'MISMATCH'} {what}")
    return ok


def show_device(device: str) -> bool:
    print(f"\n== {device} ==")
    ok = True
    input = torch.randn(3, 4, device=device, requires_grad=True)
    weight = torch.randn(4, device=device, requires_grad=True)

    # Eager, through the dispatcher: the device's kernel, then the Autograd kernel for backward.
    output = torch.ops.custom.weighted_sum(input, weight)
    print(f"input =\n{input.detach()}\nweight = {weight.detach()}\nweighted_sum(input, weight) =\n{output.detach()}")
    grad = torch.randn_like(output)
    output.backward(grad)
    print(f"input.grad =\n{input.grad}\nweight.grad = {weight.grad}")
    with torch.no_grad():
        ok &= check("forward", output, weight * input * input)
        ok &= check("grad of input", input.grad, 2 * weight * input * grad)
        ok &= check("grad of weight", weight.grad, (input * input * grad).sum(0))

    # The out= and in-place overloads.
    x, w = input.detach(), weight.detach()
    out = torch.empty_like(x)
    torch.ops.custom.weighted_sum.out(x, w, out=out)
    ok &= check("weighted_sum.out", out, w * x * x)
    inplace = x.clone()
    torch.ops.custom.weighted_sum_(inplace, w)
    ok &= check("weighted_sum_", inplace, w * x * x)

    # weighted_square_sum: sum(weight * input**2) over dims (here each row), like torch.sum.
    input, weight = x.clone().requires_grad_(), w.clone().requires_grad_()
    row_sums = torch.ops.custom.weighted_square_sum(input, weight, [1])
    print(f"weighted_square_sum(input, weight, dim=[1]) = {row_sums.detach()}")
    row_sums.sum().backward()
    ok &= check("weighted_square_sum, dim=[1]", row_sums.detach(), (w * x.square()).sum(1))
    ok &= check("its grad of input", input.grad, 2 * w * x)
    total = torch.ops.custom.weighted_square_sum(x, w, dtype=torch.float64)  # every dim, in float64
    ok &= check("weighted_square_sum, dtype=float64", total, (w.double() * x.double().square()).sum())

    # torch.compile: one graph, no breaks, sizes dynamic.
    @torch.compile(fullgraph=True, dynamic=True)
    def scaled(input, weight):
        return torch.ops.custom.weighted_sum(input, weight).sum(-1) * 0.5

    for rows in (2, 5, 9):
        x = torch.randn(rows, 4, device=device)
        ok &= check(f"torch.compile, {rows} rows", scaled(x, w), (w * x * x).sum(-1) * 0.5)
    return ok


def run_cpp_app(app: pathlib.Path, out_dir: pathlib.Path) -> bool:
    device = "cuda" if cuda_usable() else "cpu"
    print(f"\n== C++: {app} ==")
    with warnings.catch_warnings():
        # torch >= 2.14 deprecates torch.jit.script and torch.jit.save (FutureWarning); the README says so.
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)
        torchscript = export_models.export_torchscript(out_dir / "weighted_sum.pt")
    print(f"wrote {torchscript}")
    print(f"compiling the AOTInductor package for {device} (a C++ compile: tens of seconds)...", flush=True)
    package = export_models.export_aoti(out_dir / f"weighted_sum_{device}.pt2", device)
    print(f"wrote {package}", flush=True)
    result = subprocess.run([str(app), "--quiet", str(torchscript), str(package)])
    return result.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", help="path of libcustom_ops.so")
    parser.add_argument("--cpp-app", type=pathlib.Path, help="the weighted_sum_demo program of examples/cpp")
    parser.add_argument("--out-dir", type=pathlib.Path, help="where to write the model files (default: a temp dir)")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    print(f"torch {torch.__version__}; library {load_custom_ops(args.library)}")
    for op in (torch.ops.custom.weighted_sum, torch.ops.custom.weighted_square_sum):
        print(f"{op.default._schema}")
    devices = ["cpu"]
    if cuda_usable():
        devices.append("cuda")
    else:
        print("CUDA: " + ("the library has no CUDA kernels" if torch.cuda.is_available() else "no GPU visible"))

    ok = all([show_device(device) for device in devices])  # noqa: C419 - shows every device, even after a failure
    if args.cpp_app is not None:
        if args.out_dir is not None:
            ok &= run_cpp_app(args.cpp_app, args.out_dir)
        else:
            with tempfile.TemporaryDirectory() as out_dir:
                ok &= run_cpp_app(args.cpp_app, pathlib.Path(out_dir))
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
