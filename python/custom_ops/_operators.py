# SPDX-License-Identifier: BSD-3-Clause
"""The operator table, Python side: each operator's term (its math) and one row per operator.

The twin of ops/include/custom_ops/operators.h and terms/*.h. Everything else in the package is
derived from it: the typed wrappers (``__init__.py``), the Inductor decompositions
(``_inductor.py``), the ONNX translations (``onnx.py``) and the DTensor rules (``sharding.py``);
so is every cross-cutting test. It imports nothing but the standard library, so it can be read
without torch._inductor or onnxscript (and loaded by path, from a checkout that is not built).

A term's six functions are ``lambda x, w: EXPR``, EXPR the same text as the C++ term's with its
constants plain numbers (``number<T>(2)`` is ``2``) and its functions unqualified (``fn::tanh(x)``
is ``tanh(x)``): ``+ - * /``, parentheses, numbers, ``x``, ``w`` and calls of FUNCTIONS (below).
Evaluated on tensors in the kernels' op-math dtype they compute what the kernels compute, in the
same order:

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
import math
from collections.abc import Callable
from typing import Any

__all__ = [
    "ELEMENTWISE",
    "FUNCTIONS",
    "KINDS",
    "OPERATORS",
    "REDUCTION",
    "TERMS",
    "Function",
    "Operator",
    "Term",
    "expression",
]

ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
KINDS = (ELEMENTWISE, REDUCTION)

Formula = Callable[[Any, Any], Any]


@dataclasses.dataclass(frozen=True)
class Function:
    """A function a term may call: ``name(e)``, or ``name(e, c)`` for a constant c (``pow``).

    Its C++ twin is the row of the same name in ops/include/custom_ops/term_functions.h (how it is
    computed in the kernels' scalar op-math type, in at::vec::Vectorized, on at::Tensor); this row
    is everything else about it, for every Python-side reader:
      derivative  d name(e)/de as a term expression over e (and c): scripts/new_op.py differentiates
                  with it, so the generator knows no function but these rows;
      tensor      how it is computed on a torch.Tensor (the Python twin: Inductor's decomposition,
                  the composite the tests compare with), by the tensor's own methods;
      number      on a Python number (the sharding rules' and the generator's sample points);
      onnx        the standard ONNX operator that computes it, or a term expression over e for one
                  that ONNX lacks (log1p is ``log(1 + e)``);
      ulps        its documented error in units in the last place, in the kernels' op-math type,
                  as (CPU, CUDA): Sleef's and glibc's on the CPU, CUDA's libm on the GPU (the
                  CUDA Math API's table). The tests' error bounds grow by it.
    ATen's conventions where it is not differentiable: abs'(0) = sign(0) = 0, relu'(0) = step(0) =
    0 (and step(nan) = 1, as relu's backward passes the gradient of a nan input)."""

    name: str
    derivative: str
    tensor: Callable[..., Any]
    number: Callable[..., float]
    onnx: str
    ulps: tuple[float, float] = (0.0, 0.0)
    constant: bool = False  # takes a constant second argument: name(e, c)

    def derivative_at(self, e, *constant):
        """The derivative formula evaluated at e (a number, a tensor, a value class's)."""
        return _evaluate(self.derivative, e, *constant)

    @property
    def onnx_operator(self) -> str | None:
        """The standard ONNX operator that computes it; None where ``onnx`` is a formula of others."""
        return self.onnx if self.onnx.isidentifier() and self.onnx[0].isupper() else None

    def onnx_formula(self, e):
        """``onnx`` (a formula over e of the other functions) evaluated on e's value class."""
        return _evaluate(self.onnx, e)

    def __call__(self, e, *constant):
        apply = getattr(e, "term_function", None)  # a value class of the package's (ONNX, sharding)
        if apply is not None:
            return apply(self, *constant)
        if isinstance(e, (int, float)) or type(e).__name__ == "Fraction":
            return self.number(float(e), *constant)
        return self.tensor(e, *constant)


def _evaluate(text: str, e, *constant):
    """A row's formula over e (and c) with the table's functions: the row's own text, not input."""
    return eval(text, {"__builtins__": {}, **FUNCTIONS}, {"e": e, "c": constant[0] if constant else None})


def function_calls(text: str) -> list[str]:
    """The table's functions a formula's text calls, once per call."""
    import re

    return [name for name in re.findall(r"\b(\w+)\s*\(", text) if name in FUNCTIONS]


def _step(e: float) -> float:
    return 0.0 if e <= 0 else 1.0


def _sign(e: float) -> float:
    return float((e > 0) - (e < 0))


def _log(e: float) -> float:
    return -math.inf if e == 0 else math.log(e)


def _log1p(e: float) -> float:
    return -math.inf if e == -1 else math.log1p(e)


def _rsqrt(e: float) -> float:
    return math.copysign(math.inf, e) if e == 0 else 1 / math.sqrt(e)


def _sigmoid(e: float) -> float:
    if e < 0:  # exp(-e) could overflow; exp(e) only underflows
        return math.exp(e) / (1 + math.exp(e))
    return 1 / (1 + math.exp(-e))


def _pow(e: float, c: float) -> float:
    # ATen's pow(tensor, number) computes these exponents as other functions (term_functions.h).
    special = {2.0: lambda: e * e, 3.0: lambda: e * e * e, 0.5: lambda: math.sqrt(e), -0.5: lambda: _rsqrt(e)}
    if c in special:
        return special[c]()
    if e == 0 and c < 0:  # a pole: inf, of e's sign for an odd integer power
        return math.copysign(math.inf, e) if c.is_integer() and c % 2 else math.inf
    return math.pow(e, c)


def _guarded(f: Callable[[float], float]) -> Callable[[float], float]:
    """f on a Python number, nan where math raises (outside its domain) and inf where it overflows,
    as the tensor functions give."""

    def number(e: float, *constant) -> float:
        try:
            return f(e, *constant)
        except OverflowError:
            return math.inf
        except (ValueError, ZeroDivisionError):
            return math.nan

    return number


# The functions, one row each (see Function). sign and step are the derivatives of abs and relu.
FUNCTIONS = {
    f.name: f
    for f in (
        Function("exp", "exp(e)", lambda e: e.exp(), _guarded(math.exp), "Exp", (1, 2)),
        Function("log", "1 / e", lambda e: e.log(), _guarded(_log), "Log", (1, 1)),
        Function("log1p", "1 / (1 + e)", lambda e: e.log1p(), _guarded(_log1p), "log(1 + e)", (1, 1)),
        Function("expm1", "exp(e)", lambda e: e.expm1(), _guarded(math.expm1), "exp(e) - 1", (1, 1)),
        Function("sqrt", "0.5 / sqrt(e)", lambda e: e.sqrt(), _guarded(math.sqrt), "Sqrt", (1, 1)),
        Function("rsqrt", "-0.5 * rsqrt(e) / e", lambda e: e.rsqrt(), _guarded(_rsqrt), "1 / sqrt(e)", (1, 2)),
        Function("tanh", "1 - tanh(e) * tanh(e)", lambda e: e.tanh(), _guarded(math.tanh), "Tanh", (2, 2)),
        Function(
            "sigmoid", "sigmoid(e) * (1 - sigmoid(e))", lambda e: e.sigmoid(), _guarded(_sigmoid), "Sigmoid", (3, 4)
        ),
        Function("erf", "1.1283791670955126 * exp(-(e * e))", lambda e: e.erf(), _guarded(math.erf), "Erf", (2, 2)),
        Function("sin", "cos(e)", lambda e: e.sin(), _guarded(math.sin), "Sin", (1, 2)),
        Function("cos", "-sin(e)", lambda e: e.cos(), _guarded(math.cos), "Cos", (1, 2)),
        Function("abs", "sign(e)", lambda e: e.abs(), abs, "Abs"),
        Function("relu", "step(e)", lambda e: e.relu(), lambda e: e if not e < 0 else 0.0, "Relu"),
        Function("pow", "c * pow(e, c - 1)", lambda e, c: e.pow(c), _guarded(_pow), "Pow", (1, 4), constant=True),
        Function("sign", "0", lambda e: e.sign(), _sign, "Sign"),
        Function("step", "0", lambda e: (e <= 0).logical_not().to(e.dtype), _step, "relu(sign(e))"),
    )
}
globals().update(FUNCTIONS)  # a term's lambdas call them by name: tanh(x)


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
    def calls_functions(self) -> bool:
        """Whether any formula calls a function (FUNCTIONS): then its values are those functions'
        implementations' (Sleef, libm, ATen), which agree within a few units in the last place but
        not bit for bit, so the term's results are not the composite's bits."""
        texts = [expression(getattr(self, f)) or "" for f in ("value", "dx", "dw", "dxx", "dxw", "dww")]
        return any(function_calls(text) for text in texts)

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

    def term_function(self, function, *constant):
        return self


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
