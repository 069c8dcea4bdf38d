"""pyproject.toml's build backend: scikit-build-core, told where the user's torch is.

The library must be built against the torch it will run under, so torch is not a build
requirement (pip would download a second one into its isolated build environment). A plain
`pip install .` builds against the torch of the interpreter pip runs in, which build isolation
hides: torch_requirement finds it and hands its CMake directory and GPU architectures to CMake.
Without a torch in range the build stops at once with one line saying what to install.
"""

from __future__ import annotations

import pathlib

import torch_requirement
from scikit_build_core import build as _scikit_build
from scikit_build_core.build import build_sdist, get_requires_for_build_sdist  # noqa: F401 (hooks)


def _with_torch(config_settings):
    facts = torch_requirement.require_torch()
    settings = dict(config_settings or {})
    if facts["outside_build_environment"]:
        settings.setdefault("cmake.define.Torch_DIR", str(pathlib.Path(facts["cmake_prefix"]) / "Torch"))
        settings.setdefault("cmake.define.CUSTOM_OPS_TORCH_ARCH_FLAGS", facts["arch_flags"].replace(" ", ";"))
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
