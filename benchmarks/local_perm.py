"""Shuffle quality, read locality and cost of the local (clumped, windowed) permutation.

Usage::

    .venv/bin/python benchmarks/local_perm.py [--rows 2000000] [--seeds 3] [--json out.json]
        [--splits 1 16 64] [--shapes 1x1 256x1024 ...]

For ``N`` rows, every split count ``S`` of ``SPLITS``, every ``(C, W)`` of ``SHAPES`` and
every seed, the pipeline's ``LocalPermutation`` gives every split's positions; the
measures of ``benchmarks/quality.py`` are computed over

* the *global* order: what one rank reading every split delivers, round robin over the
  splits (position ``t*S + s`` is split ``s`` position ``t``), and
* *one split* alone (split 0, ``m = N // S`` positions);

a position is its own id (the table's rows in storage order are ``0 .. N-1``). Per shape it
also reports the runs a window reads (``runs()`` of sampled windows: mean count and mean run
length, and the bound ``local_run_bound``) and the rate of ``positions(split, first, 16384)``.
``(1, 1)`` is the computed permutation (``LocalDegeneracyInv``), the global-shuffle baseline.
Nothing is read from disk: the quality and the locality are properties of the order alone.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import quality
from elastic_loader._pipeline._local import LocalPermutation

SPLITS = (1, 16, 64)
SHAPES = ((1, 1), (16, 64), (64, 256), (128, 512), (256, 1024), (512, 2048), (1024, 4096))
UNIT = 16384
CALLS = 40
WINDOWS = 300


def _splits(perm: LocalPermutation) -> np.ndarray:
    """``(S, m)``: every split's positions in read order."""
    return np.stack([perm.positions(s, 0, perm.split_len) for s in range(perm.num_splits)])


def _rate(perm: LocalPermutation, rng: random.Random) -> float:
    unit = min(UNIT, perm.split_len)
    ranges = [
        (rng.randrange(perm.num_splits), rng.randrange(perm.split_len - unit + 1)) for _ in range(CALLS)
    ]
    t0 = time.perf_counter()
    for split, first in ranges:
        perm.positions(split, first, unit)
    return CALLS * unit / (time.perf_counter() - t0)


def _runs(perm: LocalPermutation, rng: random.Random) -> dict[str, float]:
    counts, lengths, bounds = [], [], []
    for _ in range(WINDOWS):
        split, q = rng.randrange(perm.num_splits), rng.randrange(perm.window_count)
        starts, runs = perm.runs(split, q)
        counts.append(len(starts))
        lengths.extend(runs.tolist())
        bounds.append(_bound(perm, q))
    return {
        "windows": WINDOWS,
        "mean_runs": float(np.mean(counts)),
        "max_runs": int(max(counts)),
        "max_bound": int(max(bounds)),
        "mean_run_length": float(np.mean(lengths)),
    }


def _bound(perm: LocalPermutation, q: int) -> int:
    """``local_run_bound`` of spec/local.py, restated (the benchmark does not import the spec)."""
    w, c, r = perm.window_size(q), perm.clump, perm.short_len
    if w == 1:
        return 1
    short = r < c and w >= r + 2 and (w - 2) % c >= r
    return 2 + (w - 2) // c + (1 if short else 0)


def run_case(rows: int, splits: int, clump: int, window: int, seeds: int) -> dict[str, Any]:
    """Every measure of one ``(S, C, W)``, per seed, plus the worst over the seeds."""
    per_seed = []
    for seed in range(seeds):
        perm = LocalPermutation(rows, splits, seed, 0, clump, window)
        table = _splits(perm)
        per_seed.append(
            {
                "seed": seed,
                "global": quality.summary(table.T.reshape(-1).astype(np.int64), rows),
                "one_split": quality.summary(table[0].astype(np.int64), rows),
            }
        )
    rng = random.Random(rows + splits + clump)
    perm = LocalPermutation(rows, splits, 0, 0, clump, window)
    worst = {
        view: {k: max(abs(s[view][k]) for s in per_seed) for k in quality.DEFINITIONS}
        for view in ("global", "one_split")
    }
    return {
        "rows": rows,
        "splits": splits,
        "clump": clump,
        "window": window,
        "per_seed": per_seed,
        "worst_over_seeds": worst,
        "runs": _runs(perm, rng),
        "positions_per_second": _rate(perm, rng),
    }


def _meta() -> dict[str, Any]:
    import elastic_loader

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "elastic_loader": getattr(elastic_loader, "__version__", "unknown"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.machine(),
            "load_average_start": os.getloadavg(),
        },
        "definitions": quality.DEFINITIONS,
    }


def _line(case: dict[str, Any]) -> str:
    g, one, runs = case["worst_over_seeds"]["global"], case["worst_over_seeds"]["one_split"], case["runs"]
    return (
        f"S={case['splits']:>2} C={case['clump']:>4} W={case['window']:>4} | global: "
        f"|corr| {g['abs_corr']:.4f} "
        f"adj {g['adjacent']:.4f} spread {g['head_decile_spread']:.3f} ks {g['head_ks']:.3f} | split 0: "
        f"|corr| {one['abs_corr']:.4f} adj {one['adjacent']:.4f} spread {one['head_decile_spread']:.3f} | "
        f"runs/window {runs['mean_runs']:.2f} (max {runs['max_runs']}, bound {runs['max_bound']}), "
        f"run {runs['mean_run_length']:.0f} rows | {case['positions_per_second'] / 1e6:.2f} M pos/s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..n-1; the worst value is printed")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--splits", type=int, nargs="*", default=list(SPLITS), help="split counts S")
    parser.add_argument(
        "--shapes",
        type=str,
        nargs="*",
        default=[f"{c}x{w}" for c, w in SHAPES],
        help="clump x window, e.g. 256x1024",
    )
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes]
    results: dict[str, Any] = {**_meta(), "seeds": args.seeds, "cases": []}
    for splits in args.splits:
        for clump, window in shapes:
            case = run_case(args.rows, splits, clump, window, args.seeds)
            results["cases"].append(case)
            print(_line(case), flush=True)
    results["machine"]["load_average_end"] = os.getloadavg()
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
