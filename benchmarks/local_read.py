"""Read rate of a Lance table in the orders of the computed and the local permutations.

Usage::

    .venv/bin/python benchmarks/local_read.py [--rows 2000000] [--repeats 5] [--json out.json]

Writes a temporary table of ``--rows`` rows (``id`` int64, ``payload`` 64 random bytes) and, per
order, reads ``BATCH = 16384`` rows per ``take`` (ascending positions, as
``read_positions``/``read_window`` issue them): the computed permutation (``C = W = 1``, a
global shuffle: 16384 positions spread over the table) and the local permutation for a few
``(C, W)`` (16 consecutive windows of 1024 positions of one split: their runs). Orders are
interleaved ``--repeats`` times so load changes hit every order alike; the median rate is
reported, with a scan (``to_table`` with offset and limit) as the ceiling. The table is deleted
at the end. On a shared machine the ratios are indicative only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

from elastic_loader._pipeline._local import LocalPermutation

BATCH = 16384
SPLITS = 16
SHAPES = ((1, 1), (64, 1024), (256, 1024), (1024, 4096))


def _table(path: Path, rows: int) -> Any:
    rng = np.random.default_rng(0)
    payload = pa.Array.from_buffers(pa.binary(64), rows, [None, pa.py_buffer(rng.bytes(64 * rows))])
    lance.write_dataset(
        pa.table({"id": pa.array(np.arange(rows), pa.int64()), "payload": payload}), str(path)
    )
    return lance.dataset(str(path))


def _batch(perm: LocalPermutation, rng: random.Random) -> np.ndarray:
    """``BATCH`` positions of one split starting at a random window: what a reader fetches at once."""
    width = perm.window_len
    q = rng.randrange(max(1, (perm.split_len - BATCH) // width))
    return np.sort(perm.positions(rng.randrange(SPLITS), q * width, BATCH))


def _time(read: Any) -> float:
    t0 = time.perf_counter()
    read()
    return BATCH / (time.perf_counter() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="local_read_"))
    try:
        dataset = _table(workdir / "t.lance", args.rows)
        perms = {f"{c}x{w}": LocalPermutation(args.rows, SPLITS, 7, 0, c, w) for c, w in SHAPES}
        rates: dict[str, list[float]] = {name: [] for name in [*perms, "scan"]}
        rng = random.Random(1)
        load_start = os.getloadavg()
        for _ in range(args.repeats):
            for name, perm in perms.items():
                positions = _batch(perm, rng).astype(np.int64)
                rates[name].append(_time(lambda p=positions: dataset.take(p, columns=["id", "payload"])))
            offset = rng.randrange(args.rows - BATCH)
            rates["scan"].append(
                _time(lambda o=offset: dataset.to_table(columns=["id", "payload"], offset=o, limit=BATCH))
            )
        medians = {name: statistics.median(values) for name, values in rates.items()}
        base = medians["1x1"]
        for name, rate in medians.items():
            print(f"{name:>10}: {rate / 1e6:6.3f} M rows/s  ({rate / base:5.1f}x the global shuffle)")
        result = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "lance": lance.__version__,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                        "load_average_start": load_start, "load_average_end": os.getloadavg()},
            "rows": args.rows, "batch": BATCH, "splits": SPLITS, "repeats": args.repeats,
            "rates": rates, "median_rows_per_second": medians,
        }  # fmt: skip
        if args.json is not None:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
