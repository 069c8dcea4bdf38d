"""How bench_weighted_sum.py reports: the printed tables, the targets with their PASS/MISS
summary, the results JSON and the plot. weighted_square_sum_report.py prints its tables, judges
its targets and writes its file with the functions here."""

from __future__ import annotations

import dataclasses
import json
import pathlib

from weighted_sum_variants import LAYOUTS, PER_CHANNEL_LAYOUTS

LABELS = {
    "copy": "y.copy_(x)",
    "add_out": "torch.add(out=)",
    "eager": "eager w*x.pow(2)",
    "compile": "compile w*x*x",
    "ours": "ours",
    "ours_out": "ours(out=)",
    "ours_fwd_bwd": "ours fwd+bwd",
    "eager_fwd_bwd": "eager fwd+bwd",
    "compile_fwd_bwd": "compile fwd+bwd",
    "ours_fwd_bwd_graph": "ours fwd+bwd graph",
    "eager_fwd_bwd_graph": "eager fwd+bwd graph",
    "add_fwd_bwd": "torch.add fwd+bwd",
    "add": "torch.add(x, w)",
}


# ----------------------------------------------------------------------------------------------
# Printing

ROW_FORMAT = "{:<19} {:<9} {:<11} {:>4} {:>5} {:>12} {:>9} {:>7} {:>8}"
# A table's columns: the variant, the case and its time, then a ratio column per row field.
COLUMNS = ("variant", "dtype", "layout", "thr", "n", "median us", "GB/s")
RATIOS = {"vs_add": "vs add", "vs_floor": "vs floor"}


def print_header(threads, dtype, layout, row_format=ROW_FORMAT, ratios=RATIOS):
    print()
    print(f"== {dtype} {layout}" + (f", {threads} threads" if threads else ""))
    print(row_format.format(*COLUMNS, *ratios.values()))


def _ratio(value):
    return "" if value is None else f"{value:.3f}x"


def print_rows(rows, row_format=ROW_FORMAT, ratios=RATIOS, labels=LABELS):
    for row in rows:
        print(
            row_format.format(
                labels[row["variant"]],
                row["dtype"],
                row["layout"],
                row["threads"] or "-",
                f"2^{row['log2n']}",
                f"{row['median_us']:.2f}",
                f"{row['gbps']:.1f}",
                *(_ratio(row[field]) for field in ratios),
            ),
            flush=True,
        )


def print_host_rows(rows):
    print("\n== per-call Python wall time, float32 contiguous (lower is better)")
    print("{:<17} {:>5} {:>12} {:>8} {:>9}".format("variant", "n", "us / call", "vs add", "vs eager"))
    for row in rows:
        print(
            "{:<17} {:>5} {:>12.2f} {:>8} {:>9}".format(
                LABELS[row["variant"]],
                f"2^{row['log2n']}",
                row["per_call_us"],
                _ratio(row["vs_add"]),
                _ratio(row["vs_eager"]),
            )
        )


# ----------------------------------------------------------------------------------------------
# The targets


@dataclasses.dataclass(frozen=True)
class Target:
    text: str
    device: str | None  # "cuda", "cpu", or None for both
    kind: str
    variant: str
    metric: str  # a ratio column of the rows
    bound: float
    at_least: bool  # True: metric >= bound, False: metric <= bound (< bound when strict)
    layouts: tuple = ("contiguous",)
    min_log2: int = 0
    max_log2: int = 99
    all_threads: bool = False  # CPU: only the rows at the default (all) thread count
    strict: bool = False


def targets() -> list[Target]:
    found = []
    for variant in ("ours", "ours_out"):
        label = LABELS[variant]
        found.append(
            Target(
                f"GPU forward contiguous n>=2^24, every dtype: {label} >= 0.97x torch.add(out=)",
                "cuda",
                "forward",
                variant,
                "vs_add",
                0.97,
                True,
                min_log2=24,
            )
        )
        for layout in ("broadcast", "transposed"):
            found.append(
                Target(
                    f"GPU forward {layout} n>=2^24, every dtype: {label} >= 0.9x torch.add(out=)",
                    "cuda",
                    "forward",
                    variant,
                    "vs_add",
                    0.9,
                    True,
                    (layout,),
                    min_log2=24,
                )
            )
    found.append(
        Target(
            "GPU fwd+bwd contiguous n>=2^24, every dtype: ours <= 1.1x the 8-stream floor",
            "cuda",
            "fwd_bwd",
            "ours_fwd_bwd",
            "vs_floor",
            1.1,
            False,
            min_log2=24,
        )
    )
    # Not the target but its explanation: the same bound on the kernels alone, and on
    # a step whose kernels hardly count (one 3-stream kernel): what the host alone allows.
    found.append(
        Target(
            "GPU fwd+bwd contiguous n>=2^24, CUDA-graph replay: ours <= 1.1x the 8-stream floor",
            "cuda",
            "fwd_bwd",
            "ours_fwd_bwd_graph",
            "vs_floor",
            1.1,
            False,
            min_log2=24,
        )
    )
    found.append(
        Target(
            "GPU fwd+bwd contiguous n>=2^24, host floor: torch.add fwd+bwd <= 1.1x the 8-stream floor",
            "cuda",
            "fwd_bwd",
            "add_fwd_bwd",
            "vs_floor",
            1.1,
            False,
            min_log2=24,
        )
    )
    found.append(
        Target(
            "GPU fwd+bwd per-channel (w [C], [R, 1], [C, 1, 1]) n>=2^26: ours <= 1.15x the 5-stream floor",
            "cuda",
            "fwd_bwd",
            "ours_fwd_bwd",
            "vs_floor",
            1.15,
            False,
            PER_CHANNEL_LAYOUTS,
            min_log2=26,
        )
    )
    found.append(
        Target(
            "GPU fwd+bwd per-channel n>=2^26, CUDA-graph replay: ours <= 1.15x the 5-stream floor",
            "cuda",
            "fwd_bwd",
            "ours_fwd_bwd_graph",
            "vs_floor",
            1.15,
            False,
            PER_CHANNEL_LAYOUTS,
            min_log2=26,
        )
    )
    found.append(
        Target(
            "GPU fwd+bwd per-channel n>=2^26: ours faster than torch.compile's step",
            "cuda",
            "fwd_bwd",
            "ours_fwd_bwd",
            "vs_compile",
            1.0,
            False,
            PER_CHANNEL_LAYOUTS,
            min_log2=26,
            strict=True,
        )
    )
    found.append(
        Target(
            "CPU fwd+bwd per-channel n>=2^20, all threads: ours <= 1/1.5 of eager's step",
            "cpu",
            "fwd_bwd",
            "ours_fwd_bwd",
            "vs_eager",
            1 / 1.5,
            False,
            PER_CHANNEL_LAYOUTS,
            min_log2=20,
            all_threads=True,
        )
    )
    found.append(
        Target(
            "CPU fwd+bwd per-channel n>=2^20, all threads: ours <= torch.compile's step",
            "cpu",
            "fwd_bwd",
            "ours_fwd_bwd",
            "vs_compile",
            1.0,
            False,
            PER_CHANNEL_LAYOUTS,
            min_log2=20,
            all_threads=True,
        )
    )
    found.append(
        Target(
            "small n<=2^14 per-call Python time: ours <= 1.5x torch.add(x, w)",
            None,
            "host",
            "ours",
            "vs_add",
            1.5,
            False,
            max_log2=14,
        )
    )
    found.append(
        Target(
            "small n<=2^14 per-call Python time: ours below eager w*x.pow(2)",
            None,
            "host",
            "ours",
            "vs_eager",
            1.0,
            False,
            max_log2=14,
            strict=True,
        )
    )
    for variant in ("ours", "ours_out"):
        for layout in LAYOUTS:
            found.append(
                Target(
                    f"CPU {layout} n>=2^20, all threads, every dtype: {LABELS[variant]} >= 0.9x torch.add(out=)",
                    "cpu",
                    "forward",
                    variant,
                    "vs_add",
                    0.9,
                    True,
                    (layout,),
                    min_log2=20,
                    all_threads=True,
                )
            )
    return found


def _meets(target: Target, value: float) -> bool:
    if target.at_least:
        return value >= target.bound
    return value < target.bound if target.strict else value <= target.bound


def _target_rows(target: Target, rows: list[dict], all_threads: int | None, any_size=False) -> list[dict]:
    return [
        row
        for row in rows
        if row["kind"] == target.kind
        and row["variant"] == target.variant
        and row["layout"] in target.layouts
        and row.get(target.metric) is not None
        and (any_size or target.min_log2 <= row["log2n"] <= target.max_log2)
        and not (target.all_threads and row["threads"] != all_threads)
    ]


def _holds_from(target: Target, rows: list[dict]) -> int | None:
    """The smallest measured log2n from which the target holds at every larger size too."""
    failing = [row["log2n"] for row in rows if not _meets(target, row[target.metric])]
    sizes = [row["log2n"] for row in rows if not failing or row["log2n"] > max(failing)]
    return min(sizes, default=None)


def evaluate(target: Target, rows: list[dict], device: str, all_threads: int | None) -> dict | None:
    """The worst ratio over the target's rows and whether it meets the bound; None if the target
    is for the other device."""
    if target.device not in (None, device):
        return None
    selected = _target_rows(target, rows, all_threads)
    result = {"target": target.text, "bound": target.bound, "rows": len(selected), "sized": bool(target.min_log2)}
    if not selected:
        return {**result, "status": "n/a", "worst": None, "at": None, "holds_from_log2": None}
    worst = (min if target.at_least else max)(selected, key=lambda row: row[target.metric])
    return {
        **result,
        "status": "PASS" if _meets(target, worst[target.metric]) else "MISS",
        "worst": round(worst[target.metric], 4),
        "at": f"{worst['dtype']} {worst['layout']} n=2^{worst['log2n']}",
        # Where the target has a size threshold: the size from which it would hold.
        "holds_from_log2": _holds_from(target, _target_rows(target, rows, all_threads, any_size=True)),
    }


def evaluate_all(rows, device, all_threads) -> list[dict]:
    """Every target of this device, judged over the rows."""
    results = [evaluate(target, rows, device, all_threads) for target in targets()]
    return [result for result in results if result is not None]


def summarize(rows, device, all_threads) -> list[dict]:
    return print_summary(evaluate_all(rows, device, all_threads))


def print_summary(results: list[dict]) -> list[dict]:
    """Prints a line per target: its status, worst ratio and where it is (or its note)."""
    print("\n== targets (worst case over the selected rows)")
    for result in results:
        if result.get("note"):
            print(f"{result['status']}  {result['target']}: {result['note']}")
            continue
        if result["worst"] is None:
            print(f"n/a   {result['target']}: no measured rows in range")
            continue
        line = f"{result['status']}  {result['target']}: worst {result['worst']:.3f}x at {result['at']}"
        if result["status"] == "MISS" and result["sized"]:
            k = result["holds_from_log2"]
            line += f"; holds from n=2^{k} up" if k is not None else "; holds at no measured size"
        print(line + f" ({result['rows']} rows)")
    return results


# ----------------------------------------------------------------------------------------------
# Files


def results_json(results: dict) -> str:
    """Indented, except one line per row: readable, and a re-run's diff stays row by row."""
    head = json.dumps({key: value for key, value in results.items() if key != "rows"}, indent=1)
    rows = ",\n".join("  " + json.dumps(row) for row in results["rows"])
    return head[: -len("\n}")] + ',\n "rows": [\n' + rows + "\n ]\n}\n"


def output_path(args, meta) -> pathlib.Path:
    return args.output or args.output_dir / "bench" / "results" / f"{meta['date']}-{meta['device']}.json"


def plot(results: pathlib.Path, png: pathlib.Path):
    try:
        import plot_results
    except ImportError as error:  # matplotlib is optional for the measurement itself
        print(f"bench: no plot ({error})")
        return
    print(f"wrote {plot_results.plot_file(results, png)}")
