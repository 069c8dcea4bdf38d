"""`import custom_ops` and Inductor: lazy registration, the opt-out, the on-disk cache key.

Each check runs in a fresh interpreter with the package importable (the `site` fixture of
conftest.py: the installed package, or one built once into a temporary directory).
"""

import json

import pytest

from test_package import run_python

pytestmark = pytest.mark.slow

# Compiles relu(weighted_sum(a + b, w)) * 3 and prints whether the generated code calls our op.
COMPILE_AND_REPORT = """
import json, torch
from torch._inductor.utils import run_and_get_code
def model(a, b, w):
    return torch.relu(torch.ops.custom.weighted_sum(a + b, w)) * 3
a, b, w = torch.randn(8, 5), torch.randn(8, 5), torch.randn(5)
result, code = run_and_get_code(torch.compile(model, fullgraph=True), a, b, w)
assert torch.equal(result, model(a, b, w))
from torch._dynamo.utils import counters
print(json.dumps({"calls_op": "custom.weighted_sum" in "\\n".join(code),
                  "fx_cache_hits": counters["inductor"]["fxgraph_cache_hit"],
                  "aot_cache_hits": counters["aot_autograd"]["autograd_cache_hit"]}))
"""


def report(result):
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_does_not_import_inductor_or_dynamo(site):
    result = run_python(
        """
        import sys, json, torch
        before = {m for m in ("torch._inductor", "torch._dynamo") if m in sys.modules}
        import custom_ops
        after = sorted(m for m in ("torch._inductor", "torch._dynamo", "torch._inductor.decomposition")
                       if m in sys.modules)
        print(json.dumps({"before": sorted(before), "after": after,
                          "enabled": custom_ops.inductor_decomposition_enabled()}))
        """,
        site,
    )
    assert report(result) == {"before": [], "after": [], "enabled": True}


def test_import_after_a_compile_still_decomposes(site):
    result = run_python(
        "import torch\n"
        "torch.compile(lambda x: x.sin() + 1, fullgraph=True)(torch.randn(4))\n"  # Inductor loaded, table cached
        "import custom_ops\n" + COMPILE_AND_REPORT,
        site,
    )
    assert report(result)["calls_op"] is False


@pytest.mark.parametrize("how", ["function", "environment"])
def test_opt_out_keeps_our_kernel(site, how, monkeypatch):
    if how == "environment":
        monkeypatch.setenv("CUSTOM_OPS_INDUCTOR_DECOMPOSE", "0")
        setup = "import custom_ops\nassert not custom_ops.inductor_decomposition_enabled()\n"
    else:
        setup = "import custom_ops\ncustom_ops.set_inductor_decomposition(False)\n"
    assert report(run_python(setup + COMPILE_AND_REPORT, site))["calls_op"] is True


def test_toggling_in_one_process(site):
    result = run_python(
        """
        import json, torch, custom_ops
        from torch._inductor.utils import run_and_get_code
        f = lambda x, w: torch.relu(torch.ops.custom.weighted_sum(x, w))
        x, w = torch.randn(6, 3), torch.randn(3)
        seen = []
        for enabled in (True, False, True):
            custom_ops.set_inductor_decomposition(enabled)
            torch._dynamo.reset()
            _, code = run_and_get_code(torch.compile(f, fullgraph=True), x, w)
            seen.append("custom.weighted_sum" in "\\n".join(code))
        print(json.dumps(seen))
        """,
        site,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [False, True, False]


def test_on_disk_cache_does_not_cross_states(site, tmp_path, monkeypatch):
    # Two processes sharing one Inductor cache directory: the second, with the decomposition off,
    # must not be served the first one's fused code (and a third, on again, hits the cache).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    on = "import custom_ops\n" + COMPILE_AND_REPORT
    first = report(run_python(on, site))
    monkeypatch.setenv("CUSTOM_OPS_INDUCTOR_DECOMPOSE", "0")
    off = report(run_python(on, site))
    monkeypatch.delenv("CUSTOM_OPS_INDUCTOR_DECOMPOSE")
    again = report(run_python(on, site))
    assert first["calls_op"] is False
    assert off["calls_op"] is True
    assert again["calls_op"] is False
    assert again["fx_cache_hits"] + again["aot_cache_hits"] >= 1  # the cache works, it only keys the state
