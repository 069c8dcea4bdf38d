# SPDX-License-Identifier: BSD-3-Clause
"""Finds and loads libcustom_ops.so for the example scripts.

The first of these that exists wins:
  1. a path given on the command line (--library),
  2. $CUSTOM_OPS_LIBRARY,
  3. the installed Python package `custom_ops` (pip install .),
  4. build/libcustom_ops.so in this checkout.
"""

from __future__ import annotations

import os
import pathlib

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]


def load_custom_ops(library: str | os.PathLike | None = None) -> str:
    """Loads the operator library once and returns its path; torch.ops.custom.* is ready after."""
    if library is None:
        library = os.environ.get("CUSTOM_OPS_LIBRARY")
    if library is None:
        try:
            import custom_ops  # the package loads its own copy on import
        except ImportError:
            library = REPO / "build" / "libcustom_ops.so"
        else:
            return custom_ops.library_path()
    path = pathlib.Path(library).resolve()
    if not path.is_file():
        raise FileNotFoundError(
            f"libcustom_ops.so not found at {path}: build the library (cmake), pass --library, "
            "set CUSTOM_OPS_LIBRARY, or pip install the custom_ops package"
        )
    if str(path) not in torch.ops.loaded_libraries:
        torch.ops.load_library(str(path))
    return str(path)


def cuda_usable() -> bool:
    """A GPU is visible and the loaded library has CUDA kernels."""
    return torch.cuda.is_available() and torch._C._dispatch_has_kernel_for_dispatch_key("custom::weighted_sum", "CUDA")
