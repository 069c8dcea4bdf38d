# SPDX-License-Identifier: BSD-3-Clause
"""What custom-ops needs of a Python environment, stated once and read here by everything else.

- The supported torch range: requirements.txt's one line, parsed with `packaging`. CMake reads the
  same line for C++ builds that have no Python.
- The test tools: pyproject.toml's `test` extra.
- The torch to build against: this interpreter's, or, under pip's build isolation, that of the
  interpreter pip runs in (pip hides it from the build; the library must match the torch it runs under).

As a scikit-build-core metadata provider (pyproject.toml) it gives the wheel's dependencies
(``torch==X.Y.Z``, the exact release it was built against, as torchvision pins it: the library is
tied to that release's C++ ABI, and ``import custom_ops`` checks the same rule, `torch_pin`) and its
version, whose local label names the torch and CUDA
it was built for (``0.2.0+torch2.15.cu132``). As a command, it answers
scripts/setup-env.sh and .ci/run::

    python torch_requirement.py range            torch>=2.11,<2.16
    python torch_requirement.py oldest           2.11.0
    python torch_requirement.py check [--release X.Y.Z] [--extras test,onnx]
        exit 0: this interpreter's torch fits (and print the extras' requirements it lacks, one a
        line); exit 1: print why it does not fit.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]

try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:  # an interpreter without `packaging` still has pip's copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version


def torch_range_text() -> str:
    lines = (line.strip() for line in (REPO / "requirements.txt").read_text().splitlines())
    return next(line for line in lines if line.startswith("torch"))


def torch_range() -> Requirement:
    requirement = Requirement(torch_range_text())
    if [spec.operator for spec in requirement.specifier].count(">=") != 1:
        raise RuntimeError(f"requirements.txt must state the torch range as torch>=A.B,<C.D, not {requirement}")
    return requirement


def outside_range(version: str, release: str | None = None) -> str | None:
    """Why torch `version` does not fit (release X.Y.Z when given, else the range); None if it fits."""
    if release is not None:
        return None if Version(version).base_version == release else f"has torch {version}, not {release}"
    fits = torch_range().specifier.contains(Version(version).base_version)
    return None if fits else f"has torch {version}, outside {torch_range_text()}"


def oldest_torch() -> str:
    (lowest,) = (Version(spec.version) for spec in torch_range().specifier if spec.operator == ">=")
    return f"{lowest.major}.{lowest.minor}.{lowest.micro}"


def extra(name: str) -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        from pip._vendor import tomli as tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"][name]


def missing(requirements: list[str]) -> list[str]:
    """The requirements with no installed distribution in this interpreter (versions not checked)."""
    return [text for text in requirements if importlib.util.find_spec(_module_of(Requirement(text).name)) is None]


def _module_of(distribution: str) -> str:
    return {"pytest-xdist": "xdist", "scikit-build-core": "scikit_build_core"}.get(distribution, distribution)


def torch_pin(version: str) -> str:
    """The requirement a build against torch `version` puts in the wheel: that release exactly, any
    local label (+cu132, +cpu: the same C++ ABI; the CUDA runtime is checked when the library loads).
    python/custom_ops/__init__.py's import check applies the same rule."""
    return f"torch=={Version(version).public}"


# What the build needs of the torch it builds against; the visible GPUs' compute capabilities as
# torch.utils.cpp_extension reads them (CUDA_VISIBLE_DEVICES applies), for the default architectures.
_FACTS = (
    "import json, torch; c = torch.cuda; print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
    "'arch_flags': getattr(torch._C, '_cuda_getArchFlags', lambda: '')() or '', "
    "'visible_gpus': ' '.join('%d.%d' % c.get_device_capability(i) for i in range(c.device_count())), "
    "'cmake_prefix': torch.utils.cmake_prefix_path, 'python': __import__('sys').executable}))"
)


@functools.cache
def torch_to_build_against() -> dict | None:
    """Version, CUDA, architectures and CMake prefix of the torch to build against; None if none.

    pip's build isolation runs the build backend in the user's interpreter with PYTHONPATH pointing
    at a temporary environment (whose sitecustomize drops the user's site-packages): the same
    interpreter without those variables sees the user's torch."""
    isolated = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    for environment in (None, isolated):
        found = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", _FACTS], capture_output=True, text=True, env=environment
        )
        if found.returncode == 0:
            return {**json.loads(found.stdout), "outside_build_environment": environment is not None}
    return None


def _parent_command() -> str:
    try:
        return pathlib.Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def no_isolation_command(environ=None, parent: str | None = None) -> str:
    """The command that builds against the user's torch, for the frontend running this build: uv
    (it sets UV), python -m build, else pip. Their isolated build environments are new venvs that
    cannot see the user's torch (pip's own isolation can: torch_to_build_against looks past it)."""
    environ = os.environ if environ is None else environ
    parent = _parent_command() if parent is None else parent
    if environ.get("UV"):
        return "uv pip install --no-build-isolation ."
    if re.search(r"(-m build\b|pyproject-build)", parent):
        return "python -m build --wheel --no-isolation"
    return "pip install --no-build-isolation ."


def in_isolated_venv(environ=None, parent: str | None = None, prefix: str | None = None) -> bool:
    """Whether this build runs in a frontend's own new venv (uv's, python -m build's), where the
    user's torch cannot be seen, rather than in the user's environment."""
    environ = os.environ if environ is None else environ
    parent = _parent_command() if parent is None else parent
    prefix = sys.prefix if prefix is None else prefix
    if environ.get("UV"):
        return "/builds-v" in prefix
    if re.search(r"(-m build\b|pyproject-build)", parent):
        return not re.search(r"\s(--no-isolation|-n)(\s|$)", parent)
    # pip's isolation with a venv of its own (its default puts the user's interpreter in charge):
    # a temporary build-env venv.
    return "build-env" in pathlib.Path(prefix).name and prefix.startswith(tempfile.gettempdir())


def require_torch() -> dict:
    """The torch to build against, in the supported range; else one actionable line and exit 1."""
    facts = torch_to_build_against()
    spec = torch_range_text()
    if facts is None and in_isolated_venv():
        sys.exit(
            f"custom-ops: builds against the torch you installed, which this isolated build environment "
            f"({sys.prefix}) cannot see: {no_isolation_command()} (with torch installed: pip install '{spec}')"
        )
    if facts is None:
        sys.exit(
            f"custom-ops: no torch to build against in {sys.executable}: install torch first "
            f"(pip install '{spec}'), then build where it is, without build isolation: {no_isolation_command()}"
        )
    if outside_range(facts["version"]):
        sys.exit(f"custom-ops: supports {spec}; {facts['python']} has torch {facts['version']}")
    return facts


def dynamic_metadata(field, settings=None, project=None):  # unused arguments: the provider protocol
    facts = require_torch()
    series = ".".join(Version(facts["version"]).base_version.split(".")[:2])
    if field == "dependencies":
        return [torch_pin(facts["version"])]
    if field == "version":
        project_version = re.search(
            r"project\(CustomOps\s+VERSION\s+([0-9.]+)", (REPO / "CMakeLists.txt").read_text()
        ).group(1)
        cuda = "cu" + facts["cuda"].replace(".", "") if facts["cuda"] else "cpu"
        return f"{project_version}+torch{series}.{cuda}"
    raise RuntimeError(f"torch_requirement provides 'dependencies' and 'version', not {field!r}")


def check(release: str | None, extras: list[str]) -> int:
    """Whether this interpreter's torch fits; the extras' missing requirements on stdout."""
    try:
        import torch
    except ImportError:
        print("has no torch")
        return 1
    reason = outside_range(torch.__version__, release)
    if reason:
        print(reason)
        return 1
    for name in extras:
        for requirement in missing(extra(name)):
            print(requirement)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("range")
    commands.add_parser("oldest")
    checking = commands.add_parser("check")
    checking.add_argument("--release")
    checking.add_argument("--extras", default="", help="comma-separated extras of pyproject.toml, e.g. test,onnx")
    args = parser.parse_args()
    if args.command == "range":
        print(torch_range_text())
    elif args.command == "oldest":
        print(oldest_torch())
    else:
        return check(args.release, [name for name in args.extras.split(",") if name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
