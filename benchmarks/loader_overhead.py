"""What ``StreamingDataLoader`` costs over iterating the dataset itself, in the main process.

Usage::

    .venv/bin/python benchmarks/loader_overhead.py [--docs 200000] [--rounds 3]
        [--src DIR,DIR...] [--local C,W] [--splits 8] [--cases CASE,...] [--name NAME] [--save]

Rules:

* One packed epoch (``pack_sequences=2048`` over ``peer_workloads.token_spec(docs)``, 8 splits,
  the default permutation) read three ways, each pass in a new process, the clock started at the
  dataset's construction: ``direct`` (iterating the dataset), ``loader_8`` and ``loader_1``
  (``StreamingDataLoader(ds, batch_size=8 or 1)``, ``num_workers=0``), ``batches_8`` and
  ``batches_64`` (``batch_format="torch"``: packed batches, no Python object per block); ``workers_8``
  (``batch_size=8``, ``num_workers=2``) and ``torch_floor_8``, a plain torch ``DataLoader`` with
  2 workers over a dataset that reads nothing and yields as many blocks of the same shape (the
  ceiling torch's worker transport sets on this machine). A loader commits every batch's
  checkpoint when the batch reaches the trainer, so its cost grows with the batches.
  A case a tree does not have (``batches_8`` before packed batches) is reported as missing.
* ``--src`` runs the same passes against other source trees (``PYTHONPATH=DIR``, for example a
  worktree of an earlier commit), interleaved with this one's: before and after a change in one
  run. Rounds are interleaved (every tree, every case, then again); medians are printed with their
  ratios to ``direct`` of the same tree.
* ``--local C,W`` reads in ``LocalShuffle(clump=C, window=W)`` order (where the packer, not the
  random ``take``, is the limit); ``--splits N`` cuts the table into ``N`` splits (default 8; 1 is
  the default ``num_splits`` in one process); ``--cases`` runs only the named cases.
* Results go to ``benchmarks/NAME.local.json`` or, with ``--save``, the committed
  ``benchmarks/NAME.json`` (``--name``, default ``loader_overhead``), with the date, versions,
  machine and command (``meta.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.utils.data as torch_data

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CASES = ("direct", "loader_8", "loader_1", "batches_8", "batches_64", "workers_8", "torch_floor_8")
WORKERS = 2


class _Blocks(torch_data.IterableDataset):  # type: ignore[type-arg]
    """``blocks`` blocks of ``length`` tokens (input_ids and doc_ids), shared out over the workers,
    made without reading anything: torch's DataLoader alone."""

    def __init__(self, blocks: int, length: int) -> None:
        self.blocks, self.length = blocks, length

    def __iter__(self) -> Any:
        import torch

        info = torch_data.get_worker_info()
        workers, me = (1, 0) if info is None else (info.num_workers, info.id)
        row = torch.arange(self.length)
        for _ in range(me, self.blocks, workers):
            yield {"input_ids": row.clone(), "doc_ids": row.clone()}


def torch_floor(blocks: int, length: int, batch: int) -> Callable[[], int]:
    def run() -> int:
        from elastic_loader._pipeline.loader import default_context

        loader = torch_data.DataLoader(
            _Blocks(blocks, length),
            batch_size=batch,
            num_workers=WORKERS,
            multiprocessing_context=default_context(),
        )
        return sum(int(b["input_ids"].numel()) for b in loader)

    return run


def one(case: str, docs: int, local: str | None, splits: int) -> float:
    """Tokens per second of one packed epoch read as ``case`` (the clock starts at construction),
    over the default permutation or ``LocalShuffle(clump, window)`` (``local="C,W"``)."""
    import peer_workloads as pw
    import workloads as w

    options: dict[str, object] = {}
    if local:
        from elastic_loader import LocalShuffle

        clump, window = (int(v) for v in local.split(","))
        options["permutation"] = LocalShuffle(clump=clump, window=window)
    spec = pw.token_spec(docs)
    table = w.token_table(spec)
    batch = None if case == "direct" else int(case.split("_")[-1])
    if case.startswith("torch_floor"):
        assert batch is not None
        run = torch_floor(w.blocks_per_epoch(table, spec, splits), spec.pack, batch)
    else:
        formats = {"batch_format": "torch"} if case.startswith("batches") else {}
        workers = WORKERS if case.startswith("workers") else 0
        run = w.packed_epoch(
            "elastic_loader",
            table,
            spec,
            num_splits=splits,
            batch_size=batch,
            num_workers=workers,
            **formats,
            **options,
        )
    t0 = time.perf_counter()
    tokens = run()
    return tokens / (time.perf_counter() - t0)


def fresh(case: str, docs: int, src: str | None, local: str | None, splits: int) -> float | None:
    """Tokens per second of ``case`` in a new process over source tree ``src`` (``None``: this one);
    ``None`` when that tree cannot run the case (its error's last line is printed)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    command = [sys.executable, __file__, "--one", case, "--docs", str(docs), "--splits", str(splits)]
    if local:
        command += ["--local", local]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"{src or 'this'} {case} failed: {done.stderr.strip().splitlines()[-1]}", flush=True)
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", default="", help="other source trees to run side by side (comma-separated)")
    parser.add_argument("--local", metavar="C,W", help="read in LocalShuffle(C, W) order, not the default")
    parser.add_argument("--splits", type=int, default=8, help="num_splits of the dataset")
    parser.add_argument("--cases", default=",".join(CASES), help=f"cases to run, from {','.join(CASES)}")
    parser.add_argument("--name", default="loader_overhead", help="results file name (without .json)")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cases = args.cases.split(",")
    if set(cases) - set(CASES):
        parser.error(f"unknown cases {sorted(set(cases) - set(CASES))}; choose from {CASES}")
    if args.one:
        print(json.dumps(one(args.one, args.docs, args.local, args.splits)))
        return 0
    import meta
    import peer_workloads as pw
    import workloads as w

    w.token_table(pw.token_spec(args.docs))  # built once, before any clock
    trees: list[str | None] = [None, *(s for s in args.src.split(",") if s)]
    rates: dict[str, dict[str, list[float]]] = {str(t or "this"): {c: [] for c in cases} for t in trees}
    for r in range(args.rounds):
        for tree in trees:
            for case in cases:
                rate = fresh(case, args.docs, tree, args.local, args.splits)
                if rate is None:
                    continue
                rates[str(tree or "this")][case].append(rate)
                print(
                    f"round {r + 1}/{args.rounds} {tree or 'this'} {case}: {rate:,.0f} tokens/s", flush=True
                )
    summary = {
        tree: {
            case: {
                "tokens_per_s": round(statistics.median(values)),
                "rounds": [round(v) for v in values],
                "vs_direct": (
                    round(statistics.median(values) / statistics.median(by_case["direct"]), 3)
                    if by_case.get("direct")
                    else None
                ),
            }
            for case, values in by_case.items()
            if values
        }
        for tree, by_case in rates.items()
    }
    for tree, by_case in summary.items():
        print(tree, {case: (f"{e['tokens_per_s']:,}", e["vs_direct"]) for case, e in by_case.items()})
    meta.write(
        meta.results_path(args.name, args.save),
        {**meta.provenance(), "docs": args.docs, "rounds": args.rounds, "local": args.local}
        | {"splits": args.splits, "results": summary},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
