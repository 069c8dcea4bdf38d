"""Bad arguments to every custom::weighted_sum overload: a RuntimeError naming the argument."""
import re

import pytest
import torch

from environment import CUDA_BUILT, DEVICES, HAS_GPU
from reference import (
    NON_STRIDED_LAYOUTS,
    OPS,
    assert_storage_unchanged,
    call_overload,
    dtype_name,
    nested,
    storage_snapshot,
    valid_arguments,
)

needs_cuda = pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")

# overload -> (name in its messages, its tensor arguments)
OVERLOADS = {
    "weighted_sum": ("custom::weighted_sum", ("input", "weight")),
    "weighted_sum.out": ("custom::weighted_sum.out", ("input", "weight", "out")),
    "weighted_sum_": ("custom::weighted_sum_", ("self", "weight")),
    "weighted_sum_backward": ("custom::weighted_sum_backward", ("grad", "input", "weight")),
}
OVERLOAD_ARGUMENTS = [(op, arg) for op, (_, args) in OVERLOADS.items() for arg in args]
overload_argument_ids = [f"{op}-{arg}" for op, arg in OVERLOAD_ARGUMENTS]

# c10's names of the dtypes, as the messages print them
UNSUPPORTED_DTYPES = {
    torch.int8: "Char",
    torch.uint8: "Byte",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.bool: "Bool",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}


def snapshot(args):
    return {name: (t.shape, t.stride(), storage_snapshot(t)) for name, t in args.items() if t.layout == torch.strided and not t.is_nested}


def assert_unchanged(args, before):
    for name, (shape, stride, data) in before.items():
        assert (args[name].shape, args[name].stride()) == (shape, stride), name
        assert_storage_unchanged(args[name], data)


def with_dtype(arg, dtype, device):
    if dtype.is_complex:
        return torch.randn(arg.shape, dtype=dtype, device=device)
    return torch.randint(0, 2 if dtype == torch.bool else 5, arg.shape, device=device).to(dtype)


DEVICES_AND_META = [*DEVICES, "meta"]


# --------------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("op,arg", OVERLOAD_ARGUMENTS, ids=overload_argument_ids)
@pytest.mark.parametrize("dtype", list(UNSUPPORTED_DTYPES), ids=dtype_name)
def test_unsupported_dtype_raises_naming_the_argument(device, op, arg, dtype):
    args = valid_arguments(device)
    args[arg] = with_dtype(args[arg], dtype, device)
    before = snapshot(args) if device != "meta" else None
    name, _ = OVERLOADS[op]
    message = rf"{re.escape(name)}: {arg} must have dtype float16, bfloat16, float32 or float64, got {UNSUPPORTED_DTYPES[dtype]}"
    with pytest.raises(RuntimeError, match=message):
        call_overload(op, args)
    if before is not None:
        assert_unchanged(args, before)


# ---------------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("op", ["weighted_sum", "weighted_sum.out", "weighted_sum_backward"])
def test_non_broadcastable_shapes_raise(device, op):
    args = valid_arguments(device, shape=(3, 4), weight_shape=(5,))
    before = snapshot(args) if device != "meta" else None
    name, _ = OVERLOADS[op]
    message = (
        rf"{re.escape(name)}: input of shape \[3, 4\] and weight of shape \[5\] are not broadcastable"
        r" \(dimension 1: 4 vs 5\)"
    )
    with pytest.raises(RuntimeError, match=message):
        call_overload(op, args)
    if before is not None:
        assert_unchanged(args, before)  # in particular, out= is not resized


@pytest.mark.parametrize("device", DEVICES_AND_META)
def test_inplace_non_broadcastable_weight_raises(device):
    args = valid_arguments(device, shape=(3, 4), weight_shape=(2, 4))
    before = snapshot(args) if device != "meta" else None
    message = (
        r"custom::weighted_sum_: self of shape \[3, 4\] and weight of shape \[2, 4\] are not broadcastable"
        r" \(dimension 0: 3 vs 2\)"
    )
    with pytest.raises(RuntimeError, match=message):
        call_overload("weighted_sum_", args)
    if before is not None:
        assert_unchanged(args, before)


@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("grad_shape", [(4,), (1, 4), (2, 3, 4), (3, 1)], ids=str)
def test_backward_grad_of_wrong_shape_raises(device, grad_shape):
    args = valid_arguments(device)
    args["grad"] = torch.randn(grad_shape, device=device)
    message = r"custom::weighted_sum_backward: grad of shape \[.*\] does not match the output shape \[3, 4\]"
    with pytest.raises(RuntimeError, match=message):
        call_overload("weighted_sum_backward", args)


# --------------------------------------------------------------------------------- devices

OTHER_DEVICE_MESSAGES = {
    ("weighted_sum", "input"): r"custom::weighted_sum: expected input and weight on the same device",
    ("weighted_sum", "weight"): r"custom::weighted_sum: expected input and weight on the same device",
    ("weighted_sum.out", "input"): r"custom::weighted_sum\.out: expected input and weight on the same device",
    ("weighted_sum.out", "weight"): r"custom::weighted_sum\.out: expected input and weight on the same device",
    ("weighted_sum.out", "out"): r"custom::weighted_sum\.out: expected out on .* like the inputs, got out on",
    ("weighted_sum_", "self"): r"custom::weighted_sum_: expected self and weight on the same device",
    ("weighted_sum_", "weight"): r"custom::weighted_sum_: expected self and weight on the same device",
    ("weighted_sum_backward", "grad"): r"custom::weighted_sum_backward: expected grad and input on the same device",
    ("weighted_sum_backward", "input"): r"custom::weighted_sum_backward: expected input and weight on the same device",
    ("weighted_sum_backward", "weight"): r"custom::weighted_sum_backward: expected input and weight on the same device",
}


@needs_cuda
@pytest.mark.parametrize("device,other", [("cuda", "cpu"), ("cpu", "cuda")])
@pytest.mark.parametrize("op,arg", OVERLOAD_ARGUMENTS, ids=overload_argument_ids)
def test_argument_on_another_device_raises(device, other, op, arg):
    args = valid_arguments(device)
    args[arg] = args[arg].to(other)
    before = snapshot(args)
    with pytest.raises(RuntimeError, match=OTHER_DEVICE_MESSAGES[op, arg]):
        call_overload(op, args)
    assert_unchanged(args, before)


# --------------------------------------------------------------------------------- layouts



def layout_cases():
    for layout in NON_STRIDED_LAYOUTS:
        for op, arg in OVERLOAD_ARGUMENTS:
            marks = []
            if layout == "mkldnn":
                marks.append(
                    pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs mkldnn")
                )
            yield pytest.param(layout, op, arg, marks=marks, id=f"{layout}-{op}-{arg}")


@pytest.mark.filterwarnings("ignore:.*(Sparse CSR|nested tensors).*:UserWarning")
@pytest.mark.parametrize("layout,op,arg", list(layout_cases()))
def test_non_strided_layout_raises_naming_the_argument(device, layout, op, arg):
    if layout == "mkldnn" and device != "cpu":
        pytest.skip("mkldnn tensors live on the CPU")
    convert, problem = NON_STRIDED_LAYOUTS[layout]
    args = valid_arguments(device, shape=(3, 4), weight_shape=(3, 4))
    args[arg] = convert(args[arg])
    before = snapshot(args)
    message = rf"custom::weighted_sum\w*: {arg} must be a dense strided tensor, got {problem}"
    with pytest.raises(RuntimeError, match=message):
        call_overload(op, args)
    assert_unchanged(args, before)


@pytest.mark.filterwarnings("ignore:.*nested tensors.*:UserWarning")
def test_nested_grad_to_backward_computing_nothing_raises_naming_grad(device):
    # With nothing to compute, the Autograd kernel records no graph node, so the layout error shows.
    args = valid_arguments(device, shape=(3, 4), weight_shape=(3, 4))
    args["grad"] = nested(args["grad"])
    with pytest.raises(RuntimeError, match="custom::weighted_sum_backward: grad must be a dense strided tensor"):
        call_overload("weighted_sum_backward", args, output_mask=(False, False))


@pytest.mark.filterwarnings("ignore:.*nested tensors.*:UserWarning")
def test_nested_self_inplace_with_weight_requiring_grad_raises_naming_self(device):
    self = nested(torch.randn(3, 4, device=device))
    weight = torch.randn(4, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="custom::weighted_sum_: self must be a dense strided tensor"):
        OPS.weighted_sum_(self, weight)


@pytest.mark.parametrize("arg", ["input", "weight"])
def test_sparse_input_requiring_grad_raises(device, arg):
    args = valid_arguments(device, shape=(3, 4), weight_shape=(3, 4))
    args[arg] = args[arg].to_sparse().requires_grad_()
    with pytest.raises(RuntimeError, match=rf"custom::weighted_sum: {arg} must be a dense strided tensor"):
        call_overload("weighted_sum", args)
