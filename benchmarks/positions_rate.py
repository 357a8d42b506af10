"""How fast a split's storage positions are computed, per permutation shape, in one or more source trees.

Usage::

    .venv/bin/python benchmarks/positions_rate.py [--rounds 5] [--rows 2000000] [--count 32768]
        [--shapes 4096x65536x1,32x256x8,...] [--src DIR,...] [--name NAME] [--save]

Rules:

* A shape ``CxWxS`` is ``LocalPermutation(rows, S, seed 0, epoch 0, clump C, window W)``; ``computed``
  is ``ComputedPermutation(rows, 8, 0, 0)``. A pass computes split 0's positions ``count`` at a time
  (the pipeline's split views compute ``AHEAD = 32768`` at once) from the split's start to its end,
  and reports positions per second. Nothing is read from disk.
* Every pass runs in a new process (``--one``), so no pass inherits another's heap. ``--src`` adds
  other source trees (``PYTHONPATH=DIR``, for example ``git archive`` of an earlier commit); rounds
  interleave every tree and shape, and the table reports medians and, per shape, each tree's median
  of its per-round ratios to this checkout.
* Results go to ``benchmarks/NAME.local.json`` or, with ``--save``, the committed
  ``benchmarks/NAME.json`` (``--name``, default ``positions_rate``), with ``meta.provenance()``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SHAPES = ("4096x65536x1", "256x1024x1", "32x256x8", "8x64x1", "1024x3000x1", "computed")


def one(shape: str, rows: int, count: int) -> float:
    """Positions per second of one pass over split 0 of ``shape``, in this process."""
    from elastic_loader._pipeline._computed import ComputedPermutation
    from elastic_loader._pipeline._local import LocalPermutation

    if shape == "computed":
        perm: Any = ComputedPermutation(rows, 8, 0, 0)
    else:
        clump, window, splits = (int(v) for v in shape.split("x"))
        perm = LocalPermutation(rows, splits, 0, 0, clump, window)
    m = perm.split_len
    t0 = time.perf_counter()
    for first in range(0, m, count):
        perm.positions(0, first, min(count, m - first))
    return m / (time.perf_counter() - t0)


def run(shape: str, rows: int, count: int, src: str | None) -> float:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    command = [sys.executable, str(HERE / "positions_rate.py"), "--one", shape]
    command += ["--rows", str(rows), "--count", str(count)]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    rate: float = json.loads(out.stdout.strip().splitlines()[-1])["rate"]
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--count", type=int, default=32_768, help="positions a call computes")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--src", default="", help="other source trees to run side by side (comma-separated)")
    parser.add_argument("--name", default="positions_rate", help="results file name (without .json)")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps({"rate": one(args.one, args.rows, args.count)}))
        return
    sys.path.insert(0, str(HERE))
    import meta

    shapes = args.shapes.split(",")
    others = {d: str(Path(d).resolve()) for d in args.src.split(",") if d}
    trees: dict[str, str | None] = {"this": None, **others}
    rates: dict[str, dict[str, list[float]]] = {s: {t: [] for t in trees} for s in shapes}
    for round_ in range(args.rounds):
        for shape in shapes:
            for tree, src in trees.items():
                rates[shape][tree].append(run(shape, args.rows, args.count, src))
                rate = rates[shape][tree][-1]
                print(f"round {round_ + 1} {shape} {tree}: {rate:,.0f} positions/s", flush=True)
    results: dict[str, Any] = {
        **meta.provenance(),
        "rows": args.rows,
        "count": args.count,
        "rounds": args.rounds,
        "trees": {t: src or "this checkout" for t, src in trees.items()},
        "results": {
            shape: {
                tree: {
                    "positions_per_s": round(statistics.median(got)),
                    "vs_this": round(
                        statistics.median(a / b for a, b in zip(got, rates[shape]["this"], strict=True)), 3
                    ),
                    "rounds": [round(r) for r in got],
                }
                for tree, got in rates[shape].items()
            }
            for shape in shapes
        },
    }
    print(f"\n{'shape':14s} " + " ".join(f"{t[-24:]:>26s}" for t in trees))
    for shape, per in results["results"].items():
        cells = (f"{per[t]['positions_per_s'] / 1e6:9.2f}M ({per[t]['vs_this']:.2f}x)" for t in trees)
        print(f"{shape:14s} " + " ".join(f"{c:>26s}" for c in cells))
    meta.write(meta.results_path(args.name, args.save), results)


if __name__ == "__main__":
    main()
