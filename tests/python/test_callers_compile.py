# SPDX-License-Identifier: BSD-3-Clause
"""torch.compile callers of the `custom` operators: functions, nn.Modules, out= and in-place,
a training step, no graph breaks, dynamic shapes without recompiling, CUDA graphs.

Every compiled result is compared with the same code run eagerly. The callers of one operator are
parametrized over operators.py's table (ids: the operator's name); out= and in place over its
elementwise rows; the nn.Module, training and CUDA-graph callers are weighted_sum's (the README's
example model).
"""

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

from environment import CUDA_BUILT, HAS_GPU
from operators import each_elementwise_operator, each_operator

OPS = torch.ops.custom
needs_cuda = pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def assert_same(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- the callers


def function(x, w):
    # The operator between ATen ops, so inductor has something to fuse around it.
    return OPS.weighted_sum(x * 0.5, w).sum(-1) + x.mean(-1)


def function_of(op):
    """function for any operator of the table (a reduction sums over the channels)."""
    return lambda x, w: op(x * 0.5, w).sum(-1) + x.mean(-1)


# An elementwise operator's out= and in-place callers: (op, x, w[, out]).
def out_into_argument(op, x, w, out):
    getattr(OPS, op.name).out(x, w, out=out)
    return out * 2


def out_into_temporary(op, x, w):
    out = torch.empty_like(x)
    getattr(OPS, op.name).out(x, w, out=out)
    return out + 1


def inplace_on_argument(op, x, w):
    getattr(OPS, f"{op.name}_")(x, w)
    return x.sum()


def inplace_on_temporary(op, x, w):
    y = x * 2
    getattr(OPS, f"{op.name}_")(y, w)
    return y - x


def bound(fn, op):
    return lambda *args: fn(op, *args)


class WeightedSumNet(torch.nn.Module):
    """linear -> custom::weighted_sum with a learned weight -> linear."""

    def __init__(self, features=8):
        super().__init__()
        self.first = torch.nn.Linear(features, features)
        self.weight = torch.nn.Parameter(torch.randn(features))
        self.last = torch.nn.Linear(features, 1)

    def forward(self, x):
        return self.last(OPS.weighted_sum(torch.tanh(self.first(x)), self.weight))


def inputs(device, rows=6, cols=8):
    return torch.randn(rows, cols, device=device), torch.randn(cols, device=device)


# ---------------------------------------------------------------------------- fullgraph


@each_operator
def test_function_fullgraph(device, op):
    x, w = inputs(device)
    fn = function_of(op)
    assert_same(torch.compile(fn, fullgraph=True)(x, w), fn(x, w))


def test_module_fullgraph(device):
    net = WeightedSumNet().to(device)
    x, _ = inputs(device)
    compiled = torch.compile(net, fullgraph=True)
    assert_same(compiled(x), net(x))


@each_elementwise_operator
def test_out_variant_fullgraph(device, op):
    x, w = inputs(device)
    out = torch.empty_like(x)
    result = torch.compile(bound(out_into_argument, op), fullgraph=True)(x, w, out)
    assert_same(out, op.composite(x, w))  # the caller's tensor was written
    assert_same(result, 2 * op.composite(x, w))
    fn = bound(out_into_temporary, op)
    assert_same(torch.compile(fn, fullgraph=True)(x, w), fn(x, w))


@each_elementwise_operator
def test_inplace_variant_fullgraph(device, op):
    x, w = inputs(device)
    expected_x = op.composite(x, w)
    mutated = x.clone()
    result = torch.compile(bound(inplace_on_argument, op), fullgraph=True)(mutated, w)
    assert_same(mutated, expected_x)  # the caller's tensor was updated in place
    assert_same(result, expected_x.sum())
    fn = bound(inplace_on_temporary, op)
    assert_same(torch.compile(fn, fullgraph=True)(x, w), fn(x, w))


def assert_one_graph_calling(fn, args, name):
    explanation = torch._dynamo.explain(fn)(*args)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    targets = {str(node.target) for graph in explanation.graphs for node in graph.graph.nodes}
    assert any(target.startswith(f"custom.{name}") for target in targets), targets


@each_operator
def test_no_graph_breaks(device, op):
    x, w = inputs(device)
    assert_one_graph_calling(function_of(op), (x, w), op.name)


@each_elementwise_operator
@pytest.mark.parametrize(
    "name", ["out_into_argument", "out_into_temporary", "inplace_on_argument", "inplace_on_temporary"]
)
def test_no_graph_breaks_out_and_inplace(name, device, op):
    x, w = inputs(device)
    args = (x, w, torch.empty_like(x)) if name == "out_into_argument" else (x, w)
    assert_one_graph_calling(bound(globals()[name], op), args, op.name)


def test_no_graph_breaks_in_module(device):
    x, _ = inputs(device)
    assert_one_graph_calling(WeightedSumNet().to(device), (x,), "weighted_sum")


# ------------------------------------------------------------------------------ dynamic


@each_operator
@pytest.mark.parametrize("name", ["function", "out_into_temporary", "inplace_on_temporary"])
def test_dynamic_shapes_compile_once(name, device, op):
    if name != "function" and op.kind != "elementwise":
        pytest.skip("out= and in place: elementwise operators")
    fn = function_of(op) if name == "function" else bound(globals()[name], op)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(fn, backend=counter, fullgraph=True, dynamic=True)
    for rows, cols in [(3, 4), (5, 7), (8, 16), (13, 2), (2, 33)]:
        x, w = inputs(device, rows, cols)
        assert_same(compiled(x, w), fn(x, w))
    assert counter.frame_count == 1, f"compiled {counter.frame_count} times for 5 shapes"
    assert counters["stats"]["unique_graphs"] == 1


def test_dynamic_shapes_after_automatic_recompile(device):
    # dynamic=None (the default): the second shape recompiles once with dynamic sizes, then never again.
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(function, backend=counter, fullgraph=True)
    for rows, cols in [(3, 4), (5, 7), (8, 16), (13, 2)]:
        x, w = inputs(device, rows, cols)
        assert_same(compiled(x, w), function(x, w))
    assert counter.frame_count == 2


# ----------------------------------------------------------------------------- training


def test_training_step(device):
    """forward + backward + SGD, the model compiled (fullgraph) and the optimizer step compiled."""
    torch.manual_seed(0)
    eager = WeightedSumNet().to(device)
    compiled_net = WeightedSumNet().to(device)
    compiled_net.load_state_dict(eager.state_dict())
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    compiled_opt = torch.optim.SGD(compiled_net.parameters(), lr=0.05, momentum=0.9)

    @torch.compile(fullgraph=True)
    def loss_of(x, target):
        return torch.nn.functional.mse_loss(compiled_net(x).squeeze(-1), target)

    @torch.compile
    def compiled_step():
        compiled_opt.step()

    for _ in range(3):
        x, target = torch.randn(16, 8, device=device), torch.randn(16, device=device)

        eager_opt.zero_grad()
        eager_loss = torch.nn.functional.mse_loss(eager(x).squeeze(-1), target)
        eager_loss.backward()
        eager_opt.step()

        compiled_opt.zero_grad()
        loss = loss_of(x, target)
        loss.backward()
        assert compiled_net.weight.grad is not None
        torch.testing.assert_close(compiled_net.weight.grad, eager.weight.grad, rtol=1e-4, atol=1e-5)
        compiled_step()

        torch.testing.assert_close(loss, eager_loss, rtol=1e-4, atol=1e-5)
    for (name, actual), expected in zip(compiled_net.named_parameters(), eager.parameters()):
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5, msg=f"parameter {name}")


# ------------------------------------------------------------------------------ CUDA graphs


@needs_cuda
def test_reduce_overhead_cuda_graphs_new_data_each_step():
    compiled = torch.compile(function, mode="reduce-overhead", fullgraph=True)
    w = torch.randn(8, device="cuda")
    for step in range(6):
        x = torch.randn(32, 8, device="cuda")  # new data, new allocations, every step
        result = compiled(x, w).clone()  # a replay overwrites the previous step's output
        assert_same(result, function(x, w))
        if step == 0:
            torch.cuda.synchronize()
    assert counters["inductor"]["cudagraph_skips"] == 0, "CUDA graphs were skipped"


@needs_cuda
def test_reduce_overhead_cuda_graphs_training():
    # A real training loop: CUDA-graph trees reuse the graph's output memory on the next step, so
    # gradients are set to None before each step (the optimizer's default) rather than summed into
    # the previous step's .grad, which lives in that memory (with or without a custom op).
    torch.manual_seed(0)
    net = WeightedSumNet().cuda()
    reference = WeightedSumNet().cuda()
    reference.load_state_dict(net.state_dict())
    compiled = torch.compile(net, mode="reduce-overhead", fullgraph=True)
    optimizers = [torch.optim.SGD(model.parameters(), lr=0.1) for model in (net, reference)]
    for _ in range(4):
        x = torch.randn(32, 8, device="cuda")
        for model, optimizer in zip((compiled, reference), optimizers):
            optimizer.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            optimizer.step()
    for (name, actual), expected in zip(net.named_parameters(), reference.parameters()):
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5, msg=f"parameter {name} after 4 steps")
    assert counters["inductor"]["cudagraph_skips"] == 0, "CUDA graphs were skipped"
