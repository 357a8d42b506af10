"""Side by side, in one run: elastic-loader vs lancedb.streaming vs the raw LanceDB limit.

Usage::

    .venv/bin/python benchmarks/compare.py [--rounds 3] [--save | --json PATH]

Each workload runs ``--rounds`` times, interleaved (raw, ours, reference, raw,
ours, ...) so drift on a shared machine hits all of them alike; the table
reports the median throughput and the ratios the issue sets targets for.

Results go to the git-ignored ``benchmarks/results.local.json`` (``make bench``);
only ``--save`` (``make bench SAVE=1``) overwrites the committed
``benchmarks/results.json``. Either file records the date, versions and machine
(``meta.environment()``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import meta
import workloads as w


def measure(runs: dict[str, Callable[[], int]], rounds: int) -> dict[str, float]:
    """Median items/s of every workload over interleaved rounds."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds):
        for name, run in runs.items():
            t0 = time.perf_counter()
            items = run()
            seconds = time.perf_counter() - t0
            samples[name].append(items / seconds)
            print(
                f"  round {r + 1}/{rounds} {name:16s} {items / seconds:>14,.0f} items/s ({seconds:.2f} s)",
                flush=True,
            )
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="write the results here instead")
    parser.add_argument(
        "--save", action="store_true", help="write the committed results.json (else results.local.json)"
    )
    parser.add_argument("--skip-loader", action="store_true", help="skip the 2-worker DataLoader comparison")
    args = parser.parse_args()
    w.quiet()
    results: dict[str, object] = {"environment": meta.environment(), "rounds": args.rounds}
    rows: list[tuple[str, str, float, float | None]] = []  # (workload, ratio name, value, target)

    table = w.rows_table()
    print(f"row mode: {table.count_rows():,} rows, 8 splits, default settings")
    tput = measure(
        {
            "raw": w.raw_rows(table),
            "elastic_loader": w.rows_epoch("elastic_loader", table),
            "reference": w.rows_epoch("reference", table),
        },
        args.rounds,
    )
    results["rows"] = tput
    rows.append(("rows", "elastic_loader / reference", tput["elastic_loader"] / tput["reference"], 5.0))
    rows.append(("rows", "elastic_loader / raw take", tput["elastic_loader"] / tput["raw"], 0.7))

    for spec in w.TOKENS:
        tokens = w.token_table(spec)
        print(
            f"packing {spec.name}: {spec.docs:,} docs of {spec.min_len}-{spec.max_len} tokens, L={spec.pack}"
        )
        tput = measure(
            {
                "raw": w.raw_tokens(tokens),
                "elastic_loader": w.packed_epoch("elastic_loader", tokens, spec),
                "reference": w.packed_epoch("reference", tokens, spec),
            },
            args.rounds,
        )
        results[f"packing_{spec.name}"] = tput
        rows.append(
            (
                f"packing {spec.name}",
                "elastic_loader / reference",
                tput["elastic_loader"] / tput["reference"],
                8.0,
            )
        )
        rows.append(
            (f"packing {spec.name}", "elastic_loader / raw take", tput["elastic_loader"] / tput["raw"], 0.6)
        )

    if not args.skip_loader:
        print("StreamingDataLoader, 2 worker processes (spawn), batch_size=64, worker start-up included")
        tput = measure(
            {
                "elastic_loader": w.loader_epoch("elastic_loader", table),
                "reference": w.loader_epoch("reference", table),
            },
            max(1, args.rounds - 1),
        )
        results["loader_2_workers"] = tput
        rows.append(
            (
                "loader 2 workers",
                "elastic_loader / reference",
                tput["elastic_loader"] / tput["reference"],
                3.0,
            )
        )

    big = w.rows_table(w.TTFR_ROWS)
    # one start-up is a single sample of a noisy machine: the median of --rounds, interleaved
    starts: dict[str, list[float]] = {"elastic_loader": [], "reference": []}
    for _ in range(args.rounds):
        for impl, seconds in starts.items():
            seconds.append(w.time_to_first_row(impl, big))
    ttfr = {impl: statistics.median(seconds) for impl, seconds in starts.items()}
    results["time_to_first_row_s"] = ttfr
    results["time_to_first_row_rounds_s"] = starts
    rows.append(
        (
            "first row, 1M rows",
            "reference / elastic_loader (time)",
            ttfr["reference"] / ttfr["elastic_loader"],
            None,
        )
    )

    print()
    print(f"{'workload':22s} {'ratio':36s} {'measured':>9s} {'target':>8s}  verdict")
    failed = 0
    for workload, name, value, target in rows:
        verdict = "-" if target is None else ("ok" if value >= target else "BELOW TARGET")
        failed += verdict == "BELOW TARGET"
        target_text = "" if target is None else f">= {target:g}"
        print(f"{workload:22s} {name:36s} {value:9.2f} {target_text:>8s}  {verdict}")
    ours_s, ref_s = ttfr["elastic_loader"], ttfr["reference"]
    print(
        f"time to first row (1M rows, median of {args.rounds}): elastic_loader {ours_s:.3f} s, "
        f"reference {ref_s:.3f} s"
    )
    results["ratios"] = [{"workload": a, "ratio": b, "value": c, "target": d} for a, b, c, d in rows]
    meta.write(args.json or meta.results_path("results", args.save), results)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
