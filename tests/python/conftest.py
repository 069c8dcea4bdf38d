"""Loads libcustom_ops.so once for every Python test.

The library is found at $CUSTOM_OPS_LIBRARY (set by `make test` to the installed copy), else at
build/libcustom_ops.so in this checkout. Before any test, checks the C++ compiler that Inductor
builds with (torch.compile on CPU, AOTInductor).
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
LIBRARY = pathlib.Path(os.environ.get("CUSTOM_OPS_LIBRARY", REPO / "build" / "libcustom_ops.so")).resolve()

torch.ops.load_library(str(LIBRARY))

CUDA_BUILT = torch._C._dispatch_has_kernel_for_dispatch_key("custom::weighted_sum", "CUDA")
HAS_GPU = torch.cuda.is_available()

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels"),
    ),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def links_libstdcxx_statically(compiler: str) -> bool | None:
    """Whether `compiler` builds C++ programs without libstdc++.so (a GCC shipped with libstdc++.a
    only). None when objdump is missing and it cannot be told."""
    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        probe = pathlib.Path(scratch) / "probe"
        subprocess.run(
            [compiler, "-x", "c++", "-", "-o", str(probe)], check=True, capture_output=True, text=True,
            input="#include <sstream>\nint main() { std::ostringstream s; s << 42; return 0; }\n",
        )
        headers = subprocess.run([objdump, "-p", str(probe)], check=True, capture_output=True, text=True).stdout
    return "libstdc++.so" not in headers


def pytest_sessionstart(session):
    # Every .so such a compiler links carries a second C++ runtime and segfaults in this process at
    # its first locale use (seen with CXX=/opt/gcc/bin/g++ on the H200 image): stop with the reason.
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        compiler = get_cpp_compiler()
    except Exception:  # no usable compiler: the tests that need one say so themselves
        return
    if links_libstdcxx_statically(compiler):
        pytest.exit(
            f"Inductor's C++ compiler {compiler} links libstdc++ statically: the graphs it compiles would "
            "crash this process. Run the tests with CXX set to a compiler that links libstdc++.so "
            "(e.g. CXX=/usr/bin/g++).", returncode=3)


def pytest_terminal_summary(terminalreporter):
    # The ATen-oracle campaign's example count and outcomes (printed even with -q).
    oracle = sys.modules.get("oracle")
    if oracle is None or not oracle.OUTCOMES:
        return
    for (device, overload), outcomes in sorted(oracle.OUTCOMES.items()):
        counts = ", ".join(f"{name} {n}" for name, n in sorted(outcomes.items()))
        terminalreporter.write_line(f"ATen oracle {device} {overload}: {sum(outcomes.values())} examples ({counts})")
