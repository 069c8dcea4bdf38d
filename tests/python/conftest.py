"""Fixtures and hooks for every Python test; loads libcustom_ops.so once, before any test module.

The names tests share (REPO, LIBRARY, HAS_GPU, CUDA_BUILT, DEVICES) live in environment.py. Before
any test, checks the C++ compiler that Inductor builds with (torch.compile on CPU, AOTInductor).
"""

import sys

import pytest
import torch

import environment
from environment import LIBRARY, links_libstdcxx_statically

torch.ops.load_library(str(LIBRARY))


@pytest.fixture(params=environment.DEVICES)  # read after the load: it asks for the CUDA kernels
def device(request):
    return request.param


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
            "(e.g. CXX=/usr/bin/g++).",
            returncode=3,
        )


def pytest_terminal_summary(terminalreporter):
    # The ATen-oracle campaign's example count and outcomes (printed even with -q).
    oracle = sys.modules.get("oracle")
    if oracle is None or not oracle.OUTCOMES:
        return
    for (device, overload), outcomes in sorted(oracle.OUTCOMES.items()):
        counts = ", ".join(f"{name} {n}" for name, n in sorted(outcomes.items()))
        terminalreporter.write_line(f"ATen oracle {device} {overload}: {sum(outcomes.values())} examples ({counts})")
