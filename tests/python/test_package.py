"""The Python package `custom_ops` (pyproject.toml + scikit-build-core + the top-level CMake).

Uses the installed package when `custom_ops` is importable, else builds it once per session with
`pip install --no-build-isolation --no-deps --target <tmp>` (conftest.py's `site` fixture; CPU
kernels only, about 4 minutes on 2 cores). Every check runs in a fresh interpreter: this test
process already loaded another copy of the library (conftest), and one process can hold only one.
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


@pytest.mark.slow
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
    assert info["version"] == info["dist_version"] == version
    assert torch.__version__.startswith(info["torch_version"])
    assert isinstance(info["with_cuda"], bool)
    assert info["schemas"][0] == "custom::weighted_sum(Tensor input, Tensor weight) -> Tensor"


@pytest.mark.slow
def test_weighted_sum_function(site):
    run_python(
        f"""
        import torch, custom_ops
        doc = custom_ops.weighted_sum.__doc__
        assert "weight * input**2" in doc and "Args:" in doc and "Returns:" in doc, doc
        assert custom_ops.library_path.__doc__
        devices = ["cpu"] + (["cuda"] if {HAS_GPU} and custom_ops.WITH_CUDA else [])
        for device in devices:
            x = torch.randn(4, 5, device=device, requires_grad=True)
            w = torch.randn(5, device=device, requires_grad=True)
            y = custom_ops.weighted_sum(x, w)
            torch.testing.assert_close(y, w * x * x)
            y.sum().backward()
            torch.testing.assert_close(x.grad, 2 * w * x)
            torch.testing.assert_close(w.grad, (x * x).sum(0))
        print(custom_ops.weighted_sum(torch.tensor([1.0, 2.0, 3.0]), torch.tensor(2.0)).tolist())
        compiled = torch.compile(custom_ops.weighted_sum, fullgraph=True, backend="aot_eager")
        x, w = torch.randn(3, 2), torch.randn(2)
        torch.testing.assert_close(compiled(x, w), w * x * x)
        """,
        site,
    )


@pytest.mark.slow
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


# Runs the op on a DTensor of a 1-rank gloo group: DTensor raises "no sharding strategy
# registered" unless the rules are in place.
DTENSOR_CALL = """
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
x, w = torch.randn(4, 6), torch.randn(6)
y = torch.ops.custom.weighted_sum(distribute_tensor(x, mesh, [Shard(0)]), distribute_tensor(w, mesh, [Shard(0)]))
assert torch.equal(y.full_tensor(), w * x.square())
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_dtensor_rules_wait_for_the_program_to_import_dtensor(site):
    code = textwrap.dedent(
        """
        import json, sys, torch
        import custom_ops
        state = {"dtensor_loaded_by_import": "torch.distributed.tensor" in sys.modules,
                 "registered_by_import": custom_ops.sharding.is_registered()}
        import torch.distributed.tensor
        state["registered_after_dtensor_import"] = custom_ops.sharding.is_registered()
        # The module keeps its own loader, and the watch is gone once it has fired.
        state["loader"] = type(torch.distributed.tensor.__loader__).__name__
        state["watches_left"] = [
            type(f).__name__ for f in sys.meta_path if getattr(f, "name", None) == "torch.distributed.tensor"]
        """
    )
    result = run_python(code + DTENSOR_CALL + "print(json.dumps(state))\n", site)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "dtensor_loaded_by_import": False,
        "registered_by_import": False,
        "registered_after_dtensor_import": True,
        "loader": "SourceFileLoader",
        "watches_left": [],
    }


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_dtensor_rules_registered_at_import_when_dtensor_is_loaded_already(site):
    code = textwrap.dedent(
        """
        import json, torch
        import torch.distributed.tensor
        import custom_ops
        registered = custom_ops.sharding.is_registered()
        """
    )
    result = run_python(code + DTENSOR_CALL + "print(json.dumps(registered))\n", site)
    assert json.loads(result.stdout.strip().splitlines()[-1]) is True


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


@pytest.mark.slow
def test_other_torch_version_raises_import_error(site):
    message = run_python(MISMATCH.format(fake="2.10.0+cu128"), site).stdout
    assert "2.10.0+cu128" in message  # the running torch
    assert f"built against torch {torch.__version__.split('+')[0]}" in message  # the recorded one
    assert "pip install --no-build-isolation" in message


@pytest.mark.slow
def test_the_wheel_requires_the_torch_series_it_was_built_against(site):
    # So pip refuses to put it under another torch (scripts/packaging/torch_requirement.py).
    requires = run_python("import importlib.metadata; print(importlib.metadata.requires('custom-ops'))", site).stdout
    series = ".".join(torch.__version__.split(".")[:2])
    assert f"torch=={series}.*" in requires, requires


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_library_does_not_link_python(site):
    library = pathlib.Path(
        run_python("import custom_ops; print(custom_ops.library_path())", site).stdout.strip().splitlines()[-1]
    )
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert "libtorch.so" in needed or "libtorch_cpu.so" in needed, needed
    assert not [name for name in needed if "python" in name], needed
