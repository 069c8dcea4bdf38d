"""custom::weighted_sum.out and custom::weighted_sum_: ATen's out= and in-place rules."""
import pytest
import torch

from environment import CUDA_BUILT, HAS_GPU
from reference import (
    FLOAT_DTYPES,
    INPLACE_LAYOUT_NAMES,
    LAYOUT_NAMES,
    OPS,
    assert_close_to_reference,
    assert_storage_unchanged,
    broadcast_shape,
    dtype_name,
    make_inputs,
    make_tensor,
    poisoned,
    reference,
    storage_snapshot,
)
from torch_warnings import torch_warnings

needs_cuda = pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")

SOME_PAIRS = [
    (torch.float32, torch.float32),
    (torch.float64, torch.float64),
    (torch.float16, torch.float16),
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.bfloat16),
    (torch.float64, torch.float16),
]
pair_ids = [f"{dtype_name(a)}-{dtype_name(b)}" for a, b in SOME_PAIRS]

RESIZE_WARNING = "was resized"

# ------------------------------------------------------------------------------------- out=


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("input_dtype,weight_dtype", SOME_PAIRS, ids=pair_ids)
def test_out_right_shape_is_fully_written(device, layout, input_dtype, weight_dtype):
    x, w = make_inputs(layout, input_dtype, weight_dtype, device)
    out = poisoned(broadcast_shape(layout), torch.result_type(x, w), device)
    data_ptr = out.data_ptr()
    result = OPS.weighted_sum.out(x, w, out=out)
    assert result is None
    assert out.data_ptr() == data_ptr  # written in place, not reallocated
    assert_close_to_reference(out, reference(x, w))
    assert torch.equal(out, OPS.weighted_sum(x, w))


@pytest.mark.parametrize("kind", ["transposed", "step", "offset"])
def test_out_non_contiguous_keeps_its_strides(device, kind):
    x, w = make_inputs("transposed_input", torch.float32, torch.float32, device)
    out = poisoned(broadcast_shape("transposed_input"), torch.float32, device, kind)
    strides, offset = out.stride(), out.storage_offset()
    outside = storage_snapshot(out)  # NaN everywhere, including the bytes out does not cover
    OPS.weighted_sum.out(x, w, out=out)
    assert (out.stride(), out.storage_offset()) == (strides, offset)
    assert_close_to_reference(out, reference(x, w))
    # Bytes out does not cover are still NaN: put out's own (now written) elements back to NaN.
    out.fill_(float("nan"))
    assert_storage_unchanged(out, outside)


def test_out_wrong_shape_is_resized_with_a_warning(device, capfd):
    x, w = make_inputs("both_broadcast", torch.float32, torch.float32, device)
    out = poisoned((7,), torch.float32, device)
    with torch_warnings(capfd) as warned:
        OPS.weighted_sum.out(x, w, out=out)
    assert out.shape == broadcast_shape("both_broadcast")
    assert out.is_contiguous()
    assert_close_to_reference(out, reference(x, w))
    assert any(RESIZE_WARNING in message for message in warned), warned


def test_out_with_no_elements_is_resized_silently(device, capfd):
    x, w = make_inputs("channel_weight", torch.float64, torch.float64, device)
    out = torch.empty(0, dtype=torch.float64, device=device)
    with torch_warnings(capfd) as warned:
        OPS.weighted_sum.out(x, w, out=out)
    assert out.shape == broadcast_shape("channel_weight")
    assert_close_to_reference(out, reference(x, w))
    assert not any(RESIZE_WARNING in message for message in warned), warned


@pytest.mark.parametrize("out_dtype", [torch.int32, torch.int64, torch.bool, torch.complex64], ids=dtype_name)
def test_out_of_unsupported_dtype_raises(device, out_dtype):
    x, w = make_inputs("same_shape", torch.float32, torch.float32, device)
    out = torch.zeros(broadcast_shape("same_shape"), dtype=out_dtype, device=device)
    before = out.clone()
    with pytest.raises(RuntimeError, match=r"weighted_sum\.out: out must have dtype float16, bfloat16, float32"):
        OPS.weighted_sum.out(x, w, out=out)
    assert torch.equal(out, before)


@pytest.mark.parametrize("out_dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("result_dtype", [torch.float32, torch.float64], ids=dtype_name)
def test_out_of_other_float_dtype_gets_the_result_cast(device, result_dtype, out_dtype):
    # The result is computed in result_type(input, weight) and then cast, as ATen's ops do: e.g. a
    # float32 result into a float64 out is the float32 result widened, not a float64 computation.
    x, w = make_inputs("channel_weight", result_dtype, result_dtype, device)
    out = poisoned(broadcast_shape("channel_weight"), out_dtype, device)
    OPS.weighted_sum.out(x, w, out=out)
    assert out.dtype == out_dtype
    assert torch.equal(out, OPS.weighted_sum(x, w).to(out_dtype))


@needs_cuda
@pytest.mark.parametrize("inputs_on,out_on", [("cuda", "cpu"), ("cpu", "cuda")])
def test_out_on_another_device_raises(inputs_on, out_on):
    x, w = make_inputs("same_shape", torch.float32, torch.float32, inputs_on)
    out = torch.zeros(broadcast_shape("same_shape"), device=out_on)
    with pytest.raises(RuntimeError, match=r"weighted_sum\.out: expected out on .* like the inputs, got out on"):
        OPS.weighted_sum.out(x, w, out=out)
    assert not out.any()


@pytest.mark.parametrize("argument", ["input", "weight"])
def test_out_partially_overlapping_an_input_raises(device, argument):
    storage = torch.randn(12, device=device)
    x, w = torch.randn(8, device=device), torch.randn(8, device=device)
    if argument == "input":
        x = storage[:8]
    else:
        w = storage[:8]
    out = storage[3:11]
    before = storage.clone()
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor refer to a single memory location"):
        OPS.weighted_sum.out(x, w, out=out)
    assert torch.equal(storage, before)


def test_out_with_internal_overlap_raises(device):
    x, w = make_inputs("same_shape", torch.float32, torch.float32, device)
    out = torch.zeros(1, x.shape[1], device=device).expand(x.shape)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single memory location"):
        OPS.weighted_sum.out(x, w, out=out)


@pytest.mark.parametrize("argument", ["input", "weight"])
def test_out_fully_aliasing_an_input_is_allowed(device, argument):
    x, w = make_inputs("same_shape", torch.float32, torch.float32, device)
    expected = reference(x, w)
    out = x if argument == "input" else w
    OPS.weighted_sum.out(x, w, out=out)
    assert_close_to_reference(out, expected)


def test_out_with_empty_result(device):
    x, w = make_inputs("empty", torch.float32, torch.float32, device)
    out = torch.empty(0, 3, device=device)
    OPS.weighted_sum.out(x, w, out=out)
    assert out.shape == (0, 3)


# --------------------------------------------------------------------------------- in place


@pytest.mark.parametrize("layout", INPLACE_LAYOUT_NAMES)
@pytest.mark.parametrize("self_dtype,weight_dtype", SOME_PAIRS, ids=pair_ids)
def test_inplace_values(device, layout, self_dtype, weight_dtype):
    x, w = make_inputs(layout, self_dtype, weight_dtype, device)
    original = x.clone()
    strides, offset, data_ptr = x.stride(), x.storage_offset(), x.data_ptr()
    result = OPS.weighted_sum_(x, w)
    assert result is None
    assert x.dtype == self_dtype
    assert (x.stride(), x.storage_offset(), x.data_ptr()) == (strides, offset, data_ptr)
    # Computed in result_type(self, weight), then cast to self's dtype.
    assert torch.equal(x, OPS.weighted_sum(original, w).to(self_dtype))
    assert_close_to_reference(x, reference(original, w).to(self_dtype))


@pytest.mark.parametrize("weight_shape", [(6,), (4, 1), (1, 6), (1, 1), ()], ids=str)
def test_inplace_with_broadcast_weight(device, weight_shape):
    x = make_tensor((4, 6), torch.float32, device)
    w = make_tensor(weight_shape, torch.float32, device)
    original = x.clone()
    OPS.weighted_sum_(x, w)
    assert x.shape == (4, 6)
    assert_close_to_reference(x, reference(original, w))


@pytest.mark.parametrize("kind", ["transposed", "step", "offset"])
def test_inplace_on_non_contiguous_self_leaves_the_rest_of_storage_alone(device, kind):
    x = make_tensor((5, 6), torch.float32, device, kind)
    w = make_tensor((6,), torch.float32, device)
    original = x.clone()
    whole = storage_snapshot(x)
    OPS.weighted_sum_(x, w)
    assert_close_to_reference(x, reference(original, w))
    x.copy_(original)  # restore self's own elements: every other byte must never have changed
    assert_storage_unchanged(x, whole)


def test_inplace_self_as_its_own_weight(device):
    x = make_tensor((5, 6), torch.float64, device)
    expected = reference(x, x)
    OPS.weighted_sum_(x, x)
    assert_close_to_reference(x, expected)


@pytest.mark.parametrize("self_shape,weight_shape", [((6,), (4, 6)), ((4, 1), (4, 6)), ((), (3,))], ids=str)
def test_inplace_raises_when_self_would_grow(device, self_shape, weight_shape):
    x = make_tensor(self_shape, torch.float32, device)
    w = make_tensor(weight_shape, torch.float32, device)
    before = x.clone()
    with pytest.raises(RuntimeError, match=r"weighted_sum_: weight of shape .* would broadcast self .* cannot resize self"):
        OPS.weighted_sum_(x, w)
    assert torch.equal(x, before)


@pytest.mark.parametrize("self_dtype", [torch.int32, torch.int64, torch.uint8, torch.bool], ids=dtype_name)
def test_inplace_on_integer_self_raises(device, self_dtype):
    x = torch.ones(4, 6, dtype=self_dtype, device=device)
    w = make_tensor((6,), torch.float32, device)
    with pytest.raises(RuntimeError, match=r"weighted_sum_: self must have dtype float16, bfloat16, float32 or float64"):
        OPS.weighted_sum_(x, w)
    assert torch.equal(x, torch.ones_like(x))


def test_inplace_on_expanded_self_raises(device):
    x = make_tensor((5, 6), torch.float32, device, "expanded")
    w = make_tensor((5, 6), torch.float32, device)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single memory location"):
        OPS.weighted_sum_(x, w)


def test_inplace_with_weight_partially_overlapping_self_raises(device):
    storage = torch.randn(12, device=device)
    before = storage.clone()
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor refer to a single memory location"):
        OPS.weighted_sum_(storage[:8], storage[3:11])
    assert torch.equal(storage, before)
