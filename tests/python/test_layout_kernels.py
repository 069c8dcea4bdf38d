# SPDX-License-Identifier: BSD-3-Clause
"""The layouts that have CUDA forward kernels of their own (kernels/cuda/elementwise_forward_layout.h): a row,
column or plane broadcast (16-byte vectors) and transposed operands (shared-memory tiles). Values on
every dtype against the float64 reference, at sizes that leave partial vectors-per-block and
partial tiles, through the functional, out= and in-place forms. On the CPU the same cases check
the CPU loops' strided paths; tests/cpp/elementwise_forward_layout_test.cpp checks which kernel such
layouts get."""

import pytest
import torch

from reference import FLOAT_DTYPES, OPS, assert_close_to_reference, dtype_name, reference


def randn(*shape, dtype, device):
    return torch.randn(shape, dtype=dtype, device=device)


def transposed(rows, cols, dtype, device):
    """A [rows, cols] column-major view: strides (1, rows)."""
    return randn(cols, rows, dtype=dtype, device=device).t()


def full_and_repeated(full_shape, repeated_shape, input_repeated=False):
    """An (input, weight) maker: a full-size operand and one repeated over it (the weight, or the input)."""

    def make(dtype, device):
        full, repeated = (
            randn(*full_shape, dtype=dtype, device=device),
            randn(*repeated_shape, dtype=dtype, device=device),
        )
        return (repeated, full) if input_repeated else (full, repeated)

    return make


# (input, weight) makers: each takes (dtype, device) and draws fresh data.
BROADCAST_CASES = {
    # weight a row repeated down the rows (a per-channel weight)
    "row_weight_67x96": lambda d, dev: (randn(67, 96, dtype=d, device=dev), randn(96, dtype=d, device=dev)),
    "row_weight_1000x136": lambda d, dev: (randn(1000, 136, dtype=d, device=dev), randn(136, dtype=d, device=dev)),
    "row_weight_3x5x16": lambda d, dev: (randn(3, 5, 16, dtype=d, device=dev), randn(16, dtype=d, device=dev)),
    "row_weight_5x16_over_3": lambda d, dev: (randn(3, 5, 16, dtype=d, device=dev), randn(5, 16, dtype=d, device=dev)),
    # weight a column repeated along the rows (a per-row weight)
    "column_weight_67x96": lambda d, dev: (randn(67, 96, dtype=d, device=dev), randn(67, 1, dtype=d, device=dev)),
    # rows that are not whole vectors: the plane kernel, with planes of 6 and one image
    "column_weight_68x6": lambda d, dev: (randn(68, 6, dtype=d, device=dev), randn(68, 1, dtype=d, device=dev)),
    # the input repeated, the weight full-size
    "row_input_67x96": lambda d, dev: (randn(96, dtype=d, device=dev), randn(67, 96, dtype=d, device=dev)),
    "column_input_67x96": lambda d, dev: (randn(67, 1, dtype=d, device=dev), randn(67, 96, dtype=d, device=dev)),
    # a conv-style weight [C, 1, 1] over NCHW, planes of whole vectors or not (7 x 7, 3 x 5 and
    # 1 x 3: vectors that straddle two planes, or several), one image, and the input repeated
    "plane_weight_6x32x16x16": full_and_repeated((6, 32, 16, 16), (32, 1, 1)),
    "plane_weight_5x24x7x7": full_and_repeated((5, 24, 7, 7), (24, 1, 1)),
    "plane_weight_8x16x3x5": full_and_repeated((8, 16, 3, 5), (16, 1, 1)),
    "plane_weight_8x16x1x3": full_and_repeated((8, 16, 1, 3), (16, 1, 1)),
    "plane_weight_1x1_over_one_image": full_and_repeated((1, 40, 7, 7), (1, 40, 1, 1)),
    "plane_input_5x24x7x7": full_and_repeated((5, 24, 7, 7), (24, 1, 1), input_repeated=True),
    # not a whole number of 16-byte vectors per row, or not 16-byte aligned: the generic loop
    "row_weight_67x6": lambda d, dev: (randn(67, 6, dtype=d, device=dev), randn(6, dtype=d, device=dev)),
    "row_weight_misaligned": lambda d, dev: (
        randn(67 * 96 + 1, dtype=d, device=dev)[1:].view(67, 96),
        randn(96, dtype=d, device=dev),
    ),
}

TRANSPOSED_CASES = {
    "input_64x96": lambda d, dev: (transposed(64, 96, d, dev), randn(64, 96, dtype=d, device=dev)),
    # partial tiles in both dimensions, for 32- and 64-wide tiles
    "input_67x45": lambda d, dev: (transposed(67, 45, d, dev), randn(67, 45, dtype=d, device=dev)),
    "weight_130x200": lambda d, dev: (randn(130, 200, dtype=d, device=dev), transposed(130, 200, d, dev)),
    "both_200x130": lambda d, dev: (transposed(200, 130, d, dev), transposed(200, 130, d, dev)),
    "input_with_row_weight": lambda d, dev: (transposed(67, 45, d, dev), randn(45, dtype=d, device=dev)),
    "input_with_column_weight": lambda d, dev: (transposed(67, 45, d, dev), randn(67, 1, dtype=d, device=dev)),
    # a transposed slice: column stride 100, not the row count
    "input_slice": lambda d, dev: (
        randn(96, 100, dtype=d, device=dev)[:, 2:66].t(),
        randn(64, 96, dtype=d, device=dev),
    ),
    # strides or pointers that break 16-bit pairs (every tile then takes the element-wise path)
    "input_odd_column_stride": lambda d, dev: (
        randn(96, 101, dtype=d, device=dev)[:, :64].t(),
        randn(64, 96, dtype=d, device=dev),
    ),
    "input_misaligned": lambda d, dev: (
        randn(96 * 64 + 1, dtype=d, device=dev)[1:].view(96, 64).t(),
        randn(64, 96, dtype=d, device=dev),
    ),
    # one value per row from a column slice (stride 0 along the row, not unit stride down it)
    "column_slice_input_with_transposed_weight": lambda d, dev: (
        randn(67, 5, dtype=d, device=dev)[:, :1],
        transposed(67, 45, d, dev),
    ),
    # thin: one tile row or column
    "input_3x500": lambda d, dev: (transposed(3, 500, d, dev), randn(3, 500, dtype=d, device=dev)),
    "input_500x3": lambda d, dev: (transposed(500, 3, d, dev), randn(500, 3, dtype=d, device=dev)),
}

CASES = {
    **{f"broadcast-{k}": v for k, v in BROADCAST_CASES.items()},
    **{f"transposed-{k}": v for k, v in TRANSPOSED_CASES.items()},
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("case", CASES)
def test_functional_matches_reference(device, case, dtype):
    x, w = CASES[case](dtype, device)
    out = OPS.weighted_sum(x, w)
    assert out.shape == torch.broadcast_shapes(x.shape, w.shape)
    assert out.stride() == (w * x.square()).stride()  # a transposed input: a transposed result
    assert_close_to_reference(out, reference(x, w))
    if dtype in (torch.float32, torch.float64):
        # One rounding per multiply in the order of w * x.square(): bitwise the composite.
        assert torch.equal(out, w * x.square())


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("case", CASES)
def test_out_matches_reference(device, case, dtype):
    x, w = CASES[case](dtype, device)
    shape = torch.broadcast_shapes(x.shape, w.shape)
    out = torch.full(shape, float("nan"), dtype=dtype, device=device)
    OPS.weighted_sum.out(x, w, out=out)
    assert_close_to_reference(out, reference(x, w))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_out_with_its_own_layout(device, dtype):
    rows, cols = 67, 45
    x, w = randn(rows, cols, dtype=dtype, device=device), randn(cols, dtype=dtype, device=device)
    expected = reference(x, w)
    # Column-major out=: row-major inputs are then the transposed ones.
    column_major = torch.full((cols, rows), float("nan"), dtype=dtype, device=device).t()
    OPS.weighted_sum.out(x, w, out=column_major)
    assert_close_to_reference(column_major, expected)
    # out= a slice of a wider tensor: a row pitch past the row; the margin stays untouched.
    wide = torch.full((rows, cols + 19), float("nan"), dtype=dtype, device=device)
    OPS.weighted_sum.out(transposed(rows, cols, dtype, device).copy_(x), w, out=wide[:, :cols])
    assert_close_to_reference(wide[:, :cols], expected)
    assert wide[:, cols:].isnan().all()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_in_place_with_broadcast_and_transposed_weights(device, dtype):
    for weight in (
        randn(96, dtype=dtype, device=device),
        randn(67, 1, dtype=dtype, device=device),
        transposed(67, 96, dtype, device),
    ):
        x = randn(67, 96, dtype=dtype, device=device)
        expected = reference(x, weight)
        OPS.weighted_sum_(x, weight)
        assert_close_to_reference(x, expected)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_special_values_through_both_kernels(device, dtype):
    special = torch.tensor(
        [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1.0, -2.0, 3.0], dtype=dtype, device=device
    )
    x = special.repeat(16, 2)  # [16, 16]
    for w in (special.flip(0).repeat(2), transposed(16, 16, dtype, device)):
        out = OPS.weighted_sum(x, w)
        torch.testing.assert_close(out, w * x.square(), equal_nan=True, rtol=0, atol=0)
        xt = x.t().contiguous().t()
        torch.testing.assert_close(OPS.weighted_sum(xt, w), w * xt.square(), equal_nan=True, rtol=0, atol=0)
