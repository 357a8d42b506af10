"""Rows per second of a full StreamingDataset pass with each permutation kind, on one table.

Usage::

    .venv/bin/python benchmarks/permutation_read.py [--rows 2000000] [--repeats 3] [--save]

Builds once (under ``benchmarks/.data``) a Lance table of ``--rows`` rows: ``id`` int64 and
``payload`` (64 random bytes), in fragments of 1M rows. Each round iterates one whole epoch of
``StreamingDataset(table, num_splits=8, columns=..., permutation=P)`` in this process, for P in
``builder`` (the default), ``computed``, ``local`` (``C = 64``, ``W = 256``) and
``LocalShuffle(clump=256, window=1024)``, and a sequential scan (``to_batches`` of the same
columns, ``to_pylist``) as the ceiling; kinds are interleaved ``--repeats`` times and the median
is reported, with the ratio to the builder. Two item kinds: the default ``to_pylist`` rows
(dicts) and ``transform=ids`` (the ``id`` column as a Python list, so the Python object per row
costs less). Wall time on a shared machine: compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
DATA = Path(os.environ.get("ELASTIC_LOADER_BENCH_DATA", HERE / ".data"))
SPLITS = 8


def ids(batch: Any) -> list[int]:
    """A cheap transform: the ``id`` column as Python ints."""
    out: list[int] = batch.column(0).to_pylist()
    return out


def build(rows: int) -> Any:
    import lance
    import lancedb
    import numpy as np
    import pyarrow as pa

    where = DATA / f"permread_{rows}"
    if not (where / "built").exists():
        rng = np.random.default_rng(0)
        schema = pa.schema([("id", pa.int64()), ("payload", pa.binary(64))])

        def batches() -> Any:
            for lo in range(0, rows, 1_000_000):
                hi = min(rows, lo + 1_000_000)
                raw = pa.py_buffer(rng.bytes(64 * (hi - lo)))
                payload = pa.FixedSizeBinaryArray.from_buffers(pa.binary(64), hi - lo, [None, raw])
                yield pa.record_batch([pa.array(np.arange(lo, hi, dtype=np.int64)), payload], schema=schema)

        reader = pa.RecordBatchReader.from_batches(schema, batches())
        lance.write_dataset(reader, str(where / "t.lance"), max_rows_per_file=1_000_000, mode="overwrite")
        (where / "built").write_text("ok")
    return lancedb.connect(str(where)).open_table("t")


def run(table: Any, kind: str, transform: Any) -> float:
    from elastic_loader import LocalShuffle, StreamingDataset

    t0 = time.perf_counter()
    if kind == "scan":
        n = 0
        for batch in table.to_lance().to_batches(columns=["id", "payload"] if transform is None else ["id"]):
            n += len(batch.to_pylist() if transform is None else transform(batch))
        return n / (time.perf_counter() - t0)
    permutation: Any = {"local_256_1024": LocalShuffle(clump=256, window=1024)}.get(kind, kind)
    columns = ["id", "payload"] if transform is None else ["id"]
    ds = StreamingDataset(
        table, num_splits=SPLITS, permutation=permutation, columns=columns, transform=transform
    )
    n = sum(1 for _ in ds)
    return n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    import meta

    table = build(args.rows)
    kinds = ["builder", "computed", "local", "local_256_1024", "scan"]
    rates: dict[str, list[float]] = {f"{k}/{t}": [] for k in kinds for t in ("rows", "ids")}
    for _ in range(args.repeats):
        for item, transform in (("rows", None), ("ids", ids)):
            for kind in kinds:
                rates[f"{kind}/{item}"].append(run(table, kind, transform))
    summary: dict[str, Any] = {}
    for item in ("rows", "ids"):
        base = statistics.median(rates[f"builder/{item}"])
        for kind in kinds:
            median = statistics.median(rates[f"{kind}/{item}"])
            summary[f"{kind}/{item}"] = {"rows_per_s": round(median), "vs_builder": round(median / base, 2)}
    results = {
        "environment": meta.environment(),
        "command": " ".join(["benchmarks/permutation_read.py", *sys.argv[1:]]),
        "rows": args.rows,
        "repeats": args.repeats,
        "results": summary,
        "raw": rates,
    }
    path = meta.results_path("permutation_read", args.save)
    meta.write(path, results)
    print(json.dumps(summary, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
