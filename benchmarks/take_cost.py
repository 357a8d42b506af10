"""How LanceDB's ``take`` cost grows with the rows per call (the case for coalesced units).

Usage: ``.venv/bin/python benchmarks/take_cost.py``. Reads 50,000 shuffled rows of the benchmark
row table in calls of 64 to 16384 rows and prints milliseconds per call and rows per second.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))

import workloads as w


def main() -> None:
    table = w.rows_table()
    ids = w.shuffled_row_ids(table)[:50_000]
    dataset = table.to_lance()
    print(f"{'rows/call':>10s} {'ms/call':>9s} {'rows/s':>12s}")
    for size in (64, 256, 1024, 4096, 16384):
        t0 = time.perf_counter()
        calls = 0
        for start in range(0, len(ids), size):
            dataset._take_rows(pa.array(ids[start : start + size]))
            calls += 1
        seconds = time.perf_counter() - t0
        print(f"{size:>10d} {seconds / calls * 1e3:>9.2f} {len(ids) / seconds:>12,.0f}")


if __name__ == "__main__":
    main()
