"""Registration of custom::weighted_square_sum: its schema and tag, a kernel per dispatch key,
torch.library.opcheck, and the Meta kernel's shapes, strides and dtypes (FakeTensor, make_fx)."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from environment import CUDA_BUILT
from reference import dtype_name
from square_sum_reference import OPS, SCHEMA, assert_matches_exact, composite, make, op

NAME = "custom::weighted_square_sum"
OVERLOAD = OPS.weighted_square_sum.default


def has_kernel(key):
    return torch._C._dispatch_has_kernel_for_dispatch_key(NAME, key)


# --------------------------------------------------------------------------------- schema


def test_schema_is_the_contract():
    assert str(OVERLOAD._schema) == SCHEMA
    assert list(OPS.weighted_square_sum.overloads()) == ["default"]


def test_schema_mutates_and_aliases_nothing():
    schema = OVERLOAD._schema
    assert all(a.alias_info is None for a in schema.arguments)
    assert all(r.alias_info is None for r in schema.returns)
    assert not schema.is_mutable


def test_tagged_pt2_compliant():
    assert torch.Tag.pt2_compliant_tag in OVERLOAD.tags


# -------------------------------------------------------------------------------- kernels


@pytest.mark.parametrize("key", ["CPU", "Meta", "Autograd", "FuncTorchBatched"])
def test_kernel_registered(key):
    assert has_kernel(key)


@pytest.mark.skipif(not CUDA_BUILT, reason="the library was built without the CUDA kernels")
def test_cuda_kernel_registered():
    # CUDA_BUILT: weighted_sum's CUDA kernels are there, so this op's must be too.
    assert has_kernel("CUDA")


@pytest.mark.parametrize("key", ["SparseCPU", "SparseCsrCPU", "MkldnnCPU", "NestedTensorCPU"])
def test_layout_error_kernel_registered(key):
    assert has_kernel(key)


def test_no_composite_kernel_hides_the_device_kernels():
    assert not has_kernel("CompositeImplicitAutograd")
    assert not has_kernel("CompositeExplicitAutograd")


def test_autograd_kernel_is_the_ops_own():
    # Not the dispatcher's fallthrough or autograd-not-implemented fallback: the result has a node
    # of our own that computes the gradient.
    x = torch.randn(3, 4, requires_grad=True)
    y = op(x, torch.randn(4), [1])
    assert y.grad_fn is not None
    assert "WeightedSquareSum" in y.grad_fn.name(), y.grad_fn.name()


# -------------------------------------------------------------------------------- opcheck


def opcheck(args, kwargs=None):
    # All four default tests: test_schema, test_autograd_registration, test_faketensor,
    # test_aot_dispatch_dynamic. Raises on the first failure.
    result = torch.library.opcheck(OVERLOAD, args, kwargs)
    assert set(result) == {"test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"}
    assert all(status == "SUCCESS" for status in result.values()), result


F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
# name -> (input shape, input kind, input dtype, weight shape, weight dtype, dim, keepdim, dtype)
SAMPLES = {
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
REQUIRES_GRAD = {"none": (False, False), "input": (True, False), "both": (True, True)}


def sample(name, device, requires_grad=(False, False)):
    x_shape, x_kind, x_dtype, w_shape, w_dtype, dim, keepdim, dtype = SAMPLES[name]
    x = make(x_shape, x_dtype, device, x_kind).requires_grad_(requires_grad[0])
    w = make(w_shape, w_dtype, device).requires_grad_(requires_grad[1])
    return (x, w, dim, keepdim), {"dtype": dtype} if dtype is not None else {}


@pytest.mark.parametrize("requires_grad", list(REQUIRES_GRAD))
@pytest.mark.parametrize("name", list(SAMPLES))
def test_opcheck(device, name, requires_grad):
    if requires_grad == "input" and name not in ("row_weight_dim0", "per_channel_nchw", "dtype_half"):
        pytest.skip("one gradient alone: a few samples suffice")
    args, kwargs = sample(name, device, REQUIRES_GRAD[requires_grad])
    opcheck(args, kwargs)


# ----------------------------------------------------------------------------------- Meta


def to_meta(t):
    """A meta tensor with t's sizes, strides and dtype."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def assert_same_metadata(meta, real):
    assert meta.device.type == "meta"
    assert (meta.shape, meta.stride(), meta.dtype) == (real.shape, real.stride(), real.dtype)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_meta_matches_real(device, name):
    (x, w, dim, keepdim), kwargs = sample(name, device)
    real = op(x, w, dim, keepdim, **kwargs)
    assert_same_metadata(op(to_meta(x), to_meta(w), dim, keepdim, **kwargs), real)
    expected = composite(x, w, dim, keepdim, **kwargs)
    assert (real.shape, real.dtype) == (expected.shape, expected.dtype)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [None, [], [0], [-1], [1, 3], [0, 1, 2, 3]], ids=str)
@pytest.mark.parametrize("dtype", [None, F16, F64], ids=lambda d: dtype_name(d) if d else "none")
def test_meta_shapes_and_dtypes_are_the_composites(dim, keepdim, dtype):
    x = torch.empty(2, 1, 4, 5, dtype=F32, device="meta")
    w = torch.empty(3, 1, 5, dtype=BF16, device="meta")
    got = op(x, w, dim, keepdim, dtype)
    expected = composite(x, w, dim, keepdim, dtype)
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype)


def test_fake_tensor_shapes_and_dtype():
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.randn(2, 3, 4))
        w = mode.from_tensor(torch.randn(3, 1, dtype=F64))
        out = op(x, w, [0, -1], True)
        assert out.shape == (1, 3, 1) and out.dtype == F64
        out = op(x, w, None, False, F16)
        assert out.shape == () and out.dtype == F16


def test_symbolic_trace_keeps_shapes_symbolic():
    # The Meta kernel runs on SymInt shapes: a symbolic trace records no specialization, so the graph
    # runs on other shapes, and its output carries symbolic shapes.
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, w):
        return op(x, w, [1], True)

    graph = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 5, 6), torch.randn(5, 1, dtype=F64))
    out_meta = next(n for n in graph.graph.nodes if n.op == "output").args[0].meta["val"]
    assert isinstance(out_meta.shape[0], torch.SymInt) and isinstance(out_meta.shape[2], torch.SymInt)
    assert out_meta.dtype == F64
    x, w = torch.randn(3, 7, 2), torch.randn(7, 1, dtype=F64)
    out = graph(x, w)
    assert_matches_exact(out, x, w, [1], True)


def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    try:
        x, w = make((4, 5, 6), F32, device), make((5, 1), F32, device)
        compiled = torch.compile(lambda x, w: op(x, w, [-1, 0], False) * 2, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(x, w), 2 * composite(x, w, [-1, 0]))
    finally:
        torch._dynamo.reset()
