"""torch.compile and custom::weighted_square_sum: the Inductor decomposition of
python/custom_ops/_inductor.py fuses the op into one reduction with its neighbours.

As in test_inductor_fusion.py, the decompositions come from the package's source file, installed
the way `import custom_ops` installs them (compile_helpers: one module instance per process);
the package-level behaviour (the opt-out by function and by environment variable) is in
test_weighted_square_sum_package.py. The decomposition sums in another order than our kernel, so
its values are compared with the exact sum's error bound and with the eager op up to rounding, not
bit for bit.
"""

import re

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

import compile_helpers
from compile_helpers import decompositions, leaves, run_compiled
from reference import FLOAT_DTYPES, LOW_PRECISION, TOLERANCES, dtype_name
from square_sum_reference import assert_matches_exact, make

OPS = torch.ops.custom
OP_NAME = "custom.weighted_square_sum"

# Fixtures: the decompositions installed for this module; decomposed, or each test also opaque.
installed = compile_helpers.installed
decompose = compile_helpers.decompose
decomposed = compile_helpers.decomposed


def model(a, b, w):
    return torch.relu(OPS.weighted_square_sum(a + b, w, [1])) * 3


def composite(a, b, w):
    return torch.relu((w * (a + b).square()).sum(1)) * 3


def kernels_and_code(fn, *args, backward=False):
    """(result, the names of the kernels Inductor generated, the generated code)."""
    result, code = run_compiled(fn, *args, backward=backward)
    return result, re.findall(r"^(\w+) = async_compile\.", code, flags=re.M), code


# --------------------------------------------------------------------------- the table


def test_table_entry_follows_the_switch():
    from torch._inductor import decomposition

    table = decomposition.decompositions
    op = OPS.weighted_square_sum.default
    try:
        decompositions.set_enabled(False)
        assert op not in table
        assert op not in decomposition.select_decomp_table()
        decompositions.set_enabled(True)
        assert table[op] is decompositions.weighted_square_sum
        assert decomposition.select_decomp_table()[op] is decompositions.weighted_square_sum
    finally:
        decompositions.set_enabled(True)


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


@pytest.mark.parametrize("dtypes", DTYPE_CASES, ids=lambda p: f"{dtype_name(p[0])}-{dtype_name(p[1])}")
def test_decomposition_eagerly_matches_the_op(dtypes):
    # The decomposition function itself, no compile: every case of dims, keepdim and dtype=, each
    # operand dtype. Same dtype, shape and strides as our kernel, values within the exact sum's bound.
    for x_shape, w_shape, dim, keepdim, dtype in CASES:
        x, w = make(x_shape, dtypes[0], "cpu"), make(w_shape, dtypes[1], "cpu")
        actual = decompositions.weighted_square_sum(x, w, dim, keepdim, dtype=dtype)
        expected = OPS.weighted_square_sum(x, w, dim, keepdim, dtype=dtype)
        case = (x_shape, w_shape, dim, keepdim, dtype)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, case
        assert actual.stride() == expected.stride(), case
        assert_matches_exact(actual, x, w, dim, keepdim, dtype)
        # A float64 result is computed in float64 from the first product on, as the kernel does.
        tight = {"rtol": 1e-12, "atol": 1e-12} if expected.dtype == torch.float64 else {}
        torch.testing.assert_close(actual, expected, **tight, msg=lambda m, case=case: f"{case}: {m}")


def test_half_terms_are_not_rounded_before_the_sum(decomposed):
    # bfloat16 x = 1 + 2**-7: x*x = 1 + 2**-6 + 2**-14 is exact in float32 but not in bfloat16. The
    # kernels add the float32 terms, so dtype=float32 gives 64 * x*x exactly; terms rounded to the
    # operands' dtype first would give 64 * (1 + 2**-6).
    x = torch.full((64,), 1 + 2.0**-7, dtype=torch.bfloat16)
    w = torch.ones(64, dtype=torch.bfloat16)
    exact = 64 * (1 + 2.0**-6 + 2.0**-14)
    compiled = torch.compile(lambda x, w: OPS.weighted_square_sum(x, w, dtype=torch.float32), fullgraph=True)
    for actual in (
        OPS.weighted_square_sum(x, w, dtype=torch.float32),
        decompositions.weighted_square_sum(x, w, dtype=torch.float32),
        compiled(x, w),
    ):
        assert actual.dtype == torch.float32 and actual.item() == exact


# --------------------------------------------------------------------------- fusion


def test_forward_fuses_with_its_neighbours(decompose):
    a, b, w = leaves((64, 33), (64, 33), (33,))
    result, kernels, code = kernels_and_code(torch.compile(model, fullgraph=True), a, b, w)
    _, composite_kernels, _ = kernels_and_code(torch.compile(composite, fullgraph=True), a, b, w)
    torch.testing.assert_close(result, model(a, b, w))
    torch.testing.assert_close(result, composite(a, b, w))
    assert len(composite_kernels) == 1
    if decompose:
        assert len(kernels) == 1, kernels  # a + b, the weighted squares, the sum, relu and * 3
        assert OP_NAME not in code
    else:
        assert OP_NAME in code
        assert len(kernels) == 2, kernels  # a + b before our call, relu(...) * 3 after it


def test_training_step(decompose):
    a, b, w = leaves((64, 33), (64, 33), (33,), requires_grad=True)
    compiled = torch.compile(model, fullgraph=True)
    result, kernels, code = kernels_and_code(compiled, a, b, w, backward=True)
    grads = [t.grad.clone() for t in (a, b, w)]
    for t in (a, b, w):
        t.grad = None
    expected = model(a, b, w)
    expected.sum().backward()
    torch.testing.assert_close(result, expected)
    for grad, t in zip(grads, (a, b, w)):
        torch.testing.assert_close(grad, t.grad, rtol=1e-5, atol=1e-5)
    if decompose:
        assert OP_NAME not in code
        assert "custom.weighted_sum_backward" not in code  # the backward op decomposes too
        for t in (a, b, w):
            t.grad = None
        _, composite_kernels, _ = kernels_and_code(torch.compile(composite, fullgraph=True), a, b, w, backward=True)
        assert len(kernels) <= len(composite_kernels), (kernels, composite_kernels)
    else:
        assert f"{OP_NAME}.default" in code
        assert "custom.weighted_sum_backward" in code


def test_dynamic_shapes_do_not_recompile(decompose):
    def reduce_last(x, w):
        return OPS.weighted_square_sum(x * 2, w, [-1], True) + 1

    compiled = torch.compile(reduce_last, fullgraph=True, dynamic=True)
    for n, c in ((5, 7), (17, 3), (64, 33), (129, 2)):
        x, w = leaves((n, c), (c,))
        actual = compiled(x, w)
        expected = reduce_last(x, w)
        assert actual.shape == expected.shape == (n, 1)
        # Inductor adds the terms in another order: a few float32 ulps of the sum's size.
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == 1


def test_dynamic_training_step_does_not_recompile(decomposed):
    def loss(x, w):
        return OPS.weighted_square_sum(torch.tanh(x), w, [0]).sum()

    compiled = torch.compile(loss, fullgraph=True, dynamic=True)
    for n in (3, 8, 21):
        x, w = leaves((n, 6), (6,), requires_grad=True)
        actual = torch.autograd.grad(compiled(x, w), [x, w])
        expected = torch.autograd.grad(loss(x, w), [x, w])
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e)
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("dtypes", DTYPE_CASES, ids=lambda p: f"{dtype_name(p[0])}-{dtype_name(p[1])}")
def test_compiled_values_match_the_op(decomposed, dtypes):
    # Every case in one graph: one compile per dtype pair.
    arguments = [
        (make(x_shape, dtypes[0], "cpu"), make(w_shape, dtypes[1], "cpu"), dim, keepdim, dtype)
        for x_shape, w_shape, dim, keepdim, dtype in CASES
    ]

    def every_case(tensors):
        return [
            OPS.weighted_square_sum(x, w, dim, keepdim, dtype=dtype)
            for (x, w), (_, _, dim, keepdim, dtype) in zip(tensors, arguments)
        ]

    tensors = [(x, w) for x, w, *_ in arguments]
    compiled, code = run_and_get_code(torch.compile(every_case, fullgraph=True), tensors)
    assert OP_NAME not in "\n".join(code)
    for actual, (x, w, dim, keepdim, dtype) in zip(compiled, arguments):
        expected = OPS.weighted_square_sum(x, w, dim, keepdim, dtype=dtype)
        case = (tuple(x.shape), tuple(w.shape), dim, keepdim, dtype)
        assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape), case
        assert actual.is_contiguous(), case
        common = torch.result_type(x, w)
        if common in LOW_PRECISION and expected.dtype != torch.float64 and (x.dtype, w.dtype) != (common, common):
            # An operand rounded down to a half-type common dtype (a 0-dim float32 weight, say):
            # Inductor skips that rounding (see _inductor._in_opmath), one rounding of it apart.
            torch.testing.assert_close(actual, expected, rtol=2 * TOLERANCES[common][0], atol=1e-3, msg=str(case))
        else:
            assert_matches_exact(actual, x, w, dim, keepdim, dtype)


def test_strided_operands(decomposed):
    # A permuted input and a transposed weight: the decomposition reads them through their strides.
    x = make((6, 5, 4), torch.float32, "cpu", "permuted")
    w = make((5, 4), torch.float32, "cpu", "transposed")

    def summed_and_exp(x, w):
        summed = OPS.weighted_square_sum(x, w, [1])
        return summed, summed.exp()

    summed, exp = torch.compile(summed_and_exp, fullgraph=True)(x, w)
    assert_matches_exact(summed, x, w, [1])
    # Of the compiled sum: exp() would magnify the few ulps by which Inductor's order of additions
    # differs from the kernel's.
    torch.testing.assert_close(exp, summed.exp())


def test_torch_export_keeps_the_op(decomposed):
    class Module(torch.nn.Module):
        def forward(self, x, w):
            return OPS.weighted_square_sum(x + 1, w, [1], True)

    x, w = leaves((4, 5), (5,))
    exported = torch.export.export(Module(), (x, w))
    for program in (exported, exported.run_decompositions()):
        targets = [node.target for node in program.graph.nodes if node.op == "call_function"]
        assert OPS.weighted_square_sum.default in targets
        torch.testing.assert_close(program.module()(x, w), OPS.weighted_square_sum(x + 1, w, [1], True), rtol=0, atol=0)


def test_errors_surface_at_compile_time(decomposed):
    # The Meta kernel checks the arguments while Dynamo traces: a bad dim is an error, not a wrong sum.
    x, w = leaves((4, 5), (5,))
    compiled = torch.compile(lambda x, w: OPS.weighted_square_sum(x, w, [2]), fullgraph=True)
    with pytest.raises(Exception, match="out of range"):
        compiled(x, w)
