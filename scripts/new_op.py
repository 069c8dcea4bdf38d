#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Adds an operator: its term (the math, written once) and its rows in the two operator tables.

    scripts/new_op.py NAME --kind {elementwise,reduction} --value EXPR [--dx EXPR] [--dw EXPR] \\
        [--dxx EXPR] [--dxw EXPR] [--dww EXPR] [--term TermName] [--domain LOW HIGH] [--root DIR] [--dry-run]

EXPR is arithmetic over x (the input) and w (the weight): + - * /, parentheses, decimal numbers and
calls of the functions of FUNCTIONS in python/custom_ops/_operators.py (exp, log, log1p, expm1,
sqrt, rsqrt, tanh, sigmoid, erf, sin, cos, abs, relu, sign, step, and pow(e, c) for a number c;
--help lists the table's), text that means the same in C++ (fn::tanh(x)) and in Python. --value
is the elementwise value y = f(x, w) (a reduction sums it over dim) and is all the script needs:
its five partial derivatives are derived from it (with sympy, which torch depends on: run the
script with the Python that has torch). A partial given by hand must equal the derived one at a
few points, and is then written as given. The value is written as given too: its operation order
is the kernels', and `w * (x * x)` and `(w * x) * x` round differently.

It writes these three files and nothing else:
  ops/include/custom_ops/terms/NAME.h  the term, a struct of the six formulas (new)
  ops/include/custom_ops/operators.h   its #include, the operator's row and the term's row
                                       (the term's backward operator is NAME_backward)
  python/custom_ops/_operators.py      the Python twin: a Term block and an Operator row
What it writes is ordinary source, yours from then on. Next: `make test-op OP=NAME`.
--dry-run prints the changes as diffs instead. It refuses, changing nothing, a NAME or term that
the tables already have, so running it twice adds an operator once.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import functools
import importlib.util
import keyword
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent  # the checkout this script is in
TERMS_DIR = Path("ops/include/custom_ops/terms")
OPERATORS_H = Path("ops/include/custom_ops/operators.h")
OPERATORS_PY = Path("python/custom_ops/_operators.py")
KINDS = ("elementwise", "reduction")
FORMULAS = ("value", "dx", "dw", "dxx", "dxw", "dww")
MEANINGS = dict(zip(FORMULAS, ("y = f(x, w)", "df/dx", "df/dw", "d2f/dx2", "d2f/dxdw", "d2f/dw2")))
# The lists of operators.h, one `  X(a, b) \` a line, each closed by this comment line.
LIST_END = "  /* end of {} */"
LISTS = {"elementwise": "CUSTOM_OPS_ELEMENTWISE_OPERATORS", "reduction": "CUSTOM_OPS_REDUCTION_OPERATORS"}
TERMS_LIST = "CUSTOM_OPS_TERMS"
PY_TERMS_END = "# --- end of terms ---"
PY_OPERATORS_END = "# --- end of operators ---"
# An operator's name is a C++ function (custom::NAME) and a Python attribute (custom_ops.NAME).
CXX_KEYWORDS = frozenset(
    re.findall(
        r"\w+",
        """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
        class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
        decltype default delete do double dynamic_cast else enum explicit export extern false float for friend goto
        if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected
        public register reinterpret_cast requires return short signed sizeof static static_assert static_cast struct
        switch template this thread_local throw true try typedef typeid typename union unsigned using virtual void
        volatile wchar_t while xor xor_eq""",
    )
)
# A number both languages read alike: decimal, no digit separators, hex, suffixes or complex.
NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


class Error(Exception):
    """A refusal: one line, and nothing written."""


# --- the functions a term may call ---


@functools.cache
def load_functions(root: Path) -> Mapping[str, Any]:
    """FUNCTIONS of the checkout's python/custom_ops/_operators.py, loaded by path (it imports only
    the standard library): the script knows no function but that table's rows."""
    path = root / OPERATORS_PY
    spec = importlib.util.spec_from_file_location("custom_ops_operators_table", path)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.FUNCTIONS
    except Exception as error:  # anything the table's own code raises, said in one line
        raise Error(f"{path}: cannot read its FUNCTIONS ({type(error).__name__}: {error})") from None


def allowed(functions: Mapping[str, Any]) -> str:
    """What an expression may contain, for refusals and --help."""
    calls = [name for name, f in functions.items() if not f.constant]
    calls += [f"{name}(e, c) for a number c" for name, f in functions.items() if f.constant]
    return f"only + - * /, parentheses, numbers, x, w and calls of {', '.join(calls)}"


# --- expressions ---


def parse(option: str, text: str, functions: Mapping[str, Any] | None = None) -> ast.expr:
    """The syntax tree of --option's expression, if it is only what a term may contain (see
    allowed); functions: FUNCTIONS (default: this checkout's)."""
    return _parse(f"--{option} {text!r}", text, load_functions(ROOT) if functions is None else functions)


def _parse(
    where: str, text: str, functions: Mapping[str, Any], variables=("x", "w"), constants: tuple[str, ...] = ()
) -> ast.expr:
    """The tree of text over variables (and, in a function's derivative, its constant), each call's
    node carrying its row of functions (node.function)."""
    text = text.strip()
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as error:
        raise Error(f"{where}: not an expression ({error.msg})") from None
    rule = allowed(functions)
    for node in ast.walk(tree):  # breadth first: a call before its function's name
        if isinstance(node, ast.Call):
            _check_call(where, text, node, functions, constants, rule)
        elif isinstance(node, ast.BinOp):
            if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
                raise Error(f"{where}: {_OPERATOR_TEXT.get(type(node.op), 'that operator')} is not allowed ({rule})")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.USub, ast.UAdd)):
                raise Error(f"{where}: {_OPERATOR_TEXT.get(type(node.op), 'that operator')} is not allowed ({rule})")
        elif isinstance(node, ast.Name):
            if node.id not in (*variables, *constants) and not getattr(node, "called", False):
                raise Error(f"{where}: unknown name {node.id!r} ({rule})")
        elif isinstance(node, ast.Constant):
            literal = ast.get_source_segment(text, node)
            if type(node.value) not in (int, float) or literal is None or not NUMBER.fullmatch(literal):
                raise Error(f"{where}: {literal or repr(node.value)} is not a decimal number ({rule})")
            if not math.isfinite(float(literal)):
                raise Error(f"{where}: {literal} is not a finite double")
            if isinstance(node.value, int) and node.value > 2**53:
                raise Error(f"{where}: {literal} is not exact as a double; write it with an exponent (1e20)")
            node.literal = literal  # the text as written, the same in both languages
        elif not isinstance(node, (ast.operator, ast.unaryop, ast.expr_context)):
            raise Error(f"{where}: {type(node).__name__.lower()} is not allowed ({rule})")
        if isinstance(node, (ast.BinOp, ast.UnaryOp)):
            # Parentheses the tree does not need are kept, for the reader: `(x * x) / w`. A node
            # with "(" just before it and ")" just after is what they enclose (not a call's own).
            start = getattr(node, "inside_call", 0)
            before, after = text[start : node.col_offset].rstrip(), text[node.end_col_offset :].lstrip()
            node.parenthesized = before.endswith("(") and after.startswith(")")
    return tree


def _check_call(where, text, node: ast.Call, functions, constants, rule) -> None:
    if not isinstance(node.func, ast.Name):  # x.exp(): "attribute is not allowed"
        raise Error(f"{where}: {type(node.func).__name__.lower()} is not allowed ({rule})")
    name = node.func.id
    function = functions.get(name)
    if function is None:
        raise Error(f"{where}: unknown function {name!r} ({rule})")
    signature = f"{name}(e, c)" if function.constant else f"{name}(e)"
    if node.keywords:
        raise Error(f"{where}: {name} takes no keyword arguments ({signature})")
    arity = 1 + function.constant
    if len(node.args) != arity:
        raise Error(f"{where}: {name} takes {arity} argument{'s' * (arity > 1)}, not {len(node.args)} ({signature})")
    if function.constant and not _is_constant(node.args[1], constants):
        exponent = ast.get_source_segment(text, node.args[1])
        raise Error(f"{where}: {name}'s constant must be a decimal number, not {exponent!r} ({signature})")
    node.func.called = True  # a function's name, not a variable
    node.function = function
    node.args[0].inside_call = text.index("(", node.func.end_col_offset) + 1  # where its "(" ends


def _is_constant(node: ast.expr, constants: tuple[str, ...]) -> bool:
    """A decimal number, optionally negative: what C++ passes as a plain double. In a function's
    derivative, an expression of its constant too (pow's `c - 1`)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    if isinstance(node, ast.Constant):
        return True
    names = [n for n in ast.walk(node) if isinstance(n, ast.Name)]
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return bool(constants and names and not calls) and all(n.id in constants for n in names)


def divisions_of_numbers(tree: ast.expr) -> bool:
    """Whether a number other than ±1 is divided by an expression: Python computes `2 / t` on a
    tensor as `t.reciprocal() * 2`, which can differ from C++'s `2 / t` in the last bit (`1 / t`
    is the reciprocal in both)."""
    return any(
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Div)
        and isinstance(node.left, (ast.Constant, ast.UnaryOp))
        and not uses(node.left, "x")
        and not uses(node.left, "w")
        and not (isinstance(node.left, ast.Constant) and node.left.value == 1)
        and not (isinstance(node.left, ast.UnaryOp) and getattr(node.left.operand, "value", None) == 1)
        and (uses(node.right, "x") or uses(node.right, "w"))
        for node in ast.walk(tree)
    )


_OPERATOR_TEXT = {
    ast.Pow: "**",
    ast.Mod: "%",
    ast.FloorDiv: "//",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.Invert: "~",
    ast.Not: "not",
}
_PRECEDENCE = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.Div: 2}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_ADD, _MUL, _UNARY, _ATOM = 1, 2, 3, 4


def to_text(tree: ast.expr, cxx: bool) -> str:
    """The expression in C++ (each number `number<T>(n)`, as terms/*.h write constants, each
    function `fn::name`, a function's constant a plain double) or in Python (numbers plain),
    parenthesized exactly where the tree needs it, so both languages compute in the same order."""
    return _emit(tree, cxx)[0]


def _emit(node: ast.expr, cxx: bool) -> tuple[str, int]:
    if isinstance(node, ast.Name):
        return node.id, _ATOM
    if isinstance(node, ast.Constant):
        return (f"number<T>({node.literal})" if cxx else node.literal), _ATOM
    if isinstance(node, ast.Call):
        arguments = [_emit(node.args[0], cxx)[0], *map(_literal, node.args[1:])]
        return f"{'fn::' if cxx else ''}{node.func.id}({', '.join(arguments)})", _ATOM
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.UAdd):
            return _emit(node.operand, cxx)
        if isinstance(node.operand, ast.Constant):  # a negative constant is one number
            literal = "-" + node.operand.literal
            return (f"number<T>({literal})", _ATOM) if cxx else _parenthesized(node, literal, _UNARY)
        text, precedence = _emit(node.operand, cxx)
        if precedence < _ATOM and not getattr(node.operand, "parenthesized", False):  # -(-x), not --x
            text = f"({text})"
        return _parenthesized(node, "-" + text, _UNARY)
    assert isinstance(node, ast.BinOp)
    precedence = _PRECEDENCE[type(node.op)]
    left, left_precedence = _emit(node.left, cxx)
    right, right_precedence = _emit(node.right, cxx)
    if left_precedence < precedence:
        left = f"({left})"
    if right_precedence <= precedence:  # left-associative: a - (b - c) keeps its parentheses
        right = f"({right})"
    return _parenthesized(node, f"{left} {_SYMBOL[type(node.op)]} {right}", precedence)


def _literal(node: ast.expr) -> str:
    """A function's constant, as written: a plain double in both languages."""
    return node.literal if isinstance(node, ast.Constant) else "-" + node.operand.literal


def _parenthesized(node: ast.expr, text: str, precedence: int) -> tuple[str, int]:
    return (f"({text})", _ATOM) if getattr(node, "parenthesized", False) else (text, precedence)


def uses(tree: ast.expr, name: str) -> bool:
    return any(isinstance(node, ast.Name) and node.id == name for node in ast.walk(tree))


def evaluate(tree: ast.expr, x: float, w: float) -> float:
    """The expression on Python numbers, each function by its row's `number`."""
    functions = {node.func.id: node.function for node in ast.walk(tree) if isinstance(node, ast.Call)}
    code = compile(ast.Expression(tree), "<term>", "eval")
    return eval(code, {"__builtins__": {}, **functions}, {"x": x, "w": w})


def sample_points(domain: tuple[float, float] | None) -> list[tuple[float, float]]:
    """(x, w) points where formulas are compared: inside the domain, off the usual kinks (0, ±1)."""
    low, high = domain or (-2.0, 2.0)
    fractions = ((0.18, 0.71), (0.63, 0.29), (0.87, 0.94), (0.41, 0.12), (0.06, 0.57))
    return [(low + (high - low) * a, low + (high - low) * b) for a, b in fractions]


def check_derivatives(trees: dict[str, ast.expr], domain: tuple[float, float] | None) -> None:
    """Each derivative against central difference quotients of the formula it differentiates, at
    a few points (those where every formula is defined): the check of five partials given by hand
    where sympy is not there to derive them."""
    points = sample_points(domain)
    checks = [  # (the derivative, the formula, the variable)
        ("dx", "value", "x"),
        ("dw", "value", "w"),
        ("dxx", "dx", "x"),
        ("dxw", "dx", "w"),
        ("dxw", "dw", "x"),
        ("dww", "dw", "w"),
    ]
    checked = False
    for x, w in points:
        try:
            for derivative, formula, variable in checks:
                h = 1e-4 * max(1.0, abs(x if variable == "x" else w))
                step = (h, 0.0) if variable == "x" else (0.0, h)
                ahead = evaluate(trees[formula], x + step[0], w + step[1])
                behind = evaluate(trees[formula], x - step[0], w - step[1])
                quotient = (ahead - behind) / (2 * h)
                given = evaluate(trees[derivative], x, w)
                if not all(map(math.isfinite, (ahead, behind, given))):
                    raise ZeroDivisionError
                if abs(given - quotient) > 1e-5 * max(1.0, abs(given), abs(quotient)):
                    raise Error(
                        f"--{derivative} {to_text(trees[derivative], cxx=False)!r} is not d({formula})/d{variable}:"
                        f" at x={x:g}, w={w:g} it is {given:.6g}, a difference quotient of --{formula} {quotient:.6g}"
                    )
            checked = True
        except (ZeroDivisionError, OverflowError):
            continue  # a pole at this point: the others decide
    if not checked:
        raise Error(f"the derivatives cannot be checked: the formulas are undefined at every point tried ({points})")


def check_against_derived(given: dict[str, ast.expr], derived: dict[str, ast.expr], domain) -> None:
    """Each partial given by hand against the derived one, at a few points where both are defined:
    a wrong one is refused with the formula it should be."""
    points = sample_points(domain)
    for name in (name for name in FORMULAS[1:] if name in given):
        compared = False
        for x, w in points:
            try:
                value, expected = evaluate(given[name], x, w), evaluate(derived[name], x, w)
            except (ZeroDivisionError, OverflowError):
                continue  # a pole at this point: the others decide
            if not (math.isfinite(value) and math.isfinite(expected)):
                continue
            compared = True
            if abs(value - expected) > 1e-9 * max(1.0, abs(value), abs(expected)):
                raise Error(
                    f"--{name} {to_text(given[name], cxx=False)!r} is not {MEANINGS[name]}: it should be --{name}"
                    f" {to_text(derived[name], cxx=False)!r}"
                    f" (at x={x:g}, w={w:g} it is {value:.6g}, not {expected:.6g})"
                )
        if not compared:
            raise Error(
                f"--{name} cannot be checked: it or {MEANINGS[name]} is undefined at every point tried ({points})"
            )


# --- the partials, derived ---


class Calculus:
    """The partials of a value, derived with sympy. Each function of the table is a sympy function
    of its own whose derivative is its row's `derivative` (sympy applies the chain rule); not
    sympy's exp, tanh or Abs, which sympy would rewrite into forms a term cannot call."""

    def __init__(self, functions: Mapping[str, Any]):
        import sympy  # the caller says what to do without it

        self.sympy = sympy
        self.variables = dict(zip(("x", "w"), sympy.symbols("x w")))
        self.functions = {name: self._function(row, functions) for name, row in functions.items()}

    @classmethod
    def if_available(cls, functions: Mapping[str, Any]) -> Calculus | None:
        try:
            return cls(functions)
        except ImportError:
            return None

    def _function(self, row, functions: Mapping[str, Any]) -> type:
        where = f"{OPERATORS_PY}: FUNCTIONS[{row.name!r}].derivative {row.derivative!r}"
        derivative = _parse(where, row.derivative, functions, ("e",), ("c",) if row.constant else ())
        sympy, expression = self.sympy, self.expression

        def fdiff(applied, argindex=1):
            if argindex != 1:  # the constant's: never asked, as it is a number
                raise sympy.core.function.ArgumentIndexError(applied, argindex)
            return expression(derivative, dict(zip(("e", "c"), applied.args)))

        return type(row.name, (sympy.Function,), {"nargs": 1 + row.constant, "fdiff": fdiff, "row": row})

    def expression(self, tree: ast.expr, names: Mapping[str, Any]):
        """The sympy expression of a parsed one, names its variables' values; numbers exact."""
        if isinstance(tree, ast.Name):
            return names[tree.id]
        if isinstance(tree, ast.Constant):
            number = Fraction(tree.literal)
            return self.sympy.Rational(number.numerator, number.denominator)
        if isinstance(tree, ast.Call):
            return self.functions[tree.func.id](*(self.expression(argument, names) for argument in tree.args))
        if isinstance(tree, ast.UnaryOp):
            operand = self.expression(tree.operand, names)
            return -operand if isinstance(tree.op, ast.USub) else operand
        left, right = self.expression(tree.left, names), self.expression(tree.right, names)
        if isinstance(tree.op, ast.Add):
            return left + right
        if isinstance(tree.op, ast.Sub):
            return left - right
        return left * right if isinstance(tree.op, ast.Mult) else left / right

    def partials(self, value: ast.expr) -> dict[str, Any]:
        """dx, dw, dxx, dxw, dww of the value, each the shorter of sympy's form and that form with
        common factors taken out (w * (2 * x + w), not w * x + w * (x + w)); the expanded forms
        where neither has constants near the tamest's: exact rationals of a decimal like
        0.7071067811865476 have huge common factors, and 1.3e-31 * (6.25e+30 - ...) is right on
        paper but overflows a float16 constant and reads as nonsense."""
        sympy = self.sympy
        f = self.expression(value, self.variables)
        result = {}
        for name in FORMULAS[1:]:
            derivative = sympy.diff(f, *(self.variables[variable] for variable in name[1:]))
            expanded = sympy.expand(derivative)
            forms = [derivative, sympy.factor_terms(derivative), expanded, sympy.factor_terms(expanded)]
            tamest = min(map(constant_spread, forms))
            tame = [form for form in forms if constant_spread(form) <= tamest + _SPREAD_SLACK]
            preferred = [form for form in tame if form in forms[:2]] or tame
            result[name] = min(preferred, key=lambda e: len(term_text(e)))
        return result


# How many binary orders of magnitude further from 1 than the tamest form's a chosen form's constants
# may reach: room for 0.02 * (7 + 10 * x) against 0.14 + 0.2 * x, not for 1e+30 against 1.
_SPREAD_SLACK = 10


def constant_spread(expr) -> float:
    """How far from 1, in binary orders of magnitude, the furthest constant of a sympy expression is."""
    import sympy

    return max((abs(math.log2(abs(float(c)))) for c in expr.atoms(sympy.Rational) if c != 0), default=0.0)


def term_text(expr) -> str:
    """A sympy expression of Calculus's as a term's text (Python's; parse and to_text give C++'s),
    parenthesized where its tree needs: integer powers as products (x * x * x), negative ones as
    divisions, rational constants as decimal doubles that read back exactly, a -1 coefficient as a
    minus sign."""
    return _term(expr)[0]


def _term(expr) -> tuple[str, int]:
    if expr.is_Symbol:
        return expr.name, _ATOM
    if expr.is_Rational:
        text = _number(expr)
        return text, _UNARY if text.startswith("-") else _ATOM
    if expr.is_Add:
        return _sum(expr)
    if expr.is_Mul or expr.is_Pow:
        return _product(expr)
    row = getattr(type(expr), "row", None)
    if row is None or not all(constant.is_Rational for constant in expr.args[1:]):
        raise Error(f"a derived partial has {expr}, which a term cannot write")
    arguments = [_term(expr.args[0])[0], *(repr(float(constant)) for constant in expr.args[1:])]
    return f"{row.name}({', '.join(arguments)})", _ATOM


def _number(rational) -> str:
    value = float(rational)
    if not math.isfinite(value):
        raise Error(f"a derived partial has the constant {rational}, which is not a finite double")
    return str(rational) if rational.is_Integer and abs(rational) <= 2**53 else repr(value)


def _sum(expr) -> tuple[str, int]:
    # A constant first and subtractions last, as one writes them: 1 - tanh(x) * tanh(x).
    terms = sorted(expr.as_ordered_terms(), key=lambda term: (term.could_extract_minus_sign(), not term.is_number))
    text = _term(terms[0])[0]
    for term in terms[1:]:
        negative = term.could_extract_minus_sign()
        operand, precedence = _term(-term if negative else term)
        text += f" {'-' if negative else '+'} {f'({operand})' if precedence <= _ADD else operand}"
    return text, _ADD


def _product(expr) -> tuple[str, int]:
    coefficient, factors = expr.as_coeff_mul()
    numerator, denominator = [], []
    for factor in factors:
        base, exponent = factor.as_base_exp()
        if not exponent.is_Integer:
            raise Error(f"a derived partial has {factor}, which a term cannot write")
        (numerator if exponent > 0 else denominator).extend([base] * abs(int(exponent)))
    negated = coefficient == -1 and bool(numerator)
    top = numerator if numerator and coefficient in (1, -1) else [coefficient, *numerator]
    text = _chain(top)
    if denominator:
        if len(denominator) == 1:
            below, precedence = _term(denominator[0])
            below = below if precedence == _ATOM else f"({below})"
        else:
            below = f"({_chain(denominator)})"
        # c / t would be t.reciprocal() * c in Python, a division in C++: c * (1 / t) is one thing.
        text = f"{text} * (1 / {below})" if top == [coefficient] and coefficient not in (1, -1) else f"{text} / {below}"
    if negated:
        text = "-" + text
    if len(top) > 1 or denominator:
        return text, _MUL
    return text, _UNARY if negated else _term(top[0])[1]


def _chain(operands) -> str:
    """a * b * c, each operand parenthesized where the left-to-right product needs it."""
    texts = []
    for i, operand in enumerate(operands):
        text, precedence = _term(operand)
        texts.append(f"({text})" if precedence < _MUL or (i and precedence <= _MUL) else text)
    return " * ".join(texts)


def formulas(texts: Mapping[str, str | None], functions: Mapping[str, Any], domain) -> dict[str, ast.expr]:
    """The six formulas' trees: the value as given; each partial as given, if it equals the
    derived one, else derived."""
    given = {name: parse(name, text, functions) for name, text in texts.items() if text is not None}
    missing = [f"--{name}" for name in FORMULAS if name not in given]
    calculus = Calculus.if_available(functions)
    if calculus is None:
        if missing:
            raise Error(
                f"deriving {', '.join(missing)} needs sympy, which this Python ({sys.executable}) lacks: run the"
                " script with the Python that has torch (e.g. .venv/bin/python scripts/new_op.py ...), or give all"
                " five partials"
            )
        check_derivatives(given, domain)
        return {name: given[name] for name in FORMULAS}
    derived = {
        name: _parse(f"the derived --{name}", term_text(partial), functions)
        for name, partial in calculus.partials(given["value"]).items()
    }
    check_against_derived(given, derived, domain)
    return {name: given.get(name, derived.get(name)) for name in FORMULAS}


# --- names ---


def camel_case(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def upper_snake_case(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", camel).upper()


@dataclass
class Tables:
    """What the two operator tables already name."""

    terms: dict[str, str]  # C++ term -> its backward operator
    operators: dict[str, tuple[str, str]]  # operator -> (kind, term)
    python_names: set[str]  # every name the Python table defines or quotes

    @classmethod
    def read(cls, header: str, python: str) -> Tables:
        terms = dict(_rows(header, TERMS_LIST))
        operators = {name: (kind, term) for kind, macro in LISTS.items() for name, term in _rows(header, macro)}
        python_names = set(re.findall(r"^(\w+) = Term\(", python, re.M))
        python_names |= set(re.findall(r'(?:name|backward)="(\w+)"', python))
        python_names |= set(re.findall(r'Operator\(\s*"(\w+)"', python))
        return cls(terms, operators, python_names)

    def taken(self) -> set[str]:
        """Every operator name in use (an in-place variant, NAME_, cannot clash: NAME has no
        trailing underscore)."""
        return set(self.operators) | set(self.terms.values()) | self.python_names


def _rows(header: str, macro: str) -> list[tuple[str, str]]:
    match = re.search(
        rf"^#define {macro}\(X\) \\\n((?:  X\(\w+, \w+\) \\\n)*){re.escape(LIST_END.format(macro))}$", header, re.M
    )
    if not match:
        raise Error(f"{OPERATORS_H}: no list {macro} in the format scripts/new_op.py appends to (see its comments)")
    return re.findall(r"X\((\w+), (\w+)\)", match.group(1))


# --- the three files ---

HEADER = """\
// SPDX-License-Identifier: BSD-3-Clause
// The term of {name} ({kind}): y = {value}
// Written by scripts/new_op.py; yours to edit (custom_ops/term.h says what each function is).
#pragma once

#include <custom_ops/term.h>

namespace custom::terms {{

struct {term} {{
  static constexpr bool dw_reads_weight = {dw_reads_weight};
{functions}}};

}}  // namespace custom::terms
"""
FUNCTION = """
  template <typename T>
  C10_HOST_DEVICE static T {formula}({x}const T& x, {w}const T& w) {{
    return {body};
  }}"""
PY_TERM = """\
{variable} = Term(
    name="{term}",
    backward="{backward}",
{formulas})
"""


def term_header(name: str, kind: str, term: str, trees: dict[str, ast.expr]) -> str:
    functions = "".join(
        FUNCTION.format(
            formula=formula,
            x="" if uses(tree, "x") else "[[maybe_unused]] ",
            w="" if uses(tree, "w") else "[[maybe_unused]] ",
            body=to_text(tree, cxx=True),
        )
        for formula, tree in trees.items()
    )
    kind_text = "elementwise" if kind == "elementwise" else "a reduction, summed over dim"
    return HEADER.format(
        name=name,
        kind=kind_text,
        value=to_text(trees["value"], cxx=False),
        term=term,
        dw_reads_weight=str(uses(trees["dw"], "w")).lower(),
        functions=functions + "\n",
    )


def insert_before(text: str, marker: str, new: str, what: Path) -> str:
    """new inserted as whole lines before the one line that is marker."""
    lines = text.splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if line.rstrip("\n") == marker]
    if len(found) != 1:
        raise Error(
            f"{what}: expected one line {marker.strip()!r}, found {len(found)} (the format new_op.py appends to)"
        )
    return "".join([*lines[: found[0]], new, *lines[found[0] :]])


def new_operators_h(header: str, name: str, kind: str, term: str) -> str:
    include = f"#include <custom_ops/terms/{name}.h>\n"
    lines = header.splitlines(keepends=True)
    includes = [i for i, line in enumerate(lines) if line.startswith("#include <custom_ops/terms/")]
    if not includes:
        raise Error(f"{OPERATORS_H}: no #include <custom_ops/terms/...> to add {include.strip()} beside")
    # Sorted into the block, as clang-format keeps it.
    at = next((i for i in includes if lines[i] > include), includes[-1] + 1)
    header = "".join([*lines[:at], include, *lines[at:]])
    header = insert_before(header, LIST_END.format(TERMS_LIST), f"  X({term}, {name}_backward) \\\n", OPERATORS_H)
    return insert_before(header, LIST_END.format(LISTS[kind]), f"  X({name}, {term}) \\\n", OPERATORS_H)


def python_term(term: str, backward: str, trees: dict[str, ast.expr]) -> str:
    return PY_TERM.format(
        variable=upper_snake_case(term),
        term=term,
        backward=backward,
        formulas="".join(
            f"    {formula}=lambda x, w: {to_text(tree, cxx=False)},\n" for formula, tree in trees.items()
        ),
    )


def new_operators_py(python: str, name: str, kind: str, term: str, trees, domain) -> str:
    variable = upper_snake_case(term)
    python = insert_before(python, PY_TERMS_END, python_term(term, f"{name}_backward", trees), OPERATORS_PY)
    marker = next((line for line in python.splitlines() if line.strip() == PY_OPERATORS_END), PY_OPERATORS_END)
    indent = marker[: len(marker) - len(marker.lstrip())]
    extra = f", domain=({domain[0]!r}, {domain[1]!r})" if domain else ""
    return insert_before(python, marker, f'{indent}Operator("{name}", "{kind}", {variable}{extra}),\n', OPERATORS_PY)


def plan(args: argparse.Namespace) -> dict[Path, tuple[str | None, str]]:
    """Each file to write: (its text now, or None for a new file; its new text). Raises Error."""
    root = Path(args.root)
    name, kind = args.name, args.kind
    if not re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*", name):
        raise Error(f"{name!r} is not a lower_snake_case name (like weighted_cube)")
    if keyword.iskeyword(name) or name in CXX_KEYWORDS:
        raise Error(f"{name!r} is a Python or C++ keyword")
    term = args.term or camel_case(name)
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", term):
        raise Error(f"--term {term!r} is not a CamelCase C++ name (like WeightedCube)")
    domain = tuple(args.domain) if args.domain else None
    if domain and not (math.isfinite(domain[0]) and math.isfinite(domain[1]) and domain[0] < domain[1]):
        raise Error(f"--domain {domain[0]:g} {domain[1]:g}: not LOW < HIGH")

    header_path = root / TERMS_DIR / f"{name}.h"
    try:
        header = (root / OPERATORS_H).read_text()
        python = (root / OPERATORS_PY).read_text()
    except OSError as error:
        raise Error(f"{error.filename}: {error.strerror} (--root is the checkout: {root})") from None
    tables = Tables.read(header, python)
    taken = tables.taken()
    if name in tables.operators or re.search(rf'Operator\(\s*"{name}"', python):
        raise Error(f"operator {name} is already in the tables ({OPERATORS_H}, {OPERATORS_PY})")
    clash = sorted({name, f"{name}_backward"} & taken)
    if clash:
        raise Error(f"{name}: its operators would clash with the existing {', '.join(clash)}")
    if term in tables.terms or term in tables.python_names or upper_snake_case(term) in tables.python_names:
        raise Error(f"term {term} is already in the tables (pick another with --term)")
    if header_path.exists():
        raise Error(f"{header_path.relative_to(root)} already exists")

    trees = formulas({formula: getattr(args, formula) for formula in FORMULAS}, load_functions(root), domain)
    for formula, tree in trees.items():
        if divisions_of_numbers(tree):
            print(
                f"new_op.py: note: --{formula} {to_text(tree, cxx=False)!r} divides a number by a tensor, which Python"
                " computes as reciprocal() * number: its Python twin can differ from C++ in the last bit",
                file=sys.stderr,
            )
    return {
        header_path.relative_to(root): (None, term_header(name, kind, term, trees)),
        OPERATORS_H: (header, new_operators_h(header, name, kind, term)),
        OPERATORS_PY: (python, new_operators_py(python, name, kind, term, trees, domain)),
    }


def diff(path: Path, old: str | None, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            "/dev/null" if old is None else f"a/{path}",
            f"b/{path}",
        )
    )


def parser() -> argparse.ArgumentParser:
    try:
        expressions = allowed(load_functions(ROOT))
    except Error:  # a checkout whose table does not load: said again, in one line, when it is read
        expressions = f"+ - * /, parentheses, numbers, x, w and calls of the functions of {OPERATORS_PY}"
    result = argparse.ArgumentParser(
        prog="new_op.py",
        description=__doc__.split("\n\n")[0],
        epilog=f"EXPR: {expressions}; e.g. --value 'w * tanh(x)' (its partials derived), or --value"
        " 'w * (x * x * x)' --dx '(x * x * 3) * w' ... (partials given are checked against the derived ones)",
    )
    result.add_argument("name", metavar="NAME", help="the operator, lower_snake_case (custom::NAME)")
    result.add_argument("--kind", required=True, choices=KINDS)
    result.add_argument("--value", required=True, metavar="EXPR", help=MEANINGS["value"])
    for formula in FORMULAS[1:]:
        result.add_argument(f"--{formula}", metavar="EXPR", help=f"{MEANINGS[formula]} (default: derived)")
    result.add_argument("--term", help="the term's C++ struct name (default: NAME in CamelCase)")
    result.add_argument(
        "--domain",
        nargs=2,
        type=float,
        metavar=("LOW", "HIGH"),
        help="where the term is defined (tests sample input and weight there), e.g. for x / w: 0.5 2",
    )
    result.add_argument("--root", default=str(ROOT), help="the checkout")
    result.add_argument("--dry-run", action="store_true", help="print the changes as diffs, write nothing")
    return result


def _joined(argv: list[str]) -> list[str]:
    """`--dx -x` as `--dx=-x`: argparse would take -x for an option, but an expression option is
    always followed by its value."""
    options, result, rest = {f"--{formula}" for formula in FORMULAS}, [], list(argv)
    while rest:
        arg = rest.pop(0)
        result.append(f"{arg}={rest.pop(0)}" if arg in options and rest else arg)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(_joined(sys.argv[1:] if argv is None else argv))
    try:
        changes = plan(args)
    except Error as error:
        print(f"new_op.py: {error}", file=sys.stderr)
        return 1
    if args.dry_run:
        sys.stdout.write("".join(diff(path, old, new) for path, (old, new) in changes.items()))
        return 0
    for path, (_, new) in changes.items():
        (Path(args.root) / path).write_text(new)
    print(f"new_op.py: wrote {', '.join(map(str, changes))}")
    print(f"new_op.py: next, build and run {args.name}'s tests: make test-op OP={args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
