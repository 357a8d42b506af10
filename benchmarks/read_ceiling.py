"""The ceiling of a shuffled read: LanceDB's ``take`` of runs against a sequential scan.

Usage::

    .venv/bin/python benchmarks/read_ceiling.py [--rows 2000000] [--repeats 3] [--save]

No loader here: only the raw reads any loader over the same Lance table is bounded by. On the
table of ``permutation_read.py`` (``id`` int64 and 64 random bytes, fragments of 1M rows; built
there if missing), each round reads every row once, ``id`` and ``payload`` as Arrow, by:

* ``scan``: ``LanceDataset.to_batches`` (the sequential scan, the reference of every ratio);
* ``take_contiguous_R``: ``take`` of ``R`` consecutive positions per call, in table order;
* ``take_runs_C``: the table cut into runs of ``C`` rows in a seeded random order, read as
  ``take`` calls of 16384 rows (``16384 / C`` runs each, positions sorted, as the pipeline's
  units are);
* ``fragment_runs_C``: the same shuffled runs, each read by its fragment's
  ``to_batches(offset=, limit=)`` (a scan of a range; a run crossing a fragment's end is two).

Methods are interleaved in every round; the medians and their ratios to ``scan`` are printed and,
with ``--save``, written to ``benchmarks/read_ceiling.json`` (else ``read_ceiling.local.json``)
with the date, versions and machine (``meta.py``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

COLUMNS = ["id", "payload"]
UNIT = 16384
CONTIGUOUS = (1024, 16384, 65536)
TAKE_RUNS = (32, 256, 1024, 8192)
FRAGMENT_RUNS = (1024, 8192, 65536)


def methods(dataset: Any) -> dict[str, Callable[[], int]]:
    """Every read method by name; each reads every row once and returns the rows read."""
    rows = dataset.count_rows()
    fragments = dataset.get_fragments()
    starts = np.cumsum([0, *(f.count_rows() for f in fragments)])

    def scan() -> int:
        return sum(batch.num_rows for batch in dataset.to_batches(columns=COLUMNS))

    def contiguous(size: int) -> Callable[[], int]:
        def go() -> int:
            return sum(
                dataset.take(np.arange(lo, min(rows, lo + size)), columns=COLUMNS).num_rows
                for lo in range(0, rows, size)
            )

        return go

    def shuffled_runs(size: int) -> np.ndarray:
        return np.random.default_rng(0).permutation(np.arange(0, rows, size))

    def take_runs(size: int) -> Callable[[], int]:
        def go() -> int:
            order, n, per = shuffled_runs(size), 0, max(1, UNIT // size)
            for i in range(0, len(order), per):
                lows = order[i : i + per]
                positions = np.concatenate([np.arange(lo, min(rows, lo + size)) for lo in np.sort(lows)])
                n += dataset.take(positions, columns=COLUMNS).num_rows
            return n

        return go

    def fragment_runs(size: int) -> Callable[[], int]:
        def go() -> int:
            n = 0
            for lo in shuffled_runs(size):
                at, hi = int(lo), int(min(rows, lo + size))
                while at < hi:  # a run that crosses a fragment's end is read from both fragments
                    f = int(np.searchsorted(starts, at, side="right")) - 1
                    limit = int(min(hi, starts[f + 1]) - at)
                    for batch in fragments[f].to_batches(
                        columns=COLUMNS, offset=at - int(starts[f]), limit=limit
                    ):
                        n += batch.num_rows
                    at += limit
            return n

        return go

    out: dict[str, Callable[[], int]] = {"scan": scan}
    out.update({f"take_contiguous_{r}": contiguous(r) for r in CONTIGUOUS})
    out.update({f"take_runs_{c}": take_runs(c) for c in TAKE_RUNS})
    out.update({f"fragment_runs_{c}": fragment_runs(c) for c in FRAGMENT_RUNS})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    import meta
    import permutation_read

    dataset = permutation_read.build(args.rows).to_lance()
    runs = methods(dataset)
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(args.repeats):
        for name, go in runs.items():
            t0 = time.perf_counter()
            n = go()
            seconds = time.perf_counter() - t0
            assert n == args.rows, (name, n)
            rates[name].append(n / seconds)
            print(f"round {round_} {name}: {n / seconds:,.0f} rows/s", flush=True)
    scan = statistics.median(rates["scan"])
    summary = {
        name: {
            "rows_per_s": round(statistics.median(values)),
            "vs_scan": round(statistics.median(values) / scan, 3),
            "rounds": [round(v) for v in values],
        }
        for name, values in rates.items()
    }
    print(f"\n{'method':22s} {'rows/s':>12s} {'vs scan':>8s}")
    for name, entry in summary.items():
        print(f"{name:22s} {entry['rows_per_s']:>12,d} {entry['vs_scan']:>8.3f}")
    meta.write(
        meta.results_path("read_ceiling", args.save),
        {
            **meta.provenance(),
            "rows": args.rows,
            "repeats": args.repeats,
            "results": summary,
        },
    )


if __name__ == "__main__":
    main()
