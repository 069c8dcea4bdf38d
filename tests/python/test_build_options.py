"""The CUDA build option: a library that claims CUDA but has no CUDA kernels is the most common bug
in this field, so a build that should have them is checked for them, and a bad value is refused."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import REPO

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
