# SPDX-License-Identifier: BSD-3-Clause
"""torch.compile fuses every operator (operators.py's table) with its neighbours through the
Inductor decompositions of python/custom_ops/_inductor.py; then, for every operator of a kind,
what that kind has: an elementwise operator's out= and in place, every layout and dtype against the
kernel and its term's backward op; a reduction's dims, keepdim and dtype=.

In this process the decompositions come from the package's source file, installed the way
`import custom_ops` installs them (compile_helpers); the package-level behaviour (lazy import,
opt-out, the on-disk cache key across processes) is in test_package.py. An elementwise operator's
decomposition gives the kernel's bits; a reduction's sums in another order than the kernel, so its
values are compared with the exact sum's error bound and with the eager op up to rounding.
"""

import re

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

import compile_helpers
import term_error
from compile_helpers import decompositions, leaves, run_compiled
from operators import (
    ELEMENTWISE,
    OPERATORS,
    as_result,
    each_elementwise_operator,
    each_operator,
    each_reduction_operator,
)
from reference import (
    DTYPE_PAIRS,
    FLOAT_DTYPES,
    LAYOUT_NAMES,
    LOW_PRECISION,
    TOLERANCES,
    dtype_name,
    make_inputs,
    make_tensor,
    promoted,
    sum_to,
)
from square_sum_reference import error_bound, make

OPS = torch.ops.custom

# Fixtures: the decompositions installed for this module; decomposed, or each test also opaque.
installed = compile_helpers.installed
decompose = compile_helpers.decompose
decomposed = compile_helpers.decomposed


# One operator per term: its backward op, named by the term.
FIRST_OF_EACH_TERM = list({op.backward: op for op in reversed(OPERATORS)}.values())[::-1]
each_backward = pytest.mark.parametrize("op", FIRST_OF_EACH_TERM, ids=lambda op: op.backward)


def decomposition(name):
    return decompositions.DECOMPOSITIONS[name]


def operands64(x, w, rounded=True):
    """x and w in float64: as the op promotes them (rounded to the common dtype), or as they are
    (Inductor skips the rounding of an operand down to a half-type common dtype: see
    _inductor._in_opmath)."""
    return promoted(x.detach(), w.detach()) if rounded else (x.detach().double(), w.detach().double())


def exact(op, x, w, dim=None, keepdim=False, rounded=True):
    """(the exact sum of the reduction's terms, the sum of their absolute values, the sum of the
    bounds of each term's error as Inductor's code computes it), all float64: the operands as
    operands64 gives them, then the term and the sum in float64. The term errors (term_error.py)
    are what a term that calls functions, or cancels, adds beyond a few roundings of its own size."""
    x64, w64 = operands64(x, w, rounded)
    zeros = torch.zeros(torch.broadcast_shapes(x64.shape, w64.shape), dtype=torch.float64)
    terms = op.term.value(x64, w64) + zeros
    opmath = torch.float64 if torch.result_type(x, w) == torch.float64 else torch.float32
    term_errors = term_error.value_error(op.term, x64, w64, opmath, "inductor")[1] + zeros
    return terms.sum(dim, keepdim), terms.abs().sum(dim, keepdim), term_errors.sum(dim, keepdim)


def assert_matches_exact(op, actual, x, w, dim=None, keepdim=False, dtype=None, either_rounding=False):
    """actual has the composite's dtype and shape, and is within error_bound of the exact sum; with
    either_rounding, of the exact sum of the operands as the op rounds them or as they are."""
    meta = op.composite(*(torch.empty(t.shape, dtype=t.dtype, device="meta") for t in (x, w)), dim, keepdim, dtype)
    assert (actual.dtype, actual.shape) == (meta.dtype, meta.shape), (actual.dtype, actual.shape, meta)
    got = actual.detach().double()
    assert torch.isfinite(got).all(), f"non-finite values: {got}"
    bad = torch.ones_like(got, dtype=torch.bool)
    for rounded in (True, False) if either_rounding else (True,):
        expected, scale, term_errors = exact(op, x, w, dim, keepdim, rounded)
        bad &= (got - expected).abs() > error_bound(x, w, dim, dtype, expected, scale) + term_errors
    assert not bad.any(), (
        f"{int(bad.sum())} values off (dim={dim}, dtype={dtype}): {got[bad][:6]} vs {expected[bad][:6]}"
    )


def model(op):
    return lambda a, b, w: torch.relu(op(a + b, w)) * 3


def composite(op):
    return lambda a, b, w: torch.relu(op.composite(a + b, w, *op.args)) * 3


def assert_like_the_op(op, actual, expected, **tolerance):
    """Bit for bit where the decomposition computes as the kernel does, else up to rounding."""
    torch.testing.assert_close(actual, expected, **({"rtol": 0, "atol": 0} if op.bitwise else tolerance))


def function_term_bound(op, x, w, rounded=True, computed_by="inductor"):
    """(the float64 value, how far a term that calls functions, computed by Inductor's code or by
    the kernel ("cpu"), may be from it), elementwise (term_error.py: each operation's rounding and
    each function's error, carried through the formula)."""
    x64, w64 = operands64(x, w, rounded)
    value, bound = term_error.result_error(op.term, x64, w64, torch.result_type(x, w), computed_by)
    return as_result(value, x64, w64), as_result(bound, x64, w64)


def tolerance_of(op, x, w, factor=1):
    """assert_close's tolerance for op(x, w) computed two ways, then scaled by `factor`: for an
    elementwise op, twice its term's error bound; for a reduction, whose additions may run in
    another order, the exact sum's error bound of its float32 accumulation (a fixed tolerance fails
    where terms cancel)."""
    if op.bitwise:
        return {}
    x, w = x.detach(), w.detach()
    if op.kind == ELEMENTWISE:  # each within its bound of the float64 value
        bound = sum(function_term_bound(op, x, w, computed_by=by)[1].max().item() for by in ("inductor", "cpu"))
        return {"rtol": 2.0**-22, "atol": factor * bound}
    expected, scale, term_errors = exact(op, x, w, *op.args)
    bound = error_bound(x, w, op.args[0], None, expected, scale) + term_errors
    return {"rtol": 2.0**-22, "atol": factor * bound.max().item()}


def calls_ours(code):
    return re.search(r"\bcustom\.\w+", code) is not None


def kernels_and_code(fn, *args, backward=False):
    """(result, how many kernels the generated code defines, that code). Not Inductor's
    metrics.generated_kernel_count, which gives 4 for a sum that the code runs as one kernel."""
    result, code = run_compiled(fn, *args, backward=backward)
    return result, len(re.findall(r"^\w+ = async_compile\.", code, flags=re.M)), code


# --------------------------------------------------------------------------- every operator


@each_operator
def test_decomposition_table_follows_the_switch(op):
    from torch._inductor import decomposition

    table = decomposition.decompositions
    overload = getattr(OPS, op.name).default
    try:
        decompositions.set_enabled(False)
        assert overload not in table
        assert overload not in decomposition.select_decomp_table()
        decompositions.set_enabled(True)
        assert table[overload] is decompositions.DECOMPOSITIONS[op.name]
        assert decomposition.select_decomp_table()[overload] is decompositions.DECOMPOSITIONS[op.name]
    finally:
        decompositions.set_enabled(True)


@each_operator
def test_forward_fuses_into_one_kernel(decompose, op):
    a, b, w = leaves((64, 33), (64, 33), (33,))
    result, kernels, code = kernels_and_code(torch.compile(model(op), fullgraph=True), a, b, w)
    _, composite_kernels, _ = kernels_and_code(torch.compile(composite(op), fullgraph=True), a, b, w)
    assert_like_the_op(op, result, model(op)(a, b, w), **tolerance_of(op, a + b, w, factor=3))
    torch.testing.assert_close(result, composite(op)(a, b, w), **tolerance_of(op, a + b, w, factor=3))
    assert composite_kernels == 1
    if decompose:
        assert kernels == composite_kernels  # a + b, the op, relu and * 3
        assert not calls_ours(code)
    else:
        assert kernels == 2  # a + b, then relu(...) * 3, around our call
        assert f"custom.{op.name}.default" in code


@each_operator
def test_training_step_fuses(decompose, op):
    a, b, w = leaves((64, 33), (64, 33), (33,), requires_grad=True)
    result, kernels, code = kernels_and_code(torch.compile(model(op), fullgraph=True), a, b, w, backward=True)
    grads = [t.grad.clone() for t in (a, b, w)]
    for t in (a, b, w):
        t.grad = None
    expected = model(op)(a, b, w)
    expected.sum().backward()
    torch.testing.assert_close(result, expected, **tolerance_of(op, a + b, w, factor=3))
    for grad, t in zip(grads, (a, b, w)):
        torch.testing.assert_close(grad, t.grad, rtol=1e-5, atol=1e-5)
    if decompose:
        assert not calls_ours(code)  # neither the op nor its backward op
        for t in (a, b, w):
            t.grad = None
        _, composite_kernels, _ = kernels_and_code(torch.compile(composite(op), fullgraph=True), a, b, w, backward=True)
        assert kernels == composite_kernels
    else:
        assert f"custom.{op.name}.default" in code
        assert f"custom.{op.backward}" in code  # its term's backward op


@each_operator
def test_dynamic_shapes_do_not_recompile(decompose, op):
    def scaled(x, w):
        return op(x * 2, w) + 1

    compiled = torch.compile(scaled, fullgraph=True, dynamic=True)
    for n, c in ((5, 7), (17, 3), (64, 33), (129, 2)):
        x, w = leaves((n, c), (c,))
        actual = compiled(x, w)
        expected = scaled(x, w)
        assert actual.shape == expected.shape
        assert_like_the_op(op, actual, expected, **tolerance_of(op, x * 2, w))
    assert counters["stats"]["unique_graphs"] == 1


@each_operator
def test_torch_export_keeps_the_op(decomposed, op):
    class Module(torch.nn.Module):
        def forward(self, x, w):
            return op(x + 1, w)

    x, w = leaves((4, 5), (5,))
    exported = torch.export.export(Module(), (x, w))
    for program in (exported, exported.run_decompositions()):
        targets = [node.target for node in program.graph.nodes if node.op == "call_function"]
        assert getattr(OPS, op.name).default in targets
        torch.testing.assert_close(program.module()(x, w), op(x + 1, w), rtol=0, atol=0)


@each_operator
def test_decomposition_registered_after_a_compile(op):
    # The state toggled after compiles already cached the merged table: the next compile must use
    # the new state (and not fail on a stale cache, pitfall 1 of the study).
    x, w = leaves((8, 3), (3,))
    for enabled in (False, True, False):
        decompositions.set_enabled(enabled)
        torch._dynamo.reset()
        _, _, code = kernels_and_code(torch.compile(model(op), fullgraph=True), x, x, w)
        assert (f"custom.{op.name}" in code) != enabled
    decompositions.set_enabled(True)


def test_cache_key_tag_carries_state_and_version():
    import torch.compiler.config as compiler_config

    saved = compiler_config.cache_key_tag
    try:
        compiler_config.cache_key_tag = "user-tag"
        decompositions.set_enabled(False)
        off = compiler_config.cache_key_tag
        decompositions.set_enabled(True)
        on = compiler_config.cache_key_tag
        assert off != on
        assert on.startswith("user-tag|") and off.startswith("user-tag|")  # the user's tag is kept
        assert on.count("custom_ops-test-") == 1  # one segment of ours, replaced on each change
    finally:
        compiler_config.cache_key_tag = saved
        decompositions.set_enabled(True)


# --------------------------------------------------------------------------- elementwise: out=, in place, every layout


@each_elementwise_operator
def test_out_and_inplace_fuse(decompose, op):
    def out_and_inplace(x, w):
        y = torch.empty_like(x)
        getattr(OPS, op.name).out(x + 1, w, out=y)
        z = x * 2
        getattr(OPS, f"{op.name}_")(z, w)
        return y + z

    x, w = leaves((16, 9), (9,))
    result, _, code = kernels_and_code(torch.compile(out_and_inplace, fullgraph=True), x, w)
    tolerance = [tolerance_of(op, operand, w).get("atol", 0) for operand in (x + 1, x * 2)]
    assert_like_the_op(op, result, out_and_inplace(x, w), rtol=2.0**-22, atol=sum(tolerance))
    assert (f"custom.{op.name}" in code) != decompose


@each_elementwise_operator
@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=lambda p: f"{dtype_name(p[0])}-{dtype_name(p[1])}")
def test_forward_bit_equal_to_the_kernel(decomposed, dtypes, op):
    # Every layout of reference.LAYOUTS (broadcast, transposed, sliced, offset, expanded, 0-dim,
    # empty) in one graph: one compile per dtype pair.
    arguments = [make_inputs(layout, *dtypes, "cpu") for layout in LAYOUT_NAMES]

    def every_layout(arguments):
        return [op(x, w) for x, w in arguments]

    for layout, actual, (x, w) in zip(LAYOUT_NAMES, torch.compile(every_layout, fullgraph=True)(arguments), arguments):
        expected = op(x, w)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, layout
        rounded_operand = any(t.dtype != expected.dtype for t in (x, w)) and expected.dtype in LOW_PRECISION
        if not op.bitwise:  # a term that calls functions: Inductor's code within its bound, as the kernel is
            bad = torch.ones(actual.shape, dtype=torch.bool)
            for rounded in (True, False) if rounded_operand else (True,):  # Inductor skips that rounding
                value, bound = function_term_bound(op, x, w, rounded)
                bad &= (actual.double() - value).abs() > bound
            assert not bad.any(), f"{layout}: {actual[bad][:6]} vs {value[bad][:6]}"
        elif rounded_operand:
            # An operand rounded down to a half-type common dtype (a 0-dim float32 weight, say):
            # Inductor skips that intermediate rounding (see _inductor._in_opmath), one rounding apart.
            torch.testing.assert_close(actual, expected, rtol=2 * TOLERANCES[expected.dtype][0], atol=1e-3)
        else:
            assert torch.equal(actual, expected), layout  # bit for bit (randn data: no NaNs)


def gradient_scales(op, grad, x, w):
    """For each operand's gradient, elementwise: the sum of the absolute values of the terms its
    sum over broadcast dimensions adds, in float64 (a rounding of each term is relative to it)."""
    x64, w64 = promoted(x.detach(), w.detach())
    g64 = grad.double()
    return [
        sum_to((g64 * as_result(partial(x64, w64), x64, w64)).abs(), operand.shape)
        for partial, operand in ((op.term.dx, x), (op.term.dw, w))
    ]


GRADIENT_LAYOUTS = ["same_shape", "channel_weight", "both_broadcast", "transposed_input", "expanded_both"]


@each_elementwise_operator
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=dtype_name)
def test_gradients_match_the_kernel(decomposed, dtype, op):
    arguments = [[t.requires_grad_() for t in make_inputs(layout, dtype, dtype, "cpu")] for layout in GRADIENT_LAYOUTS]
    leaves_ = [t for pair in arguments for t in pair]

    def every_layout(arguments):
        return [op(x, w) for x, w in arguments]

    eager = every_layout(arguments)
    grads = [torch.randn_like(out) for out in eager]
    expected = torch.autograd.grad(eager, leaves_, grads)
    actual = torch.autograd.grad(torch.compile(every_layout, fullgraph=True)(arguments), leaves_, grads)
    # The pointwise formulas are the kernel's; a sum over broadcast dimensions may add in another
    # order, and eager rounds each term to dtype first (as the composite's sum_to does) where
    # Inductor keeps float: so a few roundings of the terms' size, which is the scale of a sum that
    # cancels, not of its result.
    tolerance = {torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    scales = [s for (x, w), g in zip(arguments, grads) for s in gradient_scales(op, g, x, w)]
    for i, (a, e, scale) in enumerate(zip(actual, expected, scales)):
        assert a.dtype == e.dtype and a.shape == e.shape, GRADIENT_LAYOUTS[i // 2]
        error = (a.double() - e.double()).abs()
        bad = error > tolerance * (1 + scale)
        assert not bad.any(), f"{GRADIENT_LAYOUTS[i // 2]}: {a[bad][:6]} vs eager {e[bad][:6]}"


# (grad, input, weight) dtypes where grad is narrower than the forward's promoted dtype: an in-place
# half-precision self with a wider weight, or a reduction's dtype=.
NARROW_GRAD_DTYPES = [
    (torch.float16, torch.float16, torch.float32),
    (torch.bfloat16, torch.float32, torch.float64),
    (torch.float16, torch.bfloat16, torch.float64),
]


@each_backward
@pytest.mark.parametrize("dtypes", NARROW_GRAD_DTYPES, ids=lambda p: "-".join(map(dtype_name, p)))
def test_backward_decomposition_computes_in_the_promoted_dtype(dtypes, op):
    # No compile: the decomposition against the op, each gradient in its argument's dtype and
    # computed in the promotion of all three (the op's rule, autograd/derivative_dtype.h).
    grad_dtype, x_dtype, w_dtype = dtypes
    for x_shape, w_shape in [((4, 5), (4, 5)), ((4, 5), (5,)), ((4, 1), (3, 1, 5))]:
        x, w = make(x_shape, x_dtype, "cpu"), make(w_shape, w_dtype, "cpu")
        grad = make(torch.broadcast_shapes(x_shape, w_shape), grad_dtype, "cpu")
        actual = decomposition(op.backward)(grad, x, w, [True, True])
        expected = getattr(OPS, op.backward)(grad, x, w, [True, True])
        for name, a, e in zip(("grad_input", "grad_weight"), actual, expected):
            assert a.dtype == e.dtype and a.shape == e.shape, (name, x_shape, w_shape)
            rtol = 4 * TOLERANCES[e.dtype][0]  # sums over broadcast dims may add in another order
            torch.testing.assert_close(a, e, rtol=rtol, atol=rtol, msg=lambda m, n=name: f"{n} {x_shape}: {m}")


@each_elementwise_operator
def test_strided_output_operand_layouts_in_low_precision(decomposed, op):
    # A transposed half-precision input against a float32 weight: the cast happens per element.
    x = make_tensor((6, 5), torch.bfloat16, "cpu", "transposed")
    w = make_tensor((6, 5), torch.float32, "cpu", "step")
    compiled = torch.compile(lambda x, w: torch.relu(op(x, w)), fullgraph=True)
    assert_like_the_op(op, compiled(x, w), torch.relu(op(x, w)), **tolerance_of(op, x, w))


# --------------------------------------------------------------------------- reductions: dims, keepdim, dtype=

CASES = [  # (input shape, weight shape, dim, keepdim, dtype)
    ((4, 5, 6), (6,), None, False, None),
    ((4, 5, 6), (6,), [], True, None),
    ((4, 5, 6), (5, 1), [0], False, None),
    ((4, 5, 6), (5, 1), [-1], True, None),
    ((4, 5, 6), (4, 5, 6), [0, 2], False, None),
    ((4, 1, 6), (5, 1), [1], False, None),  # both broadcast, summed over the broadcast dim
    ((6,), (3, 4, 6), [0, -1], True, None),  # the weight is the wider one
    ((4, 5, 6), (), [2, 0], False, None),  # a 0-dim weight
    ((), (), [0], False, None),  # a 0-dim shape: one term
    ((4, 0, 6), (6,), [1], False, None),  # an empty sum: zeros
    ((4, 5, 6), (6,), [1], False, torch.float32),
    ((4, 5, 6), (6,), [2], True, torch.float64),
    ((4, 5, 6), (6,), None, False, torch.float16),
    ((4, 5, 6), (6,), [0], False, torch.bfloat16),
]
# (input dtype, weight dtype): each dtype with itself, and mixed pairs
DTYPE_CASES = [(d, d) for d in FLOAT_DTYPES] + [
    (torch.float16, torch.float32),
    (torch.bfloat16, torch.float16),
    (torch.float32, torch.float64),
]


@each_reduction_operator
@pytest.mark.parametrize("dtypes", DTYPE_CASES, ids=lambda p: f"{dtype_name(p[0])}-{dtype_name(p[1])}")
def test_decomposition_eagerly_matches_the_op(dtypes, op):
    # The decomposition function itself, no compile: every case of dims, keepdim and dtype=, each
    # operand dtype. Same dtype, shape and strides as our kernel, values within the exact sum's bound.
    for x_shape, w_shape, dim, keepdim, dtype in CASES:
        x, w = make(x_shape, dtypes[0], "cpu"), make(w_shape, dtypes[1], "cpu")
        actual = decomposition(op.name)(x, w, dim, keepdim, dtype=dtype)
        expected = op(x, w, dim, keepdim, dtype=dtype)
        case = (x_shape, w_shape, dim, keepdim, dtype)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, case
        assert actual.stride() == expected.stride(), case
        assert_matches_exact(op, actual, x, w, dim, keepdim, dtype)
        # A float64 result is computed in float64 from the first product on, as the kernel does.
        tight = {"rtol": 1e-12, "atol": 1e-12} if expected.dtype == torch.float64 else {}
        torch.testing.assert_close(actual, expected, **tight, msg=lambda m, case=case: f"{case}: {m}")


@each_reduction_operator
def test_half_terms_are_not_rounded_before_the_sum(decomposed, op):
    # bfloat16 x = 1 + 2**-7, w = 1: a term that float32 holds and bfloat16 does not (w * x*x:
    # 1 + 2**-6 + 2**-14). The kernels add the float32 terms, so dtype=float32 gives 64 times the
    # float32 term exactly (where its multiples up to 64 are floats); terms rounded to the operands'
    # dtype first would not (64 * (1 + 2**-6)).
    x = torch.full((64,), 1 + 2.0**-7, dtype=torch.bfloat16)
    w = torch.ones(64, dtype=torch.bfloat16)
    term = op.term.value(x[:1].float(), w[:1].float())
    if torch.equal(term.bfloat16().float(), term) or any(
        (term * k).double() != term.double() * k for k in range(1, 65)
    ):
        pytest.skip(f"{op.name}'s term at this point is a bfloat16, or its multiples are not floats")
    exact = 64 * term.double().item()
    compiled = torch.compile(lambda x, w: op(x, w, None, dtype=torch.float32), fullgraph=True)
    for actual in (
        op(x, w, None, dtype=torch.float32),
        decomposition(op.name)(x, w, dtype=torch.float32),
        compiled(x, w),
    ):
        assert actual.dtype == torch.float32 and actual.item() == exact


@each_reduction_operator
def test_dynamic_training_step_does_not_recompile(decomposed, op):
    def loss(x, w):
        return op(torch.tanh(x), w, [0]).sum()

    compiled = torch.compile(loss, fullgraph=True, dynamic=True)
    for n in (3, 8, 21):
        x, w = leaves((n, 6), (6,), requires_grad=True)
        actual = torch.autograd.grad(compiled(x, w), [x, w])
        expected = torch.autograd.grad(loss(x, w), [x, w])
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e)
    assert counters["stats"]["unique_graphs"] == 1


@each_reduction_operator
@pytest.mark.parametrize("dtypes", DTYPE_CASES, ids=lambda p: f"{dtype_name(p[0])}-{dtype_name(p[1])}")
def test_compiled_values_match_the_op(decomposed, dtypes, op):
    # Every case in one graph: one compile per dtype pair.
    arguments = [
        (make(x_shape, dtypes[0], "cpu"), make(w_shape, dtypes[1], "cpu"), dim, keepdim, dtype)
        for x_shape, w_shape, dim, keepdim, dtype in CASES
    ]

    def every_case(tensors):
        return [op(x, w, dim, keepdim, dtype=dtype) for (x, w), (_, _, dim, keepdim, dtype) in zip(tensors, arguments)]

    tensors = [(x, w) for x, w, *_ in arguments]
    compiled, code = run_and_get_code(torch.compile(every_case, fullgraph=True), tensors)
    assert f"custom.{op.name}" not in "\n".join(code)
    for actual, (x, w, dim, keepdim, dtype) in zip(compiled, arguments):
        expected = op(x, w, dim, keepdim, dtype=dtype)
        case = (tuple(x.shape), tuple(w.shape), dim, keepdim, dtype)
        assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape), case
        assert actual.is_contiguous(), case
        common = torch.result_type(x, w)
        # An operand rounded down to a half-type common dtype (a 0-dim float32 weight, say): Inductor
        # skips that rounding (see _inductor._in_opmath), so either exact sum.
        rounded_operand = common in LOW_PRECISION and (x.dtype, w.dtype) != (common, common)
        assert_matches_exact(op, actual, x, w, dim, keepdim, dtype, either_rounding=rounded_operand)


@each_reduction_operator
def test_strided_operands(decomposed, op):
    # A permuted input and a transposed weight: the decomposition reads them through their strides.
    x = make((6, 5, 4), torch.float32, "cpu", "permuted")
    w = make((5, 4), torch.float32, "cpu", "transposed")

    def summed_and_exp(x, w):
        summed = op(x, w, [1])
        return summed, summed.exp()

    summed, exp = torch.compile(summed_and_exp, fullgraph=True)(x, w)
    assert_matches_exact(op, summed, x, w, [1])
    # Of the compiled sum: exp() would magnify the few ulps by which Inductor's order of additions
    # differs from the kernel's.
    torch.testing.assert_close(exp, summed.exp())


@each_reduction_operator
def test_errors_surface_at_compile_time(decomposed, op):
    # The Meta kernel checks the arguments while Dynamo traces: a bad dim is an error, not a wrong sum.
    x, w = leaves((4, 5), (5,))
    compiled = torch.compile(lambda x, w: op(x, w, [2]), fullgraph=True)
    with pytest.raises(Exception, match="out of range"):
        compiled(x, w)
