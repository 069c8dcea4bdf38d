"""Registration of every custom::weighted_sum overload: kernels per dispatch key, opcheck, Meta."""

import pytest
import torch

from environment import CUDA_BUILT
from reference import (
    INPLACE_LAYOUT_NAMES,
    LAYOUT_NAMES,
    OPS,
    broadcast_shape,
    dtype_name,
    make_inputs,
    make_tensor,
    poisoned,
)

OVERLOAD_NAMES = [
    "custom::weighted_sum",
    "custom::weighted_sum.out",
    "custom::weighted_sum_",
    "custom::weighted_sum_backward",
]
OVERLOADS = {
    "custom::weighted_sum": OPS.weighted_sum.default,
    "custom::weighted_sum.out": OPS.weighted_sum.out,
    "custom::weighted_sum_": OPS.weighted_sum_.default,
    "custom::weighted_sum_backward": OPS.weighted_sum_backward.default,
}
LAYOUT_ERROR_KEYS = ["SparseCPU", "SparseCsrCPU", "MkldnnCPU", "NestedTensorCPU"]
MASKS = [[True, True], [True, False], [False, True], [False, False]]

# A few dtype pairs: same dtype (the fused backward), mixed widths, low precision with float64.
OPCHECK_PAIRS = [
    (torch.float64, torch.float64),
    (torch.float32, torch.float16),
    (torch.bfloat16, torch.float64),
]
pair_ids = [f"{dtype_name(a)}-{dtype_name(b)}" for a, b in OPCHECK_PAIRS]


def layouts_with_pairs(layouts):
    """Each layout with one of OPCHECK_PAIRS, in turn: every pair meets several layouts while
    opcheck (about 0.1-1 s a call) runs once per layout. "large" only costs time here."""
    layouts = [layout for layout in layouts if layout != "large"]
    return [
        pytest.param(layout, *OPCHECK_PAIRS[i % len(OPCHECK_PAIRS)], id=f"{layout}-{pair_ids[i % len(pair_ids)]}")
        for i, layout in enumerate(layouts)
    ]


REQUIRES_GRAD = {"none": (False, False), "input": (True, False), "weight": (False, True), "both": (True, True)}


def has_kernel(name, key):
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)


# --------------------------------------------------------------------------------- kernels


@pytest.mark.parametrize("name", OVERLOAD_NAMES)
@pytest.mark.parametrize("key", ["CPU", "Meta", "Autograd"])
def test_kernel_registered(name, key):
    assert has_kernel(name, key)


@pytest.mark.skipif(not CUDA_BUILT, reason="the library was built without the CUDA kernels")
@pytest.mark.parametrize("name", OVERLOAD_NAMES)
@pytest.mark.parametrize("key", ["CUDA", "SparseCUDA", "SparseCsrCUDA", "NestedTensorCUDA"])
def test_cuda_kernel_registered(name, key):
    assert has_kernel(name, key)


@pytest.mark.parametrize("name", OVERLOAD_NAMES)
@pytest.mark.parametrize("key", LAYOUT_ERROR_KEYS)
def test_layout_error_kernel_registered(name, key):
    assert has_kernel(name, key)


@pytest.mark.parametrize("name", OVERLOAD_NAMES)
def test_no_composite_kernel_hides_the_device_kernels(name):
    assert not has_kernel(name, "CompositeImplicitAutograd")
    assert not has_kernel(name, "CompositeExplicitAutograd")


@pytest.mark.parametrize("name", OVERLOAD_NAMES)
def test_overload_is_tagged_pt2_compliant(name):
    assert torch.Tag.pt2_compliant_tag in OVERLOADS[name].tags


def test_mutating_overloads_declare_their_mutated_argument_and_return_nothing():
    out_schema = OPS.weighted_sum.out._schema
    inplace_schema = OPS.weighted_sum_.default._schema
    assert [a.name for a in out_schema.arguments if a.alias_info and a.alias_info.is_write] == ["out"]
    assert [a.name for a in inplace_schema.arguments if a.alias_info and a.alias_info.is_write] == ["self"]
    assert out_schema.returns == [] and inplace_schema.returns == []
    assert all(a.alias_info is None for a in OPS.weighted_sum.default._schema.arguments)
    assert all(a.alias_info is None for a in OPS.weighted_sum_backward.default._schema.arguments)


# --------------------------------------------------------------------------------- opcheck


def opcheck(op, args, kwargs=None):
    # All four default tests: test_schema, test_autograd_registration, test_faketensor,
    # test_aot_dispatch_dynamic. Raises on the first failure.
    result = torch.library.opcheck(op, args, kwargs)
    assert set(result) == {"test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"}
    assert all(status == "SUCCESS" for status in result.values()), result


@pytest.mark.parametrize("requires_grad", list(REQUIRES_GRAD), ids=str)
@pytest.mark.parametrize("layout,input_dtype,weight_dtype", layouts_with_pairs(LAYOUT_NAMES))
def test_opcheck_functional(device, layout, input_dtype, weight_dtype, requires_grad):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    x_grad, w_grad = REQUIRES_GRAD[requires_grad]
    opcheck(OPS.weighted_sum.default, (x.requires_grad_(x_grad), w.requires_grad_(w_grad)))


@pytest.mark.parametrize("layout,input_dtype,weight_dtype", layouts_with_pairs(LAYOUT_NAMES))
def test_opcheck_out(device, layout, input_dtype, weight_dtype):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    out = poisoned(broadcast_shape(layout), torch.result_type(x, w), device)
    opcheck(OPS.weighted_sum.out, (x, w), {"out": out})


@pytest.mark.parametrize("out_kind", ["transposed", "step"])
def test_opcheck_out_non_contiguous(device, out_kind):
    x, w = make_inputs("transposed", torch.float32, torch.float32, device)
    out = poisoned(broadcast_shape("transposed"), torch.float64, device, out_kind)
    opcheck(OPS.weighted_sum.out, (x, w), {"out": out})


@pytest.mark.parametrize("layout,self_dtype,weight_dtype", layouts_with_pairs(INPLACE_LAYOUT_NAMES))
def test_opcheck_inplace(device, layout, self_dtype, weight_dtype):
    x, w = make_inputs(layout, self_dtype, weight_dtype, device)
    opcheck(OPS.weighted_sum_.default, (x, w))


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "requires_grad"])
@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize(
    "layout,input_dtype,weight_dtype",
    layouts_with_pairs(["same_shape", "both_broadcast", "zero_dim_weight", "transposed", "empty", "expanded"]),
)
def test_opcheck_backward(device, layout, input_dtype, weight_dtype, mask, requires_grad):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    grad = make_tensor(broadcast_shape(layout), torch.result_type(x, w), device)
    for t in (grad, x, w):
        t.requires_grad_(requires_grad)
    opcheck(OPS.weighted_sum_backward.default, (grad, x, w, mask))


# ------------------------------------------------------------------------------------ Meta


def to_meta(t):
    """A meta tensor with t's sizes, strides and dtype."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def assert_same_metadata(meta, real):
    assert meta.device.type == "meta"
    assert (meta.shape, meta.stride(), meta.dtype) == (real.shape, real.stride(), real.dtype)


@pytest.mark.parametrize("input_dtype,weight_dtype", OPCHECK_PAIRS, ids=pair_ids)
@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_meta_functional_matches_real(device, layout, input_dtype, weight_dtype):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    assert_same_metadata(OPS.weighted_sum(to_meta(x), to_meta(w)), OPS.weighted_sum(x, w))


@pytest.mark.parametrize("out_shape", ["right", "wrong", "empty"])
@pytest.mark.parametrize("layout", ["both_broadcast", "transposed_input", "zero_dim"])
def test_meta_out_matches_real(device, layout, out_shape, capfd):
    x, w = make_inputs(layout, torch.float32, torch.float16, device)
    shape = {"right": broadcast_shape(layout), "wrong": (3, 2), "empty": (0,)}[out_shape]
    out = poisoned(
        shape, torch.float64, device, "transposed" if out_shape == "right" and len(shape) >= 2 else "contiguous"
    )
    meta_out = to_meta(out)
    OPS.weighted_sum.out(x, w, out=out)
    OPS.weighted_sum.out(to_meta(x), to_meta(w), out=meta_out)
    assert_same_metadata(meta_out, out)


@pytest.mark.parametrize("layout", INPLACE_LAYOUT_NAMES)
def test_meta_inplace_matches_real(device, layout):
    x, w = make_inputs(layout, torch.float16, torch.float32, device)
    meta_x = to_meta(x)
    OPS.weighted_sum_(x, w)
    OPS.weighted_sum_(meta_x, to_meta(w))
    assert_same_metadata(meta_x, x)


@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize("input_dtype,weight_dtype", OPCHECK_PAIRS, ids=pair_ids)
@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_meta_backward_matches_real(device, layout, input_dtype, weight_dtype, mask):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    grad = make_tensor(broadcast_shape(layout), torch.result_type(x, w), device)
    real = OPS.weighted_sum_backward(grad, x, w, mask)
    meta = OPS.weighted_sum_backward(to_meta(grad), to_meta(x), to_meta(w), mask)
    for m, r, needed in zip(meta, real, mask):
        assert (m is None) == (r is None) == (not needed)
        if needed:
            assert_same_metadata(m, r)


def test_symbolic_trace_keeps_shapes_symbolic():
    # The Meta kernels run on SymInt shapes: a symbolic trace records no specialization, so the
    # graph runs on other shapes, and its outputs carry symbolic shapes.
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, w):
        out = OPS.weighted_sum(x, w)
        grad_input, grad_weight = OPS.weighted_sum_backward(out, x, w, [True, True])
        return out, grad_input, grad_weight

    graph = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 1, 6), torch.randn(5, 1, dtype=torch.float64))
    outputs = next(n for n in graph.graph.nodes if n.op == "output").args[0]
    out_meta = outputs[0].meta["val"]
    assert all(isinstance(s, torch.SymInt) for s in out_meta.shape)
    assert out_meta.dtype == torch.float64

    x, w = torch.randn(3, 1, 2), torch.randn(7, 1, dtype=torch.float64)
    out, grad_input, grad_weight = graph(x, w)
    assert torch.equal(out, OPS.weighted_sum(x, w))
    assert (grad_input.shape, grad_input.dtype) == (x.shape, x.dtype)
    assert (grad_weight.shape, grad_weight.dtype) == (w.shape, w.dtype)
