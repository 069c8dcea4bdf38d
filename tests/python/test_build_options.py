"""Build checks. The CUDA option: a library that claims CUDA but has no CUDA kernels is the most
common bug in this field, so a build that should have them is checked for them, and a bad value is
refused. The compiler: one that links libstdc++ statically is refused at configure time."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import REPO, links_libstdcxx_statically

OVERLOADS = ["weighted_sum", "weighted_sum.out", "weighted_sum_", "weighted_sum_backward"]


@pytest.mark.skipif(
    not (shutil.which("nvcc") and torch.version.cuda and os.environ.get("CUSTOM_OPS_CUDA", "AUTO") in ("AUTO", "ON")),
    reason="needs nvcc, a CUDA build of torch and a build with CUSTOM_OPS_CUDA=AUTO or ON (set by make test)",
)
@pytest.mark.parametrize("overload", OVERLOADS)
def test_a_cuda_torch_with_nvcc_gets_cuda_kernels(overload):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"custom::{overload}", "CUDA")


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_an_unknown_cuda_option_fails_the_configure(tmp_path):
    result = subprocess.run(
        ["cmake", "-S", str(REPO), "-B", str(tmp_path), "-DCUSTOM_OPS_CUDA=SOMETIMES",
         "-DCUSTOM_OPS_BUILD_TESTS=OFF", f"-DPython3_EXECUTABLE={sys.executable}"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode != 0
    assert "CUSTOM_OPS_CUDA must be AUTO, ON or OFF, got 'SOMETIMES'" in result.stdout + result.stderr


def static_libstdcxx_compiler(directory):
    """Stands in for a GCC shipped with libstdc++.a only (the H200 image's /opt/gcc/bin/g++)."""
    compiler = directory / "static-g++"
    compiler.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} "$@" -static-libstdc++\n')
    compiler.chmod(0o755)
    return compiler


@pytest.mark.skipif(not (shutil.which("g++") and shutil.which("objdump")), reason="needs g++ and objdump")
def test_the_session_check_tells_a_static_libstdcxx_compiler_apart(tmp_path):
    assert links_libstdcxx_statically(str(static_libstdcxx_compiler(tmp_path))) is True
    assert links_libstdcxx_statically(shutil.which("g++")) is False


@pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("g++")), reason="needs cmake and g++")
@pytest.mark.parametrize("variable", ["CMAKE_CXX_COMPILER", "CUDAHOSTCXX"])
def test_a_compiler_that_links_libstdcxx_statically_fails_the_configure(tmp_path, variable):
    # Such a library would carry a second C++ runtime beside libtorch's and crash inside Python.
    # nvcc's host compiler counts too: CMake puts its library directories on our link line.
    compiler = static_libstdcxx_compiler(tmp_path)
    command = ["cmake", "-S", str(REPO), "-B", str(tmp_path / "build"), "-DCUSTOM_OPS_CUDA=OFF",
               "-DCUSTOM_OPS_BUILD_TESTS=OFF", f"-DPython3_EXECUTABLE={sys.executable}"]
    env = {key: value for key, value in os.environ.items() if key not in ("CXX", "CUDAHOSTCXX")}
    if variable == "CUDAHOSTCXX":
        env["CUDAHOSTCXX"] = str(compiler)
    else:
        command.append(f"-D{variable}={compiler}")
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"{variable}={compiler} links libstdc++ statically" in " ".join(output.split()), output
