# SPDX-License-Identifier: BSD-3-Clause
"""The Inductor decompositions of python/custom_ops/_inductor.py, as the torch.compile tests use them.

Not a test module: test_inductor_fusion.py imports it (pytest
puts this directory on sys.path). In this process the decompositions come from the package's
source file, installed the way `import custom_ops` installs them (conftest loaded the library
already); one module instance per process, so one table.

  decompositions          that module
  installed               fixture: installs and enables them for one test module; a module takes
                          it (and the two below) with `installed = compile_helpers.installed`
  decompose               fixture: each test twice, decomposed and opaque (the op left to Inductor)
  decomposed              fixture: decomposed, with a fresh Dynamo and fresh counters
  run_compiled            a call, and the code Inductor generated for it
  leaves                  random float tensors
"""

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor import metrics
from torch._inductor.utils import run_and_get_code

import operators

decompositions = operators.package_module("_inductor")


@pytest.fixture(autouse=True, scope="module")
def installed():
    # For the module that takes it only: other test files compile (AOTInductor packages, say)
    # expecting the op.
    import torch.compiler.config as compiler_config

    saved_tag = compiler_config.cache_key_tag
    decompositions.install("test")
    decompositions.set_enabled(True)
    yield
    decompositions.set_enabled(False)
    compiler_config.cache_key_tag = saved_tag
    torch._dynamo.reset()


@pytest.fixture(params=[True, False], ids=["decomposed", "opaque"])
def decompose(request):
    decompositions.set_enabled(request.param)
    torch._dynamo.reset()
    counters.clear()
    yield request.param
    decompositions.set_enabled(True)
    torch._dynamo.reset()


@pytest.fixture
def decomposed():
    decompositions.set_enabled(True)
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def run_compiled(fn, *args, backward=False):
    """(fn(*args), the code Inductor generated in the call, as one string); with backward, also
    fn(*args).sum().backward(). Inductor's metrics count from the call's start."""
    metrics.reset()

    def run():
        result = fn(*args)
        if backward:
            result.sum().backward()
        return result

    result, code = run_and_get_code(run)
    return result, "\n".join(code)


def leaves(*shapes, requires_grad=False, dtype=torch.float32):
    return [torch.randn(s, dtype=dtype, requires_grad=requires_grad) for s in shapes]
