"""Loads libcustom_ops.so once for every Python test.

The library is found at $CUSTOM_OPS_LIBRARY (set by `make test` to the installed copy), else at
build/libcustom_ops.so in this checkout.
"""
import os
import pathlib

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
