# SPDX-License-Identifier: BSD-3-Clause
"""The functional op lays its result out as `weight * input.square()` does (TensorIterator's rules):
channels_last in, channels_last out; a transposed input gives a transposed result; on every device,
in the Meta kernel, and under torch.compile with dynamic shapes (no recompiles). That is the rule of
every elementwise operator of the table, whatever its term's operation order, zero-element results
included (oracle.layout_rule).
"""

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from operators import each_elementwise_operator
from oracle import layout_rule
from reference import LAYOUT_NAMES, make_inputs

OPS = torch.ops.custom


def channels_last(shape):
    return torch.randn(shape).to(memory_format=torch.channels_last)


def permuted(shape, order):
    return torch.randn([shape[i] for i in order]).permute(*[order.index(i) for i in range(len(order))])


# name -> (input, weight) on the CPU, moved to the device under test
EXTRA = {
    "channels_last_input_channel_weight": lambda: (channels_last((2, 3, 4, 5)), torch.randn(3, 1, 1)),
    "channels_last_both": lambda: (channels_last((2, 3, 4, 5)), channels_last((2, 3, 4, 5))),
    "channels_last_input_contiguous_weight": lambda: (channels_last((2, 3, 4, 5)), torch.randn(2, 3, 4, 5)),
    "contiguous_input_channels_last_weight": lambda: (torch.randn(2, 3, 4, 5), channels_last((2, 3, 4, 5))),
    "channels_last_input_scalar_weight": lambda: (channels_last((2, 3, 4, 5)), torch.randn(())),
    "channels_last_one_channel": lambda: (channels_last((2, 1, 4, 5)), torch.randn(5)),
    "transposed_input_row_weight": lambda: (torch.randn(6, 5).t(), torch.randn(6)),
    "transposed_input_column_weight": lambda: (torch.randn(6, 5).t(), torch.randn(5, 1)),
    "permuted_3d": lambda: (permuted((3, 4, 5), [1, 2, 0]), torch.randn(5)),
    "permuted_3d_both": lambda: (permuted((3, 4, 5), [2, 0, 1]), permuted((3, 4, 5), [1, 0, 2])),
    "sliced_transposed": lambda: (torch.randn(8, 6)[::2].t(), torch.randn(4)),
    "size_one_dims": lambda: (torch.randn(5, 1, 3).permute(2, 1, 0), torch.randn(1, 1)),
    # The weight's stride-0 dim leaves the order to the input (on the CPU: .to(cuda) makes it dense).
    "transposed_input_weight_expanded_along_rows": lambda: (
        torch.randn(1, 1, 2, 2).transpose(2, 3),
        torch.randn(1, 1, 2, 1).expand(1, 1, 2, 2),
    ),
}


def cases(device):
    for name in LAYOUT_NAMES:
        yield name, make_inputs(name, torch.float32, torch.float32, device)
    for name, make in EXTRA.items():
        x, w = make()
        yield name, (x.to(device), w.to(device))


def composite(x, w):
    return w * x.square()


# Zero-element results: every dense layout is one, so each ATen op chain picks its own.
EMPTY = {
    "empty_middle_dim": lambda: (torch.randn(1, 0, 1), torch.randn(())),
    "empty_strided_111": lambda: (torch.empty_strided((1, 0, 1), (1, 1, 1)), torch.randn(1)),
    "empty_channels_last": lambda: (channels_last((2, 3, 0, 5)), torch.randn(3, 1, 1)),
    "empty_transposed": lambda: (torch.randn(0, 4).t(), torch.randn(0)),
    "empty_broadcast_weight": lambda: (torch.randn(4, 1), torch.randn(0, 4).t()),
}


@each_elementwise_operator
def test_every_terms_result_follows_the_layout_rule(device, op):
    for name, make in {**EXTRA, **EMPTY}.items():
        x, w = (t.to(device) for t in make())
        for weight in (w, 0.75):  # the tensor overload and .Scalar
            out = op(x, weight) if isinstance(weight, torch.Tensor) else getattr(OPS, op.name).Scalar(x, weight)
            assert out.stride() == layout_rule(x, weight).stride(), f"{name}, weight {type(weight).__name__}"
            torch.testing.assert_close(out, op.composite(x, weight), equal_nan=True, rtol=1e-5, atol=1e-6)


def test_result_has_the_composites_strides(device):
    for name, (x, w) in cases(device):
        out, expected = OPS.weighted_sum(x, w), composite(x, w)
        assert out.stride() == expected.stride(), name
        assert torch.equal(out, expected), name  # float32: the composite's values bit for bit


def test_channels_last_stays_channels_last(device):
    x = channels_last((4, 8, 6, 6)).to(device)
    w = torch.randn(8, 1, 1, device=device)
    assert OPS.weighted_sum(x, w).is_contiguous(memory_format=torch.channels_last)
    assert OPS.weighted_sum(x.half(), w.half()).is_contiguous(memory_format=torch.channels_last)


def test_meta_kernel_gives_the_same_strides():
    for name, (x, w) in cases("cpu"):
        meta = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in (x, w)]
        assert OPS.weighted_sum(*meta).stride() == OPS.weighted_sum(x, w).stride(), name


@pytest.mark.parametrize("make", ["channels_last_input_channel_weight", "transposed_input_row_weight", "permuted_3d"])
def test_dynamic_shapes_keep_the_layout_without_recompiles(make):
    counter = CompileCounterWithBackend("aot_eager")  # the Meta kernel's strides, our kernel's values
    compiled = torch.compile(lambda x, w: OPS.weighted_sum(x, w) + 1, backend=counter, dynamic=True, fullgraph=True)
    torch._dynamo.reset()
    for scale in (3, 5, 7):  # sizes unequal to the other dimensions (no duck-sizing guard)
        x, w = EXTRA[make]()
        x = (
            x.repeat_interleave(scale, dim=0)
            if make != "transposed_input_row_weight"
            else torch.randn(6, 5 * scale).t()
        )
        x = x.to(memory_format=torch.channels_last) if x.dim() == 4 else x
        if make == "permuted_3d":
            x = permuted((3 * scale, 4, 5), [1, 2, 0])
        out, expected = compiled(x, w), composite(x, w) + 1
        assert out.stride() == expected.stride()
        assert torch.equal(out, expected)
    assert counter.frame_count == 1
