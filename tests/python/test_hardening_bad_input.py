"""Hardening: the catalogue of bad arguments, and of special values that must pass through.

Every rejected call must raise a RuntimeError whose message names the argument or the problem,
must not crash the process, and must leave every argument (its data, shape, strides and
storage) exactly as it was. Special float values (NaN, +-Inf, -0.0) must come out exactly as
`weight * input.square()` gives them.
"""
import re

import pytest
import torch

from environment import CUDA_BUILT, HAS_GPU
from reference import NON_STRIDED_LAYOUTS, call_overload, valid_arguments
from torch_warnings import torch_warnings

OPS = torch.ops.custom
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

needs_cuda = pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")
needs_two_gpus = pytest.mark.skipif(
    not (HAS_GPU and CUDA_BUILT and torch.cuda.device_count() >= 2), reason="needs two GPUs and the CUDA kernels"
)

# ---------------------------------------------------------------------------------------------
# Calling every overload with one argument replaced
# ---------------------------------------------------------------------------------------------

# overload -> its tensor arguments, by schema name
OVERLOAD_ARGS = {
    "weighted_sum": ("input", "weight"),
    "weighted_sum.out": ("input", "weight", "out"),
    "weighted_sum_": ("self", "weight"),
    "weighted_sum_backward": ("grad", "input", "weight"),
}
OVERLOAD_ARG_PAIRS = [(op, arg) for op, args in OVERLOAD_ARGS.items() for arg in args]
PAIR_IDS = [f"{op}-{arg}" for op, arg in OVERLOAD_ARG_PAIRS]


# ---------------------------------------------------------------------------------------------
# "Unchanged after the error": snapshots of every kind of tensor the catalogue passes
# ---------------------------------------------------------------------------------------------


def _storage_bytes(t):
    """Every byte of t's storage, also the bytes outside t's own view."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).clone()


def snapshot(t):
    if t.is_nested:
        if t.layout == torch.jagged:
            return ("jagged", t.values().clone(), t.offsets().clone())
        return ("nested", [u.clone() for u in t.unbind()])
    if t.layout == torch.sparse_coo:
        return ("coo", t.shape, t._indices().clone(), t._values().clone())
    if t.layout == torch.sparse_csr:
        return ("csr", t.shape, t.crow_indices().clone(), t.col_indices().clone(), t.values().clone())
    if t.is_mkldnn:
        return ("mkldnn", t.shape, t.to_dense())
    return (
        "strided",
        t.dtype,
        t.shape,
        t.stride(),
        t.storage_offset(),
        t.untyped_storage().data_ptr(),
        t.untyped_storage().nbytes(),
        None if t.is_meta else _storage_bytes(t),  # a meta tensor has metadata only
    )


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def snapshot_all(tensors):
    return {name: snapshot(t) for name, t in tensors.items()}


def assert_unchanged(tensors, before):
    for name, t in tensors.items():
        assert _same(snapshot(t), before[name]), f"{name} was changed by a call that raised"


def assert_rejected(fn, tensors, match, exception=RuntimeError):
    """fn() raises `exception` matching `match`, and leaves every tensor in `tensors` unchanged."""
    before = snapshot_all(tensors)
    with pytest.raises(exception, match=match):
        fn()
    assert_unchanged(tensors, before)


# ---------------------------------------------------------------------------------------------
# Unsupported dtypes: integer, bool, complex
# ---------------------------------------------------------------------------------------------

BAD_DTYPES = {
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.bool: "Bool",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}


def tensor_of_dtype(like, dtype):
    if dtype.is_complex:
        return torch.randn(like.shape, dtype=dtype, device=like.device)
    return torch.randint(0, 2 if dtype == torch.bool else 7, like.shape, device=like.device).to(dtype)


@pytest.mark.parametrize("dtype", list(BAD_DTYPES), ids=[str(d).removeprefix("torch.") for d in BAD_DTYPES])
@pytest.mark.parametrize("op,arg", OVERLOAD_ARG_PAIRS, ids=PAIR_IDS)
def test_unsupported_dtype_is_rejected_naming_the_argument(device, op, arg, dtype):
    args = valid_arguments(device)
    args[arg] = tensor_of_dtype(args[arg], dtype)
    assert_rejected(
        lambda: call_overload(op, args),
        args,
        rf"{arg} must have dtype float16, bfloat16, float32 or float64, got {BAD_DTYPES[dtype]}\b",
    )


# ---------------------------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------------------------


def _device_mismatch_cases(home, other):
    """(op, argument moved to `other`, message) with every other argument on `home`."""
    h, o = re.escape(str(torch.device(home))), re.escape(str(torch.device(other)))
    cases = [
        ("weighted_sum", "input", rf"expected input and weight on the same device, got input on {o} and weight on {h}"),
        ("weighted_sum", "weight", rf"expected input and weight on the same device, got input on {h} and weight on {o}"),
        ("weighted_sum.out", "weight", rf"expected input and weight on the same device, got input on {h} and weight on {o}"),
        ("weighted_sum.out", "out", rf"expected out on {h} like the inputs, got out on {o}"),
        ("weighted_sum_", "weight", rf"expected self and weight on the same device, got self on {h} and weight on {o}"),
        ("weighted_sum_", "self", rf"expected self and weight on the same device, got self on {o} and weight on {h}"),
        ("weighted_sum_backward", "grad", rf"expected grad and input on the same device, got grad on {o} and input on {h}"),
        ("weighted_sum_backward", "weight", rf"expected input and weight on the same device, got input on {h} and weight on {o}"),
    ]
    return [pytest.param(*case, id=f"{case[0]}-{case[1]}") for case in cases]


def _check_device_mismatch(home, other, op, arg, match):
    args = valid_arguments(home)
    args[arg] = args[arg].to(other)
    assert_rejected(lambda: call_overload(op, args), args, match)


@pytest.mark.parametrize("op,arg,match", _device_mismatch_cases("cpu", "meta"))
def test_cpu_and_meta_device_mismatch_is_rejected(op, arg, match):
    # Runs without a GPU: a meta tensor is on another device as far as the op's checks go.
    _check_device_mismatch("cpu", "meta", op, arg, match)


@needs_cuda
@pytest.mark.parametrize("op,arg,match", _device_mismatch_cases("cuda:0", "cpu"))
def test_cuda_inputs_with_one_cpu_argument_are_rejected(op, arg, match):
    _check_device_mismatch("cuda:0", "cpu", op, arg, match)


@needs_cuda
@pytest.mark.parametrize("op,arg,match", _device_mismatch_cases("cpu", "cuda:0"))
def test_cpu_inputs_with_one_cuda_argument_are_rejected(op, arg, match):
    _check_device_mismatch("cpu", "cuda:0", op, arg, match)


@needs_two_gpus
@pytest.mark.parametrize("op,arg,match", _device_mismatch_cases("cuda:0", "cuda:1"))
def test_cuda0_inputs_with_one_cuda1_argument_are_rejected(op, arg, match):
    _check_device_mismatch("cuda:0", "cuda:1", op, arg, match)


@needs_two_gpus
@pytest.mark.parametrize("op,arg,match", _device_mismatch_cases("cuda:1", "cuda:0"))
def test_cuda1_inputs_with_one_cuda0_argument_are_rejected(op, arg, match):
    _check_device_mismatch("cuda:1", "cuda:0", op, arg, match)


# ---------------------------------------------------------------------------------------------
# Shapes that do not broadcast
# ---------------------------------------------------------------------------------------------

NON_BROADCASTING = [((3, 4), (3,)), ((2, 3), (3, 2)), ((5,), (4,)), ((2, 1, 3), (4, 2))]


@pytest.mark.parametrize("input_shape,weight_shape", NON_BROADCASTING, ids=str)
def test_shapes_that_do_not_broadcast_are_rejected_by_the_functional_op(device, input_shape, weight_shape):
    x = torch.randn(input_shape, device=device)
    w = torch.randn(weight_shape, device=device)
    shapes = rf"input of shape {re.escape(str(list(input_shape)))} and weight of shape {re.escape(str(list(weight_shape)))}"
    assert_rejected(lambda: OPS.weighted_sum(x, w), {"x": x, "w": w}, rf"{shapes} are not broadcastable")


@pytest.mark.parametrize("input_shape,weight_shape", NON_BROADCASTING, ids=str)
def test_shapes_that_do_not_broadcast_are_rejected_by_out_before_resizing_it(device, input_shape, weight_shape):
    x = torch.randn(input_shape, device=device)
    w = torch.randn(weight_shape, device=device)
    out = torch.randn(7, device=device)  # wrong shape too: must not be resized when the call fails
    assert_rejected(
        lambda: OPS.weighted_sum.out(x, w, out=out), {"x": x, "w": w, "out": out}, r"are not broadcastable"
    )


@pytest.mark.parametrize("input_shape,weight_shape", NON_BROADCASTING, ids=str)
def test_shapes_that_do_not_broadcast_are_rejected_in_place(device, input_shape, weight_shape):
    s = torch.randn(input_shape, device=device)
    w = torch.randn(weight_shape, device=device)
    assert_rejected(lambda: OPS.weighted_sum_(s, w), {"s": s, "w": w}, r"self of shape .* and weight of shape .* are not broadcastable")


def test_in_place_weight_that_would_grow_self_is_rejected(device):
    s = torch.randn(4, device=device)
    w = torch.randn(3, 4, device=device)
    assert_rejected(lambda: OPS.weighted_sum_(s, w), {"s": s, "w": w}, r"an in-place op cannot resize self")


def test_backward_grad_of_the_wrong_shape_is_rejected(device):
    g, x, w = torch.randn(4, 3, device=device), torch.randn(3, 4, device=device), torch.randn(4, device=device)
    assert_rejected(
        lambda: OPS.weighted_sum_backward(g, x, w, [True, True]),
        {"g": g, "x": x, "w": w},
        r"grad of shape \[4, 3\] does not match the output shape \[3, 4\]",
    )


# ---------------------------------------------------------------------------------------------
# Layouts other than dense strided: sparse COO, sparse CSR, mkldnn, nested
# ---------------------------------------------------------------------------------------------


def _layout_params():
    return [
        pytest.param(layout, op, arg, id=f"{layout}-{op}-{arg}")
        for layout in NON_STRIDED_LAYOUTS
        for op, arg in OVERLOAD_ARG_PAIRS
    ]


@pytest.mark.parametrize("layout,op,arg", _layout_params())
def test_non_strided_layout_is_rejected_naming_the_argument(device, layout, op, arg):
    if layout == "mkldnn" and (device != "cpu" or not torch.backends.mkldnn.is_available()):
        pytest.skip("mkldnn tensors exist only on CPU builds with oneDNN")
    make, layout_words = NON_STRIDED_LAYOUTS[layout]
    args = valid_arguments(device, weight_shape=(3, 4))  # sparse CSR is 2-D only
    args[arg] = make(args[arg])
    before = snapshot_all(args)
    try:
        call_overload(op, args)
    except RuntimeError as error:
        message = str(error)
    else:
        pytest.fail(f"{op} accepted a {layout} {arg}")
    assert re.search(rf"{arg} must be a dense strided tensor, got {layout_words}", message), message
    assert_unchanged(args, before)


@pytest.mark.parametrize("op,arg", OVERLOAD_ARG_PAIRS, ids=PAIR_IDS)
def test_jagged_nested_tensor_is_refused_without_crashing(device, op, arg):
    # A jagged nested tensor is a Python tensor subclass: its __torch_dispatch__ refuses ops it
    # does not know with NotImplementedError before the library sees it.
    args = valid_arguments(device)
    args[arg] = torch.nested.nested_tensor(
        [torch.randn(4, device=device), torch.randn(2, 4, device=device)[0]], layout=torch.jagged
    )
    assert_rejected(
        lambda: call_overload(op, args), args, r"weighted_sum|dense strided|nested", exception=(RuntimeError, NotImplementedError)
    )


# ---------------------------------------------------------------------------------------------
# out=: dtype, device, shape, overlap
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("out_dtype", [torch.int32, torch.int64, torch.bool, torch.complex64], ids=str)
def test_out_of_a_non_float_dtype_is_rejected_before_resizing(device, out_dtype):
    x, w = torch.randn(3, 4, device=device), torch.randn(4, device=device)
    out = tensor_of_dtype(torch.empty(5, device=device), out_dtype)  # wrong shape as well
    assert_rejected(
        lambda: OPS.weighted_sum.out(x, w, out=out),
        {"x": x, "w": w, "out": out},
        rf"out must have dtype float16, bfloat16, float32 or float64, got {BAD_DTYPES[out_dtype]}",
    )


@pytest.mark.parametrize("out_dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_out_of_another_float_dtype_receives_the_result_cast_like_aten(device, dtype, out_dtype):
    x = torch.randn(3, 4, device=device, dtype=dtype)
    w = torch.randn(4, device=device, dtype=dtype)
    out = torch.full((3, 4), float("nan"), device=device, dtype=out_dtype)
    OPS.weighted_sum.out(x, w, out=out)
    # The result in its own dtype (float16/bfloat16 computed in float32, rounded once), then cast.
    expected = (w.float() * x.float().square()).to(dtype) if dtype in (torch.float16, torch.bfloat16) else w * x.square()
    assert torch.equal(out, expected.to(out_dtype))


def test_out_on_the_meta_device_is_rejected_before_resizing():
    x, w = torch.randn(3, 4), torch.randn(4)
    out = torch.empty(5, device="meta")
    with pytest.raises(RuntimeError, match=r"expected out on cpu like the inputs, got out on meta"):
        OPS.weighted_sum.out(x, w, out=out)
    assert out.shape == (5,)


@needs_cuda
def test_cpu_out_for_cuda_inputs_is_rejected_before_resizing():
    x, w = torch.randn(3, 4, device="cuda"), torch.randn(4, device="cuda")
    out = torch.randn(5)
    assert_rejected(
        lambda: OPS.weighted_sum.out(x, w, out=out),
        {"x": x, "w": w, "out": out},
        r"expected out on cuda:0 like the inputs, got out on cpu",
    )


def test_out_of_the_wrong_shape_is_resized_with_atens_warning(device, capfd):
    x, w = torch.randn(3, 4, device=device), torch.randn(4, device=device)
    out = torch.randn(5, device=device)
    with torch_warnings(capfd) as warned:
        OPS.weighted_sum.out(x, w, out=out)
    assert out.shape == (3, 4)
    assert torch.equal(out, w * x.square())
    assert any("was resized" in message for message in warned), "no 'output ... was resized' warning"


def test_out_with_zero_elements_is_resized_without_a_warning(device, capfd):
    x, w = torch.randn(3, 4, device=device), torch.randn(4, device=device)
    out = torch.empty(0, device=device)
    with torch_warnings(capfd) as warned:
        OPS.weighted_sum.out(x, w, out=out)
    assert out.shape == (3, 4)
    assert torch.equal(out, w * x.square())
    assert not any("resized" in message for message in warned), warned


OVERLAP_MESSAGE = r"some elements of the input tensor and the written-to tensor refer to a single memory location"


def test_out_partially_overlapping_the_input_is_rejected(device):
    base = torch.randn(20, device=device)
    x, w, out = base[:12].view(3, 4), torch.randn(4, device=device), base[1:13].view(3, 4)
    assert_rejected(lambda: OPS.weighted_sum.out(x, w, out=out), {"base": base, "w": w, "out": out}, OVERLAP_MESSAGE)


def test_out_partially_overlapping_the_weight_is_rejected(device):
    base = torch.randn(20, device=device)
    x, w, out = torch.randn(3, 4, device=device), base[:4], base[2:14].view(3, 4)
    assert_rejected(lambda: OPS.weighted_sum.out(x, w, out=out), {"base": base, "x": x, "out": out}, OVERLAP_MESSAGE)


def test_out_that_is_the_transpose_of_the_input_is_rejected(device):
    # Same memory, other strides: every element of out but the diagonal is another one of input.
    x = torch.randn(4, 4, device=device)
    w = torch.randn(4, device=device)
    assert_rejected(lambda: OPS.weighted_sum.out(x, w, out=x.t()), {"x": x, "w": w}, OVERLAP_MESSAGE)


def test_out_with_internal_overlap_is_rejected(device):
    x, w = torch.randn(3, 4, device=device), torch.randn(4, device=device)
    out = torch.randn(1, 4, device=device).expand(3, 4)
    assert_rejected(
        lambda: OPS.weighted_sum.out(x, w, out=out),
        {"x": x, "w": w, "out": out},
        r"more than one element of the written-to tensor refers to a single memory location",
    )


@pytest.mark.parametrize("base_size", [20, 12], ids=["storage_big_enough", "storage_grown"])
def test_out_of_the_wrong_shape_partially_overlapping_the_input_is_rejected_untouched(device, base_size):
    base = torch.randn(base_size, device=device)
    x, w = base[:12].view(3, 4), torch.randn(4, device=device)
    out = base[1:5]  # 4 elements, the result has 12: out= would resize it
    assert_rejected(lambda: OPS.weighted_sum.out(x, w, out=out), {"base": base, "w": w, "out": out}, OVERLAP_MESSAGE)


def test_out_partially_overlapping_and_wrong_shape_is_rejected_like_aten(device):
    base = torch.randn(20, device=device)
    x, w = base[:12].view(3, 4), torch.randn(4, device=device)
    with pytest.raises(RuntimeError, match=OVERLAP_MESSAGE):
        torch.mul(w, x, out=base[1:5])
    with pytest.raises(RuntimeError, match=OVERLAP_MESSAGE):
        OPS.weighted_sum.out(x, w, out=base[1:5])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_out_that_is_the_input_itself_is_allowed_and_right(device, dtype):
    x = torch.randn(3, 4, device=device, dtype=dtype)
    w = torch.randn(4, device=device, dtype=dtype)
    expected = OPS.weighted_sum(x.clone(), w)
    OPS.weighted_sum.out(x, w, out=x)
    assert torch.equal(x, expected)


def test_out_that_is_the_weight_itself_is_allowed_and_right(device):
    x = torch.randn(3, 4, device=device)
    w = torch.randn(3, 4, device=device)
    expected = w * x.square()
    OPS.weighted_sum.out(x, w, out=w)
    assert torch.equal(w, expected)


def test_out_that_is_another_view_of_exactly_the_input_is_allowed_and_right(device):
    x = torch.randn(3, 4, device=device)
    w = torch.randn(4, device=device)
    expected = w * x.square()
    OPS.weighted_sum.out(x, w, out=x.view(12).view(3, 4))
    assert torch.equal(x, expected)


def test_out_that_is_both_operands_is_allowed_and_right(device):
    x = torch.randn(3, 4, device=device)
    expected = x * x.square()
    OPS.weighted_sum.out(x, x, out=x)
    assert torch.equal(x, expected)


# ---------------------------------------------------------------------------------------------
# In place: overlapping self, leaves that require grad
# ---------------------------------------------------------------------------------------------

SELF_OVERLAP = r"more than one element of the written-to tensor refers to a single memory location"


def test_in_place_on_an_expanded_self_is_rejected(device):
    base = torch.randn(1, 4, device=device)
    w = torch.randn(4, device=device)
    assert_rejected(lambda: OPS.weighted_sum_(base.expand(3, 4), w), {"base": base, "w": w}, SELF_OVERLAP)


def test_in_place_on_a_self_with_a_zero_stride_is_rejected(device):
    base = torch.randn(4, device=device)
    w = torch.randn(3, device=device)
    self = base.as_strided((4, 3), (1, 0))
    assert_rejected(lambda: OPS.weighted_sum_(self, w), {"base": base, "w": w}, SELF_OVERLAP)


def test_in_place_on_a_self_expanded_by_broadcasting_to_weight_is_rejected(device):
    # self already has the broadcast shape only because it was expanded: still overlapping.
    base = torch.randn(3, 1, device=device)
    w = torch.randn(3, 5, device=device)
    assert_rejected(lambda: OPS.weighted_sum_(base.expand(3, 5), w), {"base": base, "w": w}, SELF_OVERLAP)


def test_in_place_with_a_weight_partially_overlapping_self_is_rejected(device):
    base = torch.randn(20, device=device)
    self, w = base[:12].view(3, 4), base[10:14]
    assert_rejected(lambda: OPS.weighted_sum_(self, w), {"base": base}, OVERLAP_MESSAGE)


def test_in_place_with_self_as_weight_is_allowed_and_right(device):
    s = torch.randn(3, 4, device=device)
    expected = s * s.square()
    OPS.weighted_sum_(s, s)
    assert torch.equal(s, expected)


LEAF_MESSAGE = r"a leaf Variable that requires grad (is being|has been) used in an in-place operation"
VIEW_OF_LEAF_MESSAGE = r"a view of a leaf Variable that requires grad is being used in an in-place operation"


def test_in_place_on_a_leaf_requiring_grad_is_rejected(device):
    s = torch.randn(3, 4, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match=LEAF_MESSAGE):
        OPS.weighted_sum_(s, torch.randn(4, device=device))


def test_in_place_on_a_view_of_a_leaf_requiring_grad_is_rejected(device):
    s = torch.randn(3, 4, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match=VIEW_OF_LEAF_MESSAGE):
        OPS.weighted_sum_(s[1], torch.randn(4, device=device))



def test_in_place_on_a_leaf_requiring_grad_leaves_it_unchanged(device):
    s = torch.randn(3, 4, device=device, requires_grad=True)
    w = torch.randn(4, device=device)
    before = s.detach().clone()
    with pytest.raises(RuntimeError, match=LEAF_MESSAGE):
        OPS.weighted_sum_(s, w)
    assert torch.equal(s.detach(), before), "the leaf was overwritten by a call that raised"


def test_in_place_on_a_view_of_a_leaf_requiring_grad_leaves_it_unchanged(device):
    s = torch.randn(3, 4, device=device, requires_grad=True)
    w = torch.randn(4, device=device)
    before = s.detach().clone()
    with pytest.raises(RuntimeError, match=VIEW_OF_LEAF_MESSAGE):
        OPS.weighted_sum_(s[1], w)
    assert torch.equal(s.detach(), before), "the leaf was overwritten by a call that raised"


def test_out_under_autograd_is_rejected_untouched(device):
    x = torch.randn(3, 4, device=device, requires_grad=True)
    w, out = torch.randn(4, device=device), torch.randn(3, 4, device=device)
    assert_rejected(
        lambda: OPS.weighted_sum.out(x, w, out=out),
        {"x": x.detach(), "w": w, "out": out},
        r"out=\.\.\. arguments don't support automatic differentiation",
    )


# ---------------------------------------------------------------------------------------------
# NaN, +-Inf and -0.0 come out exactly as weight * input.square()
# ---------------------------------------------------------------------------------------------


def _special_values(dtype):
    info = torch.finfo(dtype)
    return [
        0.0, -0.0, 1.0, -1.0, 2.5, -3.0,
        float("nan"), float("inf"), float("-inf"),
        info.max, -info.max, info.tiny, -info.tiny, info.smallest_normal / 4,  # a subnormal
        float(info.max) ** 0.5 * 2, info.eps,
    ]  # fmt: skip


def special_grid(dtype, device):
    """(x, w): every special value of x against every special value of w, elementwise."""
    values = torch.tensor(_special_values(dtype), dtype=torch.float64).to(dtype)
    x = values.repeat_interleave(len(values)).to(device)
    w = values.repeat(len(values)).to(device)
    return x, w


def expected_exactly(x, w):
    """What `weight * input.square()` gives, in the op's arithmetic: float16/bfloat16 in float32."""
    dtype = torch.result_type(x, w)
    xc, wc = x.to(dtype), w.to(dtype)
    if dtype in (torch.float16, torch.bfloat16):
        return (wc.float() * xc.float().square()).to(dtype)
    return wc * xc.square()


def assert_identical(actual, expected):
    """Equal element for element, NaN where NaN, and the sign of every zero (and infinity) kept."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    a, e = actual.cpu(), expected.cpu()
    assert torch.equal(a.isnan(), e.isnan()), "NaN in different places"
    keep = ~e.isnan()
    assert torch.equal(a[keep], e[keep]), "values differ"
    assert torch.equal(a[keep].signbit(), e[keep].signbit()), "signs (of zeros) differ"


DTYPE_PAIRS = [(a, b) for a in FLOAT_DTYPES for b in FLOAT_DTYPES]
PAIR_NAMES = [f"{str(a)[6:]}-{str(b)[6:]}" for a, b in DTYPE_PAIRS]


@pytest.mark.parametrize("input_dtype,weight_dtype", DTYPE_PAIRS, ids=PAIR_NAMES)
def test_special_values_propagate_exactly_as_weight_times_input_squared(device, input_dtype, weight_dtype):
    x, _ = special_grid(input_dtype, device)
    _, w = special_grid(weight_dtype, device)
    expected = expected_exactly(x, w)
    assert_identical(OPS.weighted_sum(x, w), expected)
    out = torch.empty_like(expected)
    OPS.weighted_sum.out(x, w, out=out)
    assert_identical(out, expected)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_special_values_propagate_exactly_in_place(device, dtype):
    x, w = special_grid(dtype, device)
    expected = expected_exactly(x, w)
    OPS.weighted_sum_(x, w)
    assert_identical(x, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_special_values_match_torch_bitwise_in_full_precision(device, dtype):
    x, w = special_grid(dtype, device)
    assert_identical(OPS.weighted_sum(x, w), w * x.square())


ZERO_CASES = {  # (x, w): a zero result whose sign is the sign of w, since x**2 >= +0
    "w=-0.0,x=2": (2.0, -0.0),
    "w=-0.0,x=-2": (-2.0, -0.0),
    "w=-1,x=0": (0.0, -1.0),
    "w=-1,x=-0.0": (-0.0, -1.0),
    "w=1,x=-0.0": (-0.0, 1.0),
    "w=-0.0,x=-0.0": (-0.0, -0.0),
    "w=0,x=-0.0": (-0.0, 0.0),
    "w=-1,x=tiny": ("tiny", -1.0),  # x**2 underflows to +0 (in float32 for float16/bfloat16)
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("case", list(ZERO_CASES))
def test_signed_zero_results_keep_the_sign_of_the_weight(device, dtype, case):
    x_value, w_value = ZERO_CASES[case]
    if x_value == "tiny":
        x_value = torch.finfo(dtype).tiny
    x = torch.tensor([x_value], dtype=dtype, device=device)
    w = torch.tensor([w_value], dtype=dtype, device=device)
    result = OPS.weighted_sum(x, w)
    assert_identical(result, expected_exactly(x, w))
    if result.item() == 0:
        assert bool(result.signbit()) == bool(w.signbit()), f"{result.item()!r} for w={w.item()!r}, x={x.item()!r}"
