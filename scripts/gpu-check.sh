#!/usr/bin/env bash
# The GPU check: on the H200 machine (offline, torch preinstalled under python3), build with the
# CUDA kernels against that torch, run every C++ and Python test, the CUDA tests again under
# compute-sanitizer, and (with --bench) the benchmark. Logs go to $OUT (default ./gpu-check-out);
# the last lines printed are the summary.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
BUILD=build-gpu
PREFIX=$PWD/install-gpu
export PYTHONUNBUFFERED=1
summary=()
step() {  # step NAME LOG COMMAND...: runs, logs, records PASS/FAIL and the runner's last line
  local name=$1 log=$2; shift 2
  "$@" >"$OUT/$log" 2>&1
  local rc=$?
  summary+=("$name: $([ $rc -eq 0 ] && echo PASS || echo "FAIL (rc=$rc)") | $(grep -E 'passed|failed|tests passed|error' "$OUT/$log" | tail -1)")
  return $rc
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  nvcc --version | tail -1; g++ --version | head -1; git rev-parse HEAD 2>/dev/null; } >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

step build build.log make install BUILD=$BUILD PREFIX="$PREFIX" CUDA=ON JOBS=16 || { tail -50 "$OUT/build.log"; exit 1; }
# An earlier build here crashed in Python (not in C++) when an error message formatted a number,
# and that build carried libstdc++ code (std::codecvt) of its own: check both first.
{ echo "std::codecvt symbols in the library: $(nm -DC $BUILD/libcustom_ops.so | grep -c 'std::codecvt')"
  "$(cat $BUILD/python-path)" -c "
import torch; torch.ops.load_library('$PREFIX/lib/libcustom_ops.so')
try: torch.ops.custom.weighted_sum(torch.randn(3), torch.randn(4))
except RuntimeError as e: print('python error path OK:', str(e).splitlines()[0])"; } 2>&1 | tee -a "$OUT/machine.txt"
step ctest ctest.log ctest --test-dir $BUILD --output-on-failure -j4
PY=$(cat $BUILD/python-path)
step pytest pytest.log env CUSTOM_OPS_LIBRARY="$PREFIX/lib/libcustom_ops.so" CUSTOM_OPS_PREFIX="$PREFIX" \
  "$PY" -m pytest tests/python -q -rs -x --durations=15
# memcheck and racecheck over the CUDA value tests (C++ and Python); small sizes keep them quick.
step memcheck sanitizer.log compute-sanitizer --tool memcheck --error-exitcode 1 \
  $BUILD/tests/cpp/custom_ops_tests --gtest_filter='*Cuda*'
step racecheck racecheck.log compute-sanitizer --tool racecheck --error-exitcode 1 \
  $BUILD/tests/cpp/custom_ops_tests --gtest_filter='*Cuda*'
if [ "${1:-}" = "--bench" ]; then
  step bench bench.log env CUSTOM_OPS_LIBRARY="$PREFIX/lib/libcustom_ops.so" \
    "$PY" bench/bench_weighted_sum.py --plot --output-dir "$OUT" --git-commit "${CUSTOM_OPS_GIT_COMMIT:-unknown}"
fi

printf '%s\n' "== summary ==" "${summary[@]}" | tee "$OUT/summary.txt"
