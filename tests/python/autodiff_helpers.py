# SPDX-License-Identifier: BSD-3-Clause
"""Forward-mode AD and functorch set-up shared by the autograd and torch.func tests of both ops.

Not a test module: the test files import it (pytest puts this directory on sys.path).

  no_vmap_fallback               autouse fixture: functorch's per-example vmap fallback off, so a
                                 missing batching rule fails instead of silently looping (jacfwd,
                                 jacrev, hessian and per-sample gradients all vmap); a module takes
                                 it with `no_vmap_fallback = autodiff_helpers.no_vmap_fallback`
  WHICH                          "input", "weight", "both": which of (input, weight) a case
                                 differentiates
  random_tangents(x, w, which)   random tangents for those, None for the other
  dual(f, x, w, tx, tw)          (primal, tangent) of f(x, w, ...) through dual tensors
"""

import pytest
import torch
import torch.autograd.forward_ad as fwAD


@pytest.fixture(autouse=True)
def no_vmap_fallback():
    enabled = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(False)
    yield
    torch._C._functorch._set_vmap_fallback_enabled(enabled)


WHICH = {"input": (True, False), "weight": (False, True), "both": (True, True)}


def random_tangents(x, w, which):
    """(tangent of x, tangent of w): random where WHICH[which] says, else None."""
    with_x, with_w = WHICH[which]
    return (torch.randn_like(x) if with_x else None, torch.randn_like(w) if with_w else None)


def dual(f, x, w, tx, tw, *args):
    """(primal, tangent) of f(x, w, *args) with x, w made dual tensors of tangents tx, tw (None: not
    dual); fails where the result lost its tangent."""
    with fwAD.dual_level():
        dx = x if tx is None else fwAD.make_dual(x, tx)
        dw = w if tw is None else fwAD.make_dual(w, tw)
        primal, tangent = fwAD.unpack_dual(f(dx, dw, *args))
        assert tangent is not None, "the result lost its tangent"
        return primal.clone(), tangent.clone()
