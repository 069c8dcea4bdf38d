# SPDX-License-Identifier: BSD-3-Clause
"""pyproject.toml's build backend: scikit-build-core, told where the user's torch is.

The library must be built against the torch it will run under, so torch is not a build
requirement (pip would download a second one into its isolated build environment). The documented
way is without isolation (`pip install --no-build-isolation .`, `uv pip install --no-build-isolation .`).
A plain `pip install .` builds against the torch of the interpreter pip runs in, which pip's build
isolation hides: torch_requirement finds it and hands its CMake directory, CUDA release, GPU
architectures and visible GPUs to CMake. Frontends whose isolated environment is a new venv (uv,
python -m build) cannot be looked past: without a torch in range the build stops at once with one
line naming the command, flag included, that builds against the user's torch.

uv's `extra-build-dependencies` with `match-runtime = true` would install the user's torch release
into uv's build environment, but uv refuses it for a package with dynamic dependencies, and ours
are dynamic: the exact torch release the wheel was built against (torch_requirement.torch_pin).
"""

from __future__ import annotations

import pathlib
import sys

import torch_requirement

try:
    from scikit_build_core import build as _scikit_build
    from scikit_build_core.build import build_sdist, get_requires_for_build_sdist  # noqa: F401 (hooks)
except ImportError:  # --no-build-isolation builds with what is installed, and pyproject's requires are not
    sys.exit(
        "custom-ops: a build without isolation uses the build tools installed here, and "
        f"{sys.executable} lacks scikit-build-core: pip install 'scikit-build-core>=0.11' (or uv pip install ...)"
    )


def _with_torch(config_settings):
    facts = torch_requirement.require_torch()
    settings = dict(config_settings or {})
    if facts["outside_build_environment"]:
        settings.setdefault("cmake.define.Torch_DIR", str(pathlib.Path(facts["cmake_prefix"]) / "Torch"))
        settings.setdefault("cmake.define.CUSTOM_OPS_TORCH_ARCH_FLAGS", facts["arch_flags"].replace(" ", ";"))
        settings.setdefault("cmake.define.CUSTOM_OPS_TORCH_CUDA_VERSION", facts["cuda"] or "")
        settings.setdefault("cmake.define.CUSTOM_OPS_VISIBLE_GPUS", facts["visible_gpus"].replace(" ", ";"))
    return settings


def _passing_torch(hook, settings_position):
    """The scikit-build-core hook, with the torch settings added to its config_settings argument."""

    def call(*args, **kwargs):
        if len(args) > settings_position:
            args = (*args[:settings_position], _with_torch(args[settings_position]), *args[settings_position + 1 :])
        else:
            kwargs["config_settings"] = _with_torch(kwargs.get("config_settings"))
        return hook(*args, **kwargs)

    return call


get_requires_for_build_wheel = _passing_torch(_scikit_build.get_requires_for_build_wheel, 0)
prepare_metadata_for_build_wheel = _passing_torch(_scikit_build.prepare_metadata_for_build_wheel, 1)
build_wheel = _passing_torch(_scikit_build.build_wheel, 1)
get_requires_for_build_editable = _passing_torch(_scikit_build.get_requires_for_build_editable, 0)
prepare_metadata_for_build_editable = _passing_torch(_scikit_build.prepare_metadata_for_build_editable, 1)
build_editable = _passing_torch(_scikit_build.build_editable, 1)
