# SPDX-License-Identifier: BSD-3-Clause
"""Two runs of one benchmark side by side: the commit before a change and the one after, measured
in one device session (each tree's library in its own process: two copies cannot share one).

    python bench/compare_results.py BEFORE.json AFTER.json [--output side_by_side.json]

Rows are matched on (kind, variant, dtype, layout, log2n, threads). Printed: our variants' rows
(``ours*``, and ``op_*`` in the fusion benchmark) with both medians and after/before; a row from
2^24 up whose ratio exceeds 1 + --tolerance (3%) is marked SLOWER, and the exit status is 1 when
any is. The reference variants (copy, add, eager, compile) are compared too, as a measure of the
run-to-run spread: a change that slows ours and them alike is the machine, not the change.
"""

import argparse
import json
import pathlib
import statistics
import sys

KEY = ("kind", "variant", "dtype", "layout", "log2n", "threads")


def ours(variant: str) -> bool:
    return variant.startswith("ours") or variant.startswith("op_")


def load(path: pathlib.Path) -> tuple[dict, dict]:
    run = json.loads(path.read_text())
    return run, {tuple(row.get(k) for k in KEY): row for row in run["rows"] if row.get("median_us")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=pathlib.Path)
    p.add_argument("after", type=pathlib.Path)
    p.add_argument("--tolerance", type=float, default=0.03, help="allowed slow-down from --min-log2 up")
    p.add_argument("--min-log2", type=int, default=24)
    p.add_argument("--output", type=pathlib.Path, help="write the side-by-side rows as JSON")
    args = p.parse_args(argv)
    before_run, before = load(args.before)
    after_run, after = load(args.after)
    rows, slower, reference_ratios = [], [], []
    for key in sorted(before.keys() & after.keys(), key=lambda k: tuple(str(v) for v in k)):
        b, a = before[key]["median_us"], after[key]["median_us"]
        row = dict(zip(KEY, key), before_us=b, after_us=a, ratio=round(a / b, 4))
        judged = key[4] is None or key[4] >= args.min_log2
        if ours(row["variant"]):
            row["slower"] = judged and row["ratio"] > 1 + args.tolerance
            slower += [row] if row["slower"] else []
        elif judged:
            reference_ratios.append(row["ratio"])
        rows.append(row)
    print(
        f"before {before_run.get('git_commit')}  after {after_run.get('git_commit')}  ({before_run.get('device_name')})"
    )
    print(
        f"{'kind':10s} {'variant':22s} {'dtype':9s} {'layout':16s} {'n':>6s} "
        f"{'before us':>11s} {'after us':>11s} {'after/before':>12s}"
    )
    for row in rows:
        if ours(row["variant"]):
            n = f"2^{row['log2n']}" if row["log2n"] is not None else "-"
            mark = "  SLOWER" if row.get("slower") else ""
            print(
                f"{row['kind']:10s} {row['variant']:22s} {row['dtype']!s:9s} {row['layout']!s:16s} {n:>6s} "
                f"{row['before_us']:11.2f} {row['after_us']:11.2f} {row['ratio']:12.4f}{mark}"
            )
    if reference_ratios:
        print(
            f"reference variants from 2^{args.min_log2}: after/before median "
            f"{statistics.median(reference_ratios):.4f}, "
            f"range {min(reference_ratios):.4f}..{max(reference_ratios):.4f} (the run-to-run spread)"
        )
    print(f"{len(slower)} of our rows more than {args.tolerance:.0%} slower" if slower else "no row of ours slower")
    if args.output:
        meta = ("date", "device_name", "torch", "cuda", "git_commit", "timing", "argv")
        summary = {
            "before": {k: before_run.get(k) for k in meta},
            "after": {k: after_run.get(k) for k in meta},
            "tolerance": args.tolerance,
            "min_log2": args.min_log2,
            "slower": len(slower),
            "reference_ratios": reference_ratios,
        }
        args.output.write_text(json.dumps({**summary, "rows": rows}, indent=1) + "\n")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
