#!/usr/bin/env python3
"""Turns the printed table of a bench_weighted_sum.py run back into its results JSON.

It exists for runs that ended before writing their JSON (a time limit, a crash) but whose
printed log was kept: the rows become the same `rows` that bench_weighted_sum.py writes, so
plot_results.py and the summary of the targets read them like any other result.

    python bench/table_to_json.py bench/results/X.txt [-o X.json] [--set key=value ...] [--note TEXT]

What the table gives, and what is rebuilt:
  - the variant (its printed label), dtype, layout, threads, log2n and the median (to 0.01 us, as
    printed) of every timed row; the header line gives the device, torch, commit and timing;
  - shape and bytes are rebuilt from the layout and dtype (weighted_sum_variants.py's shapes and
    byte counts), and every ratio (vs_add, floor_us, vs_floor, vs_eager, vs_compile) by
    bench_harness.timed_rows from the printed medians, so they may differ from the run's own in
    the last digit. The printed GB/s and ratios are checked against the rebuilt ones: a mismatch
    stops the conversion;
  - a (dtype, layout, size) cut off mid-print before the rows its ratios need (copy_,
    torch.add(out=), ours fwd+bwd) is dropped; host rows, the per-call table at the end of a
    complete run, are not read.
The file gets "complete": false (unless --complete) and a "note" saying where it came from.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

import torch

import bench_harness as harness
import weighted_sum_report as report
from weighted_sum_variants import DTYPES, FWD_BWD_VARIANTS, Case, forward_variants, fwd_bwd_floor_bytes, make_inputs

HEADER = re.compile(
    r"^custom::weighted_sum benchmark on (?P<device_name>.+) \((?P<device>[^)]+)\), torch (?P<torch>\S+), "
    r"commit (?P<git_commit>\S+), timing: (?P<timing>.+)$"
)
# The top-level fields in the order bench_weighted_sum.py writes them; others follow.
FIELD_ORDER = ("date", "device", "device_name", "torch", "cuda", "triton", "python", "git_commit", "git_dirty")
VARIANTS = {label: name for name, label in report.LABELS.items()}
# Longest label first, so that "ours fwd+bwd graph" is not read as "ours" and the rest.
ROW = re.compile(
    r"^(?P<label>" + "|".join(re.escape(label) for label in sorted(VARIANTS, key=len, reverse=True)) + r")\s+"
    r"(?P<dtype>" + "|".join(DTYPES) + r")\s+(?P<layout>\S+)\s+(?P<threads>-|\d+)\s+2\^(?P<log2n>\d+)\s+"
    r"(?P<median_us>\d+\.\d+)\s+(?P<gbps>\d+\.\d+)(?:\s+(?P<ratio>\d+\.\d+)x)?\s*$"
)


def parse(text: str) -> tuple[dict, dict]:
    """The header's fields, and {(dtype, layout, threads, log2n): {variant: (median_us, gbps, ratio)}}."""
    meta, cases = {}, {}
    for line in text.splitlines():
        if match := HEADER.match(line):
            meta = match.groupdict()
        elif match := ROW.match(line):
            row = match.groupdict()
            threads = None if row["threads"] == "-" else int(row["threads"])
            key = (row["dtype"], row["layout"], threads, int(row["log2n"]))
            ratio = float(row["ratio"]) if row["ratio"] else None
            cases.setdefault(key, {})[VARIANTS[row["label"]]] = (float(row["median_us"]), float(row["gbps"]), ratio)
    return meta, cases


def bytes_of(case: Case, names) -> tuple[tuple, dict]:
    """The shape of x and the bytes of each variant of `names`, from meta tensors of the case's
    layout (nothing allocated). Forward variants: their own accounting in forward_variants; the
    forward+backward ones all move fwd_bwd_floor_bytes (fwd_bwd_variants itself would need the
    library loaded)."""
    x, w, y = make_inputs(case, torch.device("meta"))
    moved = {variant.name: variant.bytes for variant in forward_variants(x, w, y, compiled=lambda *_: None)}
    floor_bytes = fwd_bwd_floor_bytes(x, w)
    return tuple(x.shape), {name: floor_bytes if name in FWD_BWD_VARIANTS else moved[name] for name in names}


def close(printed: float, rebuilt: float | None, decimals: int) -> bool:
    """Whether a printed value matches the rebuilt one, given the printed medians' rounding."""
    return rebuilt is not None and abs(printed - rebuilt) <= 0.5 * 10**-decimals + 2e-3 * abs(rebuilt)


def rows_of(cases: dict) -> tuple[list[dict], list[str]]:
    rows, dropped = [], []
    for (dtype, layout, threads, log2n), printed in cases.items():
        case = Case(layout, dtype, log2n, threads)
        needed = {"copy", "add_out", "ours_fwd_bwd"} if any(name in FWD_BWD_VARIANTS for name in printed) else set()
        if not {"copy", "add_out"} | needed <= printed.keys():
            dropped.append(str(case))
            continue
        shape, moved = bytes_of(case, printed)
        variants = [harness.Variant(name, None, None, moved[name]) for name in printed]
        times = {name: us for name, (us, _, _) in printed.items()}
        for row in harness.timed_rows(case, shape, variants, times, FWD_BWD_VARIANTS):
            _, gbps, ratio = printed[row["variant"]]
            metric = "vs_add" if row["kind"] == "forward" else "vs_floor"
            if not close(gbps, row["gbps"], 1) or (ratio is not None and not close(ratio, row[metric], 3)):
                sys.exit(
                    f"table_to_json: {case} {row['variant']}: printed {gbps} GB/s, {ratio}x; rebuilt "
                    f"{row['gbps']} GB/s, {row[metric]}x (bytes {row['bytes']}): the layout's shape or bytes differ"
                )
            rows.append(row)
    return rows, dropped


def value(text: str):
    """--set's value: JSON where it parses (numbers, null, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", type=pathlib.Path, help="the printed output of bench_weighted_sum.py")
    parser.add_argument("-o", "--output", type=pathlib.Path, help="JSON path (default: the table's, .json)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a top-level field the table does not print (date, cuda, argv, ...); VALUE is JSON where it "
        "parses, else a string (quote a string that looks like a number: cuda='\"13.0\"')",
    )
    parser.add_argument("--note", default=None, help="what happened to the run, for the JSON's note")
    parser.add_argument("--complete", action="store_true", help="the table is of a run that finished")
    args = parser.parse_args(argv)

    meta, cases = parse(args.table.read_text())
    if not meta or not cases:
        sys.exit(f"table_to_json: {args.table}: no header line or no rows of bench_weighted_sum.py's table")
    rows, dropped = rows_of(cases)
    extra = {}
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep:
            parser.error(f"--set: expected KEY=VALUE, got {item!r}")
        extra[key] = value(text)
    note = f"parsed by bench/table_to_json.py from {args.table.name}, the printed table of the run"
    note += f": {args.note}" if args.note else ""
    note += "; medians to 0.01 us as printed, every ratio recomputed from them; no host rows"
    if dropped:
        note += f"; dropped, cut off mid-print: {', '.join(dropped)}"
    device = "cpu" if meta["device"] == "cpu" else "cuda"
    all_threads = max((row["threads"] for row in rows if row["threads"]), default=None)  # CPU: the largest
    fields = {**meta, "git_dirty": None, **extra}
    results = {
        **{key: fields.pop(key) for key in FIELD_ORDER if key in fields},
        **fields,
        "complete": args.complete,
        "note": note,
        "summary": report.summarize(rows, device, all_threads),
        "rows": rows,
    }
    output = args.output or args.table.with_suffix(".json")
    output.write_text(report.results_json(results))
    print(f"\nwrote {output}: {len(rows)} rows" + (f", dropped {len(dropped)} cut-off cases" if dropped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
