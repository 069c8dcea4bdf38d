"""scikit-build-core metadata provider: the wheel's torch requirement.

The library inside the wheel is C++ against the ABI of the torch it was built with, so the wheel
requires that release series (``torch==2.15.*`` when built under torch 2.15.x), as torchvision
does, and pip will not install it under another one. Runs in the build's Python, which has torch
(``pip install --no-build-isolation .``).
"""

from __future__ import annotations

import re


def dynamic_metadata(field, settings=None, project=None):  # unused arguments: the provider protocol
    if field != "dependencies":
        raise RuntimeError(f"torch_requirement provides 'dependencies', not {field!r}")
    import torch

    major, minor = re.match(r"(\d+)\.(\d+)", torch.__version__).groups()
    return [f"torch=={major}.{minor}.*"]
