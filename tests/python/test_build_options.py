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
    warnings = [block.split("\n\n")[0] for block in output.split("CMake Warning")[1:]]
    # torch's own TorchConfig.cmake looks for a separate libkineto, which its wheels do not ship
    # (kineto is inside libtorch_cpu.so): a warning of torch's, not ours.
    assert all("library kineto not found" in warning for warning in warnings), warnings
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


def choose_cuda_archs(tmp_path, requested, torch_archs, nvcc_archs):
    """cmake/CustomOpsCudaArchs.cmake's choice: (chosen, left out of torch's, error), lists as strings."""
    script = tmp_path / "choose.cmake"
    lists = [";".join(text.split()) if " " in text else text for text in (requested, torch_archs, nvcc_archs)]
    script.write_text(
        "cmake_minimum_required(VERSION 3.25)\n"
        f'include("{REPO}/cmake/CustomOpsCudaArchs.cmake")\n'
        f'custom_ops_choose_cuda_archs(chosen dropped error "{lists[0]}" "{lists[1]}" "{lists[2]}")\n'
        'message("${chosen}|${dropped}|${error}")\n'
    )
    result = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return tuple(result.stderr.strip().split("|"))


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
    ],
)
def test_the_cuda_architectures_are_chosen_like_pytorch_extensions(
    tmp_path, requested, torch_archs, nvcc_archs, expected
):
    assert choose_cuda_archs(tmp_path, requested, torch_archs, nvcc_archs) == expected


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
@pytest.mark.parametrize(
    ("requested", "message"),
    [
        ("7.0;8.0", "TORCH_CUDA_ARCH_LIST has 7.0, which this nvcc cannot compile (it compiles 7.5 8.0"),
        ("Ampere", "TORCH_CUDA_ARCH_LIST entry 'Ampere' is not a compute capability such as 8.6 or 9.0+PTX"),
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
