# SPDX-License-Identifier: BSD-3-Clause
"""Registration of every operator's overloads (operators.py's table): a kernel per dispatch key,
the schema and tag, torch.library.opcheck and the Meta kernels against the real ones (FakeTensor,
make_fx, torch.compile); then the checks only some kinds have (out=, in place, the backward op,
a reduction's dim, keepdim and dtype=). The expected schemas and the samples are written per
kind; every test id names its operator (or overload), so `pytest -k NAME` selects one operator's."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import square_sum_reference
from environment import CUDA_BUILT
from operators import (
    ELEMENTWISE,
    ELEMENTWISE_OPERATORS,
    OPERATORS,
    REDUCTION,
    REDUCTION_OPERATORS,
    each_elementwise_operator,
    each_operator,
    each_reduction_operator,
)
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

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16

# Each kind's overloads and their schemas, NAME standing for the operator's name (the term's
# backward op is named in its own row).
SCHEMA_TEMPLATES = {
    ELEMENTWISE: {
        "NAME": "custom::NAME(Tensor input, Tensor weight) -> Tensor",
        "NAME.out": "custom::NAME.out(Tensor input, Tensor weight, *, Tensor(a!) out) -> ()",
        "NAME_": "custom::NAME_(Tensor(a!) self, Tensor weight) -> ()",
        "NAME.Scalar": "custom::NAME.Scalar(Tensor input, Scalar weight) -> Tensor",
    },
    REDUCTION: {
        "NAME": (
            "custom::NAME(Tensor input, Tensor weight, int[1]? dim=None, bool keepdim=False, *, "
            "ScalarType? dtype=None) -> Tensor"
        ),
    },
}
BACKWARD_SCHEMA = "custom::NAME(Tensor grad, Tensor input, Tensor weight, bool[2] output_mask) -> (Tensor, Tensor)"
MUTATING_TEMPLATE = {"NAME.out": "out", "NAME_": "self"}  # overload -> what it writes


def _schemas():
    schemas = {}
    for op in OPERATORS:
        for template, schema in SCHEMA_TEMPLATES[op.kind].items():
            schemas["custom::" + template.replace("NAME", op.name)] = schema.replace("NAME", op.name)
        schemas[f"custom::{op.backward}"] = BACKWARD_SCHEMA.replace("NAME", op.backward)
    return schemas


SCHEMAS = _schemas()
# The overloads with kernels of their own (not .Scalar: CompositeImplicitAutograd).
OVERLOAD_NAMES = [f"custom::{name}" for op in OPERATORS for name in op.overloads]
MUTATING = {
    "custom::" + template.replace("NAME", op.name): written
    for op in OPERATORS
    for template, written in MUTATING_TEMPLATE.items()
    if template in SCHEMA_TEMPLATES[op.kind]
}
FUNCTIONAL = [name for name in OVERLOAD_NAMES if name not in MUTATING]
# (operator, its term's backward op) for each operator that lists the backward.
BACKWARDS = [pytest.param(op, op.backward, id=op.backward) for op in OPERATORS if op.backward in op.overloads]
LAYOUT_ERROR_KEYS = ["SparseCPU", "SparseCsrCPU", "MkldnnCPU", "NestedTensorCPU"]
MASKS = [[True, True], [True, False], [False, True], [False, False]]

# A few dtype pairs: same dtype (the fused backward), mixed widths, low precision with float64.
OPCHECK_PAIRS = [
    (torch.float64, torch.float64),
    (torch.float32, torch.float16),
    (torch.bfloat16, torch.float64),
]
pair_ids = [f"{dtype_name(a)}-{dtype_name(b)}" for a, b in OPCHECK_PAIRS]


def overload(name):
    """The OpOverload of "custom::weighted_sum.out" and the like."""
    packet, _, overload_name = name.removeprefix("custom::").partition(".")
    return getattr(getattr(OPS, packet), overload_name or "default")


def has_kernel(name, key):
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)


def layouts_with_pairs(layouts):
    """Each layout with one of OPCHECK_PAIRS, in turn: every pair meets several layouts while
    opcheck (about 0.1-1 s a call) runs once per layout. "large" only costs time here."""
    layouts = [layout for layout in layouts if layout != "large"]
    return [
        pytest.param(layout, *OPCHECK_PAIRS[i % len(OPCHECK_PAIRS)], id=f"{layout}-{pair_ids[i % len(pair_ids)]}")
        for i, layout in enumerate(layouts)
    ]


# --------------------------------------------------------------------------------- kernels


@pytest.mark.parametrize("name", OVERLOAD_NAMES)
@pytest.mark.parametrize("key", ["CPU", "Meta", "Autograd", "FuncTorchBatched"])
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


@each_operator
def test_autograd_kernel_is_the_ops_own(op):
    # Not the dispatcher's fallthrough or autograd-not-implemented fallback: the result has a node
    # of our own that computes the gradient.
    y = op(torch.randn(3, 4, requires_grad=True), torch.randn(4))
    camel = op.name.title().replace("_", "")
    assert y.grad_fn is not None and camel in y.grad_fn.name(), y.grad_fn


# --------------------------------------------------------------------------------- schema


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_schema_is_the_contract(name):
    assert str(overload(name)._schema) == SCHEMAS[name]


@each_operator
def test_operator_has_exactly_its_overloads(op):
    # .Scalar (an elementwise operator's) is composite: test_<name>_scalar.py and the oracle test it.
    listed = {
        name.partition(".")[2] or "default"
        for name in op.overloads + op.composite_overloads
        if name.partition(".")[0] == op.name
    }
    assert set(getattr(OPS, op.name).overloads()) == listed


@each_elementwise_operator
def test_scalar_overload_is_composite(op):
    name = f"custom::{op.name}.Scalar"
    assert has_kernel(name, "CompositeImplicitAutograd")
    assert not has_kernel(name, "CPU")


@pytest.mark.parametrize("name", OVERLOAD_NAMES)
def test_overload_is_tagged_pt2_compliant(name):
    assert torch.Tag.pt2_compliant_tag in overload(name).tags


@pytest.mark.parametrize("name", FUNCTIONAL)
def test_functional_overload_mutates_and_aliases_nothing(name):
    schema = overload(name)._schema
    assert all(a.alias_info is None for a in schema.arguments)
    assert all(r.alias_info is None for r in schema.returns)
    assert not schema.is_mutable


@pytest.mark.parametrize("name", list(MUTATING))
def test_mutating_overload_declares_its_mutated_argument_and_returns_nothing(name):
    schema = overload(name)._schema
    assert [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write] == [MUTATING[name]]
    assert schema.returns == []


# --------------------------------------------------------------------------------- samples

# A reduction's samples: name -> (input shape, input kind, input dtype, weight shape, weight dtype,
# dim, keepdim, dtype). An elementwise operator's: reference.LAYOUTS, each with a dtype pair.
REDUCTION_SAMPLES = {
    "all_dims": ((3, 4), "contiguous", F64, (3, 4), F64, None, False, None),
    "row_weight_dim0": ((3, 4), "contiguous", F32, (4,), F16, [0], False, None),
    "column_weight_keepdim": ((2, 3, 4), "contiguous", BF16, (3, 1), F64, [-1], True, None),
    "per_channel_nchw": ((2, 3, 2, 2), "channels_last", F32, (3, 1, 1), F32, [0, 2, 3], False, None),
    "two_negative_dims": ((2, 3, 4), "transposed", F64, (4,), F64, [-1, -3], True, None),
    "empty_dim_list": ((2, 3), "step", F32, (), F64, [], False, None),
    "dtype_float64": ((3, 4), "contiguous", F16, (4,), F16, [1], False, F64),
    "dtype_half": ((3, 4), "offset", F32, (3, 1), F32, None, True, F16),
    "zero_dim": ((), "contiguous", F64, (), F64, [0], False, None),
    "empty_reduction": ((0, 3), "contiguous", F32, (3,), F32, [0], False, None),
}
REQUIRES_GRAD = {"none": (False, False), "input": (True, False), "weight": (False, True), "both": (True, True)}


def sample(op, case, device, requires_grad="none"):
    """(args, kwargs) of op's functional overload for one case of its sample list below."""
    x_grad, w_grad = REQUIRES_GRAD[requires_grad]
    if op.kind == ELEMENTWISE:
        x, w = make_inputs(*case, device)
        return (x.requires_grad_(x_grad), w.requires_grad_(w_grad)), {}
    x_shape, x_kind, x_dtype, w_shape, w_dtype, dim, keepdim, dtype = REDUCTION_SAMPLES[case]
    x = square_sum_reference.make(x_shape, x_dtype, device, x_kind).requires_grad_(x_grad)
    w = square_sum_reference.make(w_shape, w_dtype, device).requires_grad_(w_grad)
    return (x, w, dim, keepdim), {"dtype": dtype} if dtype is not None else {}


def opcheck_samples():
    # Elementwise: every layout, each with one dtype pair in turn, each set of inputs that require
    # grad. Reduction: one gradient alone on a few samples only.
    params = []
    for op in ELEMENTWISE_OPERATORS:
        for param in layouts_with_pairs(LAYOUT_NAMES):
            for requires_grad in REQUIRES_GRAD:
                params.append(pytest.param(op, param.values, requires_grad, id=f"{op.name}-{param.id}-{requires_grad}"))
    for op in REDUCTION_OPERATORS:
        for name in REDUCTION_SAMPLES:
            for requires_grad in ("none", "input", "both"):
                marks = ()
                if requires_grad == "input" and name not in ("row_weight_dim0", "per_channel_nchw", "dtype_half"):
                    marks = pytest.mark.skip(reason="one gradient alone: a few samples suffice")
                params.append(
                    pytest.param(op, name, requires_grad, marks=marks, id=f"{op.name}-{name}-{requires_grad}")
                )
    return params


def meta_samples():
    # Elementwise: every layout with every dtype pair; reduction: every sample.
    return [
        pytest.param(op, (layout, *pair), id=f"{op.name}-{layout}-{pair_id}")
        for op in ELEMENTWISE_OPERATORS
        for layout in LAYOUT_NAMES
        for pair, pair_id in zip(OPCHECK_PAIRS, pair_ids)
    ] + [pytest.param(op, name, id=f"{op.name}-{name}") for op in REDUCTION_OPERATORS for name in REDUCTION_SAMPLES]


# --------------------------------------------------------------------------------- opcheck


def opcheck(op, args, kwargs=None):
    # All four default tests: test_schema, test_autograd_registration, test_faketensor,
    # test_aot_dispatch_dynamic. Raises on the first failure.
    result = torch.library.opcheck(op, args, kwargs)
    assert set(result) == {"test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"}
    assert all(status == "SUCCESS" for status in result.values()), result


@pytest.mark.parametrize("op,case,requires_grad", opcheck_samples())
def test_opcheck_functional(device, op, case, requires_grad):
    args, kwargs = sample(op, case, device, requires_grad)
    opcheck(getattr(OPS, op.name).default, args, kwargs)


@pytest.mark.parametrize("layout,input_dtype,weight_dtype", layouts_with_pairs(LAYOUT_NAMES))
@each_elementwise_operator
def test_opcheck_out(device, op, layout, input_dtype, weight_dtype):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    out = poisoned(broadcast_shape(layout), torch.result_type(x, w), device)
    opcheck(getattr(OPS, op.name).out, (x, w), {"out": out})


@pytest.mark.parametrize("out_kind", ["transposed", "step"])
@each_elementwise_operator
def test_opcheck_out_non_contiguous(device, op, out_kind):
    x, w = make_inputs("transposed", torch.float32, torch.float32, device)
    out = poisoned(broadcast_shape("transposed"), torch.float64, device, out_kind)
    opcheck(getattr(OPS, op.name).out, (x, w), {"out": out})


@pytest.mark.parametrize("layout,self_dtype,weight_dtype", layouts_with_pairs(INPLACE_LAYOUT_NAMES))
@each_elementwise_operator
def test_opcheck_inplace(device, op, layout, self_dtype, weight_dtype):
    x, w = make_inputs(layout, self_dtype, weight_dtype, device)
    opcheck(getattr(OPS, f"{op.name}_").default, (x, w))


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "requires_grad"])
@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize(
    "layout,input_dtype,weight_dtype",
    layouts_with_pairs(["same_shape", "both_broadcast", "zero_dim_weight", "transposed", "empty", "expanded"]),
)
@pytest.mark.parametrize("op,backward", BACKWARDS)
def test_opcheck_backward(device, op, backward, layout, input_dtype, weight_dtype, mask, requires_grad):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    grad = make_tensor(broadcast_shape(layout), torch.result_type(x, w), device)
    for t in (grad, x, w):
        t.requires_grad_(requires_grad)
    opcheck(getattr(OPS, backward).default, (grad, x, w, mask))


# ------------------------------------------------------------------------------------ Meta


def to_meta(t):
    """A meta tensor with t's sizes, strides and dtype."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def assert_same_metadata(meta, real):
    assert meta.device.type == "meta"
    assert (meta.shape, meta.stride(), meta.dtype) == (real.shape, real.stride(), real.dtype)


@pytest.mark.parametrize("op,case", meta_samples())
def test_meta_functional_matches_real(device, op, case):
    (x, w, *rest), kwargs = sample(op, case, device)
    function = getattr(OPS, op.name)
    real = function(x, w, *rest, **kwargs)
    assert_same_metadata(function(to_meta(x), to_meta(w), *rest, **kwargs), real)
    expected = op.composite(x, w, *rest, **kwargs)
    assert (real.shape, real.dtype) == (expected.shape, expected.dtype)


@pytest.mark.parametrize("out_shape", ["right", "wrong", "empty"])
@pytest.mark.parametrize("layout", ["both_broadcast", "transposed_input", "zero_dim"])
@each_elementwise_operator
def test_meta_out_matches_real(device, op, layout, out_shape, capfd):
    x, w = make_inputs(layout, torch.float32, torch.float16, device)
    shape = {"right": broadcast_shape(layout), "wrong": (3, 2), "empty": (0,)}[out_shape]
    out = poisoned(
        shape, torch.float64, device, "transposed" if out_shape == "right" and len(shape) >= 2 else "contiguous"
    )
    meta_out = to_meta(out)
    getattr(OPS, op.name).out(x, w, out=out)
    getattr(OPS, op.name).out(to_meta(x), to_meta(w), out=meta_out)
    assert_same_metadata(meta_out, out)


@pytest.mark.parametrize("layout", INPLACE_LAYOUT_NAMES)
@each_elementwise_operator
def test_meta_inplace_matches_real(device, op, layout):
    x, w = make_inputs(layout, torch.float16, torch.float32, device)
    meta_x = to_meta(x)
    inplace = getattr(OPS, f"{op.name}_")
    inplace(x, w)
    inplace(meta_x, to_meta(w))
    assert_same_metadata(meta_x, x)


@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize("input_dtype,weight_dtype", OPCHECK_PAIRS, ids=pair_ids)
@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("op,backward", BACKWARDS)
def test_meta_backward_matches_real(device, op, backward, layout, input_dtype, weight_dtype, mask):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    grad = make_tensor(broadcast_shape(layout), torch.result_type(x, w), device)
    real = getattr(OPS, backward)(grad, x, w, mask)
    meta = getattr(OPS, backward)(to_meta(grad), to_meta(x), to_meta(w), mask)
    for m, r, needed in zip(meta, real, mask):
        assert (m is None) == (r is None) == (not needed)
        if needed:
            assert_same_metadata(m, r)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [None, [], [0], [-1], [1, 3], [0, 1, 2, 3]], ids=str)
@pytest.mark.parametrize("dtype", [None, F16, F64], ids=lambda d: dtype_name(d) if d else "none")
@each_reduction_operator
def test_meta_reduction_shapes_and_dtypes_are_the_composites(op, dim, keepdim, dtype):
    x = torch.empty(2, 1, 4, 5, dtype=F32, device="meta")
    w = torch.empty(3, 1, 5, dtype=BF16, device="meta")
    got = op(x, w, dim, keepdim, dtype=dtype)
    expected = op.composite(x, w, dim, keepdim, dtype=dtype)
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype)


@each_reduction_operator
def test_fake_tensor_reduction_shapes_and_dtype(op):
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.randn(2, 3, 4))
        w = mode.from_tensor(torch.randn(3, 1, dtype=F64))
        out = op(x, w, [0, -1], True)
        assert out.shape == (1, 3, 1) and out.dtype == F64
        out = op(x, w, None, False, dtype=F16)
        assert out.shape == () and out.dtype == F16


@each_operator
def test_symbolic_trace_keeps_shapes_symbolic(op):
    # The Meta kernels run on SymInt shapes: a symbolic trace records no specialization, so the
    # graph runs on other shapes, and its output carries symbolic shapes.
    graph = make_fx(lambda x, w: op(x, w), tracing_mode="symbolic")(torch.randn(4, 5, 6), torch.randn(5, 1, dtype=F64))
    out_meta = next(n for n in graph.graph.nodes if n.op == "output").args[0].meta["val"]
    assert out_meta.shape and all(isinstance(s, torch.SymInt) for s in out_meta.shape)
    assert out_meta.dtype == F64
    x, w = torch.randn(3, 7, 2), torch.randn(7, 1, dtype=F64)
    # The eager op, bit for bit: the composite squares the float32 input in float32, the op in the
    # promoted float64, and a sum's cancellation can make that rounding exceed float64's tolerance.
    torch.testing.assert_close(graph(x, w), op(x, w), rtol=0, atol=0)


@pytest.mark.parametrize("op,backward", BACKWARDS)
def test_symbolic_trace_of_the_backward_op_keeps_shapes_symbolic(op, backward):
    backward_op = getattr(OPS, backward)

    def f(x, w):
        grad = x * w  # of the broadcast shape and the promoted dtype, as the op's own
        grad_input, grad_weight = backward_op(grad, x, w, [True, True])
        return grad, grad_input, grad_weight

    graph = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 1, 6), torch.randn(5, 1, dtype=torch.float64))
    outputs = next(n for n in graph.graph.nodes if n.op == "output").args[0]
    # Sizes of 1 are specialized by the trace (make_fx's rule), the others stay symbolic.
    for output, dtype, symbolic in zip(outputs[1:], (torch.float32, torch.float64), ([1, 0, 1], [1, 0])):
        meta = output.meta["val"]
        assert [int(isinstance(s, torch.SymInt)) for s in meta.shape] == symbolic
        assert meta.dtype == dtype

    x, w = torch.randn(3, 1, 2), torch.randn(7, 1, dtype=torch.float64)
    grad, grad_input, grad_weight = graph(x, w)
    expected_input, expected_weight = backward_op(grad, x, w, [True, True])
    assert torch.equal(grad_input, expected_input) and torch.equal(grad_weight, expected_weight)
    assert (grad_input.shape, grad_input.dtype) == (x.shape, x.dtype)
    assert (grad_weight.shape, grad_weight.dtype) == (w.shape, w.dtype)


@each_operator
def test_torch_compile_fullgraph(device, op):
    torch._dynamo.reset()
    try:
        x, w = make_tensor((4, 5, 6), F32, device), make_tensor((5, 1), F32, device)
        compiled = torch.compile(lambda x, w: op(x, w) * 2, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(x, w), 2 * op.composite(x, w, *op.args))
    finally:
        torch._dynamo.reset()
