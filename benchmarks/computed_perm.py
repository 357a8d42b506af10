"""Construction cost, memory and read rate of the computed permutation, per table size.

Usage::

    .venv/bin/python benchmarks/computed_perm.py [--billion] [--json out.json]

Each table size runs in a fresh child process, so its peak RSS is its own. A case
measures, in the child: the time and memory of ``ComputedPermutation(N, 16, seed, epoch)``
(``tracemalloc`` peak, and the ``getrusage`` max-RSS growth over the process after imports),
the same for unpickling it (what a DataLoader worker or a resume does), and the rate of
``positions(split, first, 16384)`` over random unit-sized ranges. The spec's
``computed_positions`` is timed on the 10**6-row table only (pure Python). ``--billion`` adds
the 10**9-row table. Nothing is written to disk; the table itself is never needed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import platform
import random
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

UNIT = 16384
SPLITS = 16
CALLS = 200


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def _timed_build(build: Any) -> tuple[Any, dict[str, float]]:
    rss0 = _maxrss_mb()
    tracemalloc.start()
    t0 = time.perf_counter()
    value = build()
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return value, {
        "seconds": seconds,
        "tracemalloc_peak_mb": peak / 2**20,
        "maxrss_growth_mb": _maxrss_mb() - rss0,
    }


def _rate(positions: Any, perm: Any, calls: int, rng: random.Random) -> dict[str, float]:
    ranges = []
    for _ in range(calls):
        split = rng.randrange(SPLITS)
        first = rng.randrange(perm.split_len - UNIT + 1)
        ranges.append((split, first))
    t0 = time.perf_counter()
    for split, first in ranges:
        positions(perm, split, first, UNIT)
    seconds = time.perf_counter() - t0
    return {"calls": calls, "unit": UNIT, "positions_per_second": calls * UNIT / seconds}


def run_case(num_rows: int) -> dict[str, Any]:
    """One table size, in this process (the parent runs it in a child)."""
    import numpy as np

    from elastic_loader._pipeline._computed import ComputedPermutation

    rss_after_imports = _maxrss_mb()
    perm, build = _timed_build(lambda: ComputedPermutation(num_rows, SPLITS, 1234, 3))
    blob = pickle.dumps(perm)
    _, unpickle = _timed_build(lambda: pickle.loads(blob))
    rng = random.Random(num_rows)
    tracemalloc.start()
    rate = _rate(lambda p, s, f, c: p.positions(s, f, c), perm, CALLS, rng)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    sample = perm.positions(0, 0, UNIT)
    out: dict[str, Any] = {
        "num_rows": num_rows,
        "num_splits": SPLITS,
        "rss_after_imports_mb": rss_after_imports,
        "construction": build,
        "unpickle": unpickle,
        "pickle_bytes": len(blob),
        "positions": {**rate, "tracemalloc_peak_mb": peak / 2**20},
        "process_maxrss_mb": _maxrss_mb(),
        "sample_in_range": bool(int(sample.max()) < num_rows and sample.dtype == np.uint64),
    }
    if num_rows <= 10**6:
        from elastic_loader.spec import computed as spec

        model = spec.ComputedPermutation(num_rows, SPLITS, 1234, 3)
        out["spec_positions"] = _rate(spec.computed_positions, model, 3, rng)
    return out


def _meta() -> dict[str, Any]:
    import numpy as np

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
            "load_average": os.getloadavg(),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--billion", action="store_true", help="also the 10**9-row table")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--case", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case is not None:
        print(json.dumps(run_case(args.case)))
        return 0
    sizes = [10**6, 10**8] + ([10**9] if args.billion else [])
    results: dict[str, Any] = {**_meta(), "cases": []}
    for n in sizes:
        child = subprocess.run(
            [sys.executable, __file__, "--case", str(n)], capture_output=True, text=True, check=True
        )
        case = json.loads(child.stdout)
        results["cases"].append(case)
        build, rate = case["construction"], case["positions"]
        line = (
            f"N={n:>13,}: build {build['seconds'] * 1e3:7.3f} ms, "
            f"tracemalloc {build['tracemalloc_peak_mb']:.3f} MB, "
            f"maxrss +{build['maxrss_growth_mb']:.1f} MB (process {case['process_maxrss_mb']:.0f} MB); "
            f"unpickle {case['unpickle']['seconds'] * 1e3:.3f} ms; "
            f"positions {rate['positions_per_second'] / 1e6:.2f} M/s"
        )
        if "spec_positions" in case:
            line += f"; spec {case['spec_positions']['positions_per_second'] / 1e3:.1f} k/s"
        print(line, flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
