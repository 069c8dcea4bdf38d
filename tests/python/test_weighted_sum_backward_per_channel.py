# SPDX-License-Identifier: BSD-3-Clause
"""The per-channel backward (ops/weighted_sum_backward_plan.h): a weight broadcast over the rows
(w [C] against [R, C]), over the columns (w [R, 1]) or per NCHW channel (w [C, 1, 1]) gets
grad_input and grad_weight from one pass over grad and input, without a full-size temporary.

Checked against float64 for every layout and float dtype, partial vectors and blocks, misaligned
pointers, every output mask, bitwise determinism (runs and CPU thread counts), accuracy at least
that of at::sum_to over a temporary (the generic path), and that no full-size sum runs.
"""

import pytest
import torch

from environment import CUDA_BUILT, HAS_GPU
from reference import FLOAT_DTYPES, TOLERANCES, dtype_name

OPS = torch.ops.custom

# (input shape, weight shape), named; sizes chosen to leave partial vectors (C not a multiple of
# 8 or 16), partial row blocks (rows not a multiple of 32 or 64) and partial run chunks (runs longer
# than 256 and 2048 and not multiples of them; the CPU and CUDA loops cut at those sizes).
LAYOUTS = {
    "row_67x45": ((67, 45), (45,)),
    "row_130x1024": ((130, 1024), (1024,)),
    "row_3d_merged": ((3, 7, 40), (40,)),
    "row_keepdim": ((65, 33), (1, 33)),
    # More than 32 rows per block (the CUDA first pass spreads the rows over about a fixed number
    # of blocks) and a partial last block; element loads, a channel count not a multiple of 32.
    "row_5003x4096": ((5003, 4096), (4096,)),
    "row_2100x45": ((2100, 45), (45,)),
    "column_37x300": ((37, 300), (37, 1)),
    "column_6x4500": ((6, 4500), (6, 1)),
    "nchw_3x5x7x9": ((3, 5, 7, 9), (5, 1, 1)),
    "nchw_70x3x2x2": ((70, 3, 2, 2), (3, 1, 1)),
    "nchw_2x4x50x60": ((2, 4, 50, 60), (4, 1, 1)),
    "nchw_keepdim": ((4, 6, 5, 5), (1, 6, 1, 1)),
    "nc_inner_3d": ((2, 4, 3000), (4, 1)),
}

MASKS = [(True, True), (True, False), (False, True)]


def make(shape, dtype, device, offset=0):
    """randn of `shape`; with `offset`, a contiguous view starting `offset` elements into a
    larger buffer (a pointer off the 16-byte alignment, like x[1:] of a flat tensor)."""
    numel = 1
    for size in shape:
        numel *= size
    flat = torch.randn(numel + offset, dtype=torch.float64, device=device).to(dtype)
    return flat[offset:].view(shape)


def references(grad, x, w):
    """float64 grad_input, grad_weight and the sum of |terms| per weight element (error scale)."""
    g64, x64, w64 = grad.double(), x.double(), w.double()
    terms = x64 * x64 * g64
    return 2 * w64 * x64 * g64, terms.sum_to_size(w.shape), terms.abs().sum_to_size(w.shape)


def assert_gradients_close(grad_input, grad_weight, grad, x, w, mask=(True, True)):
    dtype = x.dtype
    rtol, atol = TOLERANCES[dtype]
    ref_input, ref_weight, scale = references(grad, x, w)
    if mask[0]:
        assert grad_input.shape == x.shape and grad_input.dtype == dtype and grad_input.is_contiguous()
        # Three roundings in float32 ((x + x) * w * g), one in half precision.
        torch.testing.assert_close(grad_input.double(), ref_input, rtol=2 * rtol, atol=atol)
    else:
        assert grad_input is None
    if mask[1]:
        assert grad_weight.shape == w.shape and grad_weight.dtype == dtype
        # One rounding to the dtype plus the float32 (float64) error of a sum of |terms|.
        eps = 2.0**-53 if dtype == torch.float64 else 2.0**-24
        bound = rtol * ref_weight.abs() + 64 * eps * scale + atol
        error = (grad_weight.double() - ref_weight).abs()
        assert bool((error <= bound).all()), f"grad_weight error {error.max().item():.3g} over {bound.min().item():.3g}"
    else:
        assert grad_weight is None


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_values_and_gradients_match_float64(device, layout, dtype):
    x_shape, w_shape = LAYOUTS[layout]
    x, w, grad = make(x_shape, dtype, device), make(w_shape, dtype, device), make(x_shape, dtype, device)
    grad_input, grad_weight = OPS.weighted_sum_backward(grad, x, w, [True, True])
    assert_gradients_close(grad_input, grad_weight, grad, x, w)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("layout", ["row_130x1024", "column_6x4500", "nchw_2x4x50x60", "row_67x45"])
@pytest.mark.parametrize("offset", [1, 3])
def test_misaligned_pointers(device, layout, dtype, offset):
    x_shape, w_shape = LAYOUTS[layout]
    x = make(x_shape, dtype, device, offset)
    grad = make(x_shape, dtype, device, offset + 1)
    w = make(w_shape, dtype, device, offset)
    grad_input, grad_weight = OPS.weighted_sum_backward(grad, x, w, [True, True])
    assert_gradients_close(grad_input, grad_weight, grad, x, w)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("layout", ["row_130x1024", "column_6x4500", "nchw_2x4x50x60", "nchw_70x3x2x2"])
@pytest.mark.parametrize("mask", [*MASKS, (False, False)], ids=lambda m: "".join("TF"[not b] for b in m))
def test_every_output_mask(device, layout, dtype, mask):
    x_shape, w_shape = LAYOUTS[layout]
    x, w, grad = make(x_shape, dtype, device), make(w_shape, dtype, device), make(x_shape, dtype, device)
    grad_input, grad_weight = OPS.weighted_sum_backward(grad, x, w, list(mask))
    assert_gradients_close(grad_input, grad_weight, grad, x, w, mask)
    # One gradient alone is the same bits as both together.
    both_input, both_weight = OPS.weighted_sum_backward(grad, x, w, [True, True])
    if mask[0]:
        assert torch.equal(grad_input, both_input)
    if mask[1]:
        assert torch.equal(grad_weight, both_weight)


def test_weight_gradient_alone_does_not_read_the_weight(device):
    # grad_weight = sum x^2 g has no w in it: a NaN weight must not leak into it.
    x, grad = make((96, 40), torch.float32, device), make((96, 40), torch.float32, device)
    w = torch.full((40,), float("nan"), device=device)
    grad_input, grad_weight = OPS.weighted_sum_backward(grad, x, w, [False, True])
    assert grad_input is None and bool(torch.isfinite(grad_weight).all())
    _, expected = OPS.weighted_sum_backward(grad, x, torch.ones(40, device=device), [True, True])
    assert torch.equal(grad_weight, expected)


DETERMINISM_CASES = {
    "row": ((4099, 96), (96,)),
    "column": ((24, 9000), (24, 1)),
    "nchw": ((9, 16, 33, 31), (16, 1, 1)),
    "row_5003x4096": ((5003, 4096), (4096,)),
    "row_2100x45": ((2100, 45), (45,)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
@pytest.mark.parametrize("case", DETERMINISM_CASES)
def test_bitwise_equal_across_runs(device, case, dtype):
    x_shape, w_shape = DETERMINISM_CASES[case]
    x, w, grad = make(x_shape, dtype, device), make(w_shape, dtype, device), make(x_shape, dtype, device)
    runs = [OPS.weighted_sum_backward(grad, x, w, [True, True]) for _ in range(3)]
    for grad_input, grad_weight in runs[1:]:
        assert torch.equal(grad_input, runs[0][0])
        assert torch.equal(grad_weight, runs[0][1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=dtype_name)
@pytest.mark.parametrize("case", DETERMINISM_CASES)
def test_cpu_bitwise_equal_across_thread_counts(case, dtype):
    x_shape, w_shape = DETERMINISM_CASES[case]
    x, w, grad = make(x_shape, dtype, "cpu"), make(w_shape, dtype, "cpu"), make(x_shape, dtype, "cpu")
    threads = torch.get_num_threads()
    results = {}
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            results[count] = OPS.weighted_sum_backward(grad, x, w, [True, True])
    finally:
        torch.set_num_threads(threads)
    for count in (2, 3):
        assert torch.equal(results[count][0], results[1][0])
        assert torch.equal(results[count][1], results[1][1])


ACCURACY_CASES = {
    "row": ((1 << 15, 64), (64,)),
    "column": ((64, 1 << 15), (64, 1)),
    "nchw": ((32, 64, 32, 32), (64, 1, 1)),
}


# float64 has no wider reference here (its exact sum is computed in float64 too).
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=dtype_name)
@pytest.mark.parametrize("case", ACCURACY_CASES)
@pytest.mark.parametrize("signs", ["mixed", "positive"])
def test_weight_gradient_at_least_as_accurate_as_sum_to(device, case, dtype, signs):
    x_shape, w_shape = ACCURACY_CASES[case]
    x, w, grad = make(x_shape, dtype, device), make(w_shape, dtype, device), make(x_shape, dtype, device)
    if signs == "positive":
        grad = grad.abs()  # no cancellation: the sum grows with its length, and so does a naive sum's error
    _, grad_weight = OPS.weighted_sum_backward(grad, x, w, [False, True])
    _, exact, _ = references(grad, x, w)
    # The generic path: the terms (x * x) * g in float32, rounded to the dtype over the full
    # shape, then at::sum_to.
    xc, gc = x.to(torch.float32), grad.to(torch.float32)
    summed = ((xc * xc) * gc).to(dtype).sum_to_size(w_shape)
    ours = (grad_weight.double() - exact).abs().mean()
    theirs = (summed.double() - exact).abs().mean()
    # Half precision: no half-precision temporary, so better, up to the float32 sum's own rounding
    # (half a float32 ulp of the mean result), which now and then rounds a result next to a
    # half-precision tie the other way. float32: two float32 sums of the same accuracy, so which
    # lands nearer is chance: the mean over 64 channels varies by about 13% from draw to draw (ours
    # reached 1.45x sum_to's in a few hundred draws), hence 1.5x, plus that rounding, which is all of
    # the error where both sums are nearly exact. A sum whose error grows with its length
    # (sequential over 2^15 terms) errs by 40 to 80 such half ulps and still fails.
    factor = 1.5 if dtype == torch.float32 else 1.0
    bound = factor * theirs + 2.0**-24 * exact.abs().mean()
    assert ours <= bound, f"ours {ours.item():.3g} vs sum_to {theirs.item():.3g} (bound {bound.item():.3g})"


@pytest.mark.parametrize("layout", ["row_130x1024", "column_6x4500", "nchw_2x4x50x60"])
def test_per_channel_path_runs_no_full_size_sum(device, layout):
    x_shape, w_shape = LAYOUTS[layout]
    x, w, grad = (
        make(x_shape, torch.float32, device),
        make(w_shape, torch.float32, device),
        make(x_shape, torch.float32, device),
    )

    def ran_sum(weight, inputs):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            OPS.weighted_sum_backward(grad, inputs, weight, [True, True])
        return any(event.name == "aten::sum" for event in prof.events())

    assert not ran_sum(w, x)
    # Control: a strided input is not per-channel and takes the generic at::sum_to path.
    x_strided = make(x_shape[::-1], torch.float32, device).permute(*reversed(range(len(x_shape))))
    assert ran_sum(w, x_strided)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
def test_autograd_through_the_op_uses_it(device, dtype):
    x = make((8, 6, 5, 7), dtype, device).requires_grad_()
    w = make((6, 1, 1), dtype, device).requires_grad_()
    grad = make((8, 6, 5, 7), dtype, device)
    grad_input, grad_weight = torch.autograd.grad(OPS.weighted_sum(x, w), (x, w), grad)
    assert_gradients_close(grad_input, grad_weight, grad, x.detach(), w.detach())


def test_gradcheck_per_channel(device):
    x = make((3, 4, 5, 6), torch.float64, device).requires_grad_()
    w = make((4, 1, 1), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(OPS.weighted_sum, (x, w))
    x2 = make((3, 300), torch.float64, device).requires_grad_()
    w2 = make((3, 1), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(OPS.weighted_sum, (x2, w2))


@pytest.mark.slow
@pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")
def test_cuda_more_than_2_31_elements():
    gib = 2**30
    channels = 4096
    rows = (2**31 + 2 * channels) // channels + 3  # past 2**31 elements, rows not a multiple of a block
    n = rows * channels
    need = 3 * n * 2 + 6 * gib  # x, grad, grad_input in bfloat16, and float64 references by chunk
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    if torch.cuda.mem_get_info()[0] < need:
        pytest.skip(f"needs {need / gib:.0f} GiB of free GPU memory")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.empty(rows, channels, dtype=torch.bfloat16, device="cuda").uniform_(-2, 2, generator=gen)
    grad = torch.empty(rows, channels, dtype=torch.bfloat16, device="cuda").uniform_(-2, 2, generator=gen)
    w = torch.empty(channels, dtype=torch.bfloat16, device="cuda").uniform_(-2, 2, generator=gen)
    grad_input, grad_weight = OPS.weighted_sum_backward(grad, x, w, [True, True])
    exact = torch.zeros(channels, dtype=torch.float64, device="cuda")
    scale = torch.zeros(channels, dtype=torch.float64, device="cuda")
    chunk = 2**16  # rows at a time
    for begin in range(0, rows, chunk):
        x64, g64 = x[begin : begin + chunk].double(), grad[begin : begin + chunk].double()
        # One rounding to bfloat16 (plus float32 arithmetic): within 2^-7 relative; a row written
        # at a wrapped 32-bit index (or not at all) is far off.
        torch.testing.assert_close(
            grad_input[begin : begin + chunk].double(),
            2 * w.double() * x64 * g64,
            rtol=2**-7,
            atol=0,
            msg=lambda m, b=begin: f"grad_input rows {b}..: {m}",
        )
        terms = x64 * x64 * g64
        exact += terms.sum(0)
        scale += terms.abs().sum(0)
    bound = 2**-7 * exact.abs() + 64 * 2**-24 * scale
    assert bool(((grad_weight.double() - exact).abs() <= bound).all())
