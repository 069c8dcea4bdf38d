# SPDX-License-Identifier: BSD-3-Clause
"""CUDA tensors of more than 2**31 elements (64-bit indexing).

N = 2**31 + 1024 elements: a kernel that indexes with int32 wraps at 2**31 and writes, or reads,
the wrong place past it. bfloat16 keeps one such tensor at 4 GiB. Every test checks the start,
the middle, both sides of element 2**31 and the end against a float64 reference computed on those
slices, and then the whole result, chunk by chunk, bitwise against torch's float32 arithmetic.

CUDA only; each test skips when the GPU has too little free memory for it.
"""

import pytest
import torch

from environment import CUDA_BUILT, HAS_GPU

OPS = torch.ops.custom
N = 2**31 + 1024
BF16 = torch.bfloat16
GIB = 2**30
TENSOR_GIB = N * 2 / GIB  # one bfloat16 tensor of N elements: 4 GiB
CHUNK = 2**28  # elements compared at a time: a few GiB of float32 temporaries at most

BF16_RTOL = 2.0**-7  # one rounding to bfloat16, against an unrounded float64 value


pytestmark = pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")


def require_free_gib(gib):
    """Skips unless the GPU has `gib` GiB free (at least 24), counted after releasing the cache
    that earlier tests in this process left behind."""
    gib = max(gib, 24)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    if free < gib * GIB:
        pytest.skip(f"needs at least {gib:.0f} GiB of free GPU memory, has {free / GIB:.1f} GiB")


@pytest.fixture(autouse=True)
def release_memory():
    yield
    if HAS_GPU:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def random_bf16(n, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.empty(n, dtype=BF16, device="cuda").uniform_(-3.0, 3.0, generator=g)


# Slices of a length-N tensor, all well away from each other.
def regions(n):
    half, boundary = n // 2, 2**31
    return {
        "start": slice(0, 4096),
        "middle": slice(half - 2048, half + 2048),
        "around_2**31": slice(boundary - 2048, boundary + 1024),
        "end": slice(n - 4096, n),
    }


def reference64(x, w):
    return w.double() * x.double() * x.double()


def assert_close_bf16(actual, expected64, what):
    torch.testing.assert_close(actual.double(), expected64, rtol=BF16_RTOL, atol=1e-30, msg=lambda m: f"{what}: {m}")


def exact_chunk(x, w):
    """The op's arithmetic on a chunk: float32, one rounding to bfloat16."""
    return (w.float() * (x.float() * x.float())).to(BF16)


def assert_whole_result_exact(result, x_of, w_of, n):
    """result[i:j] == exact(x_of(i, j), w_of(i, j)) for every chunk."""
    for i in range(0, n, CHUNK):
        j = min(i + CHUNK, n)
        want = exact_chunk(x_of(i, j), w_of(i, j))
        assert torch.equal(result[i:j], want), f"elements {i}..{j} differ"


def test_more_than_2_31_elements_same_shape_is_right_everywhere():
    require_free_gib(3 * TENSOR_GIB + 4)
    x = random_bf16(N, 1)
    w = random_bf16(N, 2)
    result = OPS.weighted_sum(x, w)
    assert result.shape == (N,) and result.dtype == BF16
    for name, sl in regions(N).items():
        assert_close_bf16(result[sl], reference64(x[sl], w[sl]), name)
    assert_whole_result_exact(result, lambda i, j: x[i:j], lambda i, j: w[i:j], N)


@pytest.mark.parametrize("weight_shape", [(), (1,)], ids=["0dim", "one"])
def test_more_than_2_31_elements_with_a_broadcast_weight_is_right_everywhere(weight_shape):
    require_free_gib(2 * TENSOR_GIB + 4)
    x = random_bf16(N, 3)
    w = torch.tensor(-1.75, dtype=BF16, device="cuda").reshape(weight_shape)
    result = OPS.weighted_sum(x, w)
    assert result.shape == (N,)
    w_flat = w.reshape(())
    for name, sl in regions(N).items():
        assert_close_bf16(result[sl], reference64(x[sl], w_flat), name)
    assert_whole_result_exact(result, lambda i, j: x[i:j], lambda i, j: w_flat, N)


def test_more_than_2_31_elements_from_a_broadcast_input_is_right_everywhere():
    require_free_gib(2 * TENSOR_GIB + 4)
    # The output's size comes from the weight; the input is one element.
    x = torch.tensor([1.5], dtype=BF16, device="cuda")
    w = random_bf16(N, 4)
    result = OPS.weighted_sum(x, w)
    assert result.shape == (N,)
    for name, sl in regions(N).items():
        assert_close_bf16(result[sl], reference64(x, w[sl]), name)
    assert_whole_result_exact(result, lambda i, j: x, lambda i, j: w[i:j], N)


def test_two_dimensional_broadcast_past_2_31_elements_is_right_everywhere():
    require_free_gib(2 * TENSOR_GIB + 4)
    # x [2, M] * w [M] with 2*M = N: the second row starts past element 2**30 + 512 and ends past 2**31.
    m = N // 2
    x = random_bf16(N, 5).view(2, m)
    w = random_bf16(m, 6)
    result = OPS.weighted_sum(x, w)
    assert result.shape == (2, m) and result.is_contiguous()
    flat, x_flat = result.view(-1), x.view(-1)
    for name, sl in regions(N).items():
        columns = torch.arange(sl.start, sl.stop, device="cuda") % m
        assert_close_bf16(flat[sl], reference64(x_flat[sl], w[columns]), name)
    for row in range(2):
        assert_whole_result_exact(result[row], lambda i, j: x[row, i:j], lambda i, j: w[i:j], m)


def test_out_variant_with_more_than_2_31_elements_is_right_everywhere():
    require_free_gib(2 * TENSOR_GIB + 4)
    x = random_bf16(N, 7)
    w = torch.tensor(0.625, dtype=BF16, device="cuda")
    out = torch.empty(N, dtype=BF16, device="cuda")
    out[-4096:].fill_(float("nan"))  # the end is where a wrapped index would not write
    OPS.weighted_sum.out(x, w, out=out)
    for name, sl in regions(N).items():
        assert_close_bf16(out[sl], reference64(x[sl], w), name)
    assert_whole_result_exact(out, lambda i, j: x[i:j], lambda i, j: w, N)


def test_in_place_with_more_than_2_31_elements_is_right_everywhere():
    require_free_gib(2 * TENSOR_GIB + 4)
    s = random_bf16(N, 8)
    original = s.clone()
    w = torch.tensor(-2.5, dtype=BF16, device="cuda")
    OPS.weighted_sum_(s, w)
    for name, sl in regions(N).items():
        assert_close_bf16(s[sl], reference64(original[sl], w), name)
    assert_whole_result_exact(s, lambda i, j: original[i:j], lambda i, j: w, N)


def assert_gradient_close(actual, expected_of, n, what):
    """Region by region against float64, then every chunk against float32 arithmetic."""
    for name, sl in regions(n).items():
        torch.testing.assert_close(
            actual[sl].double(),
            expected_of(sl, torch.float64),
            rtol=2 * BF16_RTOL,
            atol=1e-30,
            msg=lambda m: f"{what}, {name}: {m}",
        )
    for i in range(0, n, CHUNK):
        sl = slice(i, min(i + CHUNK, n))
        torch.testing.assert_close(
            actual[sl].float(),
            expected_of(sl, torch.float32),
            rtol=2 * BF16_RTOL,
            atol=1e-30,
            msg=lambda m: f"{what}, elements {sl.start}..{sl.stop}: {m}",
        )


def test_fused_backward_with_more_than_2_31_elements_is_right_everywhere():
    require_free_gib(7 * TENSOR_GIB + 4)
    # Same shapes and dtypes: the one-pass kernel with two outputs.
    x = random_bf16(N, 9)
    w = random_bf16(N, 10)
    grad = random_bf16(N, 11)
    grad_x, grad_w = OPS.weighted_sum_backward(grad, x, w, [True, True])
    assert grad_x.shape == grad_w.shape == (N,)
    # Computed in float32 from the rounded operands, then rounded once: bfloat16's tolerance.
    assert_gradient_close(grad_x, lambda sl, t: 2 * x[sl].to(t) * w[sl].to(t) * grad[sl].to(t), N, "grad_input")
    assert_gradient_close(grad_w, lambda sl, t: x[sl].to(t) * x[sl].to(t) * grad[sl].to(t), N, "grad_weight")


def test_input_gradient_with_more_than_2_31_elements_is_right_everywhere():
    require_free_gib(4 * TENSOR_GIB + 4)
    # Only the input's gradient: the separate elementwise kernel, with a broadcast weight.
    x = random_bf16(N, 12)
    w = torch.tensor(1.25, dtype=BF16, device="cuda")
    grad = random_bf16(N, 13)
    grad_x, _ = OPS.weighted_sum_backward(grad, x, w, [True, False])
    assert grad_x.shape == (N,)
    assert_gradient_close(grad_x, lambda sl, t: 2 * x[sl].to(t) * w.to(t) * grad[sl].to(t), N, "grad_input")
