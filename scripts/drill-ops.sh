#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The drill's operators: writes, with scripts/new_op.py, operators the tables have never had into the
# checkout it is run from (a scratch copy: CI's drill, the GPU check's --drill), then prints their
# names, one line, for `make test-op OP=...` and pytest -k. The gallery's lines (docs/gallery.md),
# value only, partials derived: an elementwise gate whose weight gradient reads the weight, a GELU
# (erf, and derived partials with decimal constants), and a reduction of functions with ATen's
# conventions at 0 (abs, relu); and one reduction with its partials given by hand, as the script
# checks them. PYTHON: an interpreter with torch (sympy).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
new_op() { "$python" scripts/new_op.py "$@" >&2; }
new_op silu_gate --kind elementwise --value 'x * w * sigmoid(w)'
new_op gelu_gate --kind elementwise --value 'w * x * 0.5 * (1 + erf(x * 0.7071067811865476))'
new_op bce_logits_sum --kind reduction --value 'relu(x) - x * w + log1p(exp(-abs(x)))'
new_op weighted_poly_sum --term WeightedPoly --kind reduction --value '(x + w) * x * w' \
  --dx '(x + x + w) * w' --dw 'x * (x + w + w)' --dxx 'w + w' --dxw 'x + x + w + w' --dww 'x + x'
echo silu_gate gelu_gate bce_logits_sum weighted_poly_sum
