"""torch.compile fuses the `custom` operators with their neighbours (python/custom_ops/_inductor.py).

In this process the decompositions come from the package's source file, installed the way
`import custom_ops` installs them (compile_helpers); the package-level behaviour (lazy import,
opt-out, the on-disk cache key across processes) is in test_package_inductor.py.
"""

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor import metrics

import compile_helpers
from compile_helpers import decompositions, leaves, run_compiled
from reference import DTYPE_PAIRS, LAYOUT_NAMES, LOW_PRECISION, TOLERANCES, dtype_name, make_inputs, make_tensor

OPS = torch.ops.custom

# Fixtures: the decompositions installed for this module; decomposed, or each test also opaque.
installed = compile_helpers.installed
decompose = compile_helpers.decompose
decomposed = compile_helpers.decomposed


def model(a, b, w):
    return torch.relu(OPS.weighted_sum(a + b, w)) * 3


def composite(a, b, w):
    return torch.relu(w * (a + b).square()) * 3


def kernels_and_code(fn, *args, backward=False):
    """(result, how many kernels Inductor generated, the generated code)."""
    result, code = run_compiled(fn, *args, backward=backward)
    return result, metrics.generated_kernel_count, code


# --------------------------------------------------------------------------- fusion


def test_forward_fuses_into_one_kernel(decompose):
    a, b, w = leaves((64, 33), (64, 33), (33,))
    compiled = torch.compile(model, fullgraph=True)
    result, kernels, code = kernels_and_code(compiled, a, b, w)
    _, composite_kernels, _ = kernels_and_code(torch.compile(composite, fullgraph=True), a, b, w)
    torch.testing.assert_close(result, model(a, b, w), rtol=0, atol=0)
    assert composite_kernels == 1
    if decompose:
        assert kernels == composite_kernels
        assert "custom.weighted_sum" not in code
    else:
        assert kernels == 2  # a + b, then relu(...) * 3, around our call
        assert "custom.weighted_sum" in code


def test_training_step_fuses(decompose):
    a, b, w = leaves((64, 33), (64, 33), (33,), requires_grad=True)
    compiled = torch.compile(model, fullgraph=True)
    _, kernels, code = kernels_and_code(compiled, a, b, w, backward=True)
    grads = [t.grad.clone() for t in (a, b, w)]
    for t in (a, b, w):
        t.grad = None
    _, composite_kernels, _ = kernels_and_code(torch.compile(composite, fullgraph=True), a, b, w, backward=True)
    composite_grads = [t.grad.clone() for t in (a, b, w)]
    for grad, expected in zip(grads, composite_grads):
        torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-5)
    if decompose:
        assert kernels == composite_kernels
        assert "custom.weighted_sum" not in code  # neither the op nor weighted_sum_backward
    else:
        assert "custom.weighted_sum.default" in code
        assert "custom.weighted_sum_backward" in code


def test_out_and_inplace_fuse(decompose):
    def out_and_inplace(x, w):
        y = torch.empty_like(x)
        OPS.weighted_sum.out(x + 1, w, out=y)
        z = x * 2
        OPS.weighted_sum_(z, w)
        return y + z

    x, w = leaves((16, 9), (9,))
    result, _, code = kernels_and_code(torch.compile(out_and_inplace, fullgraph=True), x, w)
    torch.testing.assert_close(result, out_and_inplace(x, w), rtol=0, atol=0)
    assert ("custom.weighted_sum" in code) != decompose


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=lambda p: f"{dtype_name(p[0])}-{dtype_name(p[1])}")
def test_forward_bit_equal_to_the_kernel(decomposed, dtypes):
    # Every layout of reference.LAYOUTS (broadcast, transposed, sliced, offset, expanded, 0-dim,
    # empty) in one graph: one compile per dtype pair.
    arguments = [make_inputs(layout, *dtypes, "cpu") for layout in LAYOUT_NAMES]

    def every_layout(arguments):
        return [OPS.weighted_sum(x, w) for x, w in arguments]

    for layout, actual, (x, w) in zip(LAYOUT_NAMES, torch.compile(every_layout, fullgraph=True)(arguments), arguments):
        expected = OPS.weighted_sum(x, w)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, layout
        if any(t.dtype != expected.dtype for t in (x, w)) and expected.dtype in LOW_PRECISION:
            # An operand rounded down to a half-type common dtype (a 0-dim float32 weight, say):
            # Inductor skips that intermediate rounding (see _inductor._in_opmath), one rounding apart.
            torch.testing.assert_close(actual, expected, rtol=2 * TOLERANCES[expected.dtype][0], atol=1e-3)
        else:
            assert torch.equal(actual, expected), layout  # bit for bit (randn data: no NaNs)


GRADIENT_LAYOUTS = ["same_shape", "channel_weight", "both_broadcast", "transposed_input", "expanded_both"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=dtype_name)
def test_gradients_match_the_kernel(decomposed, dtype):
    arguments = [[t.requires_grad_() for t in make_inputs(layout, dtype, dtype, "cpu")] for layout in GRADIENT_LAYOUTS]
    leaves_ = [t for pair in arguments for t in pair]

    def every_layout(arguments):
        return [OPS.weighted_sum(x, w) for x, w in arguments]

    eager = every_layout(arguments)
    grads = [torch.randn_like(out) for out in eager]
    expected = torch.autograd.grad(eager, leaves_, grads)
    actual = torch.autograd.grad(torch.compile(every_layout, fullgraph=True)(arguments), leaves_, grads)
    # The pointwise formulas are the kernel's; sums over broadcast dimensions may add in another
    # order, so a few roundings of difference there.
    tolerance = {torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype and a.shape == e.shape, GRADIENT_LAYOUTS[i // 2]
        torch.testing.assert_close(a, e, rtol=tolerance, atol=tolerance, msg=GRADIENT_LAYOUTS[i // 2])


def test_dynamic_shapes_do_not_recompile(decomposed):
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for n in (5, 17, 64, 129):
        a, b, w = leaves((n, 7), (n, 7), (7,))
        assert torch.equal(compiled(a, b, w), model(a, b, w))
    assert counters["stats"]["unique_graphs"] == 1


def test_torch_export_keeps_the_op(decomposed):
    class Module(torch.nn.Module):
        def forward(self, x, w):
            return OPS.weighted_sum(x + 1, w)

    x, w = leaves((4, 5), (5,))
    exported = torch.export.export(Module(), (x, w))
    for program in (exported, exported.run_decompositions()):
        targets = [node.target for node in program.graph.nodes if node.op == "call_function"]
        assert OPS.weighted_sum.default in targets
        torch.testing.assert_close(program.module()(x, w), OPS.weighted_sum(x + 1, w), rtol=0, atol=0)


def test_decomposition_registered_after_a_compile():
    # The state toggled after compiles already cached the merged table: the next compile must use
    # the new state (and not fail on a stale cache, pitfall 1 of the study).
    x, w = leaves((8, 3), (3,))
    for enabled in (False, True, False):
        decompositions.set_enabled(enabled)
        torch._dynamo.reset()
        _, _, code = kernels_and_code(torch.compile(model, fullgraph=True), x, x, w)
        assert ("custom.weighted_sum" in code) != enabled
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


def test_strided_output_operand_layouts_in_low_precision(decomposed):
    # A transposed half-precision input against a float32 weight: the cast happens per element.
    x = make_tensor((6, 5), torch.bfloat16, "cpu", "transposed")
    w = make_tensor((6, 5), torch.float32, "cpu", "step")
    compiled = torch.compile(lambda x, w: torch.relu(OPS.weighted_sum(x, w)), fullgraph=True)
    assert torch.equal(compiled(x, w), torch.relu(OPS.weighted_sum(x, w)))
