#!/usr/bin/env bash
# Prints the Python interpreter to build and test with, creating it first if needed:
#  - a python3 that already has the pinned torch (the GPU machine: offline, torch preinstalled);
#  - else .venv in this checkout, with requirements.txt installed from PyPI.
# Everything it says goes to stderr except that one path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

torch_pin=$(sed -n 's/^torch==//p' requirements.txt)
has_pinned_torch() {
  "$1" - "$torch_pin" <<'PY' 2>/dev/null
import sys, torch, pytest
sys.exit(0 if torch.__version__.split("+")[0] == sys.argv[1] else 1)
PY
}

# Tools the build needs from Debian, installed only when missing (CI and new machines run as root).
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v g++ >/dev/null || missing+=(g++)
[ -e /usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake ] || missing+=(libgtest-dev)
python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-env: installing ${missing[*]} from Debian" >&2
  apt-get update -qq >&2 && apt-get install -y -qq "${missing[@]}" >&2
fi

if [ -x .venv/bin/python ] && has_pinned_torch .venv/bin/python; then
  .venv/bin/python -m pip install -q -r requirements.txt >&2
  echo "$PWD/.venv/bin/python"
elif has_pinned_torch python3; then
  echo "setup-env: using $(command -v python3), which has torch $torch_pin" >&2
  command -v python3
else
  echo "setup-env: creating .venv with torch $torch_pin from PyPI (a few minutes the first time)" >&2
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >&2
  .venv/bin/python -m pip install -q -r requirements.txt >&2
  echo "$PWD/.venv/bin/python"
fi
