# SPDX-License-Identifier: BSD-3-Clause
"""The 0.1 headers <custom_ops/weighted_sum.h> and <custom_ops/weighted_square_sum.h>, kept in 0.2
as deprecated forwarding headers to <custom_ops/custom_ops.h>.

A 0.1 application that includes one of them (twice) is compiled, linked and run as a user builds it
against the installed package: with $CXX (else c++), C++20, torch's _GLIBCXX_USE_CXX11_ABI, and the
package's and torch's include directories as -isystem, which is how find_package(CustomOps) hands
an imported target's directories to consumers. It must build, the compiler must warn exactly once
that the header is deprecated, naming it and its replacement, and the call must give the right
values. <custom_ops/custom_ops.h> itself must compile with no such warning.

The package is $CUSTOM_OPS_PREFIX (`make test` installs to ./install); without it, the checkout's
ops/include and the library under test (LIBRARY), the same headers that `cmake --install` copies.
"""

import glob
import os
import re
import shlex
import shutil
import subprocess

import pytest
import torch
import torch.utils.cpp_extension

from environment import LIBRARY, REPO

# One diagnostic line per warning: GCC's `warning: #warning "..." [-Wcpp]`, Clang's `warning: "..."
# [-W#warnings]`. The source line GCC and Clang echo below it has no "warning: ".
DEPRECATION = re.compile(r"warning: .*is deprecated since 0\.2, removed in 0\.3")

APPS = {
    # x * w**2 with w broadcast along rows: [1 2 3 4] weighted by [0.5 -1 2 3].
    "weighted_sum.h": (
        """
        const at::Tensor x = at::tensor({1.0F, 2.0F, 3.0F, 4.0F});
        const at::Tensor w = at::tensor({0.5F, -1.0F, 2.0F, 3.0F});
        const at::Tensor y = custom::weighted_sum(x, w);
        """,
        [0.5, -4.0, 18.0, 48.0],
    ),
    # Row sums of w * x**2 for x = [[0 1 2] [3 4 5]], w = [1 2 3].
    "weighted_square_sum.h": (
        """
        const at::Tensor x = at::tensor({0.0F, 1.0F, 2.0F, 3.0F, 4.0F, 5.0F}).view({2, 3});
        const at::Tensor w = at::tensor({1.0F, 2.0F, 3.0F});
        const at::Tensor y = custom::weighted_square_sum(x, w, {1});
        """,
        [14.0, 116.0],
    ),
}

MAIN = """
#include <ATen/ops/tensor.h>

#include <iostream>

int main() {{
{body}
  const at::Tensor values = y.contiguous();
  for (int64_t i = 0; i < values.numel(); ++i) std::cout << values.data_ptr<float>()[i] << '\\n';
  return 0;
}}
"""


@pytest.fixture(scope="module")
def package():
    """(include directory, library directory) of the custom-ops the application builds against."""
    if os.environ.get("CUSTOM_OPS_PREFIX"):
        prefix = os.environ["CUSTOM_OPS_PREFIX"]
        include, lib = os.path.join(prefix, "include"), os.path.join(prefix, "lib")
        if not os.path.isfile(os.path.join(lib, "libcustom_ops.so")):
            pytest.fail(f"CUSTOM_OPS_PREFIX={prefix} holds no installed custom-ops (lib/libcustom_ops.so)")
        return include, lib
    return str(REPO / "ops" / "include"), str(LIBRARY.parent)


@pytest.fixture(scope="module")
def compiler():
    command = shlex.split(os.environ.get("CXX") or "c++")
    if shutil.which(command[0]) is None:
        pytest.skip(f"no C++ compiler {command[0]} (set CXX)")
    return command


def build(compiler, package, tmp_path, source, link):
    """Compiles `source` as a consumer of the package (linked into tmp_path/app when `link`, else
    -fsyntax-only); returns the compiler's output, stdout and stderr together."""
    include, lib = package
    (tmp_path / "main.cpp").write_text(source)
    flags = [
        "-std=c++20",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        "-fdiagnostics-color=never",
        "-isystem",
        include,
        *(arg for path in torch.utils.cpp_extension.include_paths() for arg in ("-isystem", path)),
    ]
    if link:
        torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
        # torch's bundled CUDA libraries, which libtorch_cuda needs at link time (as the CMake
        # package's -rpath-link); none in a CPU torch.
        bundled = sorted(glob.glob(os.path.join(torch_lib, "..", "..", "nvidia", "*", "lib")))
        output = ["-o", str(tmp_path / "app"), f"-L{lib}", f"-L{torch_lib}", f"-Wl,-rpath,{lib}:{torch_lib}"]
        output += [f"-Wl,-rpath-link,{':'.join(bundled)}"] if bundled else []
        output += ["-Wl,--no-as-needed", "-lcustom_ops", "-ltorch", "-ltorch_cpu", "-lc10"]
    else:
        output = ["-fsyntax-only"]
    result = subprocess.run(
        [*compiler, *flags, str(tmp_path / "main.cpp"), *output],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    return out


@pytest.mark.parametrize("header", list(APPS))
def test_0_1_header_builds_warns_once_and_runs(compiler, package, tmp_path, header):
    body, expected = APPS[header]
    # Included twice, as headers that include each other do: #pragma once keeps it to one warning.
    includes = f"#include <custom_ops/{header}>\n#include <custom_ops/{header}>\n"
    out = build(compiler, package, tmp_path, includes + MAIN.format(body=body), link=True)

    warnings = [line for line in out.splitlines() if DEPRECATION.search(line)]
    assert len(warnings) == 1, out
    assert f"<custom_ops/{header}> is deprecated" in warnings[0], warnings
    assert "include <custom_ops/custom_ops.h>" in warnings[0], warnings

    run = subprocess.run([str(tmp_path / "app")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert [float(word) for word in run.stdout.split()] == expected


def test_custom_ops_h_compiles_without_deprecation_warning(compiler, package, tmp_path):
    source = """
#include <custom_ops/custom_ops.h>

at::Tensor both(const at::Tensor& x, const at::Tensor& w) {
  return custom::weighted_square_sum(custom::weighted_sum(x, w), w, {1});
}
"""
    out = build(compiler, package, tmp_path, source, link=False)
    assert not DEPRECATION.search(out), out
    assert not [line for line in out.splitlines() if "warning:" in line and "custom_ops" in line], out
