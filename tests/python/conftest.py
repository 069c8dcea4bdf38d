# SPDX-License-Identifier: BSD-3-Clause
"""Fixtures and hooks for every Python test; loads libcustom_ops.so once, before any test module.

The names tests share (REPO, LIBRARY, HAS_GPU, CUDA_BUILT, DEVICES) live in environment.py. Before
any test, checks the C++ compiler that Inductor builds with (torch.compile on CPU, AOTInductor).
Under pytest-xdist (`make test` runs workers, one test file per worker at a time), the package is
built once for all workers and the oracle campaigns' outcome counts are gathered from them.
"""

import collections
import importlib.util
import os
import subprocess
import sys

import pytest
import torch
from filelock import FileLock  # a dependency of torch

import environment
from environment import LIBRARY, REPO, installed_package_is_this_checkout, links_libstdcxx_statically

torch.ops.load_library(str(LIBRARY))


@pytest.fixture(params=environment.DEVICES)  # read after the load: it asks for the CUDA kernels
def device(request):
    return request.param


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The directory to put on PYTHONPATH for `import custom_ops` (None: the importable package is
    this checkout's current code, environment.installed_package_is_this_checkout). An older
    custom-ops installed in the environment is not used: the package built here shadows it.

    Built once per run (a build of the library, minutes on 2 cores) for every module that runs the
    package in a fresh interpreter: test_package, test_library_loading, test_onnx_export. Under
    pytest-xdist the workers share the run's base directory: the first builds under a file lock,
    the others wait for it and reuse the package (pytest-xdist's advice for session fixtures)."""
    if installed_package_is_this_checkout():
        return None
    if importlib.util.find_spec("scikit_build_core") is None:
        pytest.fail(
            "scikit-build-core is not installed: `pip install scikit-build-core` (needed by "
            "`pip install --no-build-isolation .`)"
        )
    if "if(SKBUILD)" not in (REPO / "CMakeLists.txt").read_text():
        pytest.fail(
            "CMakeLists.txt has no if(SKBUILD) branch: `pip install .` would not put libcustom_ops.so "
            "and _build_info.py into the custom_ops package"
        )
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the workers' base directories are its children
    root = shared / "package"
    target = root / "site"
    with FileLock(f"{root}.lock"):
        if not (root / "built").is_file():
            _build_package(root, target)
            (root / "built").touch()
    return target


def _build_package(root, target):
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-build-isolation",
        "--no-deps",
        "--no-input",
        "--disable-pip-version-check",
        "--target",
        str(target),
        "-C",
        "cmake.define.CUSTOM_OPS_CUDA=OFF",
        "-C",
        f"build-dir={root / 'build'}",
        str(REPO),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed:\n{result.stdout[-5000:]}\n{result.stderr[-5000:]}")


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


# (device, overload) -> outcome counts, sent by each pytest-xdist worker when it finishes.
WORKER_OUTCOMES = collections.defaultdict(collections.Counter)


def pytest_sessionfinish(session):
    oracle = sys.modules.get("oracle")
    workeroutput = getattr(session.config, "workeroutput", None)  # set on pytest-xdist workers only
    if oracle is not None and workeroutput is not None:
        workeroutput["oracle_outcomes"] = [[*key, dict(counts)] for key, counts in oracle.OUTCOMES.items()]


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without it
def pytest_testnodedown(node, error):
    for device, overload, counts in getattr(node, "workeroutput", {}).get("oracle_outcomes", []):
        WORKER_OUTCOMES[(device, overload)].update(counts)


def pytest_terminal_summary(terminalreporter):
    # The ATen-oracle campaigns' example counts and outcomes (printed even with -q).
    oracle = sys.modules.get("oracle")
    outcomes = WORKER_OUTCOMES or (oracle.OUTCOMES if oracle is not None else {})
    for (device, overload), counter in sorted(outcomes.items()):
        counts = ", ".join(f"{name} {n}" for name, n in sorted(counter.items()))
        terminalreporter.write_line(f"ATen oracle {device} {overload}: {sum(counter.values())} examples ({counts})")
