# SPDX-License-Identifier: BSD-3-Clause
"""What the set-up and the build ask of the user's environment (scripts/packaging/torch_requirement.py,
scripts/packaging/build_backend.py, scripts/setup-env.sh): the torch range read from one place, the
reason a Python is not used, the test tools it lacks, and the torch a `pip install .` builds against
when pip's build isolation hides it."""

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from environment import REPO

PACKAGING = REPO / "scripts" / "packaging"
sys.path.insert(0, str(PACKAGING))
import torch_requirement  # noqa: E402 (from scripts/packaging)
from torch_requirement import Requirement, Version  # noqa: E402 (packaging's, or pip's copy)

# (the torch a package was built against, the torch installed, whether the package is for it): the
# one rule the wheel's requirement and `import custom_ops` share (test_package.py checks the import).
TORCH_RELEASES = [
    ("2.15.0", "2.15.0", True),
    ("2.15.0+cu132", "2.15.0+cu126", True),  # a local label is no other release
    ("2.15.0", "2.15.0+cpu", True),
    ("2.15.0+cu132", "2.15.1+cu132", False),  # a patch release is: torch keeps no C++ ABI across them
    ("2.15.1", "2.15.0", False),
    ("2.15.0", "2.16.0", False),
    ("2.16.0.dev20260101+cu132", "2.16.0.dev20260101+cpu", True),
    ("2.16.0.dev20260101", "2.16.0.dev20260102", False),
]


def run(*command, env=None, cwd=PACKAGING):
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def requirement(*arguments):
    return run(sys.executable, str(PACKAGING / "torch_requirement.py"), *arguments)


def test_the_torch_range_is_stated_once_and_read_from_there():
    lines = [line for line in (REPO / "requirements.txt").read_text().splitlines() if line and line[0] != "#"]
    assert len(lines) == 1 and lines[0].startswith("torch>="), lines
    assert requirement("range").stdout.strip() == lines[0]
    lowest = re.match(r"torch>=(\d+)\.(\d+)", lines[0]).groups()
    assert requirement("oldest").stdout.strip() == f"{lowest[0]}.{lowest[1]}.0"


def test_this_torch_fits_and_another_release_is_refused_with_the_reason():
    assert requirement("check").returncode == 0
    other = requirement("check", "--release", "2.0.1")
    assert other.returncode == 1
    assert other.stdout.strip() == f"has torch {torch.__version__}, not 2.0.1"


def test_the_missing_test_tools_are_listed_and_nothing_else(tmp_path):
    # A sitecustomize that hides one installed tool, as if it were not installed.
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['hypothesis'] = None\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = run(sys.executable, str(PACKAGING / "torch_requirement.py"), "check", "--extras", "test", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["hypothesis"]


def backend(code, env=None):
    """Runs `code` with the build backend importable, as pip runs it (backend-path)."""
    return run(sys.executable, "-c", "import build_backend, torch_requirement\n" + textwrap.dedent(code), env=env)


def test_a_build_that_sees_torch_builds_against_it():
    result = backend("print(build_backend._with_torch({'cmake.define.X': '1'}))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{'cmake.define.X': '1'}"  # CMake finds this torch itself


def test_a_build_isolated_from_the_users_torch_is_pointed_at_it(tmp_path):
    # pip's build isolation: PYTHONPATH names the build environment, whose sitecustomize drops the
    # user's site-packages. Here a sitecustomize hides torch the same way.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['torch'] = None  # import torch: ModuleNotFoundError\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(PACKAGING)])}
    result = backend(
        """
        settings = build_backend._with_torch(None)
        print(settings["cmake.define.Torch_DIR"])
        print(settings["cmake.define.CUSTOM_OPS_TORCH_ARCH_FLAGS"])
        print(settings["cmake.define.CUSTOM_OPS_TORCH_CUDA_VERSION"] or "-")
        print(settings["cmake.define.CUSTOM_OPS_VISIBLE_GPUS"] or "-")
        print(torch_requirement.dynamic_metadata("version"))
        print(torch_requirement.dynamic_metadata("dependencies"))
        """,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    torch_dir, arch_flags, cuda_version, visible, version, dependencies = result.stdout.strip().splitlines()
    assert cuda_version == (torch.version.cuda or "-")
    gpus = [torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]
    assert visible == (";".join(f"{major}.{minor}" for major, minor in gpus) or "-")
    assert torch_dir == os.path.join(torch.utils.cmake_prefix_path, "Torch")
    assert arch_flags == ";".join((getattr(torch._C, "_cuda_getArchFlags", lambda: "")() or "").split())
    series = ".".join(torch.__version__.split(".")[:2])
    cuda = "cu" + torch.version.cuda.replace(".", "") if torch.version.cuda else "cpu"
    project = re.search(r"project\(CustomOps VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
    assert version == f"{project}+torch{series}.{cuda}"
    assert dependencies == f"['torch=={Version(torch.__version__).public}']"


def interpreter_without_torch():
    base = getattr(sys, "_base_executable", None)
    if not base or run(base, "-c", "import torch").returncode == 0:
        return None
    return base


@pytest.mark.skipif(interpreter_without_torch() is None, reason="needs a Python without torch (the venv's base)")
@pytest.mark.parametrize(
    ("frontend", "command"),
    [
        ({}, "pip install --no-build-isolation ."),
        # uv's build environment is a venv of its own (uv pip install ., uv build): uv sets UV there.
        ({"UV": "/usr/bin/uv"}, "uv pip install --no-build-isolation ."),
    ],
)
def test_a_build_without_any_torch_stops_with_one_line_naming_the_flag(frontend, command):
    env = {key: value for key, value in os.environ.items() if key != "UV"} | frontend
    result = run(
        interpreter_without_torch(), "-c", "import torch_requirement; torch_requirement.require_torch()", env=env
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("custom-ops: no torch to build against in ")
    assert "install torch first (pip install 'torch>=" in lines[0]
    assert lines[0].endswith(f"without build isolation: {command}"), lines[0]


@pytest.mark.parametrize(
    ("parent", "command"),
    [
        ("/venv/bin/python -m build --wheel .", "python -m build --wheel --no-isolation"),
        ("/venv/bin/python /venv/bin/pyproject-build", "python -m build --wheel --no-isolation"),
        ("/venv/bin/python /venv/bin/pip install .", "pip install --no-build-isolation ."),
    ],
)
def test_the_flag_named_is_the_running_frontends(parent, command):
    assert torch_requirement.no_isolation_command({}, parent) == command


@pytest.mark.parametrize(
    ("environ", "parent", "prefix", "isolated"),
    [
        ({"UV": "/bin/uv"}, "/bin/uv pip install .", "/root/.cache/uv/builds-v0/.tmpAb12", True),
        ({"UV": "/bin/uv"}, "/bin/uv pip install --no-build-isolation .", "/home/me/venv", False),
        ({}, "/venv/bin/python -m build --wheel .", "/tmp/build-env-x1", True),
        ({}, "/venv/bin/python -m build --wheel --no-isolation .", "/venv", False),
        ({}, "/venv/bin/python -m build -n .", "/venv", False),
        ({}, "/venv/bin/python /venv/bin/pip install .", "/venv", False),  # pip's isolation: looked past
        ({}, "/venv/bin/python /venv/bin/pip install .", "/tmp/pip-build-env-x1", True),  # a venv of pip's
    ],
)
def test_a_frontends_own_build_venv_is_told_apart(environ, parent, prefix, isolated):
    assert torch_requirement.in_isolated_venv(environ, parent, prefix) is isolated


@pytest.mark.parametrize(("built", "installed", "same"), TORCH_RELEASES)
def test_the_wheel_requires_the_exact_torch_release_it_was_built_against(built, installed, same):
    pin = Requirement(torch_requirement.torch_pin(built))
    assert pin.name == "torch"
    assert pin.specifier.contains(installed, prereleases=True) is same


def test_one_python_bound_everywhere():
    (bound,) = re.findall(r'^requires-python = "(.*)"$', (REPO / "pyproject.toml").read_text(), flags=re.M)
    assert bound == ">=3.10"  # torch 2.11 to 2.15's own bound
    for name in ("environment.yml", "environment-cuda.yml"):
        (python,) = re.findall(r"^\s*- python=(\S+)$", (REPO / name).read_text(), flags=re.M)
        assert Version(python) >= Version("3.10"), name
    assert "Python 3.10 or newer" in (REPO / "scripts" / "setup-env.sh").read_text()
