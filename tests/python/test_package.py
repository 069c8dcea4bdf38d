# SPDX-License-Identifier: BSD-3-Clause
"""The Python package `custom_ops` (pyproject.toml + scikit-build-core + the top-level CMake): its
loading and version checks, then each operator's typed wrapper and Inductor decomposition
(operators.py's table: lazy registration, the opt-out, the on-disk cache key).

Uses the installed package when the importable `custom_ops` is this checkout's current code, else
builds it once per session with `pip install --no-build-isolation --no-deps --target <tmp>`
(conftest.py's `site` fixture; CPU kernels only, about 4 minutes on 2 cores). Every check runs in
a fresh interpreter: this test process already loaded another copy of the library (conftest), and
one process can hold only one.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from environment import HAS_GPU, LIBRARY, REPO
from operators import ELEMENTWISE, REDUCTION, each_operator, table
from test_environment_setup import TORCH_RELEASES

pytestmark = pytest.mark.slow


def run_python(code, pythonpath, check=True):
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,  # catches a hang, not slowness: ten ONNX exports in one take minutes under load
        cwd=pathlib.Path(pythonpath or REPO).parent,  # not the repo root: no stray python/ on sys.path
    )
    if check and result.returncode != 0:
        pytest.fail(f"python failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def test_import_loads_the_bundled_library(site):
    result = run_python(
        """
        import json, importlib.metadata, pathlib, torch
        import custom_ops
        print(json.dumps({
            "library": custom_ops.library_path(),
            "package_dir": str(pathlib.Path(custom_ops.__file__).resolve().parent),
            "loaded": sorted(torch.ops.loaded_libraries),
            "version": custom_ops.__version__,
            "dist_version": importlib.metadata.version("custom-ops"),
            "torch_version": custom_ops.TORCH_VERSION,
            "with_cuda": custom_ops.WITH_CUDA,
            "library_path_documented": bool(custom_ops.library_path.__doc__),
            "schemas": [str(torch.ops.custom.weighted_sum.default._schema),
                        str(torch.ops.custom.weighted_sum.out._schema),
                        str(torch.ops.custom.weighted_sum_.default._schema)],
        }))
        """,
        site,
    )
    info = json.loads(result.stdout.strip().splitlines()[-1])
    library = pathlib.Path(info["library"])
    assert library.is_absolute() and library.is_file()
    assert library.parent == pathlib.Path(info["package_dir"])
    assert library.name == "libcustom_ops.so"
    assert info["loaded"] == [str(library)]
    version = (REPO / "CMakeLists.txt").read_text().split("project(CustomOps VERSION ", 1)[1].split()[0]
    series = ".".join(torch.__version__.split(".")[:2])
    assert info["version"] == info["dist_version"]
    assert re.fullmatch(rf"{re.escape(version)}\+torch{re.escape(series)}\.(cpu|cu\d+)", info["version"])
    assert torch.__version__.startswith(info["torch_version"])
    assert isinstance(info["with_cuda"], bool)
    assert info["library_path_documented"]
    assert info["schemas"][0] == "custom::weighted_sum(Tensor input, Tensor weight) -> Tensor"


def report(result):
    return json.loads(result.stdout.strip().splitlines()[-1])


# (TORCH_CUDA_ARCH_LIST, compute capability, covered), as tests/cpp/cuda_build_test.cpp's rule.
ARCHITECTURE_CASES = [
    ("8.0;9.0", (8, 0), True), ("8.0;9.0", (8, 6), True), ("8.0 9.0", (8, 9), True),
    ("8.6;9.0", (8, 0), False), ("8.0;9.0", (7, 5), False), ("8.0;9.0", (10, 0), False),
    ("10.0", (12, 0), False), ("7.5;10.0;12.0", (12, 1), True),
    ("8.0;9.0+PTX", (10, 0), True), ("8.0;9.0+PTX", (12, 0), True), ("9.0+PTX", (8, 6), False),
    ("9.0a", (9, 0), True), ("8.0a", (8, 6), False), ("10.0f", (10, 3), True),
    ("", (9, 0), False), ("Hopper;sm_90;9", (9, 0), False),
]  # fmt: skip

GPUS_WITHOUT_KERNELS = """
import json, warnings, torch
import custom_ops
queued = any(getattr(call, "__module__", None) == "custom_ops" for call, _ in torch.cuda._queued_calls)
covers = [custom_ops._architectures_cover(archs, *capability) for archs, capability, _ in {cases}]
# Two GPUs, an H100 and a T4, as torch.cuda would report them.
torch.cuda.device_count = lambda: 2
torch.cuda.get_device_capability = lambda index: [(9, 0), (7, 5)][index]
torch.cuda.get_device_name = lambda index: ["H100", "T4"][index]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    custom_ops._warn_for_gpus_without_kernels("8.0;9.0+PTX")
    torch.cuda.get_device_capability = None  # a failing check stays silent
    custom_ops._warn_for_gpus_without_kernels("8.0;9.0+PTX")
print(json.dumps({{"archs": custom_ops.CUDA_ARCHS, "queued": queued or torch.cuda.is_initialized(),
                  "covers": covers, "warnings": [str(w.message) for w in caught]}}))
"""


def test_gpus_without_kernels_get_one_warning_when_cuda_starts(site):
    info = report(run_python(GPUS_WITHOUT_KERNELS.format(cases=ARCHITECTURE_CASES), site))
    assert info["covers"] == [covered for _, _, covered in ARCHITECTURE_CASES]
    assert info["warnings"] == [
        "custom_ops: libcustom_ops.so has no kernels for cuda:1 (T4, compute capability 7.5): it was built "
        'with TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX". Rebuild it with TORCH_CUDA_ARCH_LIST="7.5" in the '
        "environment (pip install ., make install)."
    ]
    # A check is queued for CUDA's initialization (import does not initialize CUDA) under a CUDA torch:
    # this one with CUDA kernels, the one below without.
    assert info["queued"] is bool(torch.version.cuda)


NO_CUDA_KERNELS = """
import json, warnings, torch
import custom_ops
torch.cuda.device_count = lambda: {count}
torch.cuda.get_device_name = lambda index=0: "H100"
torch.version.cuda = "13.2"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    custom_ops._warn_without_cuda_kernels()
print(json.dumps([str(w.message) for w in caught]))
"""


@pytest.mark.parametrize("count", [0, 1])
def test_a_library_without_cuda_kernels_warns_once_a_gpu_is_seen(site, count):
    warned = report(run_python(NO_CUDA_KERNELS.format(count=count), site))
    expected = (
        "custom_ops: libcustom_ops.so has no CUDA kernels, but 1 GPU(s) are visible (H100): its ops run on "
        "CPU tensors only. It was built without nvcc or with CUSTOM_OPS_CUDA=OFF; rebuild it with a CUDA 13.2 "
        "toolkit: pip install --no-build-isolation . -C cmake.define.CUSTOM_OPS_CUDA=ON"
    )
    assert warned == ([expected] if count else [])


# --------------------------------------------------------------------------- the wrappers

# An operator's kind -> its wrapper's parameters, as Python source of (name, type hint or None to
# skip, default, keyword-only); `empty` is inspect.Parameter.empty. By kind, as the package writes
# the wrappers: a new operator's wrapper is checked with no edit here.
WRAPPER_PARAMETERS = {
    ELEMENTWISE: "[('input', torch.Tensor, empty, False), "
    "('weight', typing.Union[torch.Tensor, float], empty, False), ('out', typing.Optional[torch.Tensor], None, True)]",
    REDUCTION: "[('input', torch.Tensor, empty, False), ('weight', torch.Tensor, empty, False), "
    "('dim', None, None, False), ('keepdim', bool, False, False), ('dtype', typing.Optional[torch.dtype], None, True)]",
}


@each_operator
def test_wrapper_is_exported_typed_and_documented(site, op):
    # The docstring states the term's value in the wrapper's argument names.
    formula = re.sub(r"\bw\b", "weight", re.sub(r"\bx\b", "input", table.expression(op.term.value)))
    run_python(
        f"""
        import inspect, typing, torch, custom_ops
        empty = inspect.Parameter.empty
        expected = {WRAPPER_PARAMETERS[op.kind]}
        f = custom_ops.{op.name}
        assert "{op.name}" in custom_ops.__all__
        doc = f.__doc__
        for part in [{formula!r}, "Args:", "Returns:"] + [name + ":" for name, *_ in expected]:
            assert part in doc, (part, doc)
        hints = typing.get_type_hints(f)
        assert hints["return"] is torch.Tensor, hints
        parameters = inspect.signature(f).parameters
        assert list(parameters) == [name for name, *_ in expected], parameters
        for name, hint, default, keyword_only in expected:
            assert hint is None or hints[name] == hint, (name, hints)
            assert parameters[name].default is default, parameters[name]
            assert (parameters[name].kind is inspect.Parameter.KEYWORD_ONLY) is keyword_only, parameters[name]
        """,
        site,
    )


@each_operator
def test_wrapper_values_gradients_and_compile(site, op, tmp_path):
    # Computed in the fresh interpreter, judged here against the composite.
    saved = tmp_path / "saved.pt"
    run_python(
        f"""
        import torch, custom_ops
        f = lambda x, w: custom_ops.{op.name}(x, w, *{op.args!r})
        results = {{}}
        for device in ["cpu"] + (["cuda"] if {HAS_GPU} and custom_ops.WITH_CUDA else []):
            x = torch.randn(4, 5, dtype=torch.float64, device=device, requires_grad=True)
            w = torch.randn(5, dtype=torch.float64, device=device, requires_grad=True)
            y = f(x, w)
            y.sum().backward()
            results[device] = [t.detach().cpu() for t in (x, w, y, x.grad, w.grad)]
        x, w = torch.randn(3, 7), torch.randn(7)
        for backend in ("aot_eager", "inductor"):
            results[backend] = [x, w, torch.compile(f, fullgraph=True, backend=backend)(x, w)]
        torch.save(results, {str(saved)!r})
        """,
        site,
    )
    results = torch.load(saved)
    assert {"cpu", "aot_eager", "inductor"} <= set(results)
    for key, result in results.items():
        x, w, y, *grads = result
        x.requires_grad_(bool(grads))
        w.requires_grad_(bool(grads))
        expected = op.composite(x, w, *op.args)
        torch.testing.assert_close(y, expected.detach(), msg=key)
        if grads:
            for grad, expected_grad in zip(grads, torch.autograd.grad(expected.sum(), [x, w])):
                torch.testing.assert_close(grad, expected_grad, msg=key)


def test_weighted_sum_wrapper_takes_a_number_weight(site):
    result = run_python(
        """
        import torch, custom_ops
        print(custom_ops.weighted_sum(torch.tensor([1.0, 2.0, 3.0]), torch.tensor(2.0)).tolist())
        print(custom_ops.weighted_sum(torch.tensor([1.0, 2.0, 3.0]), 2.0).tolist())
        """,
        site,
    )
    assert result.stdout.split() == ["[2.0,", "8.0,", "18.0]"] * 2, result.stdout


def test_weighted_square_sum_wrapper_takes_what_torch_sum_takes(site):
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


def test_out_and_in_place_wrappers_return_the_tensor_they_wrote(site):
    result = run_python(
        """
        import typing, warnings, torch, custom_ops
        x, w = torch.randn(4, 5), torch.randn(5)
        expected = w * x.square()  # float32: the same bits (the composite's operation order)

        out = torch.full((4, 5), float("nan"))
        assert custom_ops.weighted_sum(x, w, out=out) is out
        assert torch.equal(out, expected)
        small = torch.empty(3)  # resized, with ATen's warning, as torch.mul(out=) does
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert custom_ops.weighted_sum(x, w, out=small) is small
        assert torch.equal(small, expected)
        # torch 2.15 raises ATen's warning as a Python warning, 2.11 prints it on stderr (checked below).
        print("resize warning as a Python warning:", any("was resized" in str(c.message) for c in caught))

        self = x.clone()
        assert custom_ops.weighted_sum_(self, w) is self
        assert torch.equal(self, expected)

        # The mutating overloads have no Scalar form: a number is refused before the dispatcher.
        calls = (lambda: custom_ops.weighted_sum(x, 2.0, out=out), lambda: custom_ops.weighted_sum_(x.clone(), 2.0))
        for call in calls:
            try:
                call()
            except TypeError as error:
                assert "tensor weight, got float" in str(error), error
            else:
                raise SystemExit("a number weight was accepted")
        # The functional form still takes one (custom::weighted_sum.Scalar).
        assert torch.equal(custom_ops.weighted_sum(x, 2.0), 2.0 * x.square())

        # In place on a non-leaf is recorded by autograd; out= refuses inputs that require grad.
        leaf = torch.randn(4, 5, requires_grad=True)
        custom_ops.weighted_sum_(leaf * 1, w).sum().backward()
        torch.testing.assert_close(leaf.grad, 2 * w * leaf.detach())
        try:
            custom_ops.weighted_sum(leaf, w, out=torch.empty(4, 5))
        except RuntimeError as error:
            assert "don't support automatic differentiation" in str(error), error
        else:
            raise SystemExit("out= accepted an input that requires grad")

        # Compiled in one graph, each returning the tensor it wrote.
        def step(x, w, out):
            return custom_ops.weighted_sum_(custom_ops.weighted_sum(x, w, out=out), w) + 1
        compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
        out = torch.empty(4, 5)
        torch.testing.assert_close(compiled(x, w, out), w * expected.square() + 1)
        torch.testing.assert_close(out, w * expected.square())

        hints = typing.get_type_hints(custom_ops.weighted_sum)
        assert hints["out"] == typing.Optional[torch.Tensor] and hints["return"] is torch.Tensor, hints
        hints = typing.get_type_hints(custom_ops.weighted_sum_)
        assert hints == {"self": torch.Tensor, "weight": torch.Tensor, "return": torch.Tensor}, hints
        assert {"weighted_sum", "weighted_sum_"} <= set(custom_ops.__all__)
        """,
        site,
    )
    as_python_warning = "resize warning as a Python warning: True" in result.stdout
    assert as_python_warning or "was resized" in result.stderr, (result.stdout, result.stderr)


MISMATCH = """
import torch
torch.__version__ = "{fake}"   # as if another torch were installed
try:
    import custom_ops
except ImportError as error:
    print(error)
else:
    raise SystemExit("imported under the wrong torch")
# Raised before the library was loaded: nothing of it is in the process.
assert not torch.ops.loaded_libraries, torch.ops.loaded_libraries
try:
    torch.ops.custom.weighted_sum
except (AttributeError, RuntimeError):
    pass
else:
    raise SystemExit("the operators were registered")
"""


def test_other_torch_version_raises_import_error(site):
    message = run_python(MISMATCH.format(fake="2.10.0+cu128"), site).stdout
    assert "2.10.0+cu128" in message  # the running torch
    assert f"built against torch {torch.__version__.split('+')[0]}" in message  # the recorded one
    assert "reinstall custom_ops with `pip install .`" in message


def test_the_wheel_requires_the_torch_release_it_was_built_against(site):
    # So pip and uv see what the import checks (scripts/packaging/torch_requirement.py's torch_pin).
    requires = run_python("import importlib.metadata; print(importlib.metadata.requires('custom-ops'))", site).stdout
    release = torch.__version__.split("+")[0]
    assert f"'torch=={release}'" in requires, requires


def test_a_patch_release_of_torch_is_refused_at_import_as_pip_refuses_it(site):
    major, minor, patch = (int(part) for part in re.match(r"(\d+)\.(\d+)\.(\d+)", torch.__version__).groups())
    message = run_python(MISMATCH.format(fake=f"{major}.{minor}.{patch + 1}"), site).stdout
    assert f"but torch {major}.{minor}.{patch + 1} is installed" in message, message
    # The import's rule, on the table test_environment_setup.py checks the wheel's requirement with.
    code = (
        f"import json, custom_ops; print(json.dumps([custom_ops._same_torch(b, i) for b, i, _ in {TORCH_RELEASES!r}]))"
    )
    assert report(run_python(code, site)) == [same for _, _, same in TORCH_RELEASES]


def test_recorded_version_is_what_is_checked(site, tmp_path):
    # The package as installed, with its recorded torch version edited.
    source = pathlib.Path(
        run_python("import importlib.util; print(importlib.util.find_spec('custom_ops').origin)", site)
        .stdout.strip()
        .splitlines()[-1]
    ).parent
    copy = tmp_path / "site" / "custom_ops"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    info = copy / "_build_info.py"
    text, count = re.subn(r"^TORCH_VERSION = .*$", 'TORCH_VERSION = "1.13.1+cpu"', info.read_text(), flags=re.M)
    assert count == 1, text
    info.write_text(text)
    message = run_python(MISMATCH.format(fake=torch.__version__), copy.parent).stdout
    assert "built against torch 1.13.1+cpu" in message
    assert f"but torch {torch.__version__} is installed" in message


def test_second_copy_of_the_library_is_an_import_error(site):
    # Another libcustom_ops.so already registered the operators: importing must not abort the process.
    result = run_python(
        f"""
        import torch
        torch.ops.load_library({str(LIBRARY)!r})
        try:
            import custom_ops
        except ImportError as error:
            print(error)
        else:
            raise SystemExit("imported a second copy")
        torch.testing.assert_close(torch.ops.custom.weighted_sum(torch.ones(2), torch.ones(2)), torch.ones(2))
        """,
        site,
    )
    assert "already registered" in result.stdout


def test_library_does_not_link_python(site):
    library = pathlib.Path(
        run_python("import custom_ops; print(custom_ops.library_path())", site).stdout.strip().splitlines()[-1]
    )
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert "libtorch.so" in needed or "libtorch_cpu.so" in needed, needed
    assert not [name for name in needed if "python" in name], needed


# --------------------------------------------------------------------------- Inductor


def compile_and_report(op):
    """Source that compiles relu(op(a + b, w)) * 3 and prints whether the generated code calls the
    op, and the cache hits."""
    return f"""
import json, torch
from torch._inductor.utils import run_and_get_code
def model(a, b, w):
    return torch.relu({op.source("a + b", "w")}) * 3
a, b, w = torch.randn(8, 5), torch.randn(8, 5), torch.randn(5)
result, code = run_and_get_code(torch.compile(model, fullgraph=True), a, b, w)
torch.testing.assert_close(result, model(a, b, w), **({{"rtol": 0, "atol": 0}} if {op.bitwise} else {{}}))
from torch._dynamo.utils import counters
print(json.dumps({{"calls_op": "custom.{op.name}" in "\\n".join(code),
                  "fx_cache_hits": counters["inductor"]["fxgraph_cache_hit"],
                  "aot_cache_hits": counters["aot_autograd"]["autograd_cache_hit"]}}))
"""


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


@each_operator
def test_import_after_a_compile_still_decomposes(site, op):
    result = run_python(
        "import torch\n"
        "torch.compile(lambda x: x.sin() + 1, fullgraph=True)(torch.randn(4))\n"  # Inductor loaded, table cached
        "import custom_ops\n" + compile_and_report(op),
        site,
    )
    assert report(result)["calls_op"] is False


@pytest.mark.parametrize("how", ["default", "function", "environment"])
@each_operator
def test_package_decomposes_unless_opted_out(site, op, how, monkeypatch):
    setup = "import custom_ops\n"
    if how == "function":
        setup += "custom_ops.set_inductor_decomposition(False)\n"
    elif how == "environment":
        monkeypatch.setenv("CUSTOM_OPS_INDUCTOR_DECOMPOSE", "0")
        setup += "assert not custom_ops.inductor_decomposition_enabled()\n"
    assert report(run_python(setup + compile_and_report(op), site))["calls_op"] is (how != "default")


@each_operator
def test_toggling_in_one_process(site, op):
    result = run_python(
        f"""
        import json, torch, custom_ops
        from torch._inductor.utils import run_and_get_code
        f = lambda x, w: torch.relu({op.source("x", "w")})
        x, w = torch.randn(6, 3), torch.randn(3)
        seen = []
        for enabled in (True, False, True):
            custom_ops.set_inductor_decomposition(enabled)
            torch._dynamo.reset()
            _, code = run_and_get_code(torch.compile(f, fullgraph=True), x, w)
            seen.append("custom.{op.name}" in "\\n".join(code))
        print(json.dumps(seen))
        """,
        site,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [False, True, False]


@each_operator
def test_on_disk_cache_does_not_cross_states(site, op, tmp_path, monkeypatch):
    # Two processes sharing one Inductor cache directory: the second, with the decomposition off,
    # must not be served the first one's fused code (and a third, on again, hits the cache).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    on = "import custom_ops\n" + compile_and_report(op)
    first = report(run_python(on, site))
    monkeypatch.setenv("CUSTOM_OPS_INDUCTOR_DECOMPOSE", "0")
    off = report(run_python(on, site))
    monkeypatch.delenv("CUSTOM_OPS_INDUCTOR_DECOMPOSE")
    again = report(run_python(on, site))
    assert first["calls_op"] is False
    assert off["calls_op"] is True
    assert again["calls_op"] is False
    assert again["fx_cache_hits"] + again["aot_cache_hits"] >= 1  # the cache works, it only keys the state


# --------------------------------------------------------------------------- the wheel


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf")
def test_make_wheel_repairs_the_wheel_into_a_manylinux_one_without_torch(site, tmp_path):
    # The package as pip installed it (its files and dist-info, a RECORD of them), zipped as the wheel
    # pip built, then scripts/packaging/repair-wheel.sh as make wheel runs it (auditwheel from PyPI
    # into the checkout's .venv-wheel; skipped where it is not there and cannot be installed).
    import base64
    import hashlib
    import zipfile

    where = pathlib.Path(
        run_python("import custom_ops, pathlib; print(pathlib.Path(custom_ops.__file__).parent.parent)", site)
        .stdout.strip()
        .splitlines()[-1]
    )
    (dist_info,) = where.glob("custom_ops-*.dist-info")
    version = dist_info.name[len("custom_ops-") : -len(".dist-info")]
    wheel = tmp_path / f"custom_ops-{version}-py3-none-linux_x86_64.whl"
    record = f"{dist_info.name}/RECORD"
    lines = []
    with zipfile.ZipFile(wheel, "w") as archive:
        for directory in (where / "custom_ops", dist_info):
            for file in sorted(directory.rglob("*")):
                name = file.relative_to(where).as_posix()
                if file.is_file() and "__pycache__" not in file.parts and name != record:
                    archive.write(file, name)
                    digest = base64.urlsafe_b64encode(hashlib.sha256(file.read_bytes()).digest()).rstrip(b"=")
                    lines.append(f"{name},sha256={digest.decode()},{file.stat().st_size}")
        archive.writestr(record, "\n".join([*lines, f"{record},,"]) + "\n")
    out = tmp_path / "dist"
    result = subprocess.run(
        [str(REPO / "scripts" / "packaging" / "repair-wheel.sh"), str(wheel), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,  # the script finds the checkout itself
    )
    if result.returncode == 3:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stdout + result.stderr
    (repaired,) = out.glob("*.whl")
    assert re.fullmatch(rf"custom_ops-{re.escape(version)}-py3-none-manylinux_2_\d+_x86_64\.whl", repaired.name)
    names = zipfile.ZipFile(repaired).namelist()
    grafted = [name for name in names if re.search(r"lib(torch|c10|cudart|gomp)", name.split("/")[-1])]
    assert grafted == [], grafted  # torch's wheel brings them
    assert "custom_ops/libcustom_ops.so" in names
