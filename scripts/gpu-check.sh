#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The GPU check: on the H200 machine (offline, torch preinstalled under python3), build with the
# CUDA kernels against that torch, run every C++ and Python test, the CUDA tests again under
# compute-sanitizer, and (with --bench) the benchmark. Logs go to $OUT (default ./gpu-check-out);
# the last lines printed are the summary.
# Options: --bench (also run the benchmark), --bench-only (no ctest/pytest: the sanitizers and
# the benchmark), --no-sanitizers (skip memcheck and racecheck). One command may run 10 minutes
# on the device machine, so there: `--no-sanitizers` (build, ctest, pytest), then `--bench-only`.
# Where pytest alone needs longer (one GPU, fewer cores for pytest-xdist), split it over two
# calls: PYTEST_TARGETS picks test files (default tests/python), SKIP_CTEST=1 skips ctest, SKIP_PYTEST=1 pytest,
# PYTEST_LIMIT sets its time limit in seconds (default 400), PYTEST_K selects tests by pytest -k
# (e.g. PYTEST_K="not cpu": CI runs the CPU cases), PYTEST_MARK by pytest -m. --drill is CI's drill
# on the GPU, in one call: it writes the drill's operators into this tree (scripts/drill-ops.sh:
# run it on a scratch copy, as the device machine's is), then builds, runs every C++ test and the
# drill operators' CUDA Python tests. The functorch headers need nlohmann/json.hpp: carry
# .deps/nlohmann_json/include (a copy of Debian's nlohmann-json3-dev) to that offline machine.
set -uo pipefail
cd "$(dirname "$0")/.."
BENCH=0 TESTS=1 SANITIZERS=1 DRILL=0
for arg in "$@"; do
  case $arg in
    --bench) BENCH=1 ;;
    --bench-only) BENCH=1 TESTS=0 ;;
    --no-sanitizers) SANITIZERS=0 ;;
    --drill) DRILL=1 ;;
    *) echo "usage: $0 [--bench | --bench-only] [--no-sanitizers] [--drill]" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
BUILD=build-gpu
PREFIX=$PWD/install-gpu
export PYTHONUNBUFFERED=1
summary=()
step() {  # step NAME LOG SECONDS COMMAND...: runs with a time limit, logs, records PASS/FAIL
  local name=$1 log=$2 limit=$3; shift 3
  local started=$SECONDS
  timeout "$limit" "$@" >"$OUT/$log" 2>&1
  local rc=$?
  summary+=("$name: $([ $rc -eq 0 ] && echo PASS || echo "FAIL (rc=$rc)") in $((SECONDS - started)) s | $(grep -E 'passed|failed|tests passed|error' "$OUT/$log" | tail -1)")
  return $rc
}

# The H200 image sets CXX and CUDAHOSTCXX to /opt/gcc/bin/g++, a GCC with only libstdc++.a: a
# shared library linked with it (or with nvcc using it: its library directory joins the link line)
# carries a second C++ runtime and crashes in Python, as do the graphs Inductor compiles with CXX.
# CMake and the tests refuse it; use the system g++ instead.
links_shared_libstdcxx() {
  printf '#include <sstream>\nint main() { std::ostringstream s; s << 42; return 0; }\n' |
    "$1" -x c++ - -o "$OUT/libstdcxx-probe" 2>/dev/null && objdump -p "$OUT/libstdcxx-probe" | grep -q 'NEEDED.*libstdc++'
}
for variable in CXX CUDAHOSTCXX; do
  if [ -n "${!variable:-}" ] && ! links_shared_libstdcxx "${!variable}"; then
    echo "$variable=${!variable} links libstdc++ statically: building and testing with /usr/bin/g++ instead"
    export "$variable=/usr/bin/g++" CC=/usr/bin/gcc
  fi
done
rm -f "$OUT/libstdcxx-probe"

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  nvcc --version | tail -1; "${CXX:-g++}" --version | head -1
  # The device machine's copy of the tree may carry a stale .git: the caller's commit wins.
  echo "commit ${CUSTOM_OPS_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"; } >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

if [ $DRILL = 1 ]; then
  drill_ops=$(PYTHON=python3 scripts/drill-ops.sh 2>"$OUT/drill-ops.log") || { cat "$OUT/drill-ops.log"; exit 1; }
  # The CUDA cases alone, without the slow (CPU-bound packaging and ONNX) ones: CI runs the rest.
  PYTEST_K="(${drill_ops// / or }) and not cpu" PYTEST_MARK="not slow"
  echo "drill operators: $drill_ops" | tee -a "$OUT/machine.txt"
fi
step build build.log 300 make install BUILD=$BUILD PREFIX="$PREFIX" CUDA=ON JOBS=$(nproc) || { tail -50 "$OUT/build.log"; exit 1; }
# The error path formats numbers through libstdc++'s locale: the first thing a second runtime breaks.
{ echo "std::codecvt symbols in the library (0: no private libstdc++): $(nm -DC $BUILD/libcustom_ops.so | grep -c 'std::codecvt')"
  "$(cat $BUILD/python-path)" -c "
import torch; torch.ops.load_library('$PREFIX/lib/libcustom_ops.so')
try: torch.ops.custom.weighted_sum(torch.randn(3), torch.randn(4))
except RuntimeError as e: print('python error path OK:', str(e).splitlines()[0])"; } 2>&1 | tee -a "$OUT/machine.txt"
PY=$(cat $BUILD/python-path)
if [ $TESTS = 1 ]; then
  [ "${SKIP_CTEST:-0}" = 1 ] || step ctest ctest.log 120 ctest --test-dir $BUILD --output-on-failure -j4
  # pytest-xdist, where present, spreads the test files over processes (one CUDA context each; a
  # file stays in one process, as in make test: its campaign and count test together). One line a
  # test (-v): a run cut off by its time limit still names each failure, and what never finished.
  PARALLEL=$("$PY" -c "import xdist" 2>/dev/null && echo "-n $(( $(nproc) > 24 ? 16 : $(nproc) / 2 )) --dist loadfile" || true)
  [ "${SKIP_PYTEST:-0}" = 1 ] || step pytest pytest.log "${PYTEST_LIMIT:-400}" env CUSTOM_OPS_LIBRARY="$PREFIX/lib/libcustom_ops.so" CUSTOM_OPS_PREFIX="$PREFIX" \
    "$PY" -m pytest ${PYTEST_TARGETS:-tests/python} -v -rs --durations=15 $PARALLEL ${PYTEST_K:+-k "$PYTEST_K"} \
    ${PYTEST_MARK:+-m "$PYTEST_MARK"}
  while read -r failed; do summary+=("  $failed"); done < <(grep -oE "(FAILED|ERROR) tests/[^ ]+" "$OUT/pytest.log" | sort -u)
fi
# memcheck and racecheck over the CUDA GoogleTests; their small sizes keep them quick.
if [ $SANITIZERS = 1 ]; then
  step memcheck sanitizer.log 150 compute-sanitizer --tool memcheck --error-exitcode 1 \
    $BUILD/tests/cpp/custom_ops_tests --gtest_filter='*Cuda*'
  step racecheck racecheck.log 150 compute-sanitizer --tool racecheck --error-exitcode 1 \
    $BUILD/tests/cpp/custom_ops_tests --gtest_filter='*Cuda*'
fi
if [ $BENCH = 1 ]; then
  step bench bench.log 300 env CUSTOM_OPS_LIBRARY="$PREFIX/lib/libcustom_ops.so" \
    "$PY" bench/bench_weighted_sum.py --plot --output-dir "$OUT" --git-commit "${CUSTOM_OPS_GIT_COMMIT:-unknown}"
fi

printf '%s\n' "== summary ==" "${summary[@]}" | tee "$OUT/summary.txt"
