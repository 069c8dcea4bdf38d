#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Lists the source files that lack an `SPDX-License-Identifier: BSD-3-Clause` line near their top
(in their first five lines); with --fix, adds it, as a comment in the file's own syntax, after a
shebang or encoding line if there is one. Exit status 1 when a file lacks it (after --fix: 0).

    python scripts/check_spdx.py [--fix] [ROOT]

Sources: the files git tracks under ROOT (default: this checkout; every file when ROOT is not a git
work tree) that are C++/CUDA (.cpp .h .cu .cuh), Python (.py), shell (.sh), CMake (CMakeLists.txt,
.cmake, .cmake.in), Makefiles and the conda environment files.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

IDENTIFIER = "SPDX-License-Identifier: BSD-3-Clause"
SLASHES = {".cpp", ".h", ".cu", ".cuh", ".hpp", ".cc"}
HASHES = {".py", ".sh", ".cmake"}
HASH_NAMES = {"CMakeLists.txt", "Makefile", "environment.yml", "environment-cuda.yml"}


def comment_of(path: pathlib.Path) -> str | None:
    """The SPDX line for this file's syntax; None if it is not a source file."""
    if path.suffix in SLASHES:
        return f"// {IDENTIFIER}\n"
    if path.suffix in HASHES or path.name in HASH_NAMES or path.name.endswith(".cmake.in"):
        return f"# {IDENTIFIER}\n"
    return None


def sources(root: pathlib.Path) -> list[pathlib.Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True)
    if listed.returncode == 0:
        files = [root / name for name in listed.stdout.split("\0") if name]
    else:
        files = [path for path in root.rglob("*") if path.is_file() and ".git" not in path.parts]
    return sorted(path for path in files if path.is_file() and comment_of(path) is not None)


def has_identifier(path: pathlib.Path) -> bool:
    head = path.read_text(errors="replace").splitlines()[:5]
    return any(IDENTIFIER in line for line in head)


def add_identifier(path: pathlib.Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    at = 0
    while (
        at < len(lines)
        and at < 2
        and (lines[at].startswith("#!") or ("coding" in lines[at][:30] and lines[at][0] == "#"))
    ):
        at += 1
    lines.insert(at, comment_of(path))
    path.write_text("".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fix", action="store_true", help="add the line to the files that lack it")
    parser.add_argument("root", nargs="?", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[1])
    args = parser.parse_args(argv)
    root = args.root.resolve()
    lacking = [path for path in sources(root) if not has_identifier(path)]
    for path in lacking:
        if args.fix:
            add_identifier(path)
        print(path.relative_to(root).as_posix())
    if lacking and not args.fix:
        print(
            f"check_spdx: {len(lacking)} source files lack '{IDENTIFIER}' (fix: python scripts/check_spdx.py --fix)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
