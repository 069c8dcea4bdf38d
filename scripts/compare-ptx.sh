#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Whether a change moves any GPU instruction, without a GPU: compiles every CUDA source of this
# checkout and of BEFORE (a source tree of the same layout: `git worktree add /tmp/before <commit>`)
# to PTX with the same nvcc command, the one BUILD (a build directory of this checkout, configured
# with the CUDA kernels) uses, for its first architecture, and compares the instructions: debug
# information and the per-file hashes nvcc puts in internal names are left out. The same PTX is the
# same kernels: a refactor that prints "same" for every file changes no kernel's speed or result,
# and leaves only its host code to measure. The PTX stays in the printed directory.
#
#   scripts/compare-ptx.sh BEFORE [BUILD]      (BUILD: build by default; exit 1 when a file differs)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BEFORE [BUILD]" >&2; exit 2; }
before=$(realpath "$1")
build=${2:-build}
here=$PWD
out=$(mktemp -d "${TMPDIR:-/tmp}/compare-ptx.XXXXXX")
commands=$(ninja -C "$build" -t commands custom_ops | grep -E "nvcc .* -c $here/kernels/cuda/[A-Za-z0-9_]+\.cu" | sort -u || true)
[ -n "$commands" ] || { echo "compare-ptx: $build compiles no CUDA source (configure it with CUSTOM_OPS_CUDA=ON)" >&2; exit 2; }

# The instructions alone: no comments, line or file directives, debug strings or their labels;
# internal names without the hash of the file's contents, string constants without their number.
instructions() {
  grep -vE '^\s*//|\.loc|\.file|^\s*\.b8|L__info_string' "$1" |
    sed -E 's/[0-9]*_INTERNAL_[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]+_[0-9]+/INTERNAL/g;
            s/[0-9]*_GLOBAL__N__[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]+_[0-9]+/GLOBAL/g; s/\$str(\$[0-9]+)?/STR/g'
}

# The two source operands of mul, add and fma in one order: a * b and b * a are the same bits
# and the same instruction.
commutative() {
  python3 -c 'import re, sys
for line in sys.stdin:
    m = re.match(r"(\s*(?:mul|add|fma)\.\S+\s+[^,]+, )([^,;]+), ([^,;]+)(.*)", line, re.S)
    sys.stdout.write(m[1] + ", ".join(sorted([m[2], m[3]])) + m[4] if m else line)'
}

status=0
while read -r command; do
  source=$(grep -oE "$here/kernels/cuda/[A-Za-z0-9_]+\.cu" <<<"$command")
  name=$(basename "$source" .cu)
  arch=$(grep -oE 'arch=compute_[0-9]+[af]?' <<<"$command" | head -1 | cut -d_ -f2)
  # PTX of one architecture, no dependency file, no compiler launcher.
  ptx_command=$(sed -E "s/^ccache //; s/ -gencode [^ ]+//g; s/ -MD -MT [^ ]+ -MF [^ ]+//; s/ -o [^ ]+//; s/ -c / -ptx -arch=compute_$arch /" <<<"$command")
  if [ ! -f "$before/kernels/cuda/$name.cu" ]; then
    echo "$name: new (no kernels/cuda/$name.cu in $before)"
    continue
  fi
  # BEFORE's sources and headers: its files in place of this checkout's, the same flags and torch.
  before_command=$(sed -E "s# -I$here/# -I$before/#g; s# -I$here( |$)# -I$before\\1#g; s# $here/kernels/# $before/kernels/#g" <<<"$ptx_command")
  (cd "$build" && eval "$ptx_command -o $out/$name.after.ptx") &&
    (cd "$build" && eval "$before_command -o $out/$name.before.ptx") ||
    { echo "$name: nvcc failed"; status=1; continue; }
  differing=$(diff <(instructions "$out/$name.before.ptx") <(instructions "$out/$name.after.ptx") | grep -c '^[<>]' || true)
  if [ "$differing" = 0 ]; then
    echo "$name: same"
  elif diff -q <(instructions "$out/$name.before.ptx" | commutative) <(instructions "$out/$name.after.ptx" | commutative) >/dev/null; then
    echo "$name: same but for the order of commutative operands (mul, add, fma)"
  else
    echo "$name: differs ($differing lines of PTX)"
    status=1
  fi
done <<<"$commands"
echo "compare-ptx: PTX in $out"
exit $status
