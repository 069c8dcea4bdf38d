# SPDX-License-Identifier: BSD-3-Clause
"""Bad arguments to custom::weighted_square_sum, refused like torch.sum refuses them.

Every rejected call raises the exception torch.sum raises (IndexError for a dim out of range,
RuntimeError otherwise) with a message that names the operator and the argument, does not crash
the process, and leaves input and weight (data, shape, strides, storage) exactly as they were.
The Meta kernel shares the checks, so they run on the meta device too.
"""

import re

import pytest
import torch

from environment import CUDA_BUILT, DEVICES, HAS_GPU
from reference import NON_STRIDED_LAYOUTS, UNSUPPORTED_DTYPES, assert_rejected, dtype_name, tensor_of_dtype
from square_sum_reference import composite, op

NAME = re.escape("custom::weighted_square_sum")
DEVICES_AND_META = [*DEVICES, "meta"]
needs_cuda = pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")
needs_two_gpus = pytest.mark.skipif(
    not (HAS_GPU and CUDA_BUILT and torch.cuda.device_count() >= 2), reason="needs two GPUs and the CUDA kernels"
)


def arguments(device, shape=(3, 4), weight_shape=(4,), requires_grad=False):
    return {
        "input": torch.randn(shape, device=device).requires_grad_(requires_grad),
        "weight": torch.randn(weight_shape, device=device).requires_grad_(requires_grad),
    }


def untouched(args):
    """The tensors assert_rejected snapshots (detached: a snapshot reads their storage)."""
    return {name: t.detach() for name, t in args.items()}


def aten_raises(args, exception, **kwargs):
    """The composite raises the same exception type for these arguments (off the meta device too)."""
    with pytest.raises(exception):
        composite(args["input"], args["weight"], **kwargs)


# ------------------------------------------------------------------------------------- dim

# (broadcast shape's rank via input shape, weight shape, dim)
DIM_OUT_OF_RANGE = {
    "2d_dim_2": ((3, 4), (4,), [2]),
    "2d_dim_minus_3": ((3, 4), (4,), [-3]),
    "2d_second_dim_bad": ((3, 4), (4,), [0, 5]),
    "2d_int_dim": ((3, 4), (4,), 7),
    "rank_from_weight": ((4,), (2, 3, 4), [3]),  # the broadcast shape is 3-D: dim 2 is fine, 3 is not
    "0dim_dim_1": ((), (), [1]),
    "0dim_dim_minus_2": ((), (), [-2]),
}


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("case", list(DIM_OUT_OF_RANGE))
def test_dim_out_of_range_raises_index_error(device, case, requires_grad):
    x_shape, w_shape, dim = DIM_OUT_OF_RANGE[case]
    args = arguments(device, x_shape, w_shape, requires_grad)
    bad = dim if isinstance(dim, int) else dim[-1]
    aten_raises(args, IndexError, dim=dim)
    assert_rejected(
        lambda: op(args["input"], args["weight"], dim), untouched(args), rf"{NAME}.*\bdim\b.*{bad}", IndexError
    )


def test_dim_checked_against_the_broadcast_rank(device):
    # Not the input's rank alone: dim 2 exists only after broadcasting with the 3-D weight.
    x, w = torch.randn(4, device=device), torch.randn(2, 3, 4, device=device)
    assert op(x, w, [2]).shape == (2, 3)
    with pytest.raises(IndexError, match=NAME):
        op(w, x, [3])


REPEATED_DIMS = {
    "same_dim_twice": ((3, 4), (4,), [1, 1]),
    "negative_spelling": ((3, 4), (4,), [0, -2]),
    "three_dims_one_repeated": ((2, 3, 4), (4,), [0, 2, -1]),
    "0dim_both_spellings": ((), (), [0, -1]),
}


@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("case", list(REPEATED_DIMS))
def test_repeated_dim_raises(device, case):
    x_shape, w_shape, dim = REPEATED_DIMS[case]
    args = arguments(device, x_shape, w_shape)
    aten_raises(args, RuntimeError, dim=dim)
    assert_rejected(lambda: op(args["input"], args["weight"], dim), untouched(args), rf"{NAME}.*\bdim\b")


# ---------------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("arg", ["input", "weight"])
@pytest.mark.parametrize("dtype", list(UNSUPPORTED_DTYPES), ids=dtype_name)
def test_unsupported_operand_dtype_raises_naming_the_argument(device, arg, dtype):
    args = arguments(device)
    args[arg] = tensor_of_dtype(args[arg], dtype)
    message = rf"{NAME}: {arg} must have dtype float16, bfloat16, float32 or float64, got {UNSUPPORTED_DTYPES[dtype]}\b"
    assert_rejected(lambda: op(args["input"], args["weight"], [1]), args, message)
    # Also when the dtype= argument asks for a floating result.
    assert_rejected(lambda: op(args["input"], args["weight"], dtype=torch.float32), args, message)


@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("dtype", list(UNSUPPORTED_DTYPES), ids=dtype_name)
def test_unsupported_dtype_argument_raises_naming_dtype(device, dtype):
    args = arguments(device)
    assert_rejected(
        lambda: op(args["input"], args["weight"], [0], dtype=dtype),
        args,
        rf"{NAME}: .*\bdtype\b.*{UNSUPPORTED_DTYPES[dtype]}\b",
    )


# ---------------------------------------------------------------------------------- shapes

NON_BROADCASTING = {
    ((3, 4), (5,)): "dimension 1: 4 vs 5",
    ((3, 4), (2, 4)): "dimension 0: 3 vs 2",
    ((2, 3), (3, 2)): "dimension 1: 3 vs 2",
    ((2, 1, 3), (4, 2)): "dimension 2: 3 vs 2",
    ((0, 3), (2, 3)): "dimension 0: 0 vs 2",
}


@pytest.mark.parametrize("dim", [None, [0]], ids=["all", "dim0"])
@pytest.mark.parametrize("device", DEVICES_AND_META)
@pytest.mark.parametrize("shapes", list(NON_BROADCASTING), ids=lambda shapes: f"{shapes[0]}-{shapes[1]}")
def test_non_broadcastable_shapes_raise_naming_both_arguments(device, shapes, dim):
    input_shape, weight_shape = shapes
    args = arguments(device, input_shape, weight_shape)
    aten_raises(args, RuntimeError)
    message = (
        rf"{NAME}: input of shape {re.escape(str(list(input_shape)))} and weight of shape "
        rf"{re.escape(str(list(weight_shape)))} are not broadcastable \({NON_BROADCASTING[shapes]}\)"
    )
    assert_rejected(lambda: op(args["input"], args["weight"], dim), args, message)


# --------------------------------------------------------------------------------- devices

DEVICE_PAIRS = [
    # Runs without a GPU: a meta tensor is on another device as far as the op's checks go.
    pytest.param("cpu", "meta", id="cpu-meta"),
    pytest.param("cuda:0", "cpu", marks=needs_cuda, id="cuda0-cpu"),
    pytest.param("cpu", "cuda:0", marks=needs_cuda, id="cpu-cuda0"),
    pytest.param("cuda:0", "cuda:1", marks=needs_two_gpus, id="cuda0-cuda1"),
]


@pytest.mark.parametrize("home,other", DEVICE_PAIRS)
@pytest.mark.parametrize("arg", ["input", "weight"])
def test_operand_on_another_device_raises_naming_both(home, other, arg):
    args = arguments(home, (3, 4), (3, 4))
    args[arg] = args[arg].to(other)
    devices = {"input": torch.device(home), "weight": torch.device(home), arg: torch.device(other)}
    message = re.escape(
        "custom::weighted_square_sum: expected input and weight on the same device, "
        f"got input on {devices['input']} and weight on {devices['weight']}"
    )
    assert_rejected(lambda: op(args["input"], args["weight"], [1]), args, message)


# --------------------------------------------------------------------------------- layouts


def layout_cases():
    for layout in NON_STRIDED_LAYOUTS:
        for arg in ("input", "weight"):
            marks = []
            if layout == "mkldnn":
                marks.append(pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs mkldnn"))
            yield pytest.param(layout, arg, marks=marks, id=f"{layout}-{arg}")


@pytest.mark.filterwarnings("ignore:.*(Sparse CSR|nested tensors).*:UserWarning")
@pytest.mark.parametrize("layout,arg", list(layout_cases()))
def test_non_strided_layout_raises_naming_the_argument(device, layout, arg):
    if layout == "mkldnn" and device != "cpu":
        pytest.skip("mkldnn tensors live on the CPU")
    convert, problem = NON_STRIDED_LAYOUTS[layout]
    args = arguments(device, (3, 4), (3, 4))  # sparse CSR is 2-D only
    args[arg] = convert(args[arg])
    message = rf"{NAME}: {arg} must be a dense strided tensor, got {problem}"
    assert_rejected(lambda: op(args["input"], args["weight"], [1]), args, message)


# ------------------------------------------------------------- the first error, not a crash


def test_several_problems_raise_one_of_them_and_leave_inputs_alone(device):
    args = {
        "input": torch.randint(0, 3, (3, 4), device=device),
        "weight": torch.randn(5, device=device),
    }
    assert_rejected(lambda: op(args["input"], args["weight"], [7, 7], dtype=torch.int32), args, NAME, Exception)
    x, w = torch.randn(3, 4, device=device), torch.randn(4, device=device)
    torch.testing.assert_close(op(x, w, [1]), composite(x, w, [1]))  # still usable
