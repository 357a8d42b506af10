"""Construction, memory and resume of StreamingDataset at scale: the computed permutation vs the builder.

Usage::

    .venv/bin/python benchmarks/scale.py [--rows 100000000 [1000000000 ...]] [--builder-rows 10000000]
        [--resume-rows 10000000] [--repeats 3] [--save]

Builds (once, under ``benchmarks/.data``, or ``$ELASTIC_LOADER_BENCH_DATA``) Lance tables of one
``int64`` column ``id`` with ``--rows``, ``--builder-rows`` and ``--resume-rows`` rows, written in
batches of 10M rows, and records how long building took and its size on disk. Every measurement
runs in a fresh child process (so its peak RSS, ``ru_maxrss``, is its own) and records:

* ``construct``: ``StreamingDataset(table, num_splits=8, permutation=P)`` wall time, the time to
  its first row, and the child's peak RSS and its growth over the RSS after the imports;
* ``worker``: ``StreamingDataLoader(ds, batch_size=1000, num_workers=1)``: time to the first
  batch (worker start-up included) and the worker process's peak RSS (``VmHWM``), torch and
  LanceDB included (``worker_memory.py`` measures the loader's own share against a baseline
  worker that reads the same table);
* ``resume``: at ``--resume-rows``, a checkpoint taken after 1000 rows is loaded into a new
  dataset (construction + ``load_state_dict`` + first row), wall time; for the computed
  permutation, the builder, and the builder with its permutation cache
  (``ELASTIC_LOADER_PERM_CACHE``, written by the first dataset, read by the resumed one).

``P`` is ``"computed"`` at each of ``--rows`` and ``"builder"`` at ``--builder-rows`` (the builder
materialises 16 bytes a row: at 100M rows it took 32 s and 6 GB in issue 15's measurement).
Kinds are interleaved ``--repeats`` times; medians are reported. Wall times on a shared 2-core
machine are indicative; the memory figures are not timing-sensitive.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
DATA = Path(os.environ.get("ELASTIC_LOADER_BENCH_DATA", HERE / ".data"))
BATCH = 10_000_000
SPLITS = 8


def _rss_mb() -> float:
    """This process's resident set now (``/proc/self/status``), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def table_dir(rows: int) -> Path:
    return DATA / f"scale_{rows}"


def build(rows: int) -> dict[str, Any]:
    """The table of ``rows`` rows (built once); how long building took and its bytes on disk."""
    import lance
    import numpy as np
    import pyarrow as pa

    where = table_dir(rows)
    done = where / "built.json"
    if done.exists():
        return dict(json.loads(done.read_text()), reused=True)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    schema = pa.schema([("id", pa.int64())])

    def batches() -> Any:
        for lo in range(0, rows, BATCH):
            yield pa.record_batch(
                [pa.array(np.arange(lo, min(rows, lo + BATCH), dtype=np.int64))], schema=schema
            )

    t0 = time.perf_counter()
    reader = pa.RecordBatchReader.from_batches(schema, batches())
    lance.write_dataset(
        reader, str(where / "t.lance"), max_rows_per_file=100_000_000, max_rows_per_group=1 << 20
    )
    seconds = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in (where / "t.lance").rglob("*") if f.is_file())
    info = {"rows": rows, "build_s": round(seconds, 2), "bytes": size}
    done.write_text(json.dumps(info))
    return dict(info, reused=False)


def _open(rows: int) -> Any:
    import lancedb

    return lancedb.connect(str(table_dir(rows))).open_table("t")


def child_construct(rows: int, kind: str) -> dict[str, Any]:
    from elastic_loader import StreamingDataset

    table = _open(rows)
    base = _rss_mb()
    t0 = time.perf_counter()
    ds = StreamingDataset(table, num_splits=SPLITS, permutation=kind, columns=["id"])
    built = time.perf_counter() - t0
    first = next(iter(ds))
    to_first = time.perf_counter() - t0
    assert first is not None
    return {
        "construct_s": built,
        "first_row_s": to_first,
        "rss_base_mb": base,
        "peak_mb": _peak_mb(),
        "pickle_bytes": len(pickle.dumps(ds)),
    }


def _proc_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_worker(rows: int, kind: str) -> dict[str, Any]:
    """A real DataLoader worker (one): time to its first batch of 1000 rows, its peak RSS (VmHWM)."""
    from elastic_loader import StreamingDataLoader, StreamingDataset

    ds = StreamingDataset(_open(rows), num_splits=SPLITS, permutation=kind, columns=["id"])
    t0 = time.perf_counter()
    it = iter(StreamingDataLoader(ds, batch_size=1000, num_workers=1))
    next(it)
    seconds = time.perf_counter() - t0
    pids = [w.pid for w in it._inner._workers]  # torch's iterator holds the worker processes
    peak = max(_proc_mb(pid, "VmHWM") for pid in pids)
    it.close()
    return {"first_batch_s": seconds, "worker_peak_mb": peak}


def child_resume(rows: int, kind: str) -> dict[str, Any]:
    """``kind`` is a permutation, or ``builder+cache``: the builder with ``ELASTIC_LOADER_PERM_CACHE``
    set to a fresh directory (the first dataset writes it, the resumed one reads it)."""
    cache = None
    if kind == "builder+cache":
        cache = tempfile.mkdtemp(prefix="scale-perm-cache-")
        os.environ["ELASTIC_LOADER_PERM_CACHE"] = cache
        kind = "builder"
    try:
        return _resume(rows, kind)
    finally:
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)


def _resume(rows: int, kind: str) -> dict[str, Any]:
    import itertools

    from elastic_loader import StreamingDataset

    table = _open(rows)
    ds = StreamingDataset(table, num_splits=SPLITS, permutation=kind, columns=["id"])
    it = iter(ds)
    for _ in itertools.islice(it, 1000):
        pass
    state = ds.state_dict()
    it.close()
    t0 = time.perf_counter()
    again = StreamingDataset(table, num_splits=SPLITS, permutation=kind, columns=["id"])
    again.load_state_dict(state)
    next(iter(again))
    return {"resume_s": time.perf_counter() - t0}


def _run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False
    )
    if out.returncode:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 3)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000_000])
    parser.add_argument("--builder-rows", type=int, default=10_000_000)
    parser.add_argument("--resume-rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, *rest = args.child
        if what == "construct":
            result = child_construct(int(rest[0]), rest[1])
        elif what == "worker":
            result = child_worker(int(rest[0]), rest[1])
        else:
            result = child_resume(int(rest[0]), rest[1])
        print(json.dumps(result))
        return

    import meta

    tables = {n: build(n) for n in sorted({*args.rows, args.builder_rows, args.resume_rows})}
    cases = [*(("computed", n) for n in args.rows), ("builder", args.builder_rows)]
    construct: dict[str, list[dict[str, Any]]] = {f"{k}@{n}": [] for k, n in cases}
    worker: dict[str, list[dict[str, Any]]] = {f"{k}@{n}": [] for k, n in cases}
    resume: dict[str, list[dict[str, Any]]] = {k: [] for k in ("computed", "builder", "builder+cache")}
    for _ in range(args.repeats):
        for kind, n in cases:
            construct[f"{kind}@{n}"].append(_run_child("construct", str(n), kind))
            worker[f"{kind}@{n}"].append(_run_child("worker", str(n), kind))
        for kind in resume:
            resume[kind].append(_run_child("resume", str(args.resume_rows), kind))
    summary: dict[str, Any] = {"construct": {}, "worker": {}, "resume": {}}
    for name, runs in construct.items():
        summary["construct"][name] = {
            "construct_s": _median(runs, "construct_s"),
            "first_row_s": _median(runs, "first_row_s"),
            "peak_rss_mb": _median(runs, "peak_mb"),
            "rss_growth_mb": round(statistics.median(r["peak_mb"] - r["rss_base_mb"] for r in runs), 1),
            "pickle_bytes": runs[0]["pickle_bytes"],
        }
    for name, runs in worker.items():
        summary["worker"][name] = {
            "first_batch_s": _median(runs, "first_batch_s"),
            "worker_peak_rss_mb": _median(runs, "worker_peak_mb"),
        }
    for kind, runs in resume.items():
        summary["resume"][f"{kind}@{args.resume_rows}"] = {"resume_s": _median(runs, "resume_s")}
    results = {
        **meta.provenance(),
        "tables": tables,
        "repeats": args.repeats,
        "results": summary,
        "raw": {"construct": construct, "worker": worker, "resume": resume},
    }
    path = meta.results_path("scale", args.save)
    meta.write(path, results)
    print(json.dumps(summary, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
