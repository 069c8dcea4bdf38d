# SPDX-License-Identifier: BSD-3-Clause
"""torch.export and AOTInductor callers, from Python and from C++.

torch.export.export with dynamic shapes; torch._inductor.aoti_compile_and_package to a .pt2; the
package run from Python (torch._inductor.aoti_load_package, in a process that loaded the library)
and from C++: examples/cpp built against an installed custom-ops prefix and run as
`weighted_sum_demo --quiet MODEL.pt MODEL.pt2` (no Python in that process).

The install prefix is $CUSTOM_OPS_PREFIX when set (`make test` installs to ./install), else one
built here, once per session, in a temp dir with CUDA off (about a minute on 2 cores). The example
app is built once per session as well. Tests marked `slow` compile C++ (-m "not slow" skips them).
"""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

from environment import CUDA_BUILT, HAS_GPU, LIBRARY, REPO
from torch_warnings import torchscript_deprecation

sys.path.insert(0, str(REPO / "examples" / "python"))
import export_models

needs_cuda = pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")
SHAPES = [(2, 3), (5, 8), (17, 4), (64, 33)]
# The app's checks of the C++ API on each device: 5 of custom::weighted_sum, 4 of weighted_square_sum.
API_CHECKS = 5 + 4


def assert_same(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- torch.export


def test_export_dynamic_shapes(device):
    program = export_models.export_program(device)
    targets = [str(node.target) for node in program.graph.nodes if node.op == "call_function"]
    assert "custom.weighted_sum.default" in targets, targets
    assert "custom.weighted_square_sum.default" in targets, targets
    # Both sizes stayed symbolic: batch and features (shared by input and weight).
    input_node = next(node for node in program.graph.nodes if node.op == "placeholder" and node.name == "input")
    assert all(isinstance(size, torch.SymInt) for size in input_node.meta["val"].shape)
    module = program.module()
    for rows, cols in SHAPES:
        x, w = torch.randn(rows, cols, device=device), torch.randn(cols, device=device)
        assert_same(module(x, w), export_models.reference(x, w))


def test_export_round_trip(tmp_path):
    program = export_models.export_program("cpu")
    torch.export.save(program, tmp_path / "program.pt2")
    loaded = torch.export.load(tmp_path / "program.pt2").module()
    x, w = torch.randn(9, 5), torch.randn(5)
    assert_same(loaded(x, w), export_models.reference(x, w))


# ------------------------------------------------------------------------------ AOTInductor


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """weighted_sum.pt (TorchScript) and weighted_sum_cpu.pt2 (AOTInductor), written once."""
    out = tmp_path_factory.mktemp("models")
    with torchscript_deprecation():
        torchscript = export_models.export_torchscript(out / "weighted_sum.pt")
    return {
        "torchscript": torchscript,
        "cpu": export_models.export_aoti(out / "weighted_sum_cpu.pt2", "cpu"),
    }


@pytest.fixture(scope="session")
def cuda_package(tmp_path_factory):
    out = tmp_path_factory.mktemp("models_cuda")
    return export_models.export_aoti(out / "weighted_sum_cuda.pt2", "cuda")


def run_package_in_process(package, device):
    runner = torch._inductor.aoti_load_package(str(package))
    for rows, cols in SHAPES:
        x, w = torch.randn(rows, cols, device=device), torch.randn(cols, device=device)
        assert_same(runner(x, w), export_models.reference(x, w))


@pytest.mark.slow
def test_aoti_package_from_python_cpu(models):
    run_package_in_process(models["cpu"], "cpu")


class DtypeArgumentModel(torch.nn.Module):
    def forward(self, input, weight):
        return torch.ops.custom.weighted_square_sum(input, weight, [-1], keepdim=True, dtype=torch.float64)


@pytest.mark.slow
def test_aoti_package_passes_the_dtype_argument(tmp_path):
    x, w = torch.randn(6, 5), torch.randn(5)
    program = torch.export.export(DtypeArgumentModel(), (x, w))
    package = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "dtype.pt2"))
    result = torch._inductor.aoti_load_package(package)(x, w)
    if torch.__version__ < "2.12":
        # torch 2.11's proxy executor passes a ScalarType argument as its serialized enum value
        # (pytorch/pytorch#169157, fixed by #173562): the op gets complex32 and refuses it; the
        # runner logs the error and returns None. Where a 2.11 build has the fix, this fails.
        assert result is None
        return
    assert result.dtype == torch.float64
    torch.testing.assert_close(result, (w.double() * x.double().square()).sum(-1, keepdim=True))


FRESH_LOADER = """
import sys, torch
library, package, device = sys.argv[1:]
if library != "-":
    torch.ops.load_library(library)
runner = torch._inductor.aoti_load_package(package)
for rows, cols in [(6, 3), (2, 9)]:
    x, w = torch.randn(rows, cols, device=device), torch.randn(cols, device=device)
    row_sums = (w.double() * x.double().square()).sum(-1, keepdim=True)
    torch.testing.assert_close(runner(x, w), w * x * x + x + row_sums, rtol=1e-5, atol=1e-5)
print("ok")
"""


def load_in_fresh_process(library, package, device):
    # Loading a CPU package makes inductor probe the CPU's vector ISAs by compiling and running a
    # test program for each (tens of seconds per fresh process on 2 cores); the CPU flags suffice here.
    env = {**os.environ, "TORCHINDUCTOR_VEC_ISA_OK": "1"}
    return subprocess.run(
        [sys.executable, "-c", FRESH_LOADER, str(library), str(package), device],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.slow
def test_aoti_package_in_fresh_process_needs_the_library(models):
    with_library = load_in_fresh_process(LIBRARY, models["cpu"], "cpu")
    assert with_library.returncode == 0 and "ok" in with_library.stdout, with_library.stderr[-3000:]
    without = load_in_fresh_process("-", models["cpu"], "cpu")
    assert without.returncode != 0
    # The first operator of the graph that cannot be found: either one.
    assert "custom::weighted_sum" in without.stderr or "custom::weighted_square_sum" in without.stderr, without.stderr[
        -3000:
    ]


@pytest.mark.slow
@needs_cuda
def test_aoti_package_from_python_cuda(cuda_package):
    # In a fresh process that loads only the library.
    result = load_in_fresh_process(LIBRARY, cuda_package, "cuda")
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


# ------------------------------------------------------------------------------------- C++


def run_command(command, cwd=None, timeout=900):
    result = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} failed ({result.returncode}):\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result


def cmake_generator():
    return ["-G", "Ninja"] if shutil.which("ninja") else []


@pytest.fixture(scope="session")
def install_prefix(tmp_path_factory):
    """$CUSTOM_OPS_PREFIX, or the library built and installed here (CPU kernels only)."""
    if os.environ.get("CUSTOM_OPS_PREFIX"):
        prefix = pathlib.Path(os.environ["CUSTOM_OPS_PREFIX"])
        if not (prefix / "lib" / "cmake" / "CustomOps" / "CustomOpsConfig.cmake").is_file():
            pytest.fail(f"CUSTOM_OPS_PREFIX={prefix} holds no installed custom-ops (lib/cmake/CustomOps)")
        return prefix
    root = tmp_path_factory.mktemp("custom_ops_prefix")
    build, prefix = root / "build", root / "install"
    run_command(
        [
            "cmake",
            "-S",
            REPO,
            "-B",
            build,
            *cmake_generator(),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DCUSTOM_OPS_CUDA=OFF",
            "-DCUSTOM_OPS_BUILD_TESTS=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ]
    )
    run_command(["cmake", "--build", build, "--parallel", str(os.cpu_count() or 2)])
    run_command(["cmake", "--install", build, "--prefix", prefix])
    return prefix


@pytest.fixture(scope="session")
def cpp_app(install_prefix, tmp_path_factory):
    """examples/cpp built against the install prefix, as a user's project would be."""
    build = tmp_path_factory.mktemp("example_build")
    prefix_path = f"{install_prefix};{torch.utils.cmake_prefix_path}"
    run_command(
        [
            "cmake",
            "-S",
            REPO / "examples" / "cpp",
            "-B",
            build,
            *cmake_generator(),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_PREFIX_PATH={prefix_path}",
        ]
    )
    run_command(["cmake", "--build", build, "--parallel", str(os.cpu_count() or 2)])
    return build / "weighted_sum_demo"


@pytest.mark.slow
def test_cpp_app_has_no_python(cpp_app):
    libraries = [line.split()[0] for line in run_command(["ldd", cpp_app]).stdout.splitlines() if line.strip()]
    assert any(name.startswith("libcustom_ops.so") for name in libraries), libraries
    assert "libtorch.so" in libraries, libraries
    assert not [name for name in libraries if "python" in name], libraries  # libpython, libtorch_python


@pytest.mark.slow
def test_cpp_app_api_torchscript_and_aoti_cpu(cpp_app, models):
    result = subprocess.run(
        [str(cpp_app), "--device", "cpu", "--quiet", str(models["torchscript"]), str(models["cpu"])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "custom::weighted_sum on cpu" in out
    assert "custom::weighted_square_sum on cpu" in out
    assert f"TorchScript {models['torchscript']} on cpu" in out
    assert f"AOTInductor {models['cpu']} on cpu" in out
    assert "MISMATCH" not in out and "all checks passed" in out
    # API checks of each operator, TorchScript checks, AOTInductor shapes
    assert out.count("  ok ") == API_CHECKS + 6 + 4, out


@pytest.mark.slow
def test_cpp_app_prints_values_and_catches_a_wrong_model(cpp_app, tmp_path):
    # Without --quiet it prints the tensors.
    shown = subprocess.run([str(cpp_app), "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for name in (
        "weighted_sum(input, weight) =",
        "input.grad =",
        "weight.grad =",
        "CPUFloatType",
        "weighted_square_sum(input, weight, dim=1) =",
    ):
        assert name in shown.stdout

    # A model that is not what the app expects: it must say MISMATCH and exit 1, not pass.
    class Wrong(torch.nn.Module):
        def forward(self, input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            return torch.ops.custom.weighted_sum(input, weight) * 2 + input

    with torchscript_deprecation():
        torch.jit.save(torch.jit.script(Wrong()), str(tmp_path / "wrong.pt"))
    wrong = subprocess.run(
        [str(cpp_app), "--device", "cpu", "--quiet", str(tmp_path / "wrong.pt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "MISMATCH" in wrong.stdout

    missing = subprocess.run([str(cpp_app), str(tmp_path / "missing.pt2")], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2
    assert "error:" in missing.stderr


def prefix_has_cuda(prefix):
    config = (pathlib.Path(prefix) / "lib" / "cmake" / "CustomOps" / "CustomOpsConfig.cmake").read_text()
    return "set(CUSTOM_OPS_WITH_CUDA ON)" in config


@pytest.mark.slow
@needs_cuda
def test_cpp_app_cuda(install_prefix, cpp_app, models, cuda_package):
    if not prefix_has_cuda(install_prefix):
        pytest.skip("the install prefix has no CUDA kernels: set CUSTOM_OPS_PREFIX to a CUDA build")
    result = subprocess.run(
        [str(cpp_app), "--device", "all", "--quiet", str(models["torchscript"]), str(cuda_package)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "custom::weighted_sum on cuda" in result.stdout
    assert "custom::weighted_square_sum on cuda" in result.stdout
    assert f"TorchScript {models['torchscript']} on cuda" in result.stdout
    assert f"AOTInductor {cuda_package} on cuda" in result.stdout
    assert result.stdout.count("  ok ") == 2 * (API_CHECKS + 6) + 4, result.stdout
