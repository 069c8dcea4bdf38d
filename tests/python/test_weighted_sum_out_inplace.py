# SPDX-License-Identifier: BSD-3-Clause
"""custom::weighted_sum.out and custom::weighted_sum_: ATen's out= and in-place rules."""

import re

import pytest
import torch

from environment import CUDA_BUILT, HAS_GPU
from reference import (
    FLOAT_DTYPES,
    INPLACE_LAYOUT_NAMES,
    LAYOUT_NAMES,
    OPS,
    UNSUPPORTED_DTYPES,
    assert_close_to_reference,
    assert_rejected,
    assert_storage_unchanged,
    broadcast_shape,
    dtype_name,
    exact_reference,
    make_inputs,
    make_tensor,
    poisoned,
    reference,
    storage_snapshot,
    tensor_of_dtype,
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
PARTIAL_OVERLAP = "some elements of the input tensor and the written-to tensor refer to a single memory location"
INTERNAL_OVERLAP = "more than one element of the written-to tensor refers to a single memory location"


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
    assert torch.equal(out, exact_reference(x, w))
    assert any(RESIZE_WARNING in message for message in warned), warned


def test_out_with_no_elements_is_resized_silently(device, capfd):
    x, w = make_inputs("channel_weight", torch.float64, torch.float64, device)
    out = torch.empty(0, dtype=torch.float64, device=device)
    with torch_warnings(capfd) as warned:
        OPS.weighted_sum.out(x, w, out=out)
    assert out.shape == broadcast_shape("channel_weight")
    assert_close_to_reference(out, reference(x, w))
    assert torch.equal(out, exact_reference(x, w))
    assert not any(RESIZE_WARNING in message for message in warned), warned


@pytest.mark.parametrize("out_dtype", [torch.int32, torch.int64, torch.bool, torch.complex64], ids=dtype_name)
def test_out_of_unsupported_dtype_raises_before_resizing(device, out_dtype):
    # out of the wrong shape as well: it must not be resized when the call fails.
    x, w = make_inputs("same_shape", torch.float32, torch.float32, device)
    out = tensor_of_dtype(torch.empty(5, device=device), out_dtype)
    assert_rejected(
        lambda: OPS.weighted_sum.out(x, w, out=out),
        {"x": x, "w": w, "out": out},
        r"custom::weighted_sum\.out: out must have dtype float16, bfloat16, float32 or float64, "
        rf"got {UNSUPPORTED_DTYPES[out_dtype]}\b",
    )


@pytest.mark.parametrize("out_dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("result_dtype", FLOAT_DTYPES, ids=dtype_name)
def test_out_of_other_float_dtype_gets_the_result_cast(device, result_dtype, out_dtype):
    # The result is computed in result_type(input, weight) and then cast, as ATen's ops do: e.g. a
    # float32 result into a float64 out is the float32 result widened, not a float64 computation,
    # and a float16 result into a float32 out is rounded to float16 first.
    x, w = make_inputs("channel_weight", result_dtype, result_dtype, device)
    out = poisoned(broadcast_shape("channel_weight"), out_dtype, device)
    OPS.weighted_sum.out(x, w, out=out)
    assert out.dtype == out_dtype
    assert torch.equal(out, exact_reference(x, w).to(out_dtype))
    assert torch.equal(out, OPS.weighted_sum(x, w).to(out_dtype))


@pytest.mark.parametrize(
    "inputs_on,out_on",
    [
        # Runs without a GPU: a meta out is on another device as far as the op's checks go.
        pytest.param("cpu", "meta", id="cpu-meta"),
        pytest.param("cuda:0", "cpu", marks=needs_cuda, id="cuda0-cpu"),
        pytest.param("cpu", "cuda:0", marks=needs_cuda, id="cpu-cuda0"),
    ],
)
def test_out_on_another_device_raises_before_resizing(inputs_on, out_on):
    x, w = make_inputs("same_shape", torch.float32, torch.float32, inputs_on)
    out = torch.randn(5, device=out_on)  # the wrong shape too: must not be resized when the call fails
    assert_rejected(
        lambda: OPS.weighted_sum.out(x, w, out=out),
        {"x": x, "w": w, "out": out},
        rf"custom::weighted_sum\.out: expected out on {inputs_on} like the inputs, got out on {out_on}",
    )


@pytest.mark.parametrize("argument", ["input", "weight"])
def test_out_partially_overlapping_an_input_raises(device, argument):
    base = torch.randn(20, device=device)
    x, w = torch.randn(3, 4, device=device), torch.randn(3, 4, device=device)
    if argument == "input":
        x = base[:12].view(3, 4)
    else:
        w = base[:12].view(3, 4)
    out = base[3:15].view(3, 4)
    tensors = {"base": base, "x": x, "w": w, "out": out}
    assert_rejected(lambda: OPS.weighted_sum.out(x, w, out=out), tensors, PARTIAL_OVERLAP)


def test_out_that_is_the_transpose_of_the_input_raises(device):
    # Same memory, other strides: every element of out but the diagonal is another one of input.
    x = torch.randn(4, 4, device=device)
    w = torch.randn(4, device=device)
    assert_rejected(lambda: OPS.weighted_sum.out(x, w, out=x.t()), {"x": x, "w": w}, PARTIAL_OVERLAP)


def test_out_with_internal_overlap_raises(device):
    x, w = make_inputs("same_shape", torch.float32, torch.float32, device)
    out = torch.zeros(1, x.shape[1], device=device).expand(x.shape)
    assert_rejected(lambda: OPS.weighted_sum.out(x, w, out=out), {"x": x, "w": w, "out": out}, INTERNAL_OVERLAP)


@pytest.mark.parametrize("base_size", [20, 12], ids=["storage_big_enough", "storage_grown"])
def test_out_of_wrong_shape_partially_overlapping_the_input_raises_like_aten(device, base_size):
    # 4 elements where the result has 12: out= would resize it, over the input's memory.
    base = torch.randn(base_size, device=device)
    x, w = base[:12].view(3, 4), torch.randn(4, device=device)
    out = base[1:5]
    aten_base = base.clone()  # ATen's own out= refuses the same call
    with pytest.raises(RuntimeError, match=PARTIAL_OVERLAP):
        torch.mul(w, aten_base[:12].view(3, 4), out=aten_base[1:5])
    assert_rejected(lambda: OPS.weighted_sum.out(x, w, out=out), {"base": base, "w": w, "out": out}, PARTIAL_OVERLAP)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("argument", ["input", "weight"])
def test_out_fully_aliasing_an_input_is_allowed(device, argument, dtype):
    x, w = make_inputs("same_shape", dtype, dtype, device)
    x0, w0 = x.clone(), w.clone()
    out = x if argument == "input" else w
    OPS.weighted_sum.out(x, w, out=out)
    assert torch.equal(out, exact_reference(x0, w0))
    assert_close_to_reference(out, reference(x0, w0))


def test_out_that_is_another_view_of_exactly_the_input_is_allowed(device):
    x = torch.randn(3, 4, device=device)
    w = torch.randn(4, device=device)
    expected = exact_reference(x, w)
    OPS.weighted_sum.out(x, w, out=x.view(12).view(3, 4))
    assert torch.equal(x, expected)


def test_out_that_is_both_operands_is_allowed(device):
    x = torch.randn(3, 4, device=device)
    expected = exact_reference(x, x)
    OPS.weighted_sum.out(x, x, out=x)
    assert torch.equal(x, expected)


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dtype_name)
def test_inplace_self_as_its_own_weight(device, dtype):
    x = make_tensor((5, 6), dtype, device)
    x0 = x.clone()
    OPS.weighted_sum_(x, x)
    assert torch.equal(x, exact_reference(x0, x0))
    assert_close_to_reference(x, reference(x0, x0))


def _shape_text(shape):
    return re.escape(str(list(shape)))


@pytest.mark.parametrize("self_shape,weight_shape", [((6,), (4, 6)), ((4, 1), (4, 6)), ((), (3,))], ids=str)
def test_inplace_raises_when_self_would_grow(device, self_shape, weight_shape):
    x = make_tensor(self_shape, torch.float32, device)
    w = make_tensor(weight_shape, torch.float32, device)
    grown = torch.broadcast_shapes(self_shape, weight_shape)
    message = (
        rf"custom::weighted_sum_: weight of shape {_shape_text(weight_shape)} would broadcast self of shape "
        rf"{_shape_text(self_shape)} to {_shape_text(grown)}, but an in-place op cannot resize self"
    )
    assert_rejected(lambda: OPS.weighted_sum_(x, w), {"x": x, "w": w}, message)


# name -> (shape of the tensor self is a view of, self from it, weight shape): self's elements share memory.
EXPANDED_SELVES = {
    "rows": ((1, 6), lambda base: base.expand(5, 6), (5, 6)),
    "columns_by_as_strided": ((4,), lambda base: base.as_strided((4, 3), (1, 0)), (3,)),
    # self has the broadcast shape only because it was expanded to it: still overlapping.
    "to_the_weight_shape": ((3, 1), lambda base: base.expand(3, 5), (3, 5)),
}


@pytest.mark.parametrize("kind", list(EXPANDED_SELVES))
def test_inplace_on_expanded_self_raises(device, kind):
    base_shape, view, weight_shape = EXPANDED_SELVES[kind]
    base = make_tensor(base_shape, torch.float32, device)
    w = make_tensor(weight_shape, torch.float32, device)
    assert_rejected(lambda: OPS.weighted_sum_(view(base), w), {"base": base, "w": w}, INTERNAL_OVERLAP)


def test_inplace_with_weight_partially_overlapping_self_raises(device):
    base = torch.randn(20, device=device)
    self, w = base[:12].view(3, 4), base[10:14]
    assert_rejected(lambda: OPS.weighted_sum_(self, w), {"base": base, "self": self, "w": w}, PARTIAL_OVERLAP)


# Operands that view memory the op writes, neither the written tensor itself nor a partial overlap
# ATen refuses (the written tensor is not dense, so its overlap is not computed): read as they were
# before the call, as the composite reads them. name -> (written view, operand view) of one buffer.
VIEWS_OF_THE_WRITTEN = {
    "element_of_sliced_self": lambda b: (b[2:10].view(2, 4)[:, ::2], b[2]),
    "row_of_sliced_self": lambda b: (b[:16].view(4, 4)[:, :3], b[:3]),
    "same_view_of_sliced_self": lambda b: (b[1:9:2], b[1:9:2]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name", list(VIEWS_OF_THE_WRITTEN))
def test_a_weight_viewing_self_is_read_before_self_is_written(device, name, dtype):
    base = make_tensor((16,), dtype, device)
    self, weight = VIEWS_OF_THE_WRITTEN[name](base)
    expected = exact_reference(self.clone(), weight.clone())
    OPS.weighted_sum_(self, weight)
    torch.testing.assert_close(self, expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", list(VIEWS_OF_THE_WRITTEN))
def test_an_input_viewing_out_is_read_before_out_is_written(device, name):
    base = make_tensor((16,), torch.float32, device)
    out, weight = VIEWS_OF_THE_WRITTEN[name](base)
    x = make_tensor(out.shape, torch.float32, device)
    expected = exact_reference(x, weight.clone())
    OPS.weighted_sum.out(x, weight, out=out)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
