#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds examples/cpp against an installed custom-ops and runs the Python demo, which writes a
# TorchScript file and an AOTInductor package and runs the C++ app on them.
#
#   PYTHON=.venv/bin/python PREFIX=install examples/run_demo.sh
#
# PYTHON: an interpreter with torch (default: python3); PREFIX: the `cmake --install` prefix of
# custom-ops (default: ./install); EXAMPLE_BUILD: the example's build dir (default: build-examples);
# MODELS: where the model files go (default: out/models).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PREFIX=$(realpath "${PREFIX:-install}")
EXAMPLE_BUILD=${EXAMPLE_BUILD:-build-examples}
MODELS=${MODELS:-out/models}

# -W ignore: torch without numpy warns on import; nothing here needs numpy.
torch_prefix=$("$PYTHON" -W ignore -c 'import torch; print(torch.utils.cmake_prefix_path)')
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
# The example's build log is shown only when it fails or warns: the demo's output is the demo's.
log="$EXAMPLE_BUILD.log"
mkdir -p "$(dirname "$log")"
echo "building the C++ example (examples/cpp) against $PREFIX (log: $log)"
if ! { cmake -S examples/cpp -B "$EXAMPLE_BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX;$torch_prefix" && cmake --build "$EXAMPLE_BUILD"; } > "$log" 2>&1; then
  cat "$log" >&2
  echo "run_demo: building examples/cpp failed (above)" >&2
  exit 1
fi
if grep -qi "warning" "$log"; then cat "$log" >&2; fi
"$PYTHON" examples/python/demo.py --library "$PREFIX/lib/libcustom_ops.so" \
  --cpp-app "$EXAMPLE_BUILD/weighted_sum_demo" --out-dir "$MODELS"
