# SPDX-License-Identifier: BSD-3-Clause
"""custom::weighted_square_sum values against the exact (float64) sum of weight * input**2.

Every dtype pair and the dtype= argument, weights broadcast every usual way, strided, transposed,
sliced and channels_last operands, every set of dims of 3-D and 4-D shapes with and without
keepdim, empty reductions and 0-dim operands; the float32 accuracy promised for 2**26 terms; the
same bits run to run and for every CPU thread count. Float16/bfloat16 results written by the loops
directly are their float32 sums rounded once; full reductions summed inside the loops (one CUDA
kernel whose last block adds the partials) with broadcast weights, many partials, on several
streams and in a CUDA graph.
"""

import itertools
import pathlib

import pytest
import torch

from environment import CUDA_BUILT, HAS_GPU, LIBRARY, run_with_cpu_capability
from reference import DTYPE_PAIRS, FLOAT_DTYPES, LOW_PRECISION, assert_storage_unchanged, dtype_name, storage_snapshot
from square_sum_reference import assert_matches_exact, composite, exact, make, op, reduced_dims

pair_ids = [f"{dtype_name(a)}-{dtype_name(b)}" for a, b in DTYPE_PAIRS]
needs_cuda = pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")


def all_dim_lists(ndim):
    """Every non-empty set of dims of a rank-`ndim` shape, each spelled with non-negative dims,
    and the same set spelled with negative dims in reverse order."""
    for r in range(1, ndim + 1):
        for dims in itertools.combinations(range(ndim), r):
            yield list(dims)
            yield [d - ndim for d in reversed(dims)]


DIM_CASES_3D = [None, [], *all_dim_lists(3)]
DIM_CASES_4D = [None, [], *all_dim_lists(4)]


# ------------------------------------------------------------------------------ dtypes


# (input shape, weight shape) of the broadcast weights: name -> shapes
WEIGHTS = {
    "same_shape": ((4, 5, 6), (4, 5, 6)),
    "scalar": ((4, 5, 6), ()),
    "row": ((4, 5, 6), (6,)),
    "column": ((4, 5, 6), (5, 1)),
    "per_channel_nchw": ((2, 3, 5, 6), (3, 1, 1)),
    "both_broadcast": ((4, 1, 6), (5, 1)),
    "weight_wider": ((6,), (3, 4, 6)),
}


@pytest.mark.parametrize("dim", [None, [1], [0, -1]], ids=str)
@pytest.mark.parametrize("weight", list(WEIGHTS))
@pytest.mark.parametrize("input_dtype,weight_dtype", DTYPE_PAIRS, ids=pair_ids)
def test_every_dtype_pair_matches_exact_sum(device, input_dtype, weight_dtype, weight, dim):
    x_shape, w_shape = WEIGHTS[weight]
    x, w = make(x_shape, input_dtype, device), make(w_shape, weight_dtype, device)
    for keepdim in (False, True):
        out = op(x, w, dim, keepdim)
        assert out.dtype == torch.result_type(x, w)
        assert_matches_exact(out, x, w, dim, keepdim)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("input_dtype,weight_dtype", DTYPE_PAIRS, ids=pair_ids)
def test_dtype_argument_sets_the_result_dtype(device, input_dtype, weight_dtype, dtype):
    x, w = make((3, 40, 7), input_dtype, device), make((40, 1), weight_dtype, device)
    for dim, keepdim in [(None, False), ([1], False), ([0, 2], True)]:
        out = op(x, w, dim, keepdim, dtype=dtype)
        assert out.dtype == dtype
        assert_matches_exact(out, x, w, dim, keepdim, dtype)


# Operands that broadcast against each other, each row read by a whole dim of outputs (on the GPU,
# one tiled launch: reduction_pairs.cu): (input, weight) shapes, dims. Sizes off the 64-output
# tiles, lengths off the 16-term stages and past one 128-term run.
PAIRS = [
    ((70, 1, 5), (1, 3, 5), [-1]),
    ((65, 1, 130), (1, 67, 130), [2]),
    ((1, 66, 300), (2, 1, 300), [-1]),  # the input's row is j's
    ((9, 1, 17), (1, 130, 17), [0, 2]),  # i summed afterwards
    ((4, 1, 1, 16), (1, 5, 1, 16), [-1]),
    ((3, 2, 1, 33), (1, 1, 7, 33), [-1]),  # two batch dims, one merged axis
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("shapes", PAIRS, ids=str)
def test_operands_broadcast_against_each_other(device, shapes, dtype):
    x_shape, w_shape, dim = shapes
    x, w = make(x_shape, dtype, device), make(w_shape, dtype, device)
    for keepdim in (False, True):
        assert_matches_exact(op(x, w, dim, keepdim), x, w, dim, keepdim)
    # Strided rows (a transposed copy) and a wider result.
    xt = x.transpose(0, -1).contiguous().transpose(0, -1)
    assert_matches_exact(op(xt, w, dim, dtype=torch.float64), xt, w, dim, dtype=torch.float64)
    first = op(x, w, dim)
    assert torch.equal(op(x, w, dim), first)  # the same bits run to run


# Reduced dims split by a kept one: the frontend loops over the leading reduced dim's indices (one
# [kept, reduced] sum each) where a call has enough terms, else it sums copies with the kept dims
# first (reduction_frontend.cpp, small_calls_per_index). Both sides of the bound, on both devices.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
@pytest.mark.parametrize("x_shape", [(3, 30, 25), (3, 300, 256), (3, 1100, 1000)], ids=str)
def test_reduced_dims_around_a_kept_one_loop_or_copy(device, x_shape, dtype):
    x = make(x_shape, dtype, device, "transposed")
    w = make(x_shape[1:], dtype, device)
    for keepdim in (False, True):
        assert_matches_exact(op(x, w, [0, 2], keepdim), x, w, [0, 2], keepdim)
    assert torch.equal(op(x, w, [0, 2]), op(x, w, [0, 2]))


# Rows shorter than a warp's 16-byte loads of 16-bit values, too few of them for the CUDA columns
# plan to fill the GPU: a warp a row (reduction_plan.h). Each weight layout, sums and totals.
@pytest.mark.parametrize("dtype", [*LOW_PRECISION, torch.float32], ids=dtype_name)
@pytest.mark.parametrize("w_shape", [(), (128,), (2048, 1), (2048, 128)], ids=str)
def test_few_short_rows(device, w_shape, dtype):
    # x small: a 0-dim weight's total of 2^18 terms of one sign stays within float16's range.
    x, w = make((2048, 128), dtype, device).mul_(0.125), make(w_shape, dtype, device)
    for dim in ([1], None):
        assert_matches_exact(op(x, w, dim), x, w, dim)
    assert torch.equal(op(x, w, [1]), op(x, w, [1]))


# Kept dims innermost in memory but not last in the dims' order: the loops take the reduced dims
# before them (reduction_frontend.cpp, loop_order), as one run next to contiguous columns.
MEMORY_ORDER_CASES = [
    ((6, 40, 9, 11), "channels_last", (40, 1, 1), [0, 2, 3]),  # per-channel sums
    ((300, 70), "transposed", (300, 70), [0]),  # summed along the rows of memory
    ((5, 30, 17), "transposed", (), [2]),  # dims reversed in memory: both kept ones inner
    ((4, 33, 20, 6), "permuted", (33, 1, 1), [0, 1]),  # the middle dims swapped in memory
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
@pytest.mark.parametrize("case", MEMORY_ORDER_CASES, ids=str)
def test_kept_dims_innermost_in_memory_are_the_loops_columns(device, case, dtype):
    x_shape, kind, w_shape, dim = case
    x, w = make(x_shape, dtype, device, kind), make(w_shape, dtype, device)
    if kind == "transposed" and w.dim() == x.dim():
        w = make(x_shape, dtype, device, kind)
    for keepdim in (False, True):
        assert_matches_exact(op(x, w, dim, keepdim), x, w, dim, keepdim)
    assert torch.equal(op(x, w, dim), op(x, w, dim))


@pytest.mark.parametrize("dtype", [None, torch.float32, torch.float64], ids=str)
def test_a_wider_0_dim_weight_is_rounded_to_the_promoted_dtype_whatever_dtype_is(device, dtype):
    # result_type(float16 [n], float32 0-dim) is float16: the composite's `w * x.square()` rounds
    # the weight to float16 (1 + 2**-12 to 1), also when dtype= asks for a wider sum.
    x = make((3, 40), torch.float16, device)
    w = torch.tensor(1 + 2.0**-12, device=device)
    out = op(x, w, [1], dtype=dtype)
    assert_matches_exact(out, x, w, [1], dtype=dtype)
    assert_matches_exact(out, x, torch.ones((), dtype=torch.float16, device=device), [1], dtype=dtype)


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=dtype_name)
def test_half_and_bfloat16_accumulate_in_float32(device, dtype):
    # 4096 terms of about 1: a float16 running sum stops growing at 2048 (its spacing there is 2),
    # a bfloat16 one at 256. Accumulated in float32 and rounded once, the sum is within one
    # rounding of the exact one.
    x = torch.empty(3, 4096, device=device).uniform_(0.9, 1.1).to(dtype)
    w = torch.empty(4096, device=device).uniform_(0.9, 1.1).to(dtype)
    out = op(x, w, [1])
    assert_matches_exact(out, x, w, [1])
    expected, _ = exact(x, w, [1])
    rounded_once = expected.to(dtype)
    # Within one ulp of the correctly rounded sum (float32 accumulation may cross a rounding boundary).
    ulp = torch.finfo(dtype).eps * rounded_once.double().abs()
    assert ((out.double() - rounded_once.double()).abs() <= ulp).all()


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=dtype_name)
def test_half_and_bfloat16_terms_are_not_rounded_before_the_sum(device, dtype):
    # x = 1 + k eps: x**2 = 1 + 2k eps + (k eps)**2, where (k eps)**2 is about 0.4 eps, lost when each
    # term is rounded to the low-precision dtype. Six such losses push the sum across a rounding
    # boundary of the result: only terms kept in float32 round to the correctly rounded sum.
    eps = torch.finfo(dtype).eps
    k = round((0.4 / eps) ** 0.5)
    x = torch.full((6,), 1 + k * eps, dtype=dtype, device=device)
    w = torch.ones((6,), dtype=dtype, device=device)
    expected, _ = exact(x, w)
    per_term = (w.float() * x.float().square()).to(dtype).double().sum()
    assert per_term.to(dtype) != expected.to(dtype), "the data does not tell one rounding from per-term ones"
    out = op(x, w)
    assert out.dtype == dtype
    assert out.item() == expected.to(dtype).item()


# ------------------------------------------------------------------------- dims, keepdim


@pytest.mark.parametrize("keepdim", [False, True], ids=["drop", "keepdim"])
@pytest.mark.parametrize("dim", DIM_CASES_4D, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dtype_name)
def test_every_dim_set_of_4d_shape(device, dtype, dim, keepdim):
    x, w = make((3, 4, 5, 6), dtype, device), make((4, 1, 6), dtype, device)
    assert_matches_exact(op(x, w, dim, keepdim), x, w, dim, keepdim)


@pytest.mark.parametrize("keepdim", [False, True], ids=["drop", "keepdim"])
@pytest.mark.parametrize("dim", DIM_CASES_3D, ids=str)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=dtype_name)
def test_every_dim_set_of_3d_shape(device, dtype, dim, keepdim):
    x, w = make((7, 33, 9), dtype, device), make((7, 1, 9), dtype, device)
    assert_matches_exact(op(x, w, dim, keepdim), x, w, dim, keepdim)


@pytest.mark.parametrize("dim", [0, 1, -1, -2], ids=str)
def test_dim_as_an_int(device, dim):
    x, w = make((5, 6), torch.float32, device), make((6,), torch.float32, device)
    out = op(x, w, dim)
    assert torch.equal(out, op(x, w, [dim]))
    assert_matches_exact(out, x, w, [dim])


def test_no_dim_and_empty_dim_list_reduce_every_dim(device):
    x, w = make((3, 4, 5), torch.float64, device), make((5,), torch.float64, device)
    total = op(x, w)
    assert total.shape == ()
    assert torch.equal(op(x, w, []), total)
    assert torch.equal(op(x, w, [0, 1, 2]), total)
    assert op(x, w, None, True).shape == (1, 1, 1)
    assert op(x, w, [], True).shape == (1, 1, 1)
    assert_matches_exact(total, x, w)


def test_keyword_arguments(device):
    x, w = make((3, 4, 5), torch.float32, device), make((5,), torch.float32, device)
    out = torch.ops.custom.weighted_square_sum(x, w, dim=[1], keepdim=True, dtype=torch.float64)
    assert out.shape == (3, 1, 5) and out.dtype == torch.float64
    assert_matches_exact(out, x, w, [1], True, torch.float64)


# ------------------------------------------------------------------------------ layouts


# name -> (input shape, input kind, weight shape, weight kind)
LAYOUTS = {
    "transposed": ((6, 7, 8), "transposed", (6, 7, 8), "contiguous"),
    "transposed_both": ((6, 7, 8), "transposed", (6, 7, 8), "transposed"),
    "permuted": ((5, 6, 7, 8), "permuted", (8,), "contiguous"),
    "step_sliced": ((6, 7, 8), "step", (7, 8), "step"),
    "offset": ((6, 7, 8), "offset", (6, 7, 8), "offset"),
    "expanded_input": ((6, 7, 8), "expanded", (8,), "contiguous"),
    "channels_last": ((2, 3, 5, 6), "channels_last", (3, 1, 1), "contiguous"),
    "channels_last_both": ((2, 3, 5, 6), "channels_last", (2, 3, 5, 6), "channels_last"),
    "transposed_weight": ((4, 6, 7), "contiguous", (6, 7), "transposed"),
}
LAYOUT_DIMS = [None, [0], [1], [-1], [0, 2], [1, 2], [-1, 0]]


@pytest.mark.parametrize("keepdim", [False, True], ids=["drop", "keepdim"])
@pytest.mark.parametrize("dim", LAYOUT_DIMS, ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
def test_strided_operands_match_exact_sum(device, dtype, layout, dim, keepdim):
    x_shape, x_kind, w_shape, w_kind = LAYOUTS[layout]
    x, w = make(x_shape, dtype, device, x_kind), make(w_shape, dtype, device, w_kind)
    out = op(x, w, dim, keepdim)
    assert_matches_exact(out, x, w, dim, keepdim)
    # The layout must not change the value beyond rounding: the same data, contiguous.
    assert_matches_exact(op(x.contiguous(), w.contiguous(), dim, keepdim), x, w, dim, keepdim)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_inputs_not_modified(device, layout):
    x_shape, x_kind, w_shape, w_kind = LAYOUTS[layout]
    x, w = make(x_shape, torch.float16, device, x_kind), make(w_shape, torch.float32, device, w_kind)
    snapshots = [(t, storage_snapshot(t), (t.shape, t.stride(), t.storage_offset())) for t in (x, w)]
    out = op(x, w, [0, -1], dtype=torch.float64)
    for t, data, meta in snapshots:
        assert_storage_unchanged(t, data)
        assert (t.shape, t.stride(), t.storage_offset()) == meta
    assert out.untyped_storage().data_ptr() not in (x.untyped_storage().data_ptr(), w.untyped_storage().data_ptr())


def test_large_reduction_over_non_innermost_dim(device):
    # Over ATen's CPU grain size: several threads, vector tails (odd sizes).
    x, w = make((1031, 67), torch.float32, device), make((1031, 1), torch.float32, device)
    for dim in ([0], [1], None):
        assert_matches_exact(op(x, w, dim), x, w, dim)
        dim_t = None if dim is None else [1 - dim[0]]
        assert_matches_exact(op(x.t(), w.t(), dim_t), x.t(), w.t(), dim_t)


# ---------------------------------------------------------------------------- empty, 0-dim


EMPTY_CASES = {
    # (input shape, weight shape, dim, keepdim)
    "reduce_empty_dim": ((0, 3), (3,), [0], False),
    "reduce_empty_dim_keepdim": ((4, 0, 3), (1, 3), [1], True),
    "reduce_all_of_empty": ((2, 0, 3), (3,), None, False),
    "reduce_all_of_empty_keepdim": ((2, 0, 3), (3,), [], True),
    "keep_empty_dim": ((0, 3), (3,), [1], False),
    "empty_from_weight": ((4, 3), (0, 1, 3), [0, 2], False),
    "empty_from_weight_reduce_it": ((4, 3), (0, 1, 3), [0], False),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("case", list(EMPTY_CASES))
def test_empty_inputs_give_zero_sums_of_the_right_shape(device, case, dtype):
    x_shape, w_shape, dim, keepdim = EMPTY_CASES[case]
    x, w = make(x_shape, dtype, device), make(w_shape, dtype, device)
    out = op(x, w, dim, keepdim)
    expected = composite(x, w, dim, keepdim)
    assert (out.dtype, out.shape) == (expected.dtype, expected.shape)
    assert torch.equal(out, torch.zeros_like(expected))
    assert not out.signbit().any(), "an empty sum is +0"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_empty_reduction_is_zero_even_where_it_overwrites_garbage(device, dtype):
    # Memory the caching allocator hands out again holds old values: the result must be written.
    for _ in range(3):
        torch.full((1024,), float("nan"), dtype=dtype, device=device)
        out = op(make((0, 256), dtype, device), make((256,), dtype, device), [0])
        assert out.shape == (256,) and torch.equal(out, torch.zeros_like(out))


ZERO_DIM_CASES = {
    # (input shape, weight shape, dim)
    "both_0dim_no_dim": ((), (), None),
    "both_0dim_dim0": ((), (), [0]),
    "both_0dim_dim_minus1": ((), (), -1),
    "both_0dim_empty_list": ((), (), []),
    "0dim_input": ((), (3, 4), [1]),
    "0dim_weight": ((3, 4), (), [0]),
    "0dim_weight_all": ((3, 4), (), None),
}


@pytest.mark.parametrize("keepdim", [False, True], ids=["drop", "keepdim"])
@pytest.mark.parametrize("case", list(ZERO_DIM_CASES))
@pytest.mark.parametrize("input_dtype,weight_dtype", DTYPE_PAIRS[::3], ids=pair_ids[::3])
def test_zero_dim_operands(device, input_dtype, weight_dtype, case, keepdim):
    x_shape, w_shape, dim = ZERO_DIM_CASES[case]
    x, w = make(x_shape, input_dtype, device), make(w_shape, weight_dtype, device)
    assert_matches_exact(op(x, w, dim, keepdim), x, w, dim, keepdim)


def test_zero_dim_float64_weight_does_not_promote_a_float32_input(device):
    x = make((5, 7), torch.float32, device)
    w = torch.tensor(1 / 3, dtype=torch.float64, device=device)
    out = op(x, w, [1])
    assert out.dtype == torch.float32
    assert_matches_exact(out, x, w, [1])


# ---------------------------------------------------------------------------- accuracy


N_ACCURACY = 1 << 26  # the contract's bound: relative error <= 1e-5 over 2**26 float32 terms
TILE = 1 << 20


def uniform(*shape, device, low=0.5, high=1.5):
    return torch.empty(shape, device=device).uniform_(low, high)


def tiled_exact(x_tile, w_tile, copies):
    """(exact sum, sum of |terms|) of `copies` repetitions of the float32 terms w_tile * x_tile**2."""
    terms = w_tile.double() * x_tile.double().square()
    return copies * float(terms.sum()), copies * float(terms.abs().sum())


def assert_relative_error(out, total, scale, bound=1e-5):
    error = abs(float(out) - total)
    assert error <= bound * scale, f"ours {float(out)!r}, exact {total!r}: error {error / scale:.3g} of the scale"


# The data: 2**20 fresh random values repeated 64 times (drawing 2**26 is slower than the sum on a
# CPU); the exact sum is then 64 times the float64 sum of a tile. A float32 running sum of 2**26
# terms near 1 stops growing at 2**24, tens of percent short; a pairwise or blocked sum stays
# near 1e-7; a sum that drops or repeats a block is off by 1/64 or more.


@pytest.mark.parametrize("signs", ["positive", "mixed"])
def test_float32_sum_of_2_to_26_terms_within_1e_5(device, signs):
    x_tile, w_tile = uniform(TILE, device=device), uniform(TILE, device=device)
    if signs == "mixed":
        w_tile[::3].neg_()
    copies = N_ACCURACY // TILE
    out = op(x_tile.repeat(copies), w_tile.repeat(copies))
    assert out.dtype == torch.float32 and out.shape == ()
    total, scale = tiled_exact(x_tile, w_tile, copies)
    assert_relative_error(out, total, abs(total) if signs == "positive" else scale)


@pytest.mark.parametrize("layout", ["2d_rows", "2d_transposed", "4d_channels_last"])
def test_float32_sum_of_2_to_26_terms_over_several_dims(device, layout):
    if layout == "4d_channels_last":  # [4, 1024, 128, 128], a weight per channel
        x_tile = uniform(1, 64, 128, 128, device=device)
        w = uniform(1024, 1, 1, device=device)
        x = x_tile.repeat(4, 16, 1, 1).contiguous(memory_format=torch.channels_last)
        per_channel = x_tile.double().square().sum((0, 2, 3)).repeat(16)
        total = 4 * float((w.double().flatten() * per_channel).sum())
    else:  # [1024, 65536] (or its transpose), a weight per column
        x_tile = uniform(16, 1 << 16, device=device)
        w = uniform(1 << 16, device=device)
        x = x_tile.repeat(64, 1)
        total, _ = tiled_exact(x_tile, w.expand(x_tile.shape), 64)
        if layout == "2d_transposed":
            x, w = x.t(), w.unsqueeze(1)
    assert x.numel() == N_ACCURACY
    out = op(x, w)
    assert_relative_error(out, total, total)
    assert_relative_error(op(x, w, list(range(x.dim()))), total, total)


def test_float16_inputs_sum_2_to_24_terms_in_float32(device):
    x_tile, w_tile = uniform(TILE, device=device).half(), uniform(TILE, device=device).half()
    out = op(x_tile.repeat(16), w_tile.repeat(16), dtype=torch.float32)
    assert out.dtype == torch.float32
    total, scale = tiled_exact(x_tile, w_tile, 16)
    assert_relative_error(out, total, scale)


# ------------------------------------------------------------------------- determinism


DETERMINISM_CASES = {
    # name -> (input shape, input kind, weight shape, dim)
    "reduce_all": ((1 << 21,), "contiguous", (1 << 21,), None),
    "rows": ((64, 1 << 15), "contiguous", (1 << 15,), [1]),
    "columns": ((1 << 15, 64), "contiguous", (1 << 15, 1), [0]),
    "transposed_all": ((1 << 11, 1 << 10), "transposed", (1 << 10,), None),
    # Short runs in memory (16 along the reduced dim in memory order), many of them to add up.
    "transposed_many_runs": ((1 << 17, 16), "transposed", (16,), None),
    "transposed_many_runs_dim0": ((1 << 17, 16), "transposed", (16,), [0]),
    "middle_of_3d": ((16, 1 << 12, 16), "contiguous", (1 << 12, 1), [1]),
    "two_dims_of_4d": ((8, 64, 32, 32), "channels_last", (64, 1, 1), [0, 2]),
    # Full reductions with a weight broadcast along a dim: the rows' sums added inside the loop.
    "broadcast_row_all": ((4099, 1024), "contiguous", (1024,), None),
    "weight_per_row_all": ((4099, 1024), "contiguous", (4099, 1), None),
    # Operands that broadcast against each other (the pairs loops), past one 128-term run.
    "pairs": ((1024, 1, 300), "contiguous", (1, 300, 300), [-1]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
@pytest.mark.parametrize("case", list(DETERMINISM_CASES))
def test_same_bits_run_to_run(device, case, dtype):
    x_shape, x_kind, w_shape, dim = DETERMINISM_CASES[case]
    x, w = make(x_shape, dtype, device, x_kind), make(w_shape, dtype, device)
    first = op(x, w, dim)
    for _ in range(3):
        assert torch.equal(op(x, w, dim), first)


def cancelling_operands(x_shape, x_kind, w_shape, dim):
    """float32 x and w (of both signs) with x scaled where the weight is positive, output by output,
    so that the positive and negative terms sum to about the same: the result is small next to the
    partial sums it is made of, so their roundings, which another order changes, show in its bits.
    Where an output's weight has one sign along the reduced dims nothing cancels; those cases have
    many outputs instead."""
    x, w = make(x_shape, torch.float32, "cpu", x_kind), make(w_shape, torch.float32, "cpu")
    if torch.broadcast_shapes(x.shape, w.shape) != x.shape:
        return x, w  # x's rows serve many outputs, which no scale suits: the weights' signs cancel
    reduced = sorted(reduced_dims(x.dim(), dim))
    terms = w * x.square()
    positive = terms.clamp(min=0).sum(reduced, keepdim=True)
    negative = -terms.clamp(max=0).sum(reduced, keepdim=True)
    scale = torch.where((positive > 0) & (negative > 0), (negative / positive).sqrt(), 1.0)
    x.mul_(torch.where(w.expand(x.shape) > 0, scale, 1.0).float())  # in place: x keeps its layout
    return x, w


def rolled(x, w, dim):
    """The same terms, each output's in another order: rolled by one along every reduced dim."""
    reduced = sorted(reduced_dims(x.dim(), dim))
    lead = x.dim() - w.dim()
    w_dims = [d - lead for d in reduced if d >= lead and w.shape[d - lead] > 1]
    return x.roll([1] * len(reduced), reduced), w.roll([1] * len(w_dims), w_dims) if w_dims else w


# A sum in another order keeps the bits of one output up to 1 time in 3 (measured with rolled():
# a pairwise sum's result is a multiple of its last partials' ulp and errs by a few of them), so a
# sum whose order followed the thread count would pass all these draws less than once in 10**7
# runs (cases of many outputs: far less often).
THREAD_COUNT_DRAWS = 16


@pytest.mark.parametrize("case", list(DETERMINISM_CASES))
def test_same_bits_for_every_cpu_thread_count(case):
    x_shape, x_kind, w_shape, dim = DETERMINISM_CASES[case]
    threads = torch.get_num_threads()
    reorders_seen = 0
    for _ in range(THREAD_COUNT_DRAWS):
        x, w = cancelling_operands(x_shape, x_kind, w_shape, dim)
        try:
            results = {}
            for n in (1, 2, 3, 8):  # more threads than cores still splits the work n ways
                torch.set_num_threads(n)
                results[n] = op(x, w, dim)
            reorders_seen += not torch.equal(op(*rolled(x, w, dim), dim), results[1])
        finally:
            torch.set_num_threads(threads)
        for n, result in results.items():
            differ = result != results[1]
            assert not differ.any(), (
                f"{n} threads: other bits than 1 thread at {int(differ.sum())} of {differ.numel()} elements, "
                f"e.g. {result[differ].flatten()[:3].tolist()} vs {results[1][differ].flatten()[:3].tolist()}"
            )
    assert_matches_exact(results[1], x, w, dim)
    # The control: these data do show a change of order (else the check above could not fail).
    assert reorders_seen > 0, "the same terms in another order summed to the same bits in every draw"


# ------------------------------------------------------------------ direct writes, totals

# name -> (input shape, input kind, weight shape, dim): a last-dim, a first-dim and a middle-dim
# sum, full reductions of every layout kind (rows, a weight broadcast along them, transposed),
# and sums the loop leaves partly to the frontend (a weight broadcast between reduced dims).
ROUNDING_CASES = {
    "rows": ((37, 1031), "contiguous", (1031,), [-1]),
    "rows_split": ((3, 70000), "contiguous", (70000,), [-1]),
    "columns": ((1031, 37), "contiguous", (1031, 1), [0]),
    "middle": ((5, 700, 9), "contiguous", (700, 1), [1]),
    "all": ((70001,), "contiguous", (70001,), None),
    "broadcast_row_all": ((513, 1024), "contiguous", (1024,), None),
    "weight_per_row_all": ((513, 1024), "contiguous", (513, 1), None),
    "transposed_all": ((1024, 300), "transposed", (300,), None),
    "short_rows_all": ((20000, 3), "contiguous", (3,), None),
    "leftover": ((6, 7, 300), "contiguous", (7, 1), [0, 2]),
}


@pytest.mark.parametrize("case", list(ROUNDING_CASES))
@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=dtype_name)
def test_low_precision_results_are_the_float32_sums_rounded_once(device, dtype, case):
    # A float16/bfloat16 result is the float32 result (the same sums, in the same order) rounded
    # once, whether the loop writes it or the frontend copies it.
    x_shape, x_kind, w_shape, dim = ROUNDING_CASES[case]
    x, w = make(x_shape, dtype, device, x_kind), make(w_shape, dtype, device)
    # A weight shared by many rows makes their sums add up (20000 rows of w [3]: ~1e5 unscaled):
    # x scaled in place (its layout kept) so that a float16 sum stays far below 65504.
    x.mul_(0.25)
    out = op(x, w, dim)
    assert out.dtype == dtype
    assert torch.equal(out, op(x, w, dim, dtype=torch.float32).to(dtype))
    assert_matches_exact(out, x, w, dim)
    keep = op(x, w, dim, True)
    assert torch.equal(keep, op(x, w, dim, True, dtype=torch.float32).to(dtype))


# name -> (input shape, weight shape): full reductions whose weight is broadcast along a dim.
TOTAL_BROADCASTS = {
    "row": ((4099, 1024), (1024,)),
    # Rows that share a weight are summed in groups (on the CPU): a short last group, vector tails.
    "row_with_tails": ((1026, 1029), (1029,)),
    "row_short": ((10, 7), (7,)),
    "row_long": ((5, 20011), (20011,)),  # rows cut along their length
    # CUDA holds a short shared weight row in registers (up to 1024 elements in 2-byte types, 512
    # in float32, 256 in float64): full and partial vector groups, a tail, aligned rows or not.
    "row_512": ((1000, 512), (512,)),
    "row_odd": ((333, 1021), (1021,)),
    "row_250": ((901, 250), (250,)),
    "per_row": ((4099, 1024), (4099, 1)),
    "scalar": ((4099, 1024), ()),
    "middle": ((33, 129, 65), (129, 1)),
    "input_broadcast": ((1024,), (4099, 1024)),
}


@pytest.mark.parametrize("keepdim", [False, True], ids=["drop", "keepdim"])
@pytest.mark.parametrize("case", list(TOTAL_BROADCASTS))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_totals_with_broadcast_weights(device, dtype, case, keepdim):
    x_shape, w_shape = TOTAL_BROADCASTS[case]
    x, w = make(x_shape, dtype, device), make(w_shape, dtype, device)
    # A weight shared by many terms cancels less: sums small enough for float16 to hold (x / 16 is
    # exact).
    x = x / 16
    if case == "scalar":
        w = torch.tensor(0.01, dtype=dtype, device=device)
    out = op(x, w, None, keepdim)
    assert_matches_exact(out, x, w, None, keepdim)
    ndim = max(x.dim(), w.dim())
    # Every dim listed is the same reduction, the same bits.
    assert torch.equal(op(x, w, list(range(ndim)), keepdim), out)
    assert torch.equal(op(x, w, None, keepdim), out)


@pytest.mark.parametrize("zero_weights", [False, True], ids=["small_weights", "zero_weights"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
def test_shared_weight_row_totals_where_squares_summed_first_would_overflow(device, dtype, zero_weights):
    # The CPU sums a shared weight row's columns of squares before weighting them: x**2 near the
    # float limit overflows there (inf, or NaN times a zero weight) while every weighted term, and
    # the composite's sum, is finite. Such a total must be redone term by term.
    x = make((64, 1024), dtype, device).sign().add_(0.5).mul_(1e19)  # x**2 about 2.3e38 or 2.5e37
    w = make((1024,), dtype, device).abs().add_(0.5).mul_(1e-10)
    if zero_weights:
        w[::3] = 0
    out = op(x, w)
    assert_matches_exact(out, x, w)


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_each_cpu_instruction_set_build_gives_exact_sums(capability):
    # The CPU loops are compiled per instruction set and picked from ATen's capability; this
    # process runs one of them, so each runs in a fresh process with ATEN_CPU_CAPABILITY.
    widths = ["DEFAULT", "AVX2", "AVX512"]
    if widths.index(capability.upper()) > widths.index(torch.backends.cpu.get_cpu_capability()):
        pytest.skip(f"the CPU (or ATEN_CPU_CAPABILITY) does not allow {capability}")
    code = f"""
import sys; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
import torch
torch.ops.load_library({str(LIBRARY)!r})
from test_weighted_square_sum_values import ROUNDING_CASES, TOTAL_BROADCASTS
from reference import FLOAT_DTYPES
from square_sum_reference import assert_matches_exact, make, op
print(torch.backends.cpu.get_cpu_capability())
cases = [*ROUNDING_CASES.values(), *((x, "contiguous", w, None) for x, w in TOTAL_BROADCASTS.values())]
for x_shape, x_kind, w_shape, dim in cases:
    for dtype in FLOAT_DTYPES:
        x, w = make(x_shape, dtype, "cpu", x_kind), make(w_shape, dtype, "cpu")
        x.mul_(1 / 16)  # float16 sums of many rows stay in range
        assert_matches_exact(op(x, w, dim), x, w, dim)
print("ok")
"""
    assert run_with_cpu_capability(code, capability).split()[0] == capability.upper()


@needs_cuda
def test_total_with_more_partials_than_one_block_adds():
    # 2**26 + 12345 rows of 1024 (an expanded view: no memory) make more block partials than the
    # last block may add in series (kMaxFinalPartials): stage 2 passes add them. Every row is the
    # same, so the exact sum is the row's times the rows.
    rows = (1 << 26) + 12345
    row = torch.empty(1024, device="cuda").uniform_(0.5, 1.5)
    w = torch.empty(1024, device="cuda").uniform_(0.5, 1.5)
    x = row.expand(rows, 1024)
    out = op(x, w)
    exact_row = float((w.double() * row.double().square()).sum())
    assert abs(float(out) - rows * exact_row) <= 1e-5 * rows * exact_row
    assert torch.equal(op(x, w), out)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
def test_totals_on_concurrent_streams_and_in_a_cuda_graph(dtype):
    # A total's last-block counter is its stream's slot, left at zero by each launch's last block;
    # a total captured in a CUDA graph holds a slot of its own until the graph is destroyed. Totals
    # of each kernel queued back to back on three streams at once, a graph replayed on a stream of
    # its own while its capture stream runs eager totals, and graphs made and dropped many times
    # (each returning its slot) give the eager results.
    inputs = [
        (make((4099, 1024), dtype, "cuda"), make((1024,), dtype, "cuda")),  # weight row in registers
        (make((1 << 20,), dtype, "cuda"), make((1 << 20,), dtype, "cuda")),  # Rows
        (make((64, 513, 129), dtype, "cuda"), make((513, 1), dtype, "cuda")),  # Tiles
    ]
    expected = [op(x, w) for x, w in inputs]
    for got, (x, w) in zip(expected, inputs):
        assert_matches_exact(got, x, w, None)
    streams = [torch.cuda.Stream() for _ in range(3)]
    torch.cuda.synchronize()
    results = [[] for _ in inputs]
    for _ in range(8):
        for stream in streams:
            with torch.cuda.stream(stream):
                for k, (x, w) in enumerate(inputs):
                    results[k].append(op(x, w))
    torch.cuda.synchronize()
    for k, got in enumerate(results):
        assert all(torch.equal(result, expected[k]) for result in got), f"input {k}"

    x, w = inputs[0]
    capture, replay = torch.cuda.Stream(), torch.cuda.Stream()
    capture.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture):  # warm-up off the default stream, as capture wants
        op(x, w)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture):
        captured = op(x, w)
    replay.wait_stream(capture)
    replayed, eager = [], []
    for _ in range(4):
        with torch.cuda.stream(replay):
            graph.replay()
            replayed.append(captured.clone())
        with torch.cuda.stream(capture):
            eager.extend(op(x, w) for _ in range(4))
    torch.cuda.synchronize()
    assert all(torch.equal(result, expected[0]) for result in replayed)
    assert all(torch.equal(result, expected[0]) for result in eager)
    for _ in range(20):
        dropped = torch.cuda.CUDAGraph()
        with torch.cuda.graph(dropped, stream=capture):
            once = op(x, w)
        dropped.replay()
        torch.cuda.synchronize()
        assert torch.equal(once, expected[0])
        del dropped
    assert torch.equal(op(x, w), expected[0])
