# SPDX-License-Identifier: BSD-3-Clause
"""TorchScript callers: torch.jit.script of functions and nn.Modules calling the `custom` operators,
autograd through them, and torch.jit.save / torch.jit.load in a fresh process that only loaded the
library (as a deployment would). TorchScript is deprecated upstream (torch warns on torch.jit.script,
save and load: a DeprecationWarning up to 2.13, a FutureWarning since 2.14); it stays supported here,
and every script/save expects exactly that warning."""

import subprocess
import sys
import textwrap

import pytest
import torch

from environment import LIBRARY, REPO
from operators import each_operator
from torch_warnings import torchscript_deprecation


def script(obj):
    with torchscript_deprecation():
        return torch.jit.script(obj)


def save(scripted, path):
    with torchscript_deprecation():
        torch.jit.save(scripted, str(path))


def function(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.custom.weighted_sum(x, w) + x


def out_function(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    # TorchScript picks the overload from the arguments: out= selects custom::weighted_sum.out.
    torch.ops.custom.weighted_sum(x, w, out=out)
    return out


def inplace_function(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    torch.ops.custom.weighted_sum_(y, w)
    return y


def square_sum_function(
    x: torch.Tensor, w: torch.Tensor, dim: list[int] | None, keepdim: bool, dtype: torch.dtype | None
) -> torch.Tensor:
    return torch.ops.custom.weighted_square_sum(x, w, dim, keepdim, dtype=dtype)


scripted_function = script(function)
scripted_out = script(out_function)
scripted_inplace = script(inplace_function)
scripted_square_sum = script(square_sum_function)


class Net(torch.nn.Module):
    """A learned weight for both operators: custom::weighted_sum then a linear layer, plus each row's
    custom::weighted_square_sum."""

    def __init__(self, features: int = 8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(features))
        self.linear = torch.nn.Linear(features, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        row_sums = torch.ops.custom.weighted_square_sum(x, self.weight, [-1], keepdim=True)
        return self.linear(torch.ops.custom.weighted_sum(x, self.weight)) + row_sums


def assert_same(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_script_function(device):
    x, w = torch.randn(5, 8, device=device), torch.randn(8, device=device)
    assert "custom::weighted_sum" in str(scripted_function.graph)
    assert_same(scripted_function(x, w), w * x * x + x)


def test_script_out_and_inplace(device):
    x, w = torch.randn(5, 8, device=device), torch.randn(8, device=device)
    out = torch.empty_like(x)
    result = scripted_out(x, w, out)
    assert_same(out, w * x * x)
    assert result.data_ptr() == out.data_ptr()
    assert_same(scripted_inplace(x, w), w * x * x)


# (dim, keepdim, dtype) of custom::weighted_square_sum through TorchScript's argument passing.
SQUARE_SUM_ARGUMENTS = [
    (None, False, None),
    ([], True, None),
    ([0], False, None),
    ([-1], True, None),
    ([1, 0], False, torch.float64),
    ([1], False, torch.float16),
]


@pytest.mark.parametrize("dim, keepdim, dtype", SQUARE_SUM_ARGUMENTS)
def test_script_square_sum_matches_composite(device, dim, keepdim, dtype):
    assert "custom::weighted_square_sum" in str(scripted_square_sum.graph)
    x, w = torch.randn(5, 8, device=device), torch.randn(8, device=device)
    result = scripted_square_sum(x, w, dim, keepdim, dtype)
    expected = (w * x.square()).sum(dim, keepdim, dtype=dtype)
    assert result.dtype == expected.dtype and result.shape == expected.shape
    # Against the composite in float64: the op sums in float32 (float64 for a float64 result).
    reference = (w.double() * x.double().square()).sum(dim, keepdim)
    tolerance = {torch.float16: 2e-3, torch.float32: 1e-5, torch.float64: 1e-12}[result.dtype]
    torch.testing.assert_close(result.double(), reference, rtol=tolerance, atol=tolerance)


def test_autograd_through_scripted_square_sum(device):
    x = torch.randn(4, 6, device=device, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, device=device, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(4, 1, device=device, dtype=torch.float64)
    scripted_grads = torch.autograd.grad(scripted_square_sum(x, w, [1], True, None), (x, w), grad)
    composite_grads = torch.autograd.grad((w * x.square()).sum(1, keepdim=True), (x, w), grad)
    for actual, expected in zip(scripted_grads, composite_grads):
        torch.testing.assert_close(actual, expected)


def test_script_module(device):
    net = Net().to(device)
    scripted = script(net)
    assert "custom::weighted_sum" in str(scripted.graph)
    assert "custom::weighted_square_sum" in str(scripted.graph)
    for rows in (1, 4, 9):
        x = torch.randn(rows, 8, device=device)
        assert_same(scripted(x), net(x))


def test_autograd_through_scripted_module(device):
    net = Net().to(device)
    scripted = script(net)
    x = torch.randn(6, 8, device=device, requires_grad=True)
    grad = torch.randn(6, 3, device=device)

    scripted(x).backward(grad)
    scripted_grads = [x.grad.clone()] + [p.grad.clone() for p in scripted.parameters()]
    x.grad = None
    net.zero_grad()
    net(x).backward(grad)
    eager_grads = [x.grad] + [p.grad for p in net.parameters()]
    assert len(scripted_grads) == len(eager_grads) == 4
    for actual, expected in zip(scripted_grads, eager_grads):
        assert_same(actual, expected)
    # and against the formula: d/dx of weight * x**2 is 2 * weight * x
    x2 = torch.randn(3, 8, device=device, requires_grad=True)
    w2 = torch.randn(8, device=device, requires_grad=True)
    scripted_function(x2, w2).sum().backward()
    assert_same(x2.grad, 2 * w2.detach() * x2.detach() + 1)
    assert_same(w2.grad, (x2.detach() ** 2).sum(0))


# A fresh interpreter: torch, then the library (nothing of the test's process), then the files.
LOADER = textwrap.dedent(
    """
    import sys
    import torch
    library, module_path, function_path, data_path, result_path, device = sys.argv[1:]
    if library != "-":
        torch.ops.load_library(library)
    module = torch.jit.load(module_path, map_location=device)
    function = torch.jit.load(function_path, map_location=device)
    x, w = (t.to(device) for t in torch.load(data_path))
    x.requires_grad_()
    y = module(x)
    y.sum().backward()
    results = {"module": y.detach().cpu(), "grad": x.grad.cpu(), "function": function(x.detach(), w).cpu()}
    torch.save(results, result_path)
    """
)


def run_loader(library, *paths, device):
    return subprocess.run(
        [sys.executable, "-c", LOADER, str(library), *map(str, paths), device],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_save_and_load_in_fresh_process(device, tmp_path):
    net = Net()
    save(script(net), tmp_path / "net.pt")
    save(scripted_function, tmp_path / "function.pt")
    x, w = torch.randn(7, 8), torch.randn(8)
    torch.save((x, w), tmp_path / "data.pt")

    result = run_loader(
        LIBRARY,
        tmp_path / "net.pt",
        tmp_path / "function.pt",
        tmp_path / "data.pt",
        tmp_path / "out.pt",
        device=device,
    )
    assert result.returncode == 0, result.stderr
    outputs = torch.load(tmp_path / "out.pt")

    xg = x.clone().requires_grad_()
    expected = net(xg)
    expected.sum().backward()
    assert_same(outputs["module"], expected.detach())
    assert_same(outputs["grad"], xg.grad)
    assert_same(outputs["function"], w * x * x + x)


def test_load_without_library_fails_clearly(tmp_path):
    # The negative control: the saved files need the library; without it torch.jit.load says which op.
    save(script(Net()), tmp_path / "net.pt")
    save(scripted_function, tmp_path / "function.pt")
    torch.save((torch.randn(2, 8), torch.randn(8)), tmp_path / "data.pt")
    result = run_loader(
        "-", tmp_path / "net.pt", tmp_path / "function.pt", tmp_path / "data.pt", tmp_path / "out.pt", device="cpu"
    )
    assert result.returncode != 0
    # The first operator of the module that cannot be found: either one.
    names = ("custom::weighted_sum", "custom.weighted_sum", "custom::weighted_square_sum", "custom.weighted_square_sum")
    assert any(name in result.stderr for name in names), result.stderr[-2000:]


# ---------------------------------------------------------------------------------------------
# Every operator of the table: the module make_scripted_module.py writes for the C++ test
# (torchscript_load_test.cpp), scripted, saved and loaded here; the same call as the eager op.
# ---------------------------------------------------------------------------------------------


def scripted_row_module(op, scratch):
    sys.path.insert(0, str(REPO / "tests" / "cpp"))
    try:
        import make_scripted_module
    finally:
        sys.path.pop(0)
    with torchscript_deprecation():
        return make_scripted_module.script(op.name, op.kind, scratch)


def row_call_args(op):
    # An elementwise module's forward takes x; a reduction's x, dim, keepdim and dtype.
    return () if op.kind == "elementwise" else ([-1], True, torch.float64)


@each_operator
def test_row_module_scripts_saves_and_loads(op, tmp_path):
    module = scripted_row_module(op, tmp_path)
    assert f"custom::{op.name}(" in str(module.graph)
    save(module, tmp_path / f"{op.name}.pt")
    with torchscript_deprecation():
        loaded = torch.jit.load(str(tmp_path / f"{op.name}.pt"))
    x = torch.randn(5, 4)
    args = row_call_args(op)
    with torch.no_grad():
        expected = op(x, module.weight, *args[:2], **({"dtype": args[2]} if args else {}))
        assert torch.equal(loaded(x, *args), expected)
