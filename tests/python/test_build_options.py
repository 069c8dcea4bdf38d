# SPDX-License-Identifier: BSD-3-Clause
"""Build checks. The CUDA option: a library that claims CUDA but has no CUDA kernels is the most
common bug in this field, so a build that should have them is checked for them, and a bad value is
refused. The compiler: one that links libstdc++ statically is refused at configure time."""

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

from environment import REPO, links_libstdcxx_statically

OVERLOADS = ["weighted_sum", "weighted_sum.out", "weighted_sum_", "weighted_sum_backward"]


@pytest.mark.skipif(
    not (shutil.which("nvcc") and torch.version.cuda and os.environ.get("CUSTOM_OPS_CUDA", "AUTO") in ("AUTO", "ON")),
    reason="needs nvcc, a CUDA build of torch and a build with CUSTOM_OPS_CUDA=AUTO or ON (set by make test)",
)
@pytest.mark.parametrize("overload", OVERLOADS)
def test_a_cuda_torch_with_nvcc_gets_cuda_kernels(overload):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"custom::{overload}", "CUDA")


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_an_unknown_cuda_option_fails_the_configure(tmp_path):
    result = subprocess.run(
        [
            "cmake",
            "-S",
            str(REPO),
            "-B",
            str(tmp_path),
            "-DCUSTOM_OPS_CUDA=SOMETIMES",
            "-DCUSTOM_OPS_BUILD_TESTS=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "CUSTOM_OPS_CUDA must be AUTO, ON or OFF, got 'SOMETIMES'" in result.stdout + result.stderr


def static_libstdcxx_compiler(directory):
    """Stands in for a GCC shipped with libstdc++.a only (the H200 image's /opt/gcc/bin/g++)."""
    compiler = directory / "static-g++"
    compiler.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} "$@" -static-libstdc++\n')
    compiler.chmod(0o755)
    return compiler


@pytest.mark.skipif(not (shutil.which("g++") and shutil.which("objdump")), reason="needs g++ and objdump")
def test_the_session_check_tells_a_static_libstdcxx_compiler_apart(tmp_path):
    assert links_libstdcxx_statically(str(static_libstdcxx_compiler(tmp_path))) is True
    assert links_libstdcxx_statically(shutil.which("g++")) is False


@pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("g++")), reason="needs cmake and g++")
@pytest.mark.parametrize("variable", ["CMAKE_CXX_COMPILER", "CUDAHOSTCXX"])
def test_a_compiler_that_links_libstdcxx_statically_fails_the_configure(tmp_path, variable):
    # Such a library would carry a second C++ runtime beside libtorch's and crash inside Python.
    # nvcc's host compiler counts too: CMake puts its library directories on our link line.
    compiler = static_libstdcxx_compiler(tmp_path)
    command = [
        "cmake",
        "-S",
        str(REPO),
        "-B",
        str(tmp_path / "build"),
        "-DCUSTOM_OPS_CUDA=OFF",
        "-DCUSTOM_OPS_BUILD_TESTS=OFF",
        f"-DPython3_EXECUTABLE={sys.executable}",
    ]
    env = {key: value for key, value in os.environ.items() if key not in ("CXX", "CUDAHOSTCXX")}
    if variable == "CUDAHOSTCXX":
        env["CUDAHOSTCXX"] = str(compiler)
    else:
        command.append(f"-D{variable}={compiler}")
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"{variable}={compiler} links libstdc++ statically" in " ".join(output.split()), output


def configure(build_dir, *options, env=None, prefix=None):
    command = [
        "cmake",
        "-S",
        str(REPO),
        "-B",
        str(build_dir),
        "-DCUSTOM_OPS_BUILD_TESTS=OFF",
        f"-DPython3_EXECUTABLE={sys.executable}",
        *options,
    ]
    if prefix is not None:
        command.append(f"-DCMAKE_PREFIX_PATH={prefix}")
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    return result.returncode, result.stdout + result.stderr


def fake_torch(directory, version):
    """A TorchConfig.cmake that reports `version` and nothing else: enough to reach the range check."""
    config = directory / "share" / "cmake" / "Torch"
    config.mkdir(parents=True)
    (config / "TorchConfigVersion.cmake").write_text(
        f'set(PACKAGE_VERSION "{version}")\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n'
    )
    (config / "TorchConfig.cmake").write_text(
        f'set(TORCH_LIBRARY "{directory}/lib/libtorch.so")\nadd_library(torch INTERFACE IMPORTED)\n'
    )
    return directory


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
@pytest.mark.parametrize("version", ["2.10.3", "2.16.0"])
def test_a_torch_outside_the_supported_range_fails_the_configure(tmp_path, version):
    code, output = configure(
        tmp_path / "build", "-DCUSTOM_OPS_CUDA=OFF", prefix=fake_torch(tmp_path / "torch", version)
    )
    assert code != 0
    assert f"custom-ops supports torch >= 2.11, < 2.16; found torch {version}" in output, output


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_the_configure_prints_no_warning_of_ours(tmp_path):
    code, output = configure(tmp_path / "build")
    assert code == 0, output
    assert f"custom-ops: libtorch {torch.__version__.split('+')[0]}" in output
    # None of torch's either: its TorchConfig.cmake warns "library kineto not found" unless told
    # where kineto is (inside libtorch_cpu.so), and torch without numpy warns when CMake imports it.
    assert "CMake Warning" not in output, output
    assert "kineto" not in output and "NumPy" not in output, output
    assert "CMAKE_CUDA_ARCHITECTURES" not in output


def toolkit_root():
    nvcc = shutil.which("nvcc")
    return None if nvcc is None else os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(nvcc)), ".."))


@pytest.mark.skipif(
    not (
        shutil.which("cmake")
        and shutil.which("unshare")
        and os.geteuid() == 0
        and toolkit_root()
        and os.path.isdir(os.path.join(toolkit_root() or "/", "bin"))
    ),
    reason="needs root, unshare and a CUDA toolkit to hide",
)
def test_a_cuda_torch_configures_without_a_cuda_toolkit(tmp_path):
    # Most pip users have a CUDA build of torch and no toolkit: torch's own CMake config stops there
    # unless told not to look. The toolkit is hidden in a private mount namespace.
    root = toolkit_root()
    script = (
        f"mount -t tmpfs none {root} && "
        f"cmake -S {REPO} -B {tmp_path / 'build'} -DCUSTOM_OPS_BUILD_TESTS=OFF -DPython3_EXECUTABLE={sys.executable}"
    )
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "custom-ops: CUDA kernels OFF" in output and "nvcc: OFF" in output, output


# torch 2.15.0+cu132's wheel and nvcc 13.0, as `torch._C._cuda_getArchFlags()` and
# `nvcc --list-gpu-code` print them.
TORCH_ARCHS = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
NVCC_13_ARCHS = "sm_75 sm_80 sm_86 sm_87 sm_88 sm_89 sm_90 sm_100 sm_110 sm_103 sm_120 sm_121"


def run_cuda_archs_function(tmp_path, call, printed):
    """Runs `call` of cmake/CustomOpsCudaArchs.cmake in `cmake -P`; what message(printed) printed."""
    script = tmp_path / "call.cmake"
    script.write_text(
        f'cmake_minimum_required(VERSION 3.25)\ninclude("{REPO}/cmake/CustomOpsCudaArchs.cmake")\n{call}\n'
        f'message("{printed}")\n'
    )
    result = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stderr.strip()


def choose_cuda_archs(tmp_path, requested, torch_archs, nvcc_archs, visible=""):
    """cmake/CustomOpsCudaArchs.cmake's choice: (chosen, left out, error), lists as strings; visible:
    the visible GPUs' compute capabilities, as the configure reads them from torch.cuda."""
    lists = [";".join(text.split()) for text in (torch_archs, nvcc_archs, visible)]
    call = f'custom_ops_choose_cuda_archs(chosen dropped error "{requested}" "{lists[0]}" "{lists[1]}" "{lists[2]}")'
    return tuple(run_cuda_archs_function(tmp_path, call, "${chosen}|${dropped}|${error}").split("|"))


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
@pytest.mark.parametrize(
    ("requested", "torch_archs", "nvcc_archs", "expected"),
    [
        # Unset: torch's architectures that nvcc compiles, PTX of the newest for later GPUs.
        ("", TORCH_ARCHS, NVCC_13_ARCHS, ("7.5;8.0;8.6;9.0;10.0;12.0+PTX", "", "")),
        # An older torch's Volta and Pascal kernels: nvcc 13 cannot build them, and says so.
        ("", "sm_60 sm_70 sm_75 sm_80 sm_90 compute_90", NVCC_13_ARCHS, ("7.5;8.0;9.0+PTX", "6.0;7.0", "")),
        # torch's list unknown (a libtorch without Python): recent wheels' list, less what nvcc cannot build.
        ("", "", "sm_80 sm_86 sm_90", ("8.0;8.6;9.0+PTX", "7.5;10.0;12.0", "")),
        # nvcc's list unknown: torch's, as it is.
        ("", "sm_80 sm_90", "", ("8.0;9.0+PTX", "", "")),
        # Set: exactly that, whatever torch has.
        ("7.5;8.0", TORCH_ARCHS, NVCC_13_ARCHS, ("7.5;8.0", "", "")),
        ("8.0 9.0a 10.0f+PTX", TORCH_ARCHS, NVCC_13_ARCHS, ("8.0;9.0a;10.0f+PTX", "", "")),
        # Named as torch.utils.cpp_extension names them.
        ("Ampere;Hopper", TORCH_ARCHS, NVCC_13_ARCHS, ("8.0;8.6+PTX;9.0+PTX", "", "")),
        ("Ampere+Tegra", TORCH_ARCHS, NVCC_13_ARCHS, ("8.7", "", "")),
        ("Blackwell", TORCH_ARCHS, NVCC_13_ARCHS, ("10.0;10.3;12.0;12.1+PTX", "", "")),
        ("Ada 9.0", TORCH_ARCHS, NVCC_13_ARCHS, ("8.9+PTX;9.0", "", "")),
    ],
)
def test_the_cuda_architectures_are_chosen_like_pytorch_extensions(
    tmp_path, requested, torch_archs, nvcc_archs, expected
):
    assert choose_cuda_archs(tmp_path, requested, torch_archs, nvcc_archs) == expected


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
@pytest.mark.parametrize(
    ("requested", "visible", "expected"),
    [
        # One GPU visible: its architecture only, with PTX, whatever torch was built for.
        ("", "8.6", ("8.6+PTX", "", "")),
        ("native", "8.6", ("8.6+PTX", "", "")),
        # Several, in any order, repeated: each once, ascending, PTX of the newest.
        ("", "9.0 7.5 9.0", ("7.5;9.0+PTX", "", "")),
        # One torch was not built for, but nvcc compiles (Ada): its own.
        ("", "8.9", ("8.9+PTX", "", "")),
        # Newer than torch's newest (12.0): clamped to it, as cpp_extension clamps (PTX runs it).
        ("", "12.1", ("12.0+PTX", "", "")),
        # Older than nvcc 13 compiles (Pascal): left out, said so; the other GPU still gets its own.
        ("", "6.1 9.0", ("9.0+PTX", "6.1", "")),
        # Only such a GPU: torch's list, as with none visible.
        ("", "6.1", ("7.5;8.0;8.6;9.0;10.0;12.0+PTX", "6.1", "")),
        # Named architectures win over the visible GPUs.
        ("Hopper", "8.6", ("9.0+PTX", "", "")),
        # native needs a GPU to name.
        ("native", "", ("", "", "TORCH_CUDA_ARCH_LIST=native, but no GPU is visible")),
    ],
)
def test_a_local_build_is_for_the_visible_gpus(tmp_path, requested, visible, expected):
    chosen, dropped, error = choose_cuda_archs(tmp_path, requested, TORCH_ARCHS, NVCC_13_ARCHS, visible)
    assert (chosen, dropped) == expected[:2]
    assert error.startswith(expected[2]) and bool(error) is bool(expected[2]), error


def check_cuda_major(tmp_path, nvcc_cuda, torch_cuda):
    call = f'custom_ops_check_cuda_major(error "{nvcc_cuda}" "{torch_cuda}")'
    return run_cuda_archs_function(tmp_path, call, "${error}")


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_an_nvcc_of_another_cuda_major_than_torchs_is_named(tmp_path):
    assert check_cuda_major(tmp_path, "12.4", "13.2") == (
        "nvcc is CUDA 12.4 but torch was built with CUDA 13.2: install a CUDA 13 toolkit (put its nvcc "
        "first on PATH or set CUDACXX), or configure with -DCUSTOM_OPS_CUDA=OFF"
    )
    assert check_cuda_major(tmp_path, "13.0", "13.2") == ""  # minor versions may differ, as in cpp_extension
    assert check_cuda_major(tmp_path, "13.0", "") == ""  # a CPU torch: nothing to compare


CUDA_CONFIGURE = pytest.mark.skipif(
    not (shutil.which("cmake") and shutil.which("nvcc") and torch.version.cuda),
    reason="needs cmake, nvcc and a CUDA build of torch",
)


def torch_facts(cuda=None, visible=""):
    """What scripts/packaging hands the configure about torch when the build cannot import it."""
    flags = (getattr(torch._C, "_cuda_getArchFlags", lambda: "")() or "").replace(" ", ";")
    return [
        f"-DCUSTOM_OPS_TORCH_ARCH_FLAGS={flags}",
        f"-DCUSTOM_OPS_TORCH_CUDA_VERSION={cuda or torch.version.cuda}",
        f"-DCUSTOM_OPS_VISIBLE_GPUS={visible}",
    ]


@CUDA_CONFIGURE
def test_the_configure_stops_on_a_cuda_major_mismatch_with_one_line(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "TORCH_CUDA_ARCH_LIST"}
    other = "12.8" if not torch.version.cuda.startswith("12.") else "13.0"
    code, output = configure(tmp_path / "build", "-DCUSTOM_OPS_CUDA=AUTO", *torch_facts(cuda=other), env=env)
    assert code != 0
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("custom-ops: nvcc is CUDA")]
    assert len(errors) == 1 and f"but torch was built with CUDA {other}" in errors[0], output


@CUDA_CONFIGURE
def test_a_local_configure_builds_for_the_visible_gpu(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "TORCH_CUDA_ARCH_LIST"}
    code, output = configure(tmp_path / "build", "-DCUSTOM_OPS_CUDA=ON", *torch_facts(visible="8.6"), env=env)
    assert code == 0, output
    assert "custom-ops: CUDA architectures 8.6+PTX, from the visible GPUs (8.6)" in output, output
    commands = json.loads((tmp_path / "build" / "compile_commands.json").read_text())
    cuda = [entry["command"] for entry in commands if entry["file"].endswith(".cu")]
    assert cuda and all(set(re.findall(r"code=(\w+)", command)) == {"sm_86", "compute_86"} for command in cuda)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
@pytest.mark.parametrize(
    ("requested", "message"),
    [
        ("7.0;8.0", "TORCH_CUDA_ARCH_LIST has 7.0, which this nvcc cannot compile (it compiles 7.5 8.0"),
        ("Volta", "TORCH_CUDA_ARCH_LIST has 7.0+PTX, which this nvcc cannot compile"),
        ("sm_90", "TORCH_CUDA_ARCH_LIST entry 'sm_90' is not a compute capability such as 8.6 or 9.0+PTX, an"),
    ],
)
def test_an_architecture_that_cannot_be_built_is_refused(tmp_path, requested, message):
    chosen, _, error = choose_cuda_archs(tmp_path, requested, TORCH_ARCHS, NVCC_13_ARCHS)
    assert chosen == "" and error.startswith(message), error


@pytest.mark.skipif(
    not (shutil.which("cmake") and shutil.which("nvcc") and torch.version.cuda),
    reason="needs cmake, nvcc and a CUDA build of torch",
)
@pytest.mark.parametrize("how", ["environment", "-D"])
def test_torch_cuda_arch_list_is_honoured_and_recorded(tmp_path, how):
    env = {key: value for key, value in os.environ.items() if key != "TORCH_CUDA_ARCH_LIST"}
    options = ["-DCUSTOM_OPS_CUDA=ON"]
    if how == "environment":
        env["TORCH_CUDA_ARCH_LIST"] = "7.5;8.0"
    else:
        options.append("-DTORCH_CUDA_ARCH_LIST=7.5;8.0")
    code, output = configure(tmp_path / "build", *options, env=env)
    assert code == 0, output
    assert "custom-ops: CUDA architectures 7.5;8.0, from " in output, output
    # The CMake config the package installs, and nvcc's flags: those two, no PTX, nothing else.
    config = (tmp_path / "build" / "CustomOpsConfig.cmake").read_text()
    assert 'set(CUSTOM_OPS_CUDA_ARCHS "7.5;8.0")' in config
    commands = json.loads((tmp_path / "build" / "compile_commands.json").read_text())
    cuda = [entry["command"] for entry in commands if entry["file"].endswith(".cu")]
    assert cuda and all(set(re.findall(r"code=(\w+)", command)) == {"sm_75", "sm_80"} for command in cuda)


def architecture_not_covering(major):
    """A GPU architecture nvcc compiles whose kernels cannot run on a GPU of this major version."""
    return "8.0" if major >= 9 else "9.0"


@pytest.mark.slow
@pytest.mark.skipif(
    not (torch.cuda.is_available() and shutil.which("cmake") and shutil.which("nvcc")),
    reason="needs a GPU, cmake and nvcc",
)
def test_a_gpu_left_out_of_the_architectures_is_warned_about_at_its_first_call(tmp_path):
    # The library built for another architecture only: the first CUDA call names the variable to
    # rebuild with (before CUDA's own "no kernel image" error), once per device.
    major, minor = torch.cuda.get_device_capability()
    build = tmp_path / "build"
    built_for = architecture_not_covering(major)
    code, output = configure(build, "-DCUSTOM_OPS_CUDA=ON", f"-DTORCH_CUDA_ARCH_LIST={built_for}")
    assert code == 0, output
    built = subprocess.run(
        ["cmake", "--build", str(build), "--target", "custom_ops", "-j", str(os.cpu_count())],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    script = textwrap.dedent(
        f"""
        import warnings, torch
        torch.ops.load_library({str(build / "libcustom_ops.so")!r})
        x = torch.ones(4, device="cuda")
        for attempt in range(2):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    torch.ops.custom.weighted_sum(x, x)
                except RuntimeError as error:
                    print("error:", str(error).splitlines()[0])
            print("warnings:", [str(w.message) for w in caught if "custom-ops" in str(w.message)])
        """
    )
    cuobjdump = pathlib.Path(shutil.which("nvcc")).with_name("cuobjdump")
    if cuobjdump.is_file():  # the library holds the one architecture asked for, and no PTX
        listed = subprocess.run(
            [str(cuobjdump), "--list-elf", "--list-ptx", str(build / "libcustom_ops.so")],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        assert set(re.findall(r"\.(sm_\d+a?)\.(?:cubin|ptx)", listed)) == {"sm_" + built_for.replace(".", "")}, listed
        assert ".ptx" not in listed, listed
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    explained = f"configure:\n{output[-4000:]}\nrun:\n{result.stdout}\n{result.stderr[-3000:]}"
    assert result.stdout.count("error: CUDA error: no kernel image") == 2, explained
    # Once for the device over both calls: as a Python warning, or on stderr from c10's own warning
    # handler, which is where it went on the H200 with torch 2.11 (the call then fails).
    named = f"has no kernels for cuda:0 ({torch.cuda.get_device_name()}, compute capability {major}.{minor})"
    assert (result.stdout + result.stderr).count(named) == 1, explained
    assert f'Rebuild it with TORCH_CUDA_ARCH_LIST="{major}.{minor}"' in result.stdout + result.stderr, explained
