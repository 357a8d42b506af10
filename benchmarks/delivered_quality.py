"""Which ``LocalShuffle`` shapes pass the quality bar on the order packed blocks deliver, over seeds.

Usage::

    .venv/bin/python benchmarks/delivered_quality.py --shapes 8_256,16_512 [--docs 200000]
        [--seeds 10] [--name NAME] [--save]

Rules:

* A shape ``C_W`` is ``LocalShuffle(clump=C, window=W)`` over ``peer_workloads.token_spec(docs)``'s
  table with ``permutation_read.SPLITS`` splits; for each seed 0 .. N-1 the documents' delivered
  order is scored by ``permutation_read.delivered_summary`` (no data is read but the documents'
  lengths) against ``quality.BAR``.
* Per shape: the seeds that pass, and the worst value of every bar measure over the seeds.
* Results go to ``benchmarks/NAME.local.json`` or, with ``--save``, ``benchmarks/NAME.json``
  (default ``delivered_quality``), with ``meta.provenance()``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import meta
import peer_workloads as pw
import permutation_read as pr
import quality
import workloads as w


def shape_quality(shape: str, lengths: np.ndarray, seeds: int) -> dict[str, Any]:
    """The bar over ``seeds`` seeds for one ``C_W`` shape."""
    scores = [pr.delivered_summary(f"local_{shape}", lengths, seed) for seed in range(seeds)]
    return {
        "passing_seeds": [seed for seed, q in enumerate(scores) if quality.passes(q)],
        "worst": {name: round(max(q[name] for q in scores), 4) for name in quality.BAR},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", required=True, help="comma-separated C_W shapes")
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--name", default="delivered_quality")
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    lengths = pr.document_lengths(w.token_table(pw.token_spec(args.docs)))
    results = {}
    for shape in args.shapes.split(","):
        results[shape] = shape_quality(shape, lengths, args.seeds)
        got = results[shape]
        passing = len(got["passing_seeds"])
        print(f"{shape:10s} passes {passing}/{args.seeds}  worst {got['worst']}", flush=True)
    out = {**meta.provenance(), "docs": args.docs, "seeds": args.seeds, "bar": quality.BAR, "shapes": results}
    meta.write(meta.results_path(args.name, args.save), out)


if __name__ == "__main__":
    main()
