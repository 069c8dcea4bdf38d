# SPDX-License-Identifier: BSD-3-Clause
"""scripts/check_spdx.py: which sources lack the SPDX line, the fix it makes, and this checkout."""

import subprocess
import sys

import pytest

from environment import REPO

SCRIPT = REPO / "scripts" / "check_spdx.py"


def check_spdx(*arguments):
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, timeout=120)


def test_sources_without_the_line_are_listed_and_fixed_in_their_own_syntax(tmp_path):
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "op.cpp").write_text("#include <x>\n")
    (tmp_path / "ops" / "done.h").write_text("// SPDX-License-Identifier: BSD-3-Clause\n#pragma once\n")
    (tmp_path / "tool.py").write_text("#!/usr/bin/env python3\nprint(1)\n")
    (tmp_path / "CMakeLists.txt").write_text("project(x)\n")
    (tmp_path / "notes.md").write_text("not a source\n")
    listed = check_spdx(str(tmp_path))
    assert listed.returncode == 1
    assert listed.stdout.split() == ["CMakeLists.txt", "ops/op.cpp", "tool.py"]
    assert check_spdx("--fix", str(tmp_path)).returncode == 0
    assert (tmp_path / "ops" / "op.cpp").read_text() == "// SPDX-License-Identifier: BSD-3-Clause\n#include <x>\n"
    assert (tmp_path / "tool.py").read_text() == (
        "#!/usr/bin/env python3\n# SPDX-License-Identifier: BSD-3-Clause\nprint(1)\n"
    )
    assert (tmp_path / "CMakeLists.txt").read_text().startswith("# SPDX-License-Identifier: BSD-3-Clause\n")
    assert (tmp_path / "notes.md").read_text() == "not a source\n"
    again = check_spdx(str(tmp_path))
    assert (again.returncode, again.stdout) == (0, "")


def test_every_source_of_this_checkout_has_the_line():
    # Outside a git work tree (a source copy, as CI's new-operator drill makes) build outputs
    # cannot be told from sources.
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "--is-inside-work-tree"], capture_output=True).returncode:
        pytest.skip(f"{REPO} is not a git work tree")
    result = check_spdx()
    assert result.returncode == 0, result.stdout + result.stderr
