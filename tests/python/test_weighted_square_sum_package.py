"""custom_ops.weighted_square_sum, the package's typed wrapper of custom::weighted_square_sum, and
the package's Inductor decomposition and DTensor rules for it.

As in test_package.py, every check runs in a fresh interpreter with the package importable (the
`site` fixture of conftest.py): this test process already loaded another copy of the library.
"""

import json

import pytest
import torch

from environment import HAS_GPU
from test_package import run_python

pytestmark = pytest.mark.slow


def report(result):
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_wrapper_is_exported_typed_and_documented(site):
    run_python(
        """
        import inspect, typing, torch, custom_ops
        assert "weighted_square_sum" in custom_ops.__all__
        doc = custom_ops.weighted_square_sum.__doc__
        for part in ("weight * input**2", "Args:", "Returns:", "dim:", "keepdim:", "dtype:"):
            assert part in doc, (part, doc)
        hints = typing.get_type_hints(custom_ops.weighted_square_sum)
        assert hints["input"] is torch.Tensor and hints["weight"] is torch.Tensor, hints
        assert hints["keepdim"] is bool and hints["return"] is torch.Tensor, hints
        assert hints["dtype"] == typing.Optional[torch.dtype], hints
        parameters = inspect.signature(custom_ops.weighted_square_sum).parameters
        assert list(parameters) == ["input", "weight", "dim", "keepdim", "dtype"]
        assert parameters["dim"].default is None and parameters["keepdim"].default is False
        assert parameters["dtype"].kind is inspect.Parameter.KEYWORD_ONLY and parameters["dtype"].default is None
        """,
        site,
    )


def test_wrapper_values_gradients_and_compile(site):
    run_python(
        f"""
        import torch, custom_ops
        f = custom_ops.weighted_square_sum
        devices = ["cpu"] + (["cuda"] if {HAS_GPU} and custom_ops.WITH_CUDA else [])
        for device in devices:
            x = torch.randn(4, 5, 6, dtype=torch.float64, device=device)
            w = torch.randn(6, dtype=torch.float64, device=device)
            composite = lambda dim=None, keepdim=False: (w * x.square()).sum(dim, keepdim)
            torch.testing.assert_close(f(x, w), composite())
            torch.testing.assert_close(f(x, w, 1), composite(1))  # an int dim
            torch.testing.assert_close(f(x, w, [0, -1], True), composite([0, -1], True))
            torch.testing.assert_close(f(x, w, (2,), keepdim=True), composite((2,), True))
            torch.testing.assert_close(f(x, w, []), composite())
            out = f(x, w, [1], dtype=torch.float32)
            assert out.dtype == torch.float32 and out.shape == (4, 6)
            torch.testing.assert_close(out, composite([1]).float())
            xh, wh = x.half(), w.half()
            half = f(xh, wh, -1)
            assert half.dtype == torch.float16
            exact = (wh.double() * xh.double().square()).sum(-1)
            torch.testing.assert_close(half, exact.half(), rtol=2**-10, atol=0)  # one rounding, 1 ulp

            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            f(xg, wg, 1).sum().backward()
            torch.testing.assert_close(xg.grad, 2 * w * x)
            torch.testing.assert_close(wg.grad, x.square().sum((0, 1)))

        x, w = torch.randn(3, 7), torch.randn(7)
        for backend in ("aot_eager", "inductor"):
            compiled = torch.compile(lambda x, w: f(x, w, 1, keepdim=True), fullgraph=True, backend=backend)
            torch.testing.assert_close(compiled(x, w), (w * x * x).sum(1, keepdim=True))
        """,
        site,
    )


# Compiles a function that calls the op, reports whether the generated code calls it.
COMPILE_AND_REPORT = """
import json, torch
from torch._inductor.utils import run_and_get_code
def model(a, w):
    return torch.relu(torch.ops.custom.weighted_square_sum(a * 2, w, [1])) + 1
a, w = torch.randn(8, 5), torch.randn(5)
result, code = run_and_get_code(torch.compile(model, fullgraph=True), a, w)
torch.testing.assert_close(result, model(a, w))
print(json.dumps({"calls_op": "custom.weighted_square_sum" in "\\n".join(code)}))
"""


@pytest.mark.parametrize("how", ["default", "function", "environment"])
def test_package_decomposes_unless_opted_out(site, how, monkeypatch):
    setup = "import custom_ops\n"
    if how == "function":
        setup += "custom_ops.set_inductor_decomposition(False)\n"
    elif how == "environment":
        monkeypatch.setenv("CUSTOM_OPS_INDUCTOR_DECOMPOSE", "0")
    assert report(run_python(setup + COMPILE_AND_REPORT, site))["calls_op"] is (how != "default")


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_dtensor_rules_registered_with_the_package(site):
    # A 1-rank gloo group: DTensor raises "no sharding strategy registered" without the rule.
    result = run_python(
        """
        import json, torch, custom_ops
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        mesh = init_device_mesh("cpu", (1,))
        x, w = torch.randn(4, 6), torch.randn(6)
        xd, wd = distribute_tensor(x, mesh, [Shard(0)]), distribute_tensor(w, mesh, [Replicate()])
        summed = custom_ops.weighted_square_sum(xd, wd, 0)
        kept = custom_ops.weighted_square_sum(xd, wd, 1)
        torch.testing.assert_close(summed.full_tensor(), (w * x.square()).sum(0))
        torch.testing.assert_close(kept.full_tensor(), (w * x.square()).sum(1))
        print(json.dumps({"registered": custom_ops.sharding.is_registered(),
                          "summed": str(list(summed.placements)), "kept": str(list(kept.placements))}))
        dist.destroy_process_group()
        """,
        site,
    )
    # Partial from the sharded summed dim 0 (1 rank: no reduction needed to read it), Shard kept.
    assert report(result) == {"registered": True, "summed": "[Partial(sum)]", "kept": "[Shard(dim=0)]"}
