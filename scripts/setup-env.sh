#!/usr/bin/env bash
# Prints the Python interpreter to build and test with, creating it first if needed.
#   TORCH unset: python3 (an active venv or conda env included) when its torch is in the supported
#                range (requirements.txt: torch>=A.B,<C.D), used as it is; else .venv in this
#                checkout, created when missing with the newest torch in the range.
#   TORCH=X.Y.Z: python3 when its torch is that release; else .venv-torch-X.Y.Z with it.
# Everything it says goes to stderr except that one path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

torch_range=$(grep -E '^torch>=' requirements.txt)  # e.g. torch>=2.11,<2.16
wanted=${TORCH:-}

# Whether $1 has pytest and a torch that fits: release $wanted, or else the supported range.
fits() {
  "$1" - "$torch_range" "$wanted" <<'PY' 2>/dev/null
import re, sys
import pytest, torch  # noqa: F401
release = tuple(int(p) for p in re.match(r"(\d+)\.(\d+)\.(\d+)", torch.__version__).groups())
spec, wanted = sys.argv[1], sys.argv[2]
if wanted:
    sys.exit(0 if ".".join(map(str, release)) == wanted else 1)
low, below = (tuple(int(p) for p in v.split(".")) for v in re.match(r"torch>=([\d.]+),<([\d.]+)", spec).groups())
sys.exit(0 if low <= release[:2] < below else 1)
PY
}

# Tools the build needs from Debian, installed only when missing (CI and new machines run as root).
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v g++ >/dev/null || missing+=(g++)
[ -e /usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake ] || missing+=(libgtest-dev)
python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
# Header-only; torch's functorch headers include it, the wheels do not ship it. An offline machine
# (the GPU check) gets a copy carried in .deps/nlohmann_json/include instead.
[ -e /usr/include/nlohmann/json.hpp ] || [ -e .deps/nlohmann_json/include/nlohmann/json.hpp ] || missing+=(nlohmann-json3-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-env: installing ${missing[*]} from Debian" >&2
  apt-get update -qq >&2 && apt-get install -y -qq "${missing[@]}" >&2
fi

venv=.venv${wanted:+-torch-$wanted}
if fits python3; then
  echo "setup-env: using $(command -v python3) with torch $(python3 -c 'import torch; print(torch.__version__)')" >&2
  command -v python3
  exit 0
fi
if ! { [ -x "$venv/bin/python" ] && fits "$venv/bin/python"; }; then
  echo "setup-env: creating $venv with torch ${wanted:-newest in $torch_range} from PyPI (a few minutes the first time)" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
fi
"$venv/bin/python" -m pip install -q -r requirements.txt ${wanted:+"torch==$wanted"} >&2
echo "setup-env: using $venv with torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')" >&2
echo "$PWD/$venv/bin/python"
