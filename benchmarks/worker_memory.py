"""What the loader itself costs a DataLoader worker and the main process: the computed permutation
against a baseline worker that reads the same table with a trivial Dataset.

Usage::

    nice -n 19 .venv/bin/python benchmarks/worker_memory.py [--rows 100000000 [1000000000 ...]]
        [--batches 1000] [--rounds 3] [--kinds plain,baseline,computed,computed_depth1]
        [--save | --json PATH]

Issue 15 asks for <= 200 MB in the main process and in each worker at 100M rows. A worker's RSS
holds the interpreter, torch, NumPy, pyarrow and LanceDB, which every DataLoader worker that reads
a LanceDB table carries; this script measures them apart from the loader. The tables are
``scale.py``'s (one ``int64`` column ``id``, built once under ``benchmarks/.data``). Each case runs
in a fresh interpreter; rounds are interleaved (plain, baseline, computed at every size, then
again), medians are reported. The cases, all with one worker and batches of 1000 rows:

* ``plain``: ``torch.utils.data.DataLoader`` with a fork server that preloads torch, NumPy and
  pyarrow; the main process never imports elastic-loader. The dataset (``TakeRows``) opens the table
  in the worker with ``lancedb``, takes ``READ`` random storage positions a call (sorted, as the
  loader reads them) with Lance's ``take`` and yields one ``{"id": ...}`` dict a row.
* ``baseline``: the same dataset and loader after ``import elastic_loader``, workers started from
  elastic-loader's default context (its fork server also preloads elastic-loader): the same start
  method and the same imports as ``computed``, none of the loader's work.
* ``computed``: ``StreamingDataLoader(StreamingDataset(table, num_splits=8,
  permutation="computed", columns=["id"]), batch_size=1000, num_workers=1)``.
* ``computed_depth1``: the same with ``io_queue_depth=1`` (one read in flight instead of four, as
  the baseline's dataset reads): it shows how much of ``computed``'s cost is its concurrent reads.

Every case delivers ``--batches`` batches. The worker's figures: peak RSS (``VmHWM``), and the peaks
of its RSS, PSS and USS (``Private_Clean + Private_Dirty`` of ``/proc/<pid>/smaps_rollup``),
sampled every 20 ms while it runs. USS is what the worker alone holds (its pages shared with the
fork server, torch's among them, do not count); PSS splits shared pages between the processes
that map them. The main process's figures are growths over its own reading after the imports and
opening the table (before any dataset or loader exists): peak RSS (sampled, and ``VmHWM``) and
peak USS. The loader's own cost per worker is ``computed - baseline``; ``computed - plain`` adds
what importing elastic-loader costs.

Results go to ``benchmarks/worker_memory.local.json`` or, with ``--save``,
``benchmarks/worker_memory.json``, with the environment (``meta.py``), rewritten after every round
(``rounds`` says how many finished).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from torch.utils.data import IterableDataset  # noqa: E402

import scale  # noqa: E402  (the tables: scale.build, scale.table_dir)

KINDS = ("plain", "baseline", "computed", "computed_depth1")
OPTIONS: dict[str, dict[str, Any]] = {"computed": {}, "computed_depth1": {"io_queue_depth": 1}}
"""The loader's cases: constructor options of ``StreamingDataset`` besides the permutation."""
BATCH = 1000
READ = 16384
SAMPLE_S = 0.02
MIB = 2**20
MARK = "WORKER-MEMORY "


# ---------------------------------------------------------------- /proc readings


def reading(pid: int) -> dict[str, float]:
    """RSS, PSS, USS (``smaps_rollup``) and peak RSS (``VmHWM``) of ``pid`` now, MiB; {} once it is gone."""
    got: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            rollup = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in handle) if v}
        with open(f"/proc/{pid}/status") as handle:
            hwm = next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:"))
    except (OSError, ValueError, StopIteration):
        return got
    got["rss"] = rollup.get("Rss", 0) / 1024
    got["pss"] = rollup.get("Pss", 0) / 1024
    got["uss"] = (rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)) / 1024
    got["hwm"] = hwm / 1024
    return got


class Peaks(threading.Thread):
    """Samples the readings of some processes every ``SAMPLE_S`` until ``stop()``; keeps each maximum."""

    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.peak: dict[str, dict[str, float]] = {name: {} for name in pids}
        self.samples = 0
        self._done = threading.Event()

    def sample(self) -> None:
        for name, pid in self.pids.items():
            for key, value in reading(pid).items():
                self.peak[name][key] = max(self.peak[name].get(key, 0.0), value)
        self.samples += 1

    def run(self) -> None:
        while not self._done.is_set():
            self.sample()
            self._done.wait(SAMPLE_S)

    def stop(self) -> None:
        self._done.set()
        self.join()
        self.sample()


# ---------------------------------------------------------------- the baseline dataset


class TakeRows(IterableDataset):  # type: ignore[type-arg]
    """``rows`` rows at random storage positions of the table at ``path``: ``READ`` positions a
    ``take`` (sorted), one dict a row. It opens the table in the process that iterates it."""

    def __init__(self, path: str, rows: int) -> None:
        self.path, self.rows = path, rows

    def __iter__(self) -> Any:
        import lancedb
        import numpy as np

        dataset = lancedb.connect(self.path).open_table("t").to_lance()
        total = int(dataset.count_rows())
        rng = np.random.default_rng(0)
        for lo in range(0, self.rows, READ):
            wanted = np.sort(rng.integers(0, total, size=min(READ, self.rows - lo), dtype=np.int64))
            yield from dataset.take(wanted, columns=["id"]).to_pylist()


# ---------------------------------------------------------------- one case (child process)


def _loader(kind: str, rows: int, batches: int) -> Any:
    path = str(scale.table_dir(rows))
    if kind in OPTIONS:
        import lancedb

        from elastic_loader import StreamingDataLoader, StreamingDataset

        table = lancedb.connect(path).open_table("t")
        ds = StreamingDataset(
            table, num_splits=scale.SPLITS, permutation="computed", columns=["id"], **OPTIONS[kind]
        )
        return StreamingDataLoader(ds, batch_size=BATCH, num_workers=1)
    from torch.utils.data import DataLoader

    if kind == "baseline":
        from elastic_loader._pipeline.loader import default_context

        context = default_context()
    else:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["torch", "numpy", "pyarrow"])
    return DataLoader(
        TakeRows(path, batches * BATCH), batch_size=BATCH, num_workers=1, multiprocessing_context=context
    )


def _workers(iterator: Any) -> list[int]:
    inner = getattr(iterator, "_inner", iterator)  # StreamingDataLoader's iterator wraps torch's
    return [w.pid for w in inner._workers]


def run_case(kind: str, rows: int, batches: int) -> dict[str, Any]:
    """Imports, the table opened, the main process's base reading; then one worker delivers ``batches``."""
    import lancedb
    import torch  # noqa: F401

    if kind != "plain":
        import elastic_loader  # noqa: F401
    lancedb.connect(str(scale.table_dir(rows))).open_table("t").count_rows()
    base = reading(os.getpid())
    main = Peaks({"main": os.getpid()})
    main.start()
    t0 = time.perf_counter()
    iterator = iter(_loader(kind, rows, batches))
    (worker,) = _workers(iterator)
    from multiprocessing import forkserver

    server = getattr(forkserver._forkserver, "_forkserver_pid", None)
    procs = Peaks({"worker": worker, **({"forkserver": server} if server else {})})
    procs.start()
    delivered = 0
    for i, batch in enumerate(iterator):
        delivered += len(batch["id"])
        if i + 1 >= batches:
            break
    seconds = time.perf_counter() - t0
    final = reading(worker)
    procs.stop()
    main.stop()
    del iterator
    return {
        "main_base": base,
        "main_peak": main.peak["main"],
        "worker_peak": procs.peak["worker"],
        "worker_final": final,
        "forkserver_peak": procs.peak.get("forkserver", {}),
        "samples": procs.samples,
        "delivered": delivered,
        "seconds": seconds,
    }


# ---------------------------------------------------------------- the parent


def spawn_case(kind: str, rows: int, batches: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", kind, str(rows), str(batches)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return dict(json.loads(line[len(MARK) :]))
    raise RuntimeError(f"case {kind}@{rows} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")


FIGURES = {
    "worker_peak_rss_mb": lambda r: r["worker_peak"]["hwm"],
    "worker_peak_uss_mb": lambda r: r["worker_peak"]["uss"],
    "worker_peak_pss_mb": lambda r: r["worker_peak"]["pss"],
    "worker_final_uss_mb": lambda r: r["worker_final"]["uss"],
    "main_rss_growth_mb": lambda r: r["main_peak"]["rss"] - r["main_base"]["rss"],
    "main_hwm_growth_mb": lambda r: r["main_peak"]["hwm"] - r["main_base"]["hwm"],
    "main_uss_growth_mb": lambda r: r["main_peak"]["uss"] - r["main_base"]["uss"],
    "main_base_rss_mb": lambda r: r["main_base"]["rss"],
    "seconds": lambda r: r["seconds"],
}


PAIRS = (("computed", "baseline"), ("computed", "plain"), ("computed_depth1", "baseline"))
"""The differences reported: (ours, the baseline it is compared with)."""


def summarise(runs: dict[str, list[dict[str, Any]]], sizes: list[int]) -> dict[str, Any]:
    """Medians per case, and the differences of ``PAIRS`` (both cases run) per size."""
    medians = {
        case: {name: round(statistics.median(f(r) for r in got), 1) for name, f in FIGURES.items()}
        for case, got in runs.items()
        if got
    }
    differences: dict[str, Any] = {}
    for n in sizes:
        for ours_kind, other in PAIRS:
            ours, theirs = medians.get(f"{ours_kind}@{n}"), medians.get(f"{other}@{n}")
            if ours is None or theirs is None:
                continue
            differences[f"{ours_kind}-{other}@{n}"] = {
                name: round(ours[name] - theirs[name], 1)
                for name in FIGURES
                if not name.startswith("main_base")
            }
    return {"medians": medians, "differences": differences}


def print_table(summary: dict[str, Any]) -> None:
    names = [name for name in FIGURES if name != "seconds"]
    print(f"{'case':28s} " + " ".join(f"{n.replace('_mb', ''):>20s}" for n in names))
    for group in ("medians", "differences"):
        for case, figures in summary[group].items():
            cells = " ".join(f"{figures.get(n, float('nan')):>20.1f}" for n in names)
            print(f"{case:28s} {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000_000])
    parser.add_argument("--batches", type=int, default=1000, help=f"batches of {BATCH} rows per case")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated cases to run")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="write the results here instead")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, rows, batches = args.child
        print(MARK + json.dumps(run_case(kind, int(rows), int(batches))), flush=True)
        return

    import meta

    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; choose from {KINDS}")
    tables = {n: scale.build(n) for n in args.rows}
    runs: dict[str, list[dict[str, Any]]] = {f"{k}@{n}": [] for n in args.rows for k in kinds}
    for round_ in range(args.rounds):
        for n in args.rows:
            for kind in kinds:
                try:
                    got = spawn_case(kind, n, args.batches)
                except RuntimeError as exc:  # a worker lost on a shared machine: run the case again
                    print(f"round {round_ + 1} {kind}@{n} failed, again: {str(exc)[-300:]}", flush=True)
                    got = spawn_case(kind, n, args.batches)
                assert got["delivered"] == args.batches * BATCH, got
                runs[f"{kind}@{n}"].append(got)
                print(f"round {round_ + 1} {kind}@{n}: worker peak {got['worker_peak']}", flush=True)
        # Written after every round: a run stopped early keeps the rounds it finished.
        summary = summarise(runs, args.rows)
        results = {
            **meta.provenance(),
            "tables": tables,
            "rounds": round_ + 1,
            "batches": args.batches,
            "batch_size": BATCH,
            "results": summary,
            "raw": runs,
        }
        meta.write(args.json or meta.results_path("worker_memory", args.save), results)
    print_table(summary)


if __name__ == "__main__":
    main()
