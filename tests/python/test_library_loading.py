# SPDX-License-Identifier: BSD-3-Clause
"""Loading the library.

twice      torch.ops.load_library of the same file again (also through another of its names,
           in this process and in a fresh one) registers nothing twice and the op still works.
a copy     a second copy of the file (another inode) cannot register `custom` again: that must
           be an error the process survives, not an abort.
torch      the build records the torch it was built against, and it is the torch running
           here; the `custom_ops` package refuses, with a clear ImportError, a torch of another
           release (simulated: the package reads torch.__version__) and a second copy.
watches    what `import custom_ops` adds once the program imports Inductor (_post_import.py):
           one function per watch however often it is registered (a reload of the package),
           run once, after the module's code; the optional parts' imports say what they lack.
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

from environment import LIBRARY, REPO

OPS = torch.ops.custom
REAL_LIBRARY = LIBRARY.resolve()


def run_python(*parts, timeout=300, pythonpath=None):
    """Runs the code `parts` (each dedented, then joined) in a fresh interpreter: this one, so the
    same torch, with `pythonpath` (the `site` fixture's) first on PYTHONPATH where given. Returns
    the CompletedProcess."""
    code = "\n".join(textwrap.dedent(part) for part in parts)
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=pathlib.Path(__file__).parent,
    )


def describe(result):
    return f"exit code {result.returncode}\nstdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"


# A check of the op inside a subprocess: prints OK when its result is right.
CHECK_OP = """
x = torch.randn(5, 7, dtype=torch.float64)
w = torch.randn(7, dtype=torch.float64)
assert torch.equal(torch.ops.custom.weighted_sum(x, w), w * x.square())
out = torch.empty(5, 7, dtype=torch.float64)
torch.ops.custom.weighted_sum.out(x, w, out=out)
assert torch.equal(out, w * x.square())
print("OK")
"""


def _names_of_the_library():
    """Every path that names the one library file: the configured one, its symlinks, the file."""
    names = {LIBRARY, REAL_LIBRARY}
    for candidate in LIBRARY.parent.glob("libcustom_ops.so*"):
        if candidate.resolve() == REAL_LIBRARY:
            names.add(candidate)
    return sorted(str(n) for n in names)


# ---------------------------------------------------------------------------------------------
# The same file, twice
# ---------------------------------------------------------------------------------------------


def _custom_schemas():
    return sorted((s.name, s.overload_name) for s in torch._C._jit_get_all_schemas() if s.name.startswith("custom::"))


def test_loading_the_library_again_in_this_process_is_harmless():
    schemas_before = _custom_schemas()
    for name in _names_of_the_library():
        torch.ops.load_library(name)
        torch.ops.load_library(name)
    # torch records the file once, under its real path; nothing was registered again.
    entries = [p for p in torch.ops.loaded_libraries if pathlib.Path(p).resolve() == REAL_LIBRARY]
    assert entries == [str(REAL_LIBRARY)], entries
    assert _custom_schemas() == schemas_before
    x, w = torch.randn(4, 5), torch.randn(5)
    assert torch.equal(OPS.weighted_sum(x, w), w * x.square())


def test_loading_the_library_twice_in_a_fresh_process_is_harmless():
    names = _names_of_the_library()
    result = run_python(
        f"""
        import torch
        for name in {names!r}:
            torch.ops.load_library(name)
            torch.ops.load_library(name)
        # Registered once: the three overloads of weighted_sum are there, once each.
        assert len([s for s in torch._C._jit_get_all_schemas() if s.name == "custom::weighted_sum"]) == 3
        """,
        CHECK_OP,
        # Again after the op ran (its kernels are in use): still harmless.
        f"for name in {names!r}: torch.ops.load_library(name)",
        CHECK_OP,
    )
    assert result.returncode == 0 and result.stdout.split() == ["OK", "OK"], describe(result)


def test_each_operator_has_its_schema_registered_exactly_once():
    schemas = _custom_schemas()
    assert len(schemas) == len(set(schemas)), f"an overload is registered twice: {schemas}"
    expected = [
        ("custom::weighted_sum", ""),
        ("custom::weighted_sum", "Scalar"),
        ("custom::weighted_sum", "out"),
        ("custom::weighted_sum_", ""),
        ("custom::weighted_sum_backward", ""),
    ]
    for overload in expected:
        assert overload in schemas, schemas


# ---------------------------------------------------------------------------------------------
# A second copy of the file
# ---------------------------------------------------------------------------------------------


def test_loading_a_second_copy_of_the_library_warns_and_the_operators_keep_working(tmp_path):
    # A second file (a build tree's and an installed package's, say) would run TORCH_LIBRARY's
    # definition again from its static initializer, and the exception would abort the process.
    copy = tmp_path / "libcustom_ops_copy.so"
    shutil.copy(REAL_LIBRARY, copy)
    result = run_python(
        f"""
        import torch
        torch.ops.load_library({str(LIBRARY)!r})
        torch.ops.load_library({str(copy)!r})
        schemas = [s for s in torch._C._jit_get_all_schemas() if s.name == "custom::weighted_sum"]
        assert len(schemas) == 3, schemas  # the functional, .Scalar and out= overloads, once each
        """,
        CHECK_OP,
    )
    assert result.returncode == 0, describe(result)
    assert result.stdout.strip().endswith("OK"), describe(result)
    assert "already defined in this process, by another copy of libcustom_ops.so" in result.stderr, describe(result)
    assert str(copy) in result.stderr, describe(result)


# ---------------------------------------------------------------------------------------------
# The torch the library was built against
# ---------------------------------------------------------------------------------------------


def release(version):
    """'2.11.0+cu130' -> '2.11.0'."""
    match = re.match(r"\d+(\.\d+)*", str(version))
    return match.group(0) if match else str(version)


def _recorded_cmake_torch_version():
    """CUSTOM_OPS_TORCH_VERSION from the CMake package beside the library (build or install tree)."""
    for config in (
        LIBRARY.parent / "CustomOpsConfig.cmake",  # the build tree
        LIBRARY.parent / "cmake" / "CustomOps" / "CustomOpsConfig.cmake",  # an install prefix's lib/
    ):
        if config.is_file():
            match = re.search(r'set\(CUSTOM_OPS_TORCH_VERSION "([^"]*)"\)', config.read_text())
            if match:
                return config, match.group(1)
    return None, None


def test_the_build_records_the_torch_it_was_built_against_and_it_is_this_one():
    config, recorded = _recorded_cmake_torch_version()
    if config is None:
        pytest.skip(f"no CustomOpsConfig.cmake recording CUSTOM_OPS_TORCH_VERSION beside {LIBRARY}")
    assert recorded, f"{config} records an empty torch version"
    assert release(recorded) == release(torch.__version__), (
        f"{LIBRARY} was built against torch {recorded} ({config}), but torch {torch.__version__} is running"
    )


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_a_cpp_consumer_that_finds_another_torch_release_fails_at_configure(tmp_path):
    """find_package(CustomOps) refuses a libtorch of another release by name, rather than letting
    the app fail later at link or load time on undefined symbols that name neither version."""
    config, recorded = _recorded_cmake_torch_version()
    if config is None:
        pytest.skip(f"no CustomOpsConfig.cmake recording CUSTOM_OPS_TORCH_VERSION beside {LIBRARY}")
    other = "2.10.0" if release(recorded) != "2.10.0" else "2.9.0"
    fake_torch = tmp_path / "fake-libtorch" / "share" / "cmake" / "Torch"
    fake_torch.mkdir(parents=True)
    (fake_torch / "TorchConfig.cmake").write_text("set(TORCH_LIBRARIES torch)\n")
    (fake_torch / "TorchConfigVersion.cmake").write_text(
        f'set(PACKAGE_VERSION "{other}")\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n'
    )
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    (consumer / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(consumer LANGUAGES CXX)\nfind_package(CustomOps REQUIRED)\n"
    )
    result = subprocess.run(
        [
            "cmake",
            "-S",
            str(consumer),
            "-B",
            str(tmp_path / "build"),
            f"-DCustomOps_DIR={config.parent}",
            f"-DCMAKE_PREFIX_PATH={tmp_path / 'fake-libtorch'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    assert f"custom-ops was built against torch {recorded}, but find_package(Torch) found torch '{other}'" in output


# The `custom_ops` package (python/custom_ops), when it is installed: it records the torch
# release it was built against and refuses any other on import.


@pytest.fixture(scope="module")
def package():
    """Skips unless `import custom_ops` works in a fresh interpreter."""
    probe = run_python("import custom_ops; print(custom_ops.library_path())")
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no error output"])[-1][:200]
        pytest.skip(f"the custom_ops package is not importable here (install it with `pip install .`): {last}")


needs_package = pytest.mark.usefixtures("package")


@needs_package
def test_package_records_the_torch_it_was_built_against_and_it_is_this_one():
    result = run_python(
        """
        import torch, custom_ops
        print(custom_ops.TORCH_VERSION)
        print(torch.__version__)
        """
    )
    assert result.returncode == 0, describe(result)
    built, running = result.stdout.split()[-2:]
    assert release(built) == release(running), f"custom_ops built against {built}, running {running}"


@needs_package
def test_package_import_loads_the_library_once_and_the_op_works():
    result = run_python(
        """
        import torch, custom_ops, importlib, pathlib
        path = custom_ops.library_path()
        assert pathlib.Path(path).is_file(), path
        assert path in torch.ops.loaded_libraries, torch.ops.loaded_libraries
        importlib.reload(custom_ops)  # a second import of the package
        torch.ops.load_library(path)  # and of its library
        assert torch.equal(custom_ops.weighted_sum(torch.ones(3), torch.full((3,), 2.0)), torch.full((3,), 2.0))
        """,
        CHECK_OP,
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), describe(result)


@needs_package
@pytest.mark.parametrize("other", ["2.99.0", "1.13.1+cu117", "2.12.0.dev20260101"])
def test_package_refuses_a_torch_of_another_release_with_a_clear_message(other):
    # Simulated: the package compares its recorded release with torch.__version__.
    result = run_python(
        f"""
        import torch
        real = torch.__version__
        torch.__version__ = {other!r}
        try:
            import custom_ops
        except ImportError as error:
            print("REFUSED:", error)
        else:
            print("IMPORTED")
        # Nothing was registered by the refused import.
        try:
            torch._C._dispatch_find_schema_or_throw("custom::weighted_sum", "")
            print("REGISTERED")
        except RuntimeError:
            print("NOT REGISTERED")
        """
    )
    assert result.returncode == 0, describe(result)
    assert "REFUSED:" in result.stdout, describe(result)
    message = result.stdout.split("REFUSED:", 1)[1]
    assert "built against torch" in message and other in message, message
    assert "NOT REGISTERED" in result.stdout, "the library was loaded although the import was refused"


@needs_package
def test_package_refuses_a_second_copy_of_the_library_without_aborting():
    result = run_python(
        f"""
        import pathlib, torch
        torch.ops.load_library({str(LIBRARY)!r})
        try:
            import custom_ops
        except ImportError as error:
            print("REFUSED:", error)
        else:
            print("IMPORTED", custom_ops.library_path())
        """,
        CHECK_OP,
    )
    assert result.returncode == 0, describe(result)
    if "IMPORTED" in result.stdout:
        # The package's library is the very file loaded first: the same library, loaded once.
        imported = pathlib.Path(result.stdout.split("IMPORTED", 1)[1].split()[0]).resolve()
        assert imported == REAL_LIBRARY, describe(result)
    else:
        assert re.search(r"already registered", result.stdout), describe(result)
    assert result.stdout.strip().endswith("OK"), describe(result)


# ---------------------------------------------------------------------------------------------
# Watching an import (python/custom_ops/_post_import.py) and the optional parts' imports
# ---------------------------------------------------------------------------------------------

# Loads _post_import.py by path (it needs nothing of the package) and watches `watched`, a package
# written to `root` by the test, with `fired` twice (as a reload of custom_ops registers its
# functions again) and `other` once, then imports it: the first attempt fails in the module's code.
WATCH_TWICE = """
import importlib.util, json, pathlib, sys
spec = importlib.util.spec_from_file_location("post_import", {source!r})
post_import = importlib.util.module_from_spec(spec)
spec.loader.exec_module(post_import)
sys.path.insert(0, {root!r})
calls = []
def fired():
    calls.append(["fired", sys.modules["watched"].COMPLETE])
def other():
    calls.append(["other"])
for function in (fired, other, fired):
    post_import.when_imported("watched", function)
state = {{"finders": sum(type(f).__module__ == "post_import" for f in sys.meta_path)}}
pathlib.Path({root!r}, "fail").touch()
try:
    import watched
except RuntimeError:
    state["after_a_failed_import"] = list(calls)
pathlib.Path({root!r}, "fail").unlink()
import watched
state["calls"] = list(calls)
state["finders_left"] = sum(type(f).__module__ == "post_import" for f in sys.meta_path)
state["loader"] = type(watched.__loader__).__name__
post_import.when_imported("watched", other)  # imported: runs now
state["then"] = calls[len(state["calls"]):]
print(json.dumps(state))
"""


def test_a_watch_registered_twice_runs_once_after_the_module_has_run(tmp_path):
    package = tmp_path / "watched"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import pathlib\n"
        "if (pathlib.Path(__file__).parents[1] / 'fail').exists():\n"
        "    raise RuntimeError('the first import fails')\n"
        "COMPLETE = True\n"
    )
    source = REPO / "python" / "custom_ops" / "_post_import.py"
    result = run_python(WATCH_TWICE.format(source=str(source), root=str(tmp_path)))
    assert result.returncode == 0, describe(result)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "finders": 1,
        "after_a_failed_import": [],  # the watch stays for the next attempt
        "calls": [["fired", True], ["other"]],
        "finders_left": 0,  # nothing left to watch: sys.meta_path as it was
        "loader": "SourceFileLoader",  # the module keeps its own loader
        "then": [["other"]],
    }


@pytest.mark.slow
def test_package_reloaded_then_inductor_imported_gets_the_decompositions(site):
    result = run_python(
        """
        import importlib, json, sys, torch
        import custom_ops
        importlib.reload(custom_ops)  # registers its Inductor watch again
        importlib.reload(custom_ops)
        import torch._inductor.decomposition as decomposition
        table = custom_ops._inductor._table()
        missing = [str(op) for op, function in table.items() if decomposition.decompositions.get(op) is not function]
        print(json.dumps({
            "missing": missing,
            "entries": len(table),
            "finders_left": [type(f).__module__ for f in sys.meta_path if "custom_ops" in type(f).__module__],
        }))
        """,
        pythonpath=site,
    )
    assert result.returncode == 0, describe(result)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"missing": [], "entries": 5, "finders_left": []}


# The package, in a fresh interpreter: `import custom_ops` leaves DTensor alone (it neither imports
# it nor registers the rules when the program does); `import custom_ops.sharding` registers them, and both
# operators then run on DTensors of a 1-rank gloo group (DTensor raises "no sharding strategy
# registered" without them).
DTENSOR_OPT_IN = """
import json, sys, torch
import custom_ops
state = {"dtensor_imported": "torch.distributed.tensor" in sys.modules}
import torch.distributed.tensor
state["sharding_imported"] = "custom_ops.sharding" in sys.modules
import custom_ops.sharding
state["registered"] = custom_ops.sharding.is_registered()

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
x, w = torch.randn(4, 6), torch.randn(6)
xd, wd = distribute_tensor(x, mesh, [Shard(0)]), distribute_tensor(w, mesh, [Replicate()])
y = custom_ops.weighted_sum(xd, distribute_tensor(w, mesh, [Shard(0)]))
assert torch.equal(y.full_tensor(), w * x.square())
summed, kept = custom_ops.weighted_square_sum(xd, wd, 0), custom_ops.weighted_square_sum(xd, wd, 1)
torch.testing.assert_close(summed.full_tensor(), (w * x.square()).sum(0))
torch.testing.assert_close(kept.full_tensor(), (w * x.square()).sum(1))
# Partial from the sharded summed dim 0 (1 rank: no reduction needed to read it), Shard kept.
state["placements"] = [str(list(t.placements)) for t in (y, summed, kept)]
dist.destroy_process_group()
print(json.dumps(state))
"""


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_dtensor_rules_only_with_import_custom_ops_sharding(site):
    result = run_python(DTENSOR_OPT_IN, pythonpath=site)
    assert result.returncode == 0, describe(result)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "dtensor_imported": False,
        "sharding_imported": False,  # not even once the program has imported DTensor
        "registered": True,
        "placements": ["[Shard(dim=0)]", "[Partial(sum)]", "[Shard(dim=0)]"],
    }


ONNX_MISSING = """
import importlib.util, sys
for missing in ("onnx", "onnxscript"):
    sys.modules[missing] = None  # as if not installed: its import raises ModuleNotFoundError
    try:
        import custom_ops.onnx
    except ImportError as error:
        print(repr(error), error.__cause__, error.__suppress_context__)
    else:
        raise SystemExit(f"custom_ops.onnx imported without {missing}")
    del sys.modules[missing]
if importlib.util.find_spec("onnxscript") is not None:  # with both: it imports
    import custom_ops.onnx
    print("imported", custom_ops.onnx.__name__)
"""


@pytest.mark.slow
def test_onnx_part_without_onnx_or_onnxscript_says_what_to_install(site):
    result = run_python(ONNX_MISSING, pythonpath=site)
    assert result.returncode == 0, describe(result)
    message = (
        'ImportError("custom_ops.onnx needs onnx and onnxscript (and onnxruntime to run models): '
        "pip install 'custom-ops[onnx]'\") None True"  # raised from None: one line, no chained traceback
    )
    lines = result.stdout.strip().splitlines()
    assert lines[:2] == [message, message], describe(result)
    assert lines[2:] in ([], ["imported custom_ops.onnx"]), describe(result)
