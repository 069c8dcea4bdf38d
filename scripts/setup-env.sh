#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Prints the Python interpreter to build (and test) with, after checking, before any compiling,
# that everything the build needs is there. Everything it says goes to stderr, the path to stdout.
#
#   scripts/setup-env.sh          for make install / make demo: a torch in the supported range
#   scripts/setup-env.sh --test   for make test: also the test tools (pyproject.toml's `test` extra)
#
# Which Python (the range: requirements.txt, read by scripts/packaging/torch_requirement.py):
#   TORCH unset: python3 (an active venv or conda env included) when its torch is in the range,
#                used as it is: torch is never replaced; test tools it lacks are pip-installed into
#                it, saying so (INSTALL_TEST_TOOLS=no: the command to run is printed instead).
#                Otherwise, saying why, .venv in this checkout, created once with the newest torch
#                of the range and numpy (and for --test the test and ONNX tools).
#   TORCH=X.Y.Z: likewise with release X.Y.Z and .venv-torch-X.Y.Z.
set -euo pipefail
cd "$(dirname "$0")/.."

for_tests=false
[ "${1:-}" = --test ] && for_tests=true
wanted=${TORCH:-}
install_test_tools=${INSTALL_TEST_TOOLS:-yes}
say() { echo "setup-env: $*" >&2; }
# -W ignore: torch without numpy warns on import; that is for make test to add, not to print here.
requirement() { "$1" -W ignore scripts/packaging/torch_requirement.py "${@:2}"; }

# System tools (not Python packages): named with the command that installs them. Root on Debian
# (CI, a fresh machine) gets them installed; anyone else gets the command.
found_in_prefixes() {
  local prefix
  for prefix in /usr /usr/local ${CONDA_PREFIX:+"$CONDA_PREFIX"}; do
    compgen -G "$prefix/$1" >/dev/null && return 0
  done
  return 1
}
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v "${CXX:-g++}" >/dev/null || missing+=(g++)
found_in_prefixes 'lib*/cmake/GTest/GTestConfig.cmake' || found_in_prefixes 'lib/*/cmake/GTest/GTestConfig.cmake' ||
  [ -d /usr/src/googletest ] || missing+=(libgtest-dev)
# Header-only; torch's functorch headers include it and the wheels do not ship it. An offline
# machine (the GPU check) gets a copy carried in .deps/nlohmann_json/include instead.
found_in_prefixes include/nlohmann/json.hpp || [ -e .deps/nlohmann_json/include/nlohmann/json.hpp ] ||
  missing+=(nlohmann-json3-dev)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]} from Debian"
    apt-get update -qq >&2 && apt-get install -y -qq "${missing[@]}" >&2
  else
    say "missing ${missing[*]}: install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}; conda:" \
      "conda env create -f environment.yml, then conda activate custom-ops) and run make again"
    exit 1
  fi
fi

command -v python3 >/dev/null || { say "no python3 on PATH: install Python 3.10 or newer"; exit 1; }
# pyproject.toml's requires-python, which torch 2.11-2.15 share.
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
  { say "$(command -v python3) is Python $(python3 -c 'import platform; print(platform.python_version())'): install Python 3.10 or newer"; exit 1; }
check=(check ${wanted:+--release "$wanted"})
if why=$(requirement python3 "${check[@]}" 2>&1); then
  python=$(command -v python3)
  say "using $python with torch $("$python" -W ignore -c 'import torch; print(torch.__version__)')"
else
  venv=.venv${wanted:+-torch-$wanted}
  say "not using $(command -v python3): it ${why##*$'\n'}; using $venv"
  python=$PWD/$venv/bin/python
  if ! { [ -x "$python" ] && requirement "$python" "${check[@]}" >/dev/null; }; then
    python3 -m venv --help >/dev/null 2>&1 || {
      say "python3 cannot make a venv: install python3-venv (Debian/Ubuntu), or activate an environment with torch"
      exit 1
    }
    torch=$(requirement python3 range)
    say "creating $venv with torch ${wanted:-newest of $torch} from PyPI (a few GB, minutes the first time)"
    python3 -m venv "$venv"
    "$python" -m pip install -q --upgrade pip >&2
    spec=${wanted:+torch==$wanted}  # TORCH=X.Y.Z: that release, else the newest in the range
    "$python" -m pip install -q "${spec:-$torch}" numpy >&2
  fi
  # numpy: torch warns on import without it ("Failed to initialize NumPy"), in the demo's output too.
  "$python" -c 'import numpy' 2>/dev/null || "$python" -m pip install -q numpy >&2
  # This checkout's own environment also gets the ONNX tools, so that every test runs.
  if $for_tests; then
    mapfile -t tools < <(requirement "$python" check --extras test,onnx)
    [ ${#tools[@]} -eq 0 ] || "$python" -m pip install -q "${tools[@]}" >&2
  fi
  echo "$python"
  exit 0
fi

if $for_tests; then
  mapfile -t tools < <(requirement "$python" check --extras test)
  if [ ${#tools[@]} -gt 0 ]; then
    if [ "$install_test_tools" != no ] &&
      say "installing the test tools $python lacks: ${tools[*]} (custom-ops[test]; torch is left as it is)" &&
      "$python" -m pip install -q "${tools[@]}" >&2; then
      :
    else
      # pytest-xdist only speeds the tests up: make test runs them in one process without it.
      required=("${tools[@]/pytest-xdist/}")
      if [ -n "${required[*]// /}" ]; then
        say "$python lacks ${tools[*]}: run $python -m pip install ${tools[*]@Q} and make test again"
        exit 1
      fi
    fi
  fi
fi
echo "$python"
