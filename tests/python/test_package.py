"""The Python package `custom_ops` (pyproject.toml + scikit-build-core + the top-level CMake).

Uses the installed package when `custom_ops` is importable, else builds it once with
`pip install --no-build-isolation --no-deps --target <tmp>` (CPU kernels only, about a minute on
2 cores). Every check runs in a fresh interpreter: this test process already loaded another copy of
the library (conftest), and one process can hold only one.
"""
import importlib.util
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
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300,
        cwd=pathlib.Path(pythonpath or REPO).parent,  # not the repo root: no stray python/ on sys.path
    )
    if check and result.returncode != 0:
        pytest.fail(f"python failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The directory to put on PYTHONPATH for `import custom_ops` (None: already importable)."""
    if importlib.util.find_spec("custom_ops") is not None:
        return None
    if importlib.util.find_spec("scikit_build_core") is None:
        pytest.fail("scikit-build-core is not installed: `pip install scikit-build-core` (needed by "
                    "`pip install --no-build-isolation .`)")
    if "if(SKBUILD)" not in (REPO / "CMakeLists.txt").read_text():
        pytest.fail("CMakeLists.txt has no if(SKBUILD) branch: `pip install .` would not put libcustom_ops.so "
                    "and _build_info.py into the custom_ops package")
    root = tmp_path_factory.mktemp("package")
    target = root / "site"
    command = [
        sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-input",
        "--disable-pip-version-check", "--target", str(target),
        "-C", "cmake.define.CUSTOM_OPS_CUDA=OFF", "-C", f"build-dir={root / 'build'}", str(REPO),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed:\n{result.stdout[-5000:]}\n{result.stderr[-5000:]}")
    return target


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
        .stdout.strip().splitlines()[-1]
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
