# SPDX-License-Identifier: BSD-3-Clause
"""Warnings as tests should see them, whichever channel a torch release routes them through.

A C++ `TORCH_WARN` reaches Python as a `warnings` warning, or c10's default handler prints it on
stderr (torch 2.11 did that for torch.ops calls; 2.15 raises a Python UserWarning). Tests check
the text, never the channel. Not a test module: the test files import it.
"""

import contextlib
import re
import warnings

import torch

TORCH_RELEASE = tuple(int(part) for part in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())

# TorchScript is deprecated upstream: torch.jit.script / save / load warn with a DeprecationWarning
# (hidden by Python's default filters) up to 2.13 and a FutureWarning (shown to users) from 2.14.
TORCHSCRIPT_WARNING = FutureWarning if TORCH_RELEASE >= (2, 14) else DeprecationWarning
TORCHSCRIPT_DEPRECATION = re.compile(r"`torch\.jit\.\w+` is deprecated\. Please switch to `torch\.(compile|export)`")


@contextlib.contextmanager
def torch_warnings(capfd):
    """Collects the warnings emitted in the block, from `warnings` and from stderr, into the yielded list."""
    messages = []
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as recorded:
        warnings.simplefilter("always")
        yield messages
    messages.extend(str(record.message) for record in recorded)
    messages.extend(line for line in capfd.readouterr().err.splitlines() if line.strip())


@contextlib.contextmanager
def torchscript_deprecation():
    """For torch.jit.script / torch.jit.save: expects torch's deprecation warning, of the category
    this torch release uses, and fails on any other warning."""
    with warnings.catch_warnings(record=True) as recorded:
        warnings.simplefilter("always")
        yield
    expected = [
        r for r in recorded if r.category is TORCHSCRIPT_WARNING and TORCHSCRIPT_DEPRECATION.search(str(r.message))
    ]
    others = [f"{r.category.__name__}: {r.message}" for r in recorded if r not in expected]
    assert not others, f"unexpected warnings: {others}"
    assert expected, f"torch {torch.__version__}: no {TORCHSCRIPT_WARNING.__name__} that TorchScript is deprecated"
