"""Throughput of a 3-source StreamingMixture against one table of the same rows, and resume cost.

Usage::

    .venv/bin/python benchmarks/mixture.py [--rows 300000] [--rounds 5] [--save]

Builds (once, under ``benchmarks/.data/`` or ``ELASTIC_LOADER_BENCH_DATA``) three tables
``web``, ``code`` and ``books`` holding 60%, 30% and 10% of ``--rows`` rows and one table
``single`` of ``--rows`` rows, all of the same schema (``id`` int64, ``value`` float64, ``name``
a short string, ``vec`` 16 float32). Then, in rounds interleaved A, B, A, B, ... (load changes
hit both alike), it reads a whole epoch of:

* ``single``: ``StreamingDataset(single, num_splits=8)`` in this process;
* ``mixture``: ``StreamingMixture`` of the three tables, weights 6:3:1 with
  ``on_exhausted="renormalize"`` (every row of every source once), ``num_splits=8``.

Reported: rows/s of each per round, the mixture/single ratio per round and its median and range
(the target is >= 0.9); the CPU seconds of the process per epoch (every thread) and their ratio
single/mixture, the work per row, which moves much less than wall time on a shared machine; and
the resume cost: the seconds from ``load_state_dict`` of a checkpoint
taken half-way through the epoch to the first item (median over the rounds), for both, and the
checkpoint's JSON size. The results file records date, commit, versions and machine (``meta``):
``benchmarks/mixture.local.json``, or ``benchmarks/mixture.json`` with ``--save``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import meta
from elastic_loader import MixtureSource, StreamingDataset, StreamingMixture

HERE = Path(__file__).resolve().parent
SHARES = (("web", 0.6), ("code", 0.3), ("books", 0.1))
SPLITS = 8


def _data(n: int, first: int) -> pa.Table:
    rng = np.random.default_rng(first)
    ids = np.arange(first, first + n, dtype=np.int64)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 16).astype(np.float32)), 16)
    return pa.table(
        {"id": ids, "value": rng.standard_normal(n), "name": [f"row-{i}" for i in ids], "vec": vec}
    )


def _tables(rows: int) -> dict[str, Any]:
    root = Path(os.environ.get("ELASTIC_LOADER_BENCH_DATA", HERE / ".data")) / f"mixture_{rows}"
    db = lancedb.connect(str(root))
    have = set(db.list_tables().tables)
    sizes = {name: int(rows * share) // SPLITS * SPLITS for name, share in SHARES}
    sizes["single"] = sum(sizes.values())
    out = {}
    first = 0
    for name, n in sizes.items():
        if name not in have:
            db.create_table(name, _data(n, 0 if name == "single" else first))
        out[name] = db.open_table(name)
        first += n
    return out


def _mixture(tables: dict[str, Any]) -> StreamingMixture:
    sources = {name: MixtureSource(tables[name], shuffle_seed=k) for k, (name, _) in enumerate(SHARES)}
    return StreamingMixture(
        sources, [share for _, share in SHARES], num_splits=SPLITS, on_exhausted="renormalize"
    )


def _single(tables: dict[str, Any]) -> StreamingDataset:
    return StreamingDataset(tables["single"], num_splits=SPLITS)


def _epoch(make: Any, tables: dict[str, Any]) -> tuple[float, int, float]:
    """Rows/s of one whole epoch (construction excluded), the rows read, and the CPU seconds the
    process spent on it (every thread: the pipeline's readers and transforms included)."""
    ds = make(tables)
    start, cpu = time.perf_counter(), time.process_time()
    count = 0
    for _ in ds:
        count += 1
    return count / (time.perf_counter() - start), count, time.process_time() - cpu


def _resume(make: Any, tables: dict[str, Any], half: int) -> tuple[float, int]:
    """Seconds from load_state_dict of a half-epoch checkpoint to the first item; checkpoint bytes."""
    first = make(tables)
    it = iter(first)
    for _ in itertools.islice(it, half):
        pass
    state = first.state_dict()
    it.close()
    again = make(tables)
    start = time.perf_counter()
    again.load_state_dict(state)
    next(iter(again))
    return time.perf_counter() - start, len(json.dumps(state))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--save", action="store_true", help="write benchmarks/mixture.json")
    args = parser.parse_args(argv)
    tables = _tables(args.rows)
    loaders = {"single": _single, "mixture": _mixture}
    _epoch(_single, tables)  # warm the page cache once for both layouts
    _epoch(_mixture, tables)
    rounds = []
    for r in range(args.rounds):
        row: dict[str, Any] = {"round": r}
        for name, make in loaders.items():
            rate, count, cpu = _epoch(make, tables)
            row[name] = {"rows_per_s": round(rate), "rows": count, "cpu_s": round(cpu, 3)}
        row["ratio"] = round(row["mixture"]["rows_per_s"] / row["single"]["rows_per_s"], 4)
        row["cpu_ratio"] = round(row["single"]["cpu_s"] / row["mixture"]["cpu_s"], 4)
        for name, make in loaders.items():
            seconds, size = _resume(make, tables, row[name]["rows"] // 2)
            row[name].update(resume_s=round(seconds, 4), checkpoint_bytes=size)
        rounds.append(row)
        print(json.dumps(row))
    ratios = [r["ratio"] for r in rounds]
    cpu_ratios = [r["cpu_ratio"] for r in rounds]
    summary = {
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "cpu_ratio_median": statistics.median(cpu_ratios),
        "cpu_ratio_min": min(cpu_ratios),
        "cpu_ratio_max": max(cpu_ratios),
        "target": 0.9,
        "resume_s_median": {n: statistics.median(r[n]["resume_s"] for r in rounds) for n in loaders},
    }
    result = {
        "benchmark": "mixture",
        "meta": meta.environment(),
        "config": {"rows": args.rows, "shares": dict(SHARES), "num_splits": SPLITS, "rounds": args.rounds},
        "rounds": rounds,
        "summary": summary,
    }
    out = HERE / ("mixture.json" if args.save else "mixture.local.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
