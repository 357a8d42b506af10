"""Columnar batches against a sequential scan and raw reads: where the time goes, as ratios.

Usage::

    .venv/bin/python benchmarks/columnar.py [--rows 2000000] [--rounds 3] [--batch 1024]
        [--skip NAME,...] [--save]

Rules:

* One table (``workloads.rows_table``: id, float, short string, 16-float vector), every run
  in the consumer's process, rounds interleaved (A, B, C, ..., A, B, C, ...); the table shows
  each run's median rows/s and its ratio to ``scan_arrow`` (a sequential scan of every column as
  Arrow record batches, the ceiling of any loader that reads every row).
* elastic-loader runs report two rates: ``pass`` (iterating an already-built dataset, the
  pipeline alone) and ``total`` (construction included: the permutation is built then).
  ``raw_take_ordered`` and ``raw_take_shuffled`` are LanceDB ``_take_rows`` of every row id in
  storage order and in a seeded random order, 16384 ids a call, Arrow only: the read cost of
  elastic-loader's ``shuffle=False`` and default orders (its reads are row-id takes).
* ``columnar_free_reads_noshuffle*`` answer the pipeline's reads from a copy of the table in
  memory (zero-copy slices, built before timing; a private reader method is replaced for the
  run): the pipeline's own cost, the ceiling of any faster read path.
* Results go to ``benchmarks/columnar.local.json`` (git-ignored) or, with ``--save``, the
  committed ``benchmarks/columnar.json``; both record the environment (``meta.py``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
import pyarrow as pa

import meta
import workloads as w

CHUNK = 16_384
NUM_SPLITS = 8

Run = Callable[[], tuple[int, float]]
"""A run returns (rows delivered, seconds spent building before the pass)."""


def scan_arrow(table: Any) -> Run:
    dataset = table.to_lance()

    def run() -> tuple[int, float]:
        return sum(batch.num_rows for batch in dataset.to_batches()), 0.0

    return run


def raw_take(table: Any, shuffled: bool) -> Run:
    dataset = table.to_lance()
    ids = w.shuffled_row_ids(table)
    order = ids if shuffled else np.sort(ids)

    def run() -> tuple[int, float]:
        n = 0
        for start in range(0, len(order), CHUNK):
            n += dataset._take_rows(pa.array(order[start : start + CHUNK])).num_rows
        return n, 0.0

    return run


def elastic(
    table: Any, batch_format: str | None, batch: int, splits: int = NUM_SPLITS, **options: Any
) -> Run:
    from elastic_loader import StreamingDataLoader, StreamingDataset

    def run() -> tuple[int, float]:
        t0 = time.perf_counter()
        ds = StreamingDataset(table, num_splits=splits, shuffle_seed=0, read_batch_size=1024, **options)
        built = time.perf_counter() - t0
        if batch_format is None:
            return sum(1 for _ in ds), built
        loader = StreamingDataLoader(ds, batch_size=batch, batch_format=batch_format)
        if batch_format == "arrow":
            return sum(b.num_rows for b in loader), built
        return sum(len(b["id"]) for b in loader), built

    return run


def free_reads(table: Any, batch: int) -> Run:
    """Columnar batches in storage order with reads that cost (almost) nothing: the table is read
    into memory once, before timing, and every read the pipeline makes is answered with a
    zero-copy slice of it (a take where the ids are not contiguous). What is left is the
    pipeline's own work: the ceiling no read path can lift."""
    from elastic_loader._pipeline import _lance

    inner = elastic(table, "arrow", batch, shuffle=False)
    memory: dict[str, Any] = {}

    def take(self: Any, ids: np.ndarray, columns: list[str] | None) -> pa.Table:
        at = memory["by_id"][np.searchsorted(memory["sorted_ids"], np.asarray(ids, dtype=np.int64))]
        data = memory["data"] if columns is None else memory["data"].select(columns)
        if len(at) and int(at[-1]) - int(at[0]) + 1 == len(at) and bool(np.all(np.diff(at) == 1)):
            return data.slice(int(at[0]), len(at))
        return data.take(pa.array(at))

    def run() -> tuple[int, float]:
        loading = time.perf_counter()
        if not memory:  # the first round reads the table into memory, counted as building
            held = table.to_lance().to_table(with_row_id=True)
            row_ids = held.column("_rowid").to_numpy().astype(np.int64)
            memory["by_id"] = np.argsort(row_ids)
            memory["sorted_ids"] = row_ids[memory["by_id"]]
            memory["data"] = held.drop_columns(["_rowid"]).combine_chunks()
        loaded = time.perf_counter() - loading
        real = _lance._LanceReader.take
        _lance._LanceReader.take = take  # type: ignore[method-assign]
        try:
            rows, built = inner()
            return rows, built + loaded
        finally:
            _lance._LanceReader.take = real  # type: ignore[method-assign]

    return run


def runs(table: Any, batch: int) -> dict[str, tuple[str, Run]]:
    from elastic_loader import LocalShuffle

    storage = LocalShuffle(table.count_rows(), 1)  # one window of one clump: storage order
    return {
        "scan_arrow": ("sequential scan, Arrow batches (the ratio base)", scan_arrow(table)),
        "raw_take_ordered": ("_take_rows in storage order, 16384 ids a call", raw_take(table, False)),
        "raw_take_shuffled": ("_take_rows in a random order, 16384 ids a call", raw_take(table, True)),
        "columnar_noshuffle": (
            f"columnar arrow batches of {batch}, shuffle=False",
            elastic(table, "arrow", batch, shuffle=False),
        ),
        "columnar_numpy_noshuffle": (
            f"columnar numpy batches of {batch}, shuffle=False",
            elastic(table, "numpy", batch, shuffle=False),
        ),
        "columnar_free_reads_noshuffle": (
            f"columnar arrow batches of {batch}, shuffle=False, reads answered from memory "
            "(the pipeline alone)",
            free_reads(table, batch),
        ),
        "columnar_free_reads_noshuffle_8192": (
            "columnar arrow batches of 8192, shuffle=False, reads answered from memory (the pipeline alone)",
            free_reads(table, 8192),
        ),
        "columnar": (f"columnar arrow batches of {batch}, global shuffle", elastic(table, "arrow", batch)),
        "columnar_storage_1split": (
            f"columnar arrow batches of {batch}, storage order (LocalShuffle(rows, 1)), one split "
            "(the default in one process): range scans, no interleaving",
            elastic(table, "arrow", batch, splits=1, permutation=storage),
        ),
        "columnar_storage": (
            f"columnar arrow batches of {batch}, storage order (LocalShuffle(rows, 1)), "
            f"{NUM_SPLITS} splits: range scans, interleaved",
            elastic(table, "arrow", batch, permutation=storage),
        ),
        "columnar_local_4096_65536": (
            f"columnar arrow batches of {batch}, LocalShuffle(4096, 65536), {NUM_SPLITS} splits",
            elastic(table, "arrow", batch, permutation=LocalShuffle(4096, 65536)),
        ),
        "columnar_local_32_256": (
            f"columnar arrow batches of {batch}, LocalShuffle(32, 256) (the quality bar), "
            f"{NUM_SPLITS} splits",
            elastic(table, "arrow", batch, permutation=LocalShuffle(32, 256)),
        ),
        "rows_noshuffle": ("row mode (dicts), shuffle=False", elastic(table, None, batch, shuffle=False)),
        "rows_noshuffle_id": (
            "row mode (dicts), shuffle=False, columns=['id']",
            elastic(table, None, batch, shuffle=False, columns=["id"]),
        ),
    }


def measure(table: Any, rounds: int, batch: int, skip: set[str]) -> dict[str, Any]:
    chosen = {name: run for name, run in runs(table, batch).items() if name not in skip}
    passes: dict[str, list[float]] = {name: [] for name in chosen}
    totals: dict[str, list[float]] = {name: [] for name in chosen}
    builds: dict[str, list[float]] = {name: [] for name in chosen}
    for r in range(rounds):
        for name, (_, run) in chosen.items():
            t0 = time.perf_counter()
            rows, built = run()
            seconds = time.perf_counter() - t0
            passes[name].append(rows / (seconds - built))
            totals[name].append(rows / seconds)
            builds[name].append(built)
            print(
                f"  round {r + 1}/{rounds} {name:26s} pass {rows / (seconds - built):>12,.0f} rows/s"
                f"  total {rows / seconds:>12,.0f} rows/s  build {built:.2f} s",
                flush=True,
            )
    base = statistics.median(passes["scan_arrow"])
    return {
        name: {
            "description": description,
            "pass_rows_per_s": statistics.median(passes[name]),
            "total_rows_per_s": statistics.median(totals[name]),
            "build_s": statistics.median(builds[name]),
            "pass_ratio_to_scan": statistics.median(passes[name]) / base,
            "total_ratio_to_scan": statistics.median(totals[name]) / base,
            "rounds_pass_rows_per_s": passes[name],
        }
        for name, (description, _) in chosen.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1024, help="rows per columnar batch")
    parser.add_argument(
        "--skip", type=lambda text: {n for n in text.split(",") if n}, default=set(), help="runs to leave out"
    )
    parser.add_argument("--save", action="store_true", help="write the committed columnar.json")
    args = parser.parse_args(argv)
    w.quiet()
    table = w.rows_table(args.rows)
    results = {
        **meta.provenance(),
        "rows": args.rows,
        "rounds": args.rounds,
        "batch": args.batch,
        "skipped": sorted(args.skip),
        "runs": measure(table, args.rounds, args.batch, args.skip - {"scan_arrow"}),
    }
    print(f"\n{args.rows:,} rows, medians of {args.rounds} interleaved rounds; ratios to scan_arrow's rows/s")
    header = f"{'run':26s} {'pass rows/s':>13s} {'ratio':>6s} {'total rows/s':>13s} {'ratio':>6s}"
    print(f"{header} {'build s':>8s}")
    for name, e in results["runs"].items():
        print(
            f"{name:26s} {e['pass_rows_per_s']:>13,.0f} {e['pass_ratio_to_scan']:>6.3f}"
            f" {e['total_rows_per_s']:>13,.0f} {e['total_ratio_to_scan']:>6.3f} {e['build_s']:>8.2f}"
        )
    meta.write(meta.results_path("columnar", args.save), results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
