#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Creates .venv-lint with the pinned lint and format tools (requirements-lint.txt) from PyPI, and
# brings it up to date when requirements-lint.txt changes. Own venv: the tools need no torch, and
# the pins stay out of the build and test environment.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-lint
stamp=$venv/requirements-lint.txt  # the requirements it was last installed from
if [ -x "$venv/bin/python" ] && cmp -s requirements-lint.txt "$stamp"; then
  exit 0
fi
if ! python3 -m venv --help >/dev/null 2>&1; then
  echo "setup-lint: installing python3-venv from Debian" >&2
  apt-get update -qq >&2 && apt-get install -y -qq python3-venv >&2
fi
echo "setup-lint: installing requirements-lint.txt into $venv" >&2
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements-lint.txt >&2
cp requirements-lint.txt "$stamp"
