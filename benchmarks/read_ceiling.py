"""The ceiling of a shuffled read: LanceDB's ``take`` of runs against a sequential scan.

Usage::

    .venv/bin/python benchmarks/read_ceiling.py [--rows 2000000] [--repeats 3] [--save]
    .venv/bin/python benchmarks/read_ceiling.py --docs 200000 --repeats 3 --save

No loader here: only the raw reads any loader over the same Lance table is bounded by. On the
table of ``permutation_read.py`` (``id`` int64 and 64 random bytes, fragments of 1M rows; built
there if missing), each round reads every row once, ``id`` and ``payload`` as Arrow, by:

* ``scan``: ``LanceDataset.to_batches`` (the sequential scan, the reference of every ratio);
* ``take_contiguous_R``: ``take`` of ``R`` consecutive positions per call, in table order;
* ``take_runs_C``: the table cut into runs of ``C`` rows in a seeded random order, read as
  ``take`` calls of 16384 rows (``16384 / C`` runs each, positions sorted, as the pipeline's
  units are);
* ``range_runs_C``: the same units of shuffled runs, each read by one range scan of its sorted runs
  (Lance's ``take_scan``, 8 batches ahead), as the pipeline reads runs long enough on average
  (``_lance.range_runs``);
* ``fragment_runs_C``: the same shuffled runs, each read by its fragment's
  ``to_batches(offset=, limit=)`` (a scan of a range; a run crossing a fragment's end is two).

With ``--docs N`` the table is instead the peers' token table of ``N`` documents of 128-2048
tokens (``peer_workloads.token_spec``), read as its ``tokens`` column, with units of 1344
documents (about the pipeline's 8 MiB units) and runs of documents (``DOC_RUNS``); results go to
``read_ceiling_docs.json``.

Methods are interleaved in every round; the medians and their ratios to ``scan`` are printed and,
with ``--save``, written to ``benchmarks/read_ceiling.json`` (else ``read_ceiling.local.json``)
with the date, versions and machine (``meta.py``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

COLUMNS = ("id", "payload")
UNIT = 16384
CONTIGUOUS = (1024, 16384, 65536)
TAKE_RUNS = (32, 128, 256, 512, 1024, 8192)
FRAGMENT_RUNS = (1024, 8192, 65536)
DOC_UNIT = 1344
DOC_RUNS = (1, 8, 32, 128, 512)


class Reads:
    """The read methods over one dataset: each reads every row once (``columns``) and returns the
    rows read; shuffled runs are read ``unit`` rows a call."""

    def __init__(self, dataset: Any, columns: tuple[str, ...], unit: int) -> None:
        self.dataset, self.columns, self.unit = dataset, list(columns), unit
        self.rows = dataset.count_rows()
        self.fragments = dataset.get_fragments()
        self.starts = np.cumsum([0, *(f.count_rows() for f in self.fragments)])

    def scan(self) -> int:
        return sum(batch.num_rows for batch in self.dataset.to_batches(columns=self.columns))

    def contiguous(self, size: int) -> int:
        return sum(
            self.dataset.take(np.arange(lo, min(self.rows, lo + size)), columns=self.columns).num_rows
            for lo in range(0, self.rows, size)
        )

    def _units(self, size: int) -> Iterator[list[tuple[int, int]]]:
        """The table cut into runs of ``size`` rows in a seeded random order, ``unit`` rows at a time,
        each unit's runs sorted (as the pipeline's units are)."""
        order, per = (
            np.random.default_rng(0).permutation(np.arange(0, self.rows, size)),
            max(1, self.unit // size),
        )
        for i in range(0, len(order), per):
            yield [(int(lo), int(min(self.rows, lo + size))) for lo in np.sort(order[i : i + per])]

    def take_runs(self, size: int) -> int:
        n = 0
        for ranges in self._units(size):
            positions = np.concatenate([np.arange(lo, hi) for lo, hi in ranges])
            n += self.dataset.take(positions, columns=self.columns).num_rows
        return n

    def range_runs(self, size: int) -> int:
        n = 0
        for ranges in self._units(size):
            for batch in self.dataset._ds.take_scan(ranges, columns=self.columns, batch_readahead=8):
                n += batch.num_rows
        return n

    def fragment_runs(self, size: int) -> int:
        n, starts = 0, self.starts
        for lo in np.random.default_rng(0).permutation(np.arange(0, self.rows, size)):
            at, hi = int(lo), int(min(self.rows, lo + size))
            while at < hi:  # a run that crosses a fragment's end is read from both fragments
                f = int(np.searchsorted(starts, at, side="right")) - 1
                limit = int(min(hi, starts[f + 1]) - at)
                for batch in self.fragments[f].to_batches(
                    columns=self.columns, offset=at - int(starts[f]), limit=limit
                ):
                    n += batch.num_rows
                at += limit
        return n


def methods(
    dataset: Any,
    columns: tuple[str, ...] = COLUMNS,
    unit: int = UNIT,
    runs: tuple[int, ...] = TAKE_RUNS,
    only_runs: bool = False,
) -> dict[str, Callable[[], int]]:
    """Every read method by name (:class:`Reads`). ``runs``: the run lengths of ``take_runs`` and
    ``range_runs``; ``only_runs``: the scan and those two only."""
    reads = Reads(dataset, columns, unit)
    out: dict[str, Callable[[], int]] = {"scan": reads.scan}
    if not only_runs:
        out.update({f"take_contiguous_{r}": partial(reads.contiguous, r) for r in CONTIGUOUS})
    for c in runs:
        out.update(
            {f"take_runs_{c}": partial(reads.take_runs, c), f"range_runs_{c}": partial(reads.range_runs, c)}
        )
    if not only_runs:
        out.update({f"fragment_runs_{c}": partial(reads.fragment_runs, c) for c in FRAGMENT_RUNS})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--docs", type=int, help="read the token table of this many documents instead")
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    import meta
    import permutation_read

    if args.docs:
        import peer_workloads
        import workloads

        dataset = workloads.token_table(peer_workloads.token_spec(args.docs)).to_lance()
        runs = methods(dataset, ("tokens",), DOC_UNIT, DOC_RUNS, only_runs=True)
        args.rows = args.docs
    else:
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
        meta.results_path("read_ceiling_docs" if args.docs else "read_ceiling", args.save),
        {
            **meta.provenance(),
            "table": f"token table of {args.docs} documents (tokens)" if args.docs else "rows (id, payload)",
            "rows": args.rows,
            "repeats": args.repeats,
            "results": summary,
        },
    )


if __name__ == "__main__":
    main()
