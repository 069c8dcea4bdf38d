# SPDX-License-Identifier: BSD-3-Clause
"""scripts/new_op.py, with no build: the expressions it accepts and how it writes them in C++ and
Python, the partials it derives (against difference quotients, not against sympy), the rows it
adds, its refusals, --dry-run; on copies of the three files it writes. The test marked slow
compiles the terms it writes (g++ -fsyntax-only, torch's headers). CI's drill (.ci/run) builds
and tests operators it writes.

No test id here contains an operator's name: `make test-op OP=NAME` selects tests by it.
"""

import ast
import importlib.util
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("new_op_script", REPO / "scripts" / "new_op.py")
new_op = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # its dataclass looks itself up
_spec.loader.exec_module(new_op)

TERMS_DIR, OPERATORS_H, OPERATORS_PY = new_op.TERMS_DIR, new_op.OPERATORS_H, new_op.OPERATORS_PY
FUNCTIONS = new_op.load_functions(REPO)
CUBE = {
    "value": "w * (x * x * x)",
    "dx": "(x * x * 3) * w",
    "dw": "x * x * x",
    "dxx": "(x * 6) * w",
    "dxw": "x * x * 3",
    "dww": "0",
}
RATIO = {
    "value": "(x * x) / (w * w + 1)",
    "dx": "(x + x) / (w * w + 1)",
    "dw": "-(x * x) * (w + w) / ((w * w + 1) * (w * w + 1))",
    "dxx": "2 / (w * w + 1)",
    "dxw": "-(x + x) * (w + w) / ((w * w + 1) * (w * w + 1))",
    "dww": "(x * x) * (w * w * 6 - 2) / ((w * w + 1) * (w * w + 1) * (w * w + 1))",
}
# terms/weighted_square.h's, as _operators.py writes them.
SQUARE = {"value": "w * (x * x)", "dx": "(x + x) * w", "dw": "x * x", "dxx": "w + w", "dxw": "x + x", "dww": "0"}


def copy_checkout(root):
    """A scratch root with copies of what the script reads and writes, and what a term includes."""
    shutil.copytree(REPO / TERMS_DIR, root / TERMS_DIR)
    headers = (Path("ops/include/custom_ops") / name for name in ("term.h", "term_functions.h"))
    for path in (OPERATORS_H, OPERATORS_PY, *headers):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, root / path)
    return root


@pytest.fixture
def checkout(tmp_path):
    return copy_checkout(tmp_path)


def snapshot(root):
    return {path.relative_to(root): path.read_text() for path in sorted(root.rglob("*")) if path.is_file()}


def run(root, name, kind, formulas, *extra):
    argv = [name, "--kind", kind, "--root", str(root), *extra]
    for formula, text in formulas.items():
        argv += [f"--{formula}", text]
    return new_op.main(argv)


def added_lines(old, new):
    """The lines new adds to old, checking it only adds."""
    import difflib

    lines = list(difflib.ndiff(old.splitlines(), new.splitlines()))
    assert not [line for line in lines if line.startswith("- ")], "the script only appends"
    return [line[2:] for line in lines if line.startswith("+ ")]


# --- expressions ---


@pytest.mark.parametrize(
    ("text", "cxx", "python"),
    [
        pytest.param("w * (x * x)", "w * (x * x)", "w * (x * x)", id="grouping-kept"),
        pytest.param("(x * x) / w", "(x * x) / w", "(x * x) / w", id="parentheses-for-the-reader-kept"),
        pytest.param("((x + w))", "(x + w)", "(x + w)", id="doubled-parentheses-once"),
        pytest.param("x - (w - x)", "x - (w - x)", "x - (w - x)", id="right-operand-grouping"),
        pytest.param("0", "number<T>(0)", "0", id="constant"),
        pytest.param("x*2.5e-3", "x * number<T>(2.5e-3)", "x * 2.5e-3", id="exponent"),
        pytest.param(".5 * x", "number<T>(.5) * x", ".5 * x", id="leading-point"),
        pytest.param("-2 * x", "number<T>(-2) * x", "-2 * x", id="negative-constant"),
        pytest.param("x / (-2)", "x / number<T>(-2)", "x / (-2)", id="negative-constant-parenthesized"),
        pytest.param("-x * w", "-x * w", "-x * w", id="unary-minus"),
        pytest.param("-(x * w)", "-(x * w)", "-(x * w)", id="unary-minus-of-a-product"),
        pytest.param("--x", "-(-x)", "-(-x)", id="no-decrement-in-cxx"),
        pytest.param("x - -w", "x - -w", "x - -w", id="minus-minus"),
        pytest.param("+x", "x", "x", id="unary-plus-dropped"),
        pytest.param("w * tanh(x)", "w * fn::tanh(x)", "w * tanh(x)", id="function"),
        pytest.param("log1p(exp(-abs(x)))", "fn::log1p(fn::exp(-fn::abs(x)))", "log1p(exp(-abs(x)))", id="nested"),
        pytest.param("exp((x + w))", "fn::exp((x + w))", "exp((x + w))", id="argument-parentheses-for-the-reader"),
        pytest.param("pow(x * w, 1.5)", "fn::pow(x * w, 1.5)", "pow(x * w, 1.5)", id="constant-a-plain-double"),
        pytest.param("pow(x, -2)", "fn::pow(x, -2)", "pow(x, -2)", id="negative-constant-of-a-function"),
        pytest.param("-sqrt(x) / 2", "-fn::sqrt(x) / number<T>(2)", "-sqrt(x) / 2", id="minus-a-call"),
    ],
)
def test_an_expression_in_cxx_and_python(text, cxx, python):
    tree = new_op.parse("value", text)
    assert new_op.to_text(tree, cxx=True) == cxx
    assert new_op.to_text(tree, cxx=False) == python


@pytest.mark.parametrize(
    "text",
    [
        *CUBE.values(),
        *RATIO.values(),
        "x - w - x",
        "x - (w - x) / (x / w)",
        "-(x - w) * -(w / -x) - 3",
        "w * tanh(x - w) - pow(x * w, 1.5) / (x + exp(-(x * w)))",
    ],
)
def test_printing_keeps_the_order_of_operations(text):
    def shape(source):
        return ast.dump(ast.parse(source, mode="eval"))

    tree = new_op.parse("value", text)
    as_written = shape(text)
    assert shape(new_op.to_text(tree, cxx=False)) == as_written
    # C++'s text with number<T>(n) as n and fn::f as f: the same tree, so the same rounding in both.
    cxx = re.sub(r"number<T>\(([^)]*)\)", r"(\1)", new_op.to_text(tree, cxx=True)).replace("fn::", "")
    assert shape(cxx) == as_written


@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param("x ** 2", "** is not allowed", id="power"),
        pytest.param("x % 2", "% is not allowed", id="modulo"),
        pytest.param("x // w", "// is not allowed", id="floor-division"),
        pytest.param("~x", "~ is not allowed", id="invert"),
        pytest.param("x * y", "unknown name 'y'", id="other-name"),
        pytest.param("exp(x)(w)", "call is not allowed", id="call-of-a-call"),
        pytest.param("x.exp()", "attribute is not allowed", id="method"),
        pytest.param("cosh(x)", "unknown function 'cosh'", id="unknown-function"),
        pytest.param("tanh(x, w)", "tanh takes 1 argument, not 2", id="too-many-arguments"),
        pytest.param("pow(x)", "pow takes 2 arguments, not 1", id="too-few-arguments"),
        pytest.param("tanh(e=x)", "tanh takes no keyword arguments", id="keyword-argument"),
        pytest.param("tanh(*x)", "starred is not allowed", id="starred-argument"),
        pytest.param("pow(x, w)", "pow's constant must be a decimal number, not 'w'", id="variable-constant"),
        pytest.param("pow(x, 2 * 3)", "not '2 * 3'", id="computed-constant"),
        pytest.param("pow(x, 1e999)", "not a finite double", id="infinite-constant"),
        pytest.param("tanh * x", "unknown name 'tanh'", id="function-uncalled"),
        pytest.param("e * x", "unknown name 'e'", id="not-a-variable"),
        pytest.param("x if w else w", "ifexp is not allowed", id="conditional"),
        pytest.param("x < w", "compare is not allowed", id="comparison"),
        pytest.param("x.real", "attribute is not allowed", id="attribute"),
        pytest.param("x *", "not an expression", id="syntax"),
        pytest.param("0x10", "not a decimal number", id="hexadecimal"),
        pytest.param("1_000 * x", "not a decimal number", id="digit-separator"),
        pytest.param("2j", "not a decimal number", id="complex"),
        pytest.param("True", "not a decimal number", id="boolean"),
        pytest.param("'x'", "not a decimal number", id="string"),
        pytest.param("1e999", "not a finite double", id="infinite"),
        pytest.param("12345678901234567890 * x", "not exact as a double", id="huge-integer"),
    ],
)
def test_a_refused_expression_says_why_in_one_line(text, says):
    with pytest.raises(new_op.Error) as error:
        new_op.parse("dx", text)
    assert says in str(error.value) and "\n" not in str(error.value)
    assert str(error.value).startswith(f"--dx {text!r}")
    if "unknown" in says or "not allowed" in says:  # and what is allowed, the table's functions
        assert "calls of exp, log," in str(error.value) and "pow(e, c) for a number c" in str(error.value)


def test_wrong_derivatives_are_refused():
    for formula, wrong in [("dx", "x * x * 3"), ("dww", "x"), ("dxw", "x * x * 2")]:
        trees = {name: new_op.parse(name, text) for name, text in {**CUBE, formula: wrong}.items()}
        with pytest.raises(new_op.Error, match=rf"^--{formula} .* is not d\("):
            new_op.check_derivatives(trees, None)
    new_op.check_derivatives({name: new_op.parse(name, text) for name, text in RATIO.items()}, None)


def test_derivatives_are_checked_where_the_term_is_defined():
    inverse = {"value": "x / w", "dx": "1 / w", "dw": "-x / (w * w)", "dxx": "0", "dxw": "-1 / (w * w)"}
    trees = {name: new_op.parse(name, text) for name, text in {**inverse, "dww": "(x + x) / (w * w * w)"}.items()}
    new_op.check_derivatives(trees, (0.5, 2.0))
    trees["dww"] = new_op.parse("dww", "x / (w * w * w)")
    with pytest.raises(new_op.Error, match=r"^--dww"):
        new_op.check_derivatives(trees, (0.5, 2.0))


# --- the partials it derives ---

# Terms that call functions, each with its domain. The points avoid the kinks of abs, relu, sign
# and step (at 0), where a difference quotient is not the derivative.
FUNCTION_TERMS = [
    pytest.param("w * tanh(x)", None, id="tanh"),
    pytest.param("x * w * sigmoid(w)", None, id="sigmoid"),
    pytest.param("relu(x) - x * w + log1p(exp(-abs(x)))", None, id="softplus"),
    pytest.param("w * pow(x, 1.5)", (0.5, 2.0), id="power"),
    pytest.param("w * erf(x)", None, id="erf"),
    pytest.param("sin(x * w) * cos(x) + expm1(w) * step(x) - sign(w) * x / (1 + x * x)", None, id="trigonometric"),
    pytest.param("log(x) * sqrt(w) - rsqrt(x + w) / w + pow(x * w, -2)", (0.5, 2.0), id="logarithms-and-roots"),
]
POINTS = {
    None: [(0.37, 1.21), (-1.13, 0.62), (1.71, -0.83), (-0.52, -1.46)],
    (0.5, 2.0): [(0.7, 1.3), (1.6, 0.55), (1.1, 1.9)],
}


def difference_quotients(f, x, w):
    """The five partials of f at (x, w), by central differences of f alone (no sympy)."""
    h, k = 1e-5, 1e-3  # first and second differences, each well above its rounding error
    return {
        "dx": (f(x + h, w) - f(x - h, w)) / (2 * h),
        "dw": (f(x, w + h) - f(x, w - h)) / (2 * h),
        "dxx": (f(x + k, w) - 2 * f(x, w) + f(x - k, w)) / (k * k),
        "dxw": (f(x + k, w + k) - f(x + k, w - k) - f(x - k, w + k) + f(x - k, w - k)) / (4 * k * k),
        "dww": (f(x, w + k) - 2 * f(x, w) + f(x, w - k)) / (k * k),
    }


def assert_partials_are_difference_quotients(term, domain):
    for x, w in POINTS[domain]:
        for name, quotient in difference_quotients(term.value, x, w).items():
            partial = getattr(term, name)(x, w)
            assert math.isclose(partial, quotient, rel_tol=1e-4, abs_tol=1e-4), (name, x, w, partial, quotient)


def sympy_value(expr, x, w):
    """A derived partial (new_op.Calculus's sympy expression) on Python numbers, each function by
    its row's `number`: not through the script's printer."""
    if expr.is_Symbol:
        return {"x": x, "w": w}[expr.name]
    if expr.is_Number:
        return float(expr)
    arguments = [sympy_value(argument, x, w) for argument in expr.args]
    if expr.is_Add:
        return math.fsum(arguments)
    if expr.is_Mul:
        return math.prod(arguments)
    if expr.is_Pow:
        return arguments[0] ** arguments[1]
    return FUNCTIONS[type(expr).__name__].number(*arguments)


@pytest.mark.parametrize(
    ("value", "partials"),
    [
        pytest.param(
            "x / w",
            {"dx": "1 / w", "dw": "-x / (w * w)", "dxx": "0", "dxw": "-1 / (w * w)", "dww": "2 * x / (w * w * w)"},
            id="negative-powers-as-divisions",
        ),
        pytest.param(
            "w * x * x * x",
            {"dx": "3 * w * x * x", "dw": "x * x * x", "dxx": "6 * w * x", "dxw": "3 * x * x", "dww": "0"},
            id="powers-as-products",
        ),
        pytest.param(
            "(x + w) * x * w", {"dx": "w * (w + 2 * x)", "dw": "x * (2 * w + x)"}, id="common-factors-taken-out"
        ),
        pytest.param(
            "w * pow(x, 1.5)",
            {"dx": "1.5 * w * pow(x, 0.5)", "dxx": "0.75 * w * pow(x, -0.5)"},
            id="rational-constants-as-doubles",
        ),
        pytest.param(
            "w * erf(x)", {"dxx": "-2.256758334191025 * w * x * exp(-x * x)"}, id="a-constant-that-reads-back-exactly"
        ),
        pytest.param("3 / (x + w)", {"dx": "-3 * (1 / ((w + x) * (w + x)))"}, id="no-number-divided-by-a-tensor"),
        pytest.param("w * tanh(x)", {"dx": "w * (1 - tanh(x) * tanh(x))", "dxw": "1 - tanh(x) * tanh(x)"}, id="tanh"),
        pytest.param(
            "w * x * 0.5 * (1 + erf(x * 0.7071067811865476))",
            {
                "dxx": "0.7978845608028654 * w * exp(-0.5000000000000001 * x * x)"
                " - 0.3989422804014328 * w * x * x * exp(-0.5000000000000001 * x * x)",
                "dxw": "0.5 + 0.3989422804014327 * x * exp(-0.5000000000000001 * x * x)"
                " + 0.5 * erf(0.7071067811865476 * x)",
            },
            id="no-huge-common-factor-of-a-decimal",  # not 1.2766152972845847e-31 * w * (6.25e+30 - ...)
        ),
    ],
)
def test_the_derived_partials_as_written(value, partials):
    derived = new_op.formulas({"value": value}, FUNCTIONS, None)
    for name, text in partials.items():
        assert new_op.to_text(derived[name], cxx=False) == text
        assert not new_op.divisions_of_numbers(derived[name])


def test_a_derived_partial_in_cxx():
    derived = new_op.formulas({"value": "x / w + w * pow(x, 1.5)"}, FUNCTIONS, (0.5, 2.0))
    assert new_op.to_text(derived["dxw"], cxx=True) == "number<T>(1.5) * fn::pow(x, 0.5) - number<T>(1) / (w * w)"


@pytest.mark.parametrize(("value", "domain"), FUNCTION_TERMS)
def test_the_derived_partials_are_the_derived_expressions_on_tensors(checkout, value, domain):
    """The Python lambdas written, on float64 tensors, against sympy's expressions evaluated
    directly: the printer (one, for both languages) writes what sympy derived."""
    extra = ("--domain", *map(str, domain)) if domain else ()
    assert run(checkout, "function_term", "elementwise", {"value": value}, *extra) == 0
    term = load_operators_py(checkout).OPERATORS[-1].term
    derived = new_op.Calculus(FUNCTIONS).partials(new_op.parse("value", value, FUNCTIONS))
    xs, ws = (torch.tensor(column, dtype=torch.float64) for column in zip(*POINTS[domain]))
    for name, expr in derived.items():
        on_tensors = torch.as_tensor(getattr(term, name)(xs, ws), dtype=torch.float64).expand(len(xs))
        for (x, w), computed in zip(POINTS[domain], on_tensors.tolist()):
            assert math.isclose(computed, sympy_value(expr, x, w), rel_tol=1e-12, abs_tol=1e-12), (name, x, w)


@pytest.mark.parametrize(("value", "domain"), FUNCTION_TERMS)
def test_a_value_is_enough(checkout, capsys, value, domain):
    """--value alone: three files written, the partials its difference quotients, every function
    called as fn::NAME in C++ and NAME in Python, dw_reads_weight from dw."""
    before = snapshot(checkout)
    extra = ("--domain", *map(str, domain)) if domain else ()
    assert run(checkout, "function_term", "elementwise", {"value": value}, *extra) == 0
    after = snapshot(checkout)
    assert {path for path in after if before.get(path) != after[path]} == {
        TERMS_DIR / "function_term.h",
        OPERATORS_H,
        OPERATORS_PY,
    }
    assert "note:" not in capsys.readouterr().err  # no derived partial divides a number by a tensor
    term = load_operators_py(checkout).OPERATORS[-1].term
    assert_partials_are_difference_quotients(term, domain)
    header = after[TERMS_DIR / "function_term.h"]
    assert f"// The term of function_term (elementwise): y = {value}\n" in header
    for name in re.findall(r"(\w+)\(", value):
        assert f"fn::{name}(" in header
    bodies = "\n".join(re.findall(r"^    return (.*);$", header, re.M))
    assert not re.search(r"(?<!fn::)\b(?:" + "|".join(FUNCTIONS) + r")\(", bodies)  # each one fn::
    assert f"    value=lambda x, w: {value},\n" in after[OPERATORS_PY]
    dw = re.search(r"static T dw\(.*?return (.*?);", header, re.S)[1]
    reads_weight = "true" if re.search(r"\bw\b", dw) else "false"
    assert f"dw_reads_weight = {reads_weight};" in header


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_every_function_of_the_table_is_written_in_both_languages(checkout, name):
    call = f"{name}(x * w, -1.5)" if FUNCTIONS[name].constant else f"{name}(x * w)"
    assert run(checkout, "function_term", "elementwise", {"value": f"w + {call}"}, "--domain", "0.5", "2") == 0
    assert f"    return w + fn::{call};\n" in (checkout / TERMS_DIR / "function_term.h").read_text()
    assert f"    value=lambda x, w: w + {call},\n" in (checkout / OPERATORS_PY).read_text()
    assert_partials_are_difference_quotients(load_operators_py(checkout).OPERATORS[-1].term, (0.5, 2.0))


@pytest.mark.parametrize(
    ("formulas", "says"),
    [
        pytest.param(
            {"value": "w * tanh(x)", "dx": "w * (1 - tanh(x))"},
            "--dx 'w * (1 - tanh(x))' is not df/dx: it should be --dx 'w * (1 - tanh(x) * tanh(x))'",
            id="first",
        ),
        pytest.param(
            {**CUBE, "dxw": "x * x * 2"},
            "--dxw 'x * x * 2' is not d2f/dxdw: it should be --dxw '3 * x * x'",
            id="second",
        ),
        pytest.param(
            {"value": "x / w", "dww": "x / (w * w * w)"},
            "--dww 'x / (w * w * w)' is not d2f/dw2: it should be --dww '2 * x / (w * w * w)'",
            id="where-defined",
        ),
    ],
)
def test_a_wrong_partial_is_refused_with_the_derived_one(checkout, capsys, formulas, says):
    before = snapshot(checkout)
    assert run(checkout, "function_term", "elementwise", formulas, "--domain", "0.5", "2") == 1
    assert snapshot(checkout) == before
    error = capsys.readouterr().err
    assert error.startswith(f"new_op.py: {says} (at x=") and error.count("\n") == 1, error


def test_partials_given_that_agree_are_written_as_given(checkout):
    formulas = {"value": "w * tanh(x)", "dx": "(1 - tanh(x) * tanh(x)) * w", "dww": "0 * x"}
    assert run(checkout, "function_term", "elementwise", formulas) == 0
    header = (checkout / TERMS_DIR / "function_term.h").read_text()
    assert "return (number<T>(1) - fn::tanh(x) * fn::tanh(x)) * w;" in header
    assert "return number<T>(0) * x;" in header
    assert "return fn::tanh(x);" in header  # dw, derived
    text = (checkout / OPERATORS_PY).read_text()
    assert "    dx=lambda x, w: (1 - tanh(x) * tanh(x)) * w,\n" in text and "    dww=lambda x, w: 0 * x,\n" in text


def test_without_sympy_partials_are_given_and_checked_by_difference_quotients(tmp_path, capsys, monkeypatch):
    with_sympy, without = copy_checkout(tmp_path / "with"), copy_checkout(tmp_path / "without")
    assert run(with_sympy, "cube", "elementwise", CUBE) == 0
    monkeypatch.setitem(sys.modules, "sympy", None)  # import sympy raises ImportError
    before = snapshot(without)
    capsys.readouterr()
    assert run(without, "cube", "elementwise", {"value": CUBE["value"], "dx": CUBE["dx"]}) == 1
    assert run(without, "cube", "elementwise", {**CUBE, "dx": "x * x * 3"}) == 1
    assert snapshot(without) == before
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2
    assert "deriving --dw, --dxx, --dxw, --dww needs sympy" in errors[0]
    assert ".venv/bin/python scripts/new_op.py" in errors[0]
    assert errors[1].startswith("new_op.py: --dx 'x * x * 3' is not d(value)/dx")
    assert run(without, "cube", "elementwise", CUBE) == 0
    assert snapshot(without) == snapshot(with_sympy)  # what the drill writes, with sympy or not


def test_the_help_names_every_function_of_the_table():
    epilog = new_op.parser().epilog
    for name, row in FUNCTIONS.items():
        assert re.search(rf"\b{name}\b", new_op.__doc__), f"the module docstring does not name {name}"
        assert (f"{name}(e, c)" if row.constant else f" {name},") in epilog


# --- what it writes ---


def test_the_generated_term_is_the_shape_of_the_hand_written_one():
    """Each function and the flag as terms/weighted_square.h writes them, so the template is the
    code's; an optional extra function in that file is not the generator's business."""
    trees = {name: new_op.parse(name, text) for name, text in SQUARE.items()}
    generated = new_op.term_header("any_name", "elementwise", "WeightedSquare", trees)
    written = (REPO / TERMS_DIR / "weighted_square.h").read_text()

    def functions(text):
        return dict(re.findall(r"(  template <typename T>\n  C10_HOST_DEVICE static T (\w+)\(.*?\n  }\n)", text, re.S))

    by_name = {name: block for block, name in functions(generated).items()}
    for block, name in functions(written).items():
        if name in new_op.FORMULAS:
            assert by_name.pop(name) == block
    assert not by_name, f"terms/weighted_square.h lacks {sorted(by_name)}"
    flag = "  static constexpr bool dw_reads_weight = false;\n"
    assert flag in written and flag in generated
    assert re.search(r"^namespace custom::terms \{\n\nstruct WeightedSquare \{\n", generated, re.M)
    # And the Python twin's block, as _operators.py writes it.
    assert new_op.python_term("WeightedSquare", "weighted_sum_backward", trees) in (REPO / OPERATORS_PY).read_text()


def load_operators_py(root):
    spec = importlib.util.spec_from_file_location("operators_table_copy", root / OPERATORS_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("kind", "formulas", "extra", "term"),
    [
        pytest.param("elementwise", CUBE, (), "Cube", id="elementwise"),
        pytest.param("reduction", RATIO, ("--term", "SomeRatio"), "SomeRatio", id="reduction-named-term"),
    ],
)
def test_an_operator_is_a_term_header_and_rows(checkout, kind, formulas, extra, term):
    before = snapshot(checkout)
    assert run(checkout, "cube" if kind == "elementwise" else "ratio_sum", kind, formulas, *extra) == 0
    name = "cube" if kind == "elementwise" else "ratio_sum"
    after = snapshot(checkout)
    header = TERMS_DIR / f"{name}.h"
    assert set(after) - set(before) == {header}
    assert {path for path in before if before[path] != after[path]} == {OPERATORS_H, OPERATORS_PY}

    text = after[header]
    assert f"struct {term} {{" in text
    assert f"dw_reads_weight = {'true' if kind == 'reduction' else 'false'};" in text
    unused = [(f, v) for f, t in formulas.items() for v in "xw" if not new_op.uses(new_op.parse(f, t), v)]
    assert text.count("[[maybe_unused]]") == len(unused)
    for formula, variable in unused:
        assert re.search(rf"static T {formula}\(.*\[\[maybe_unused\]\] const T& {variable}\b", text)

    lists = {"elementwise": "CUSTOM_OPS_ELEMENTWISE_OPERATORS", "reduction": "CUSTOM_OPS_REDUCTION_OPERATORS"}
    assert added_lines(before[OPERATORS_H], after[OPERATORS_H]) == [
        f"#include <custom_ops/terms/{name}.h>",
        f"  X({term}, {name}_backward) \\",
        f"  X({name}, {term}) \\",
    ]
    tables = new_op.Tables.read(after[OPERATORS_H], after[OPERATORS_PY])
    assert tables.operators[name] == (kind, term) and tables.terms[term] == f"{name}_backward"
    assert re.search(
        rf"^#define {lists[kind]}\(X\) \\\n(  X\(\w+, \w+\) \\\n)*  X\({name}, {term}\) \\\n", after[OPERATORS_H], re.M
    )

    # The Python table loads, with the row last and the term computing what the expressions say.
    table = load_operators_py(checkout)
    row = table.OPERATORS[-1]
    assert (row.name, row.kind, row.term.name, row.term.backward) == (name, kind, term, f"{name}_backward")
    assert row.term in table.TERMS
    for formula, text in formulas.items():
        for x, w in [(0.3, 1.7), (-1.1, 0.4)]:
            expected = eval(text, {"__builtins__": {}}, {"x": x, "w": w})
            assert math.isclose(getattr(row.term, formula)(x, w), expected, rel_tol=1e-15)
    assert row.term.dw_reads_weight == (kind == "reduction")


def test_a_term_include_goes_in_sorted_order(checkout):
    count = len(re.findall(r"^#include <custom_ops/terms/", (checkout / OPERATORS_H).read_text(), re.M))
    assert run(checkout, "aaa_first", "elementwise", CUBE) == 0
    assert run(checkout, "zzz_last", "reduction", RATIO) == 0
    includes = re.findall(r"^#include <custom_ops/terms/.*>$", (checkout / OPERATORS_H).read_text(), re.M)
    assert includes == sorted(includes) and len(includes) == count + 2


def test_running_twice_refuses_and_changes_nothing(checkout, capsys):
    assert run(checkout, "cube", "elementwise", CUBE) == 0
    before = snapshot(checkout)
    capsys.readouterr()
    assert run(checkout, "cube", "elementwise", CUBE) == 1
    assert run(checkout, "cube", "reduction", RATIO, "--term", "OtherCube") == 1
    assert snapshot(checkout) == before
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2 and all("already in the tables" in line for line in errors)


@pytest.mark.parametrize(
    ("name", "extra", "says"),
    [
        pytest.param("weighted_sum", (), "already in the tables", id="an-operator"),
        pytest.param("weighted_sum_backward", (), "would clash with the existing", id="a-backward-operator"),
        pytest.param("weighted", ("--term", "WeightedSquare"), "term WeightedSquare is already", id="a-term"),
        pytest.param("weighted_square", (), "term WeightedSquare is already", id="a-term-by-default"),
        pytest.param("CamelCase", (), "not a lower_snake_case name", id="camel-case"),
        pytest.param("two__underscores", (), "not a lower_snake_case name", id="double-underscore"),
        pytest.param("trailing_", (), "not a lower_snake_case name", id="trailing-underscore"),
        pytest.param("9lives", (), "not a lower_snake_case name", id="leading-digit"),
        pytest.param("delete", (), "keyword", id="cxx-keyword"),
        pytest.param("lambda", (), "keyword", id="python-keyword"),
        pytest.param("fine", ("--term", "not_camel"), "not a CamelCase", id="bad-term"),
        pytest.param("fine", ("--domain", "2", "1"), "not LOW < HIGH", id="bad-domain"),
    ],
)
def test_a_refused_name_changes_nothing(checkout, capsys, name, extra, says):
    before = snapshot(checkout)
    assert run(checkout, name, "elementwise", CUBE, *extra) == 1
    assert snapshot(checkout) == before
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and says in error, error


def test_a_name_whose_operators_would_clash_is_refused(checkout, capsys):
    assert run(checkout, "cube", "elementwise", CUBE) == 0
    before = snapshot(checkout)
    capsys.readouterr()
    assert run(checkout, "cube_backward", "reduction", RATIO, "--term", "Other") == 1
    assert snapshot(checkout) == before
    assert (
        capsys.readouterr().err
        == "new_op.py: cube_backward: its operators would clash with the existing cube_backward\n"
    )


def test_an_existing_term_header_is_refused(checkout, capsys):
    (checkout / TERMS_DIR / "cube.h").write_text("// someone's\n")
    before = snapshot(checkout)
    assert run(checkout, "cube", "elementwise", CUBE) == 1
    assert snapshot(checkout) == before
    assert "already exists" in capsys.readouterr().err


def test_a_table_in_another_format_is_refused(checkout, capsys):
    header = checkout / OPERATORS_H
    header.write_text(header.read_text().replace("  /* end of CUSTOM_OPS_TERMS */\n", ""))
    before = snapshot(checkout)
    assert run(checkout, "cube", "elementwise", CUBE) == 1
    assert snapshot(checkout) == before
    assert "CUSTOM_OPS_TERMS" in capsys.readouterr().err


def test_the_domain_goes_in_the_row(checkout):
    inverse = {"value": "x / w", "dx": "1 / w", "dw": "-x / (w * w)", "dxx": "0", "dxw": "-1 / (w * w)"}
    assert (
        run(checkout, "inverse", "elementwise", {**inverse, "dww": "(x + x) / (w * w * w)"}, "--domain", "0.5", "2")
        == 0
    )
    assert 'Operator("inverse", "elementwise", INVERSE, domain=(0.5, 2.0)),' in (checkout / OPERATORS_PY).read_text()
    assert load_operators_py(checkout).OPERATORS[-1].domain == (0.5, 2.0)


def test_dry_run_prints_the_diffs_and_writes_nothing(checkout, capsys):
    before = snapshot(checkout)
    assert run(checkout, "cube", "elementwise", CUBE, "--dry-run") == 0
    assert snapshot(checkout) == before
    out = capsys.readouterr().out
    for line in [
        "--- /dev/null",
        f"+++ b/{TERMS_DIR}/cube.h",
        f"+++ b/{OPERATORS_H}",
        "+  X(cube, Cube) \\",
        f"+++ b/{OPERATORS_PY}",
        '+    Operator("cube", "elementwise", CUBE),',
    ]:
        assert line in out.splitlines()
    # The diffs are the change: applied, they give what a real run writes.
    assert run(checkout, "cube", "elementwise", CUBE) == 0
    added = [line for line in out.splitlines() if line.startswith("+") and not line.startswith("+++ ")]
    assert len(added) == sum(len(added_lines(before.get(p, ""), t)) for p, t in snapshot(checkout).items())


def test_the_script_runs_as_a_program(checkout):
    formulas = [arg for formula, text in CUBE.items() for arg in (f"--{formula}", text)]
    # "--dww -1 * 0": an expression that starts with a minus is the option's value.
    formulas[-1] = "-1 * 0"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "new_op.py"), "cube", "--kind=elementwise", "--root", str(checkout),
         "--dry-run", *formulas],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "number<T>(-1) * number<T>(0)" in result.stdout


# --- the C++ it writes compiles ---


def _torch_include():
    spec = importlib.util.find_spec("torch")
    include = spec and Path(spec.submodule_search_locations[0]) / "include"
    return include if include and (include / "ATen" / "cpu" / "vec" / "vec.h").is_file() else None


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None or _torch_include() is None, reason="needs g++ and torch's headers")
def test_the_generated_terms_compile(checkout):
    """Every formula of an elementwise and a reduction term, and of a term of every function with
    its partials derived, instantiated in each type a term is evaluated in on the CPU, with the
    library's warnings as errors (an unused parameter without [[maybe_unused]] fails)."""
    assert run(checkout, "cube", "elementwise", CUBE) == 0
    assert run(checkout, "ratio_sum", "reduction", RATIO, "--term", "Ratio") == 0
    calls = [f"{name}(x * w, -1.5)" if row.constant else f"{name}(x + w)" for name, row in FUNCTIONS.items()]
    every_function = {"value": " + ".join(calls)}
    assert run(checkout, "every_function", "elementwise", every_function, "--domain", "0.5", "2") == 0
    instantiations = "".join(
        f"template {t} custom::terms::{term}::{formula}<{t}>(const {t}&, const {t}&);\n"
        for term in ("Cube", "Ratio", "EveryFunction")
        for t in ("float", "double", "at::vec::Vectorized<float>", "at::vec::Vectorized<double>")
        for formula in new_op.FORMULAS
    )
    source = checkout / "terms.cpp"
    source.write_text(
        "#include <ATen/cpu/vec/vec.h>\n#include <custom_ops/operators.h>\n"
        f'#include "{REPO / "kernels/cpu/vectorized_term_functions.h"}"\n'  # the functions on Vectorized
        "static_assert(!custom::terms::Cube::dw_reads_weight && custom::terms::Ratio::dw_reads_weight);\n"
        + instantiations
    )
    command = ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-I", str(checkout / "ops/include")]
    command += ["-isystem", str(_torch_include()), str(source)]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
