# SPDX-License-Identifier: BSD-3-Clause
"""What the Python tests run against: the checkout, the library under test, the devices.

Not a test module and not a conftest: test files import these names from here (pytest puts this
directory on sys.path). conftest.py loads LIBRARY before any test module is imported.

  REPO        the checkout's root
  LIBRARY     libcustom_ops.so under test: $CUSTOM_OPS_LIBRARY (set by `make test` to the installed
              copy), else build/libcustom_ops.so in this checkout
  HAS_GPU     torch sees a GPU
  CUDA_BUILT  the loaded library registered CUDA kernels
  DEVICES     parameters for a device-parametrized test: cpu, and cuda when it can run
  run_with_cpu_capability(code, capability)  Python code in a fresh process under ATEN_CPU_CAPABILITY
  campaign_settings(**kwargs)  a Hypothesis campaign's settings: derandomized unless CUSTOM_OPS_NEW_SEEDS=1
  new_seeds()  whether CUSTOM_OPS_NEW_SEEDS=1 asks the campaigns for new examples
  installed_package_is_this_checkout()  whether the importable custom_ops is this tree's code
"""

import importlib.util
import os
import pathlib
import runpy
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
LIBRARY = pathlib.Path(os.environ.get("CUSTOM_OPS_LIBRARY", REPO / "build" / "libcustom_ops.so")).resolve()
HAS_GPU = torch.cuda.is_available()


def _library_facts():
    cuda_built = torch._C._dispatch_has_kernel_for_dispatch_key("custom::weighted_sum", "CUDA")
    devices = [
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not (HAS_GPU and cuda_built), reason="needs a GPU and the CUDA kernels"),
        ),
    ]
    return {"CUDA_BUILT": cuda_built, "DEVICES": devices}


def __getattr__(name):
    # CUDA_BUILT and DEVICES ask the dispatcher about the loaded library, so they are computed on
    # first use, after conftest.py has loaded it (conftest imports LIBRARY from here first).
    if name not in ("CUDA_BUILT", "DEVICES"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals().update(_library_facts())
    return globals()[name]


def links_libstdcxx_statically(compiler: str) -> bool | None:
    """Whether `compiler` builds C++ programs without libstdc++.so (a GCC shipped with libstdc++.a
    only). None when objdump is missing and it cannot be told."""
    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        probe = pathlib.Path(scratch) / "probe"
        subprocess.run(
            [compiler, "-x", "c++", "-", "-o", str(probe)],
            check=True,
            capture_output=True,
            text=True,
            input="#include <sstream>\nint main() { std::ostringstream s; s << 42; return 0; }\n",
        )
        headers = subprocess.run([objdump, "-p", str(probe)], check=True, capture_output=True, text=True).stdout
    return "libstdc++.so" not in headers


def run_with_cpu_capability(code: str, capability: str) -> str:
    """Runs `code` in a fresh Python with ATEN_CPU_CAPABILITY=capability (ATen, and our CPU loops
    with it, pick their instruction set once per process); asserts that its last printed word is
    "ok" and that its first is the capability it ran with (print torch.backends.cpu.
    get_cpu_capability() first). Returns its output."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ATEN_CPU_CAPABILITY": capability},
    )
    words = result.stdout.split()
    assert result.returncode == 0 and words and words[-1] == "ok", result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def campaign_settings(**kwargs):
    """Hypothesis settings for a property campaign, with its own `kwargs` (max_examples, deadline,
    suppress_health_check...). The same examples in every run (derandomized, no example database:
    `make test` passes or fails the same way each time); CUSTOM_OPS_NEW_SEEDS=1 draws new ones, and
    a failure then prints the @reproduce_failure line that replays it (print_blob)."""
    from hypothesis import settings  # imported here: the modules that run campaigns skip without it

    return settings(derandomize=not new_seeds(), database=None, print_blob=True, **kwargs)


def new_seeds() -> bool:
    value = os.environ.get("CUSTOM_OPS_NEW_SEEDS") or "0"
    if value not in ("0", "1"):
        raise ValueError(f"CUSTOM_OPS_NEW_SEEDS={value!r}: 1 (new random examples) or 0 (the fixed ones)")
    return value == "1"


def installed_package_is_this_checkout() -> bool:
    """Whether the importable `custom_ops` package is this checkout's current code: every .py file
    of python/custom_ops byte-identical, built against the running torch release. An older
    custom-ops installed in the environment is not (its tests would import stale code: a newly
    generated operator missing). Read from its files, not imported: this process already loaded
    LIBRARY, and the package would load its own copy."""
    spec = importlib.util.find_spec("custom_ops")
    if spec is None or not spec.submodule_search_locations:
        return False
    installed = pathlib.Path(spec.submodule_search_locations[0])
    for source in (REPO / "python" / "custom_ops").glob("*.py"):
        copy = installed / source.name
        if not copy.is_file() or copy.read_bytes() != source.read_bytes():
            return False
    build_info = installed / "_build_info.py"
    if not build_info.is_file():
        return False
    return runpy.run_path(str(build_info))["TORCH_VERSION"].split("+")[0] == torch.__version__.split("+")[0]
