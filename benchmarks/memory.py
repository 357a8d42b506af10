"""Peak memory of the read-ahead: 1 MiB rows, a slow consumer, elastic-loader and lancedb.streaming.

Usage (``make bench-memory``; options after ``MEMORY_ARGS=``)::

    .venv/bin/python benchmarks/memory.py [--rows 2000] [--row-kib 1024] [--take 120] [--sleep 0.05]
        [--impl elastic_loader,reference] [--workers 0,2] [--opt NAME=VALUE ...] [--ref-opt NAME=VALUE ...]
        [--start-method forkserver] [--save | --json PATH]

What it measures:

* The table: ``--rows`` rows of an id and a ``--row-kib`` KiB binary payload of random
  (incompressible) bytes, built once under ``benchmarks/.data``.
* One case per implementation and worker count, each in a fresh Python process (so
  one case's memory never shows in another's). The case opens the table, then records
  the baseline; builds ``StreamingDataset(table, num_splits=8, shuffle_seed=0, **opts)``
  (with ``--workers N > 0`` a ``StreamingDataLoader(batch_size=1, num_workers=N)``),
  takes ``--take`` rows with ``--sleep`` seconds between them, and stops. elastic-loader's
  loader starts workers its default way (a fork server); lancedb.streaming's is given a
  fork-server context (``--start-method``), because fork is unsafe once LanceDB runs.
* A thread samples every 10 ms the process tree (the case's process and all its
  descendants: fork server and workers, found through ``/proc/<pid>/task/*/children``):
  the sum of resident set sizes (``/proc/<pid>/statm``), and the sum of proportional
  set sizes (``Pss`` of ``/proc/<pid>/smaps_rollup``, shared pages split between the
  processes that map them). ``rss_growth`` / ``pss_growth`` are the peaks minus the
  baseline (the case's process alone before the dataset exists), so with workers they
  include the workers' and fork server's own interpreter, torch and LanceDB.
* ``--opt NAME=VALUE`` passes any constructor option to elastic-loader (VALUE is a
  Python literal, else a string), ``--ref-opt`` to lancedb.streaming; an option an
  implementation does not accept fails that case, reported with its error.

Results go to ``benchmarks/memory.local.json`` (git-ignored) or, with ``--save``,
``benchmarks/memory.json``, with the environment (``meta.py``).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))

import meta
import workloads as w

PAGE = os.sysconf("SC_PAGE_SIZE")
GIB = 2**30
SAMPLE_SECONDS = 0.01
CASE_TIMEOUT_S = 1800
MARK = "MEMORY-RESULT "


# ---------------------------------------------------------------- the table


def blob_table(rows: int, row_kib: int) -> Any:
    """``rows`` rows: ``id`` and ``payload``, ``row_kib`` KiB of random bytes each."""
    db = w.connect()
    name = f"blobs_{rows}_{row_kib}k"
    if name not in db.list_tables().tables:
        rng = np.random.default_rng(2)
        chunk = max(1, (64 * 1024) // row_kib)  # about 64 MiB per append
        table = None
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            payload = pa.array([rng.bytes(row_kib * 1024) for _ in range(n)], type=pa.binary())
            data = pa.table({"id": np.arange(start, start + n), "payload": payload})
            if table is None:
                table = db.create_table(name, data)
            else:
                table.add(data)
        assert table is not None
        table.optimize()
        print(f"built {name}", flush=True)
    return db.open_table(name)


# ---------------------------------------------------------------- sampling /proc


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(x) for x in handle.read().split()]
        except OSError:
            continue
    return found


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants that exist now."""
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += _children(pid)
    return tree


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        return 0
    return 0


class TreeSampler(threading.Thread):
    """Samples the RSS and PSS sums of this process's tree until ``stop()``; keeps the peaks."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_rss = self.peak_pss = self.peak_processes = self.samples = 0
        self._stop_event = threading.Event()

    def sample(self) -> tuple[int, int, int]:
        tree = process_tree(os.getpid())
        return sum(map(rss_bytes, tree)), sum(map(pss_bytes, tree)), len(tree)

    def run(self) -> None:
        while not self._stop_event.is_set():
            rss, pss, processes = self.sample()
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.peak_processes = max(self.peak_processes, processes)
            self.samples += 1
            self._stop_event.wait(SAMPLE_SECONDS)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


# ---------------------------------------------------------------- one case (child process)


def _samples(batch: list[Any]) -> list[Any]:
    return batch


def _classes(impl: str) -> tuple[Any, Any]:
    if impl == "elastic_loader":
        from elastic_loader import StreamingDataLoader, StreamingDataset

        return StreamingDataset, StreamingDataLoader
    from lancedb.streaming import StreamingDataLoader as RefLoader, StreamingDataset as RefDataset

    return RefDataset, RefLoader


def _rows(case: dict[str, Any], table: Any) -> Any:
    dataset_cls, loader_cls = _classes(case["impl"])
    ds = dataset_cls(table, num_splits=8, shuffle_seed=0, **case["options"])
    if not case["workers"]:
        return iter(ds)
    extra: dict[str, Any] = {}
    if case["impl"] != "elastic_loader" or case["start_method"] != "default":
        import multiprocessing

        method = "forkserver" if case["start_method"] == "default" else case["start_method"]
        extra["multiprocessing_context"] = multiprocessing.get_context(method)
    loader = loader_cls(ds, batch_size=1, num_workers=case["workers"], collate_fn=_samples, **extra)
    return (row for batch in loader for row in batch)


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Baseline, then the slow consumer under the sampler; the peaks minus the baseline."""
    w.quiet()
    table = blob_table(case["rows"], case["row_kib"])
    _classes(case["impl"])  # imports are not the read-ahead's memory
    sampler = TreeSampler()
    base_rss, base_pss, _ = sampler.sample()
    sampler.start()
    t0 = time.perf_counter()
    taken, payload = 0, 0
    try:
        rows = _rows(case, table)
        for row in rows:
            taken += 1
            payload += len(row["payload"])
            del row
            if taken >= case["take"]:
                break
            time.sleep(case["sleep"])
        seconds = time.perf_counter() - t0
    finally:
        sampler.stop()
    return {
        "rss_growth_bytes": sampler.peak_rss - base_rss,
        "pss_growth_bytes": sampler.peak_pss - base_pss,
        "baseline_rss_bytes": base_rss,
        "peak_processes": sampler.peak_processes,
        "samples": sampler.samples,
        "rows_taken": taken,
        "payload_bytes_taken": payload,
        "seconds": seconds,
    }


# ---------------------------------------------------------------- the cases (parent)


def parse_option(text: str) -> tuple[str, Any]:
    """``NAME=VALUE``; VALUE as a Python literal (``1``, ``None``, ``'x'``), else the string."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def spawn_case(case: dict[str, Any]) -> dict[str, Any]:
    """Run one case in a fresh interpreter; its result, or its error."""
    command = [sys.executable, __file__, "--child", json.dumps(case)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CASE_TIMEOUT_S} s"}
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return dict(json.loads(line[len(MARK) :]))
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit {done.returncode}: {tail}"}


def cases(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for impl in args.impl:
        for workers in args.workers:
            out.append(
                {
                    "impl": impl,
                    "workers": workers,
                    "options": dict(args.opt if impl == "elastic_loader" else args.ref_opt),
                    "start_method": args.start_method,
                    "rows": args.rows,
                    "row_kib": args.row_kib,
                    "take": args.take,
                    "sleep": args.sleep,
                }
            )
    return out


def _gib(value: Any) -> str:
    return f"{value / GIB:+.2f}" if isinstance(value, int) else "-"


def print_table(results: list[dict[str, Any]]) -> None:
    print(f"\n{'impl':15s} {'workers':>7s} {'RSS GiB':>8s} {'PSS GiB':>8s} {'procs':>5s} {'s':>6s}  options")
    for entry in results:
        case, got = entry["case"], entry["result"]
        options = ", ".join(f"{k}={v!r}" for k, v in case["options"].items()) or "defaults"
        if "error" in got:
            print(f"{case['impl']:15s} {case['workers']:>7d} {got['error']}  ({options})")
            continue
        print(
            f"{case['impl']:15s} {case['workers']:>7d} {_gib(got['rss_growth_bytes']):>8s} "
            f"{_gib(got['pss_growth_bytes']):>8s} {got['peak_processes']:>5d} {got['seconds']:>6.1f}"
            f"  {options}"
        )


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--row-kib", type=int, default=1024)
    parser.add_argument("--take", type=int, default=120)
    parser.add_argument("--sleep", type=float, default=0.05, help="seconds between rows")
    parser.add_argument(
        "--impl", type=lambda s: [x for x in s.split(",") if x], default=["elastic_loader", "reference"]
    )
    parser.add_argument("--workers", type=_ints, default=[0, 2], help="comma-separated worker counts")
    parser.add_argument("--opt", type=parse_option, action="append", default=[], help="elastic-loader option")
    parser.add_argument(
        "--ref-opt", type=parse_option, action="append", default=[], help="lancedb.streaming option"
    )
    parser.add_argument(
        "--start-method",
        default="default",
        help="worker start method (default: elastic-loader's own, forkserver for the reference)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here instead")
    parser.add_argument("--save", action="store_true", help="write the committed memory.json")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        print(MARK + json.dumps(run_case(json.loads(args.child))), flush=True)
        return 0
    blob_table(args.rows, args.row_kib)  # build it once, outside every case
    results = []
    for case in cases(args):
        print(
            f"case: {case['impl']}, {case['workers']} workers, options {case['options'] or 'defaults'}",
            flush=True,
        )
        results.append({"case": case, "result": spawn_case(case)})
    print_table(results)
    out = {"environment": meta.environment(), "cases": results}
    meta.write(args.json or meta.results_path("memory", args.save), out)
    return 1 if any("error" in entry["result"] for entry in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
