# SPDX-License-Identifier: BSD-3-Clause
"""The operator table, Python side: each operator's term (its math) and one row per operator.

The twin of ops/include/custom_ops/operators.h and terms/*.h. Everything else in the package is
derived from it: the typed wrappers (``__init__.py``), the Inductor decompositions
(``_inductor.py``), the ONNX translations (``onnx.py``) and the DTensor rules (``sharding.py``);
so is every cross-cutting test. It imports nothing but the standard library, so it can be read
without torch._inductor or onnxscript (and loaded by path, from a checkout that is not built).

A term's six functions are ``lambda x, w: EXPR``, EXPR the same text as the C++ term's with its
constants plain numbers (``number<T>(2)`` is ``2``): ``+ - * /``, parentheses, numbers, ``x``,
``w``. Evaluated on tensors in the kernels' op-math dtype they compute what the kernels compute,
in the same order:

  value  the elementwise value y = f(x, w)      dxx  d2f/dx2
  dx     df/dx                                  dxw  d2f/dxdw
  dw     df/dw                                  dww  d2f/dw2

An operator's ``kind`` says what it computes from its term:
  "elementwise"  name(input, weight) -> value(input, weight), broadcast; with name.Scalar,
                 name.out and name_ (in place)
  "reduction"    name(input, weight, dim=None, keepdim=False, *, dtype=None) -> value summed over
                 dim (every dim for None or []), like torch.sum
Every operator of a term shares the term's backward operator,
  backward(grad, input, weight, bool[2] output_mask) -> (sum_to(grad * dx, input), sum_to(grad * dw, weight))

The format (scripts/new_op.py adds an operator by text, so keep it regular):

  * one block per term between ``# --- terms ---`` and ``# --- end of terms ---``, exactly as
    WEIGHTED_SQUARE's below (a keyword argument a line, in that order);
    the variable the term's C++ struct name in UPPER_SNAKE_CASE, ``name`` the C++ struct
    (custom::terms::NAME, CUSTOM_OPS_TERMS), ``backward`` its backward operator (``<first
    operator's name>_backward`` for a new term);
  * one line per operator inside OPERATORS, between ``# --- operators ---`` and
    ``# --- end of operators ---``, exactly::

        Operator("weighted_abs_sum", "reduction", WEIGHTED_ABS),

    the same order as the C++ rows (elementwise and reduction operators may interleave);
  * TERMS is derived: every term of an operator, in the order of first use (so a term written
    but used by no operator is not in it, as it would register no backward operator).

Optional Operator fields (keyword arguments after the three, default in brackets):
  domain  [None]  (low, high): the range test samples of input and weight are drawn from, for a
                  term defined only on part of the line (``x / w`` away from w = 0); None: any
                  float.

Loadable by path too (no relative imports; no string annotations, which dataclasses would look up
in sys.modules).
"""

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["ELEMENTWISE", "KINDS", "OPERATORS", "REDUCTION", "TERMS", "Operator", "Term", "expression"]

ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
KINDS = (ELEMENTWISE, REDUCTION)

Formula = Callable[[Any, Any], Any]


@dataclasses.dataclass(frozen=True)
class Term:
    """An operator's math: its value and first and second partials in x and w (see the module)."""

    name: str
    backward: str
    value: Formula
    dx: Formula
    dw: Formula
    dxx: Formula
    dxw: Formula
    dww: Formula

    @property
    def dw_reads_weight(self) -> bool:
        """Whether dw depends on w (the C++ term's ``dw_reads_weight``): when not, the weight
        gradient is computed from (grad, input) alone, and in their common dtype."""
        return isinstance(self.dw(1.5, _Reads()), _Reads)


@dataclasses.dataclass(frozen=True)
class Operator:
    """One row: an operator, its kind ("elementwise" or "reduction") and its term."""

    name: str
    kind: str
    term: Term
    domain: tuple[float, float] | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"operator {self.name}: kind must be one of {KINDS}, got {self.kind!r}")

    def __str__(self):
        return self.name


class _Reads:
    """Stands for w in Term.dw_reads_weight: any arithmetic with it gives one again."""

    def _any(self, *_):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _any
    __neg__ = __pos__ = _any


# --- terms ---
WEIGHTED_SQUARE = Term(
    name="WeightedSquare",
    backward="weighted_sum_backward",
    value=lambda x, w: w * (x * x),
    dx=lambda x, w: (x + x) * w,
    dw=lambda x, w: x * x,
    dxx=lambda x, w: w + w,
    dxw=lambda x, w: x + x,
    dww=lambda x, w: 0,
)
# --- end of terms ---

OPERATORS = (
    # --- operators ---
    Operator("weighted_sum", "elementwise", WEIGHTED_SQUARE),
    Operator("weighted_square_sum", "reduction", WEIGHTED_SQUARE),
    # --- end of operators ---
)

TERMS = tuple(dict.fromkeys(operator.term for operator in OPERATORS))


def expression(formula: Formula) -> str | None:
    """The EXPR of a term's ``lambda x, w: EXPR`` as written in this file (for docstrings and the
    generator's checks); None where the source cannot be read (a build without .py files)."""
    import inspect
    import re

    try:
        line = inspect.getsource(formula).strip()
    except (OSError, TypeError):
        return None
    match = re.search(r"lambda\s+x\s*,\s*w\s*:\s*(.*?)\s*,?$", line)
    return match[1] if match else None
