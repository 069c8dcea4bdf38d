#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A change's speed, before and after, in one device session: builds the library of BEFORE (a
# source tree, e.g. `git archive <commit>` unpacked) and of this checkout, each with its own
# benchmarks, then runs every benchmark of both in turn (before, after, before, ... so drift hits
# both alike) and prints bench/compare_results.py's side-by-side table per benchmark. Two copies of
# the library cannot share a process, so each run is its own process. Logs and JSON under $OUT.
#
#   scripts/gpu-compare.sh BEFORE [BENCH_ARGS...]   (default: float32,bfloat16 from 2^24, no compile)
# BEFORE_COMMIT and AFTER_COMMIT name the two sides in the JSON (a copied tree has no .git);
# BENCHES picks benchmarks (default all three), WEIGHTED_SUM_LAYOUTS bench_weighted_sum's layouts.
set -uo pipefail
cd "$(dirname "$0")/.."
before=$(realpath "$1"); shift
bench_args=("$@")
[ ${#bench_args[@]} -gt 0 ] || bench_args=(--dtypes float32,bfloat16 --min-log2 24 --no-compile)
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
# The system g++, as scripts/gpu-check.sh explains.
export CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++
jobs=$(( $(nproc) / 2 ))
build() {  # build TREE: the library only, into TREE/build-compare
  make -C "$1" install BUILD=build-compare PREFIX="$1/install-compare" CUDA=ON JOBS=$jobs \
    CMAKE_ARGS="-DCUSTOM_OPS_BUILD_TESTS=OFF -DTORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST" >"$OUT/build-$2.log" 2>&1
}
build "$before" before & build "$PWD" after & wait
for side in before after; do
  tree=$([ $side = before ] && echo "$before" || echo "$PWD")
  [ -f "$tree/install-compare/lib/libcustom_ops.so" ] || { echo "build of $side failed:"; tail -30 "$OUT/build-$side.log"; exit 1; }
done
status=0
for bench in ${BENCHES:-bench_weighted_sum bench_weighted_square_sum bench_fusion}; do
  for side in before after; do
    tree=$([ $side = before ] && echo "$before" || echo "$PWD")
    extra=()
    [ $bench = bench_weighted_sum ] && extra=(--layouts "${WEIGHTED_SUM_LAYOUTS:-contiguous,broadcast,transposed,per-channel}")
    [ $bench = bench_fusion ] && extra=()
    args=("${bench_args[@]}")
    [ $bench = bench_fusion ] && args=(--dtypes float32,bfloat16)
    (cd "$tree" && python3 bench/$bench.py --library install-compare/lib/libcustom_ops.so "${args[@]}" "${extra[@]}" \
      --git-commit "$(eval echo "\${${side^^}_COMMIT:-$side}")" --output "$OUT/$bench-$side.json") >"$OUT/$bench-$side.log" 2>&1 ||
      { echo "$bench ($side) failed:"; tail -20 "$OUT/$bench-$side.log"; status=1; }
  done
  echo "== $bench =="
  python3 bench/compare_results.py "$OUT/$bench-before.json" "$OUT/$bench-after.json" \
    --output "$OUT/$bench-side-by-side.json" | tee "$OUT/$bench-compare.txt" || status=1
done
exit $status
