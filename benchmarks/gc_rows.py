"""How much of row mode is CPython's garbage collector, and what ``gc.freeze()`` after start-up saves.

Usage::

    .venv/bin/python benchmarks/gc_rows.py [--rows 2000000] [--repeats 3] [--save]

Row mode makes Python objects (a dict per row, a list per vector value); every gen-2 collection
walks every tracked object of the process, and a process that imported torch holds a few hundred
thousand. On the peers' feature table (``workloads.rows_table``: id, a float, a short string, 16
floats), each pass runs in a new process (this script with ``--one``), times its collections with
``gc.callbacks`` and reports rows/s and seconds in gen-2 collections, for a plain scan with
``to_pylist`` and for ``StreamingDataset`` with ``LocalShuffle(32, 256)``, each with and without
``gc.freeze()`` called after the imports (before the clock starts). Rounds interleave the passes;
medians are printed and, with ``--save``, written to ``benchmarks/gc_rows.json`` (else
``gc_rows.local.json``) with the date, versions and machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

PASSES = ("scan", "scan+freeze", "loader", "loader+freeze")


def one(rows: int, what: str) -> dict[str, float]:
    """One pass in this process: rows/s and the seconds spent in gen-2 collections."""
    import workloads as w
    from elastic_loader import LocalShuffle, StreamingDataset

    table = w.rows_table(rows)
    if what.endswith("+freeze"):
        gc.freeze()
    spent, began = [0.0], [0.0]

    def clock(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                began[0] = time.perf_counter()
            else:
                spent[0] += time.perf_counter() - began[0]

    gc.callbacks.append(clock)
    t0 = time.perf_counter()
    if what.startswith("scan"):
        n = sum(len(batch.to_pylist()) for batch in table.to_lance().to_batches())
    else:
        ds = StreamingDataset(
            table, num_splits=8, shuffle_seed=0, permutation=LocalShuffle(clump=32, window=256)
        )
        n = sum(1 for _ in ds)
    seconds = time.perf_counter() - t0
    assert n == rows, (what, n)
    return {"rows_per_s": n / seconds, "gen2_seconds": spent[0], "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.rows, args.one)))
        return
    import meta

    got: dict[str, list[dict[str, float]]] = {p: [] for p in PASSES}
    for round_ in range(args.repeats):
        for what in PASSES:
            command = [sys.executable, __file__, "--one", what, "--rows", str(args.rows)]
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            got[what].append(result)
            print(
                f"round {round_} {what}: {result['rows_per_s']:,.0f} rows/s, "
                f"gen-2 collections {result['gen2_seconds']:.2f} of {result['seconds']:.2f} s",
                flush=True,
            )
    summary = {
        what: {
            "rows_per_s": round(statistics.median(r["rows_per_s"] for r in runs)),
            "gen2_share": round(statistics.median(r["gen2_seconds"] / r["seconds"] for r in runs), 3),
            "rounds_rows_per_s": [round(r["rows_per_s"]) for r in runs],
        }
        for what, runs in got.items()
    }
    for what, entry in summary.items():
        print(f"{what:14s} {entry['rows_per_s']:>10,d} rows/s  gen-2 share {entry['gen2_share']:.3f}")
    meta.write(
        meta.results_path("gc_rows", args.save),
        {
            **meta.provenance(),
            "rows": args.rows,
            "repeats": args.repeats,
            "results": summary,
        },
    )


if __name__ == "__main__":
    main()
