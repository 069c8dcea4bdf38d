# SPDX-License-Identifier: BSD-3-Clause
"""Bad arguments to every custom::weighted_sum overload.

Every rejected call raises a RuntimeError whose message names the overload and the argument or the
problem, does not crash the process, and leaves every argument (its data, shape, strides and
storage) exactly as it was.
"""

import re

import pytest
import torch

from environment import CUDA_BUILT, DEVICES, HAS_GPU
from reference import (
    NON_STRIDED_LAYOUTS,
    OPS,
    UNSUPPORTED_DTYPES,
    assert_rejected,
    call_overload,
    dtype_name,
    nested,
    tensor_of_dtype,
    valid_arguments,
)

needs_cuda = pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")
needs_two_gpus = pytest.mark.skipif(
    not (HAS_GPU and CUDA_BUILT and torch.cuda.device_count() >= 2), reason="needs two GPUs and the CUDA kernels"
)

# overload -> (name in its messages, its tensor arguments)
OVERLOADS = {
    "weighted_sum": ("custom::weighted_sum", ("input", "weight")),
    "weighted_sum.out": ("custom::weighted_sum.out", ("input", "weight", "out")),
    "weighted_sum_": ("custom::weighted_sum_", ("self", "weight")),
    "weighted_sum_backward": ("custom::weighted_sum_backward", ("grad", "input", "weight")),
}
OVERLOAD_ARGUMENTS = [(op, arg) for op, (_, args) in OVERLOADS.items() for arg in args]
overload_argument_ids = [f"{op}-{arg}" for op, arg in OVERLOAD_ARGUMENTS]

# The meta device runs the same checks (the Meta kernel shares the frontend) without data.
DEVICES_AND_META = [*DEVICES, "meta"]


def shape_text(shape):
    """A shape as the messages print it, as a regular expression: [3, 4]."""
    return re.escape(str(list(shape)))


# --------------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("op,arg", OVERLOAD_ARGUMENTS, ids=overload_argument_ids)
@pytest.mark.parametrize("dtype", list(UNSUPPORTED_DTYPES), ids=dtype_name)
def test_unsupported_dtype_raises_naming_the_argument(device, op, arg, dtype):
    args = valid_arguments(device)
    args[arg] = tensor_of_dtype(args[arg], dtype)
    name, _ = OVERLOADS[op]
    message = (
        rf"{re.escape(name)}: {arg} must have dtype float16, bfloat16, float32 or float64, "
        rf"got {UNSUPPORTED_DTYPES[dtype]}\b"
    )
    assert_rejected(lambda: call_overload(op, args), args, message)


# ---------------------------------------------------------------------------------- shapes

# (shape of input or self, weight shape) -> the dimension of the broadcast shape the message names:
# the first one, counting from the right, where the sizes differ and neither is 1.
NON_BROADCASTING = {
    ((3, 4), (5,)): "dimension 1: 4 vs 5",
    ((3, 4), (3,)): "dimension 1: 4 vs 3",
    ((3, 4), (2, 4)): "dimension 0: 3 vs 2",
    ((2, 3), (3, 2)): "dimension 1: 3 vs 2",
    ((5,), (4,)): "dimension 0: 5 vs 4",
    ((2, 1, 3), (4, 2)): "dimension 2: 3 vs 2",
}
# (overload, shape of out= or None for out shaped like input): out of a wrong shape as well shows
# that out is not resized before the call fails.
SHAPE_ERROR_CALLS = {
    "weighted_sum": ("weighted_sum", None),
    "weighted_sum.out": ("weighted_sum.out", None),
    "weighted_sum.out-wrong_size_out": ("weighted_sum.out", (7,)),
    "weighted_sum_": ("weighted_sum_", None),
    "weighted_sum_backward": ("weighted_sum_backward", None),
}


@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("call", list(SHAPE_ERROR_CALLS))
@pytest.mark.parametrize("shapes", list(NON_BROADCASTING), ids=lambda shapes: f"{shapes[0]}-{shapes[1]}")
def test_non_broadcastable_shapes_raise(device, call, shapes):
    op, out_shape = SHAPE_ERROR_CALLS[call]
    input_shape, weight_shape = shapes
    args = valid_arguments(device, shape=input_shape, weight_shape=weight_shape)
    if out_shape is not None:
        args["out"] = torch.randn(out_shape, device=device)
    name, _ = OVERLOADS[op]
    first = "self" if op == "weighted_sum_" else "input"
    message = (
        rf"{re.escape(name)}: {first} of shape {shape_text(input_shape)} and weight of shape "
        rf"{shape_text(weight_shape)} are not broadcastable \({NON_BROADCASTING[shapes]}\)"
    )
    assert_rejected(lambda: call_overload(op, args), args, message)


@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("grad_shape", [(4,), (1, 4), (2, 3, 4), (3, 1), (4, 3)], ids=str)
def test_backward_grad_of_wrong_shape_raises(device, grad_shape):
    args = valid_arguments(device)
    args["grad"] = torch.randn(grad_shape, device=device)
    message = (
        rf"custom::weighted_sum_backward: grad of shape {shape_text(grad_shape)} "
        r"does not match the output shape \[3, 4\]"
    )
    assert_rejected(lambda: call_overload("weighted_sum_backward", args), args, message)


# --------------------------------------------------------------------------------- devices

# (overload, argument on the other device) -> the two arguments whose devices the failing check
# compares (None: the check of out against the inputs).
DEVICE_CHECKS = {
    ("weighted_sum", "input"): ("input", "weight"),
    ("weighted_sum", "weight"): ("input", "weight"),
    ("weighted_sum.out", "input"): ("input", "weight"),
    ("weighted_sum.out", "weight"): ("input", "weight"),
    ("weighted_sum.out", "out"): None,
    ("weighted_sum_", "self"): ("self", "weight"),
    ("weighted_sum_", "weight"): ("self", "weight"),
    ("weighted_sum_backward", "grad"): ("grad", "input"),
    ("weighted_sum_backward", "input"): ("input", "weight"),
    ("weighted_sum_backward", "weight"): ("input", "weight"),
}


def other_device_message(op, arg, home, other):
    home, other = torch.device(home), torch.device(other)
    name, _ = OVERLOADS[op]
    if DEVICE_CHECKS[op, arg] is None:
        return f"{name}: expected {arg} on {home} like the inputs, got {arg} on {other}"
    a, b = DEVICE_CHECKS[op, arg]
    on = {a: home, b: home, arg: other}
    return f"{name}: expected {a} and {b} on the same device, got {a} on {on[a]} and {b} on {on[b]}"


# (device of the arguments, device of the one moved argument)
DEVICE_PAIRS = [
    # Runs without a GPU: a meta tensor is on another device as far as the op's checks go.
    pytest.param("cpu", "meta", id="cpu-meta"),
    pytest.param("cuda:0", "cpu", marks=needs_cuda, id="cuda0-cpu"),
    pytest.param("cpu", "cuda:0", marks=needs_cuda, id="cpu-cuda0"),
    pytest.param("cuda:0", "cuda:1", marks=needs_two_gpus, id="cuda0-cuda1"),
    pytest.param("cuda:1", "cuda:0", marks=needs_two_gpus, id="cuda1-cuda0"),
]


@pytest.mark.parametrize("home,other", DEVICE_PAIRS)
@pytest.mark.parametrize("op,arg", OVERLOAD_ARGUMENTS, ids=overload_argument_ids)
def test_argument_on_another_device_raises(home, other, op, arg):
    args = valid_arguments(home)
    args[arg] = args[arg].to(other)
    assert_rejected(lambda: call_overload(op, args), args, re.escape(other_device_message(op, arg, home, other)))


# --------------------------------------------------------------------------------- layouts


def layout_cases():
    for layout in NON_STRIDED_LAYOUTS:
        for op, arg in OVERLOAD_ARGUMENTS:
            marks = []
            if layout == "mkldnn":
                marks.append(pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs mkldnn"))
            yield pytest.param(layout, op, arg, marks=marks, id=f"{layout}-{op}-{arg}")


@pytest.mark.filterwarnings("ignore:.*(Sparse CSR|nested tensors).*:UserWarning")
@pytest.mark.parametrize("layout,op,arg", list(layout_cases()))
def test_non_strided_layout_raises_naming_the_argument(device, layout, op, arg):
    if layout == "mkldnn" and device != "cpu":
        pytest.skip("mkldnn tensors live on the CPU")
    convert, problem = NON_STRIDED_LAYOUTS[layout]
    args = valid_arguments(device, shape=(3, 4), weight_shape=(3, 4))  # sparse CSR is 2-D only
    args[arg] = convert(args[arg])
    name, _ = OVERLOADS[op]
    message = rf"{re.escape(name)}: {arg} must be a dense strided tensor, got {problem}"
    assert_rejected(lambda: call_overload(op, args), args, message)


@pytest.mark.parametrize("op,arg", OVERLOAD_ARGUMENTS, ids=overload_argument_ids)
def test_jagged_nested_tensor_is_refused_without_crashing(device, op, arg):
    # A jagged nested tensor is a Python tensor subclass: its __torch_dispatch__ refuses ops it
    # does not know with NotImplementedError before the library sees it.
    args = valid_arguments(device)
    args[arg] = torch.nested.nested_tensor(
        [torch.randn(4, device=device), torch.randn(2, 4, device=device)[0]], layout=torch.jagged
    )
    assert_rejected(
        lambda: call_overload(op, args),
        args,
        r"weighted_sum|dense strided|nested",
        exception=(RuntimeError, NotImplementedError),
    )


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
