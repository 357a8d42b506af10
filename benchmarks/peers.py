"""elastic-loader against peer loaders in one run: throughput ratios and shuffle quality.

Usage (``make bench-peers`` installs the peers first)::

    .venv/bin/python benchmarks/peers.py [--rows 2000000] [--docs 200000] [--rounds 3]
        [--large] [--only NAME,...] [--skip NAME,...] [--no-packing] [--fresh [--warm N] [--prescan COLUMN]]
        [--save | --json PATH]

Rules:

* Every loader reads the same table (``peer_workloads``); copies in other formats are
  built once before timing and reused. A loader whose package is missing is reported
  as skipped, never as a failure.
* Rounds are interleaved (A, B, C, ..., A, B, C, ...); the table shows the median of
  each loader's rounds and its ratio to elastic-loader's defaults (``elastic_loader``).
  Times include constructing the dataset (and starting workers where there are any).
* Row mode: items are rows delivered; the quality columns come from the ids of the
  first round (``quality.py`` defines them; they are the same in every round, since
  every shuffle is seeded). Packing: items are tokens delivered in 2048-token blocks.
* Copies in other formats are checked when built: litdata's hold every row (its token copy
  every document and every token, EOS included, from ``index.json``), since ``optimize``
  can return normally when a worker died.
* ``--large`` (or ``BENCH_LARGE=1``) uses 100,000,000 rows; never in CI. At 2,000,000 rows
  the table and its litdata and MDS copies took 10 s, 3 min and 1 min to build and 316,
  218 and 195 MB of disk (a shared 2-core machine); at 100,000,000 rows 2.3 min, 24 min
  and 31 min (the copies at the same time, litdata's with ``PEERS_BUILD_WORKERS=2``) and
  16, 11 and 9.5 GB. ``--mosaic-rows N`` stops mosaicml-streaming after N rows (no quality
  columns then): a full pass at its speed takes hours; ``--builder-rows N`` stops
  ``elastic_loader`` (the default builder permutation, whose pass there did not finish in 81
  minutes on 2026-12-03) the same way. A prefix's rate includes the loader's start (the
  builder's permutation: 32 s at 100M rows when issue 15 was filed).
* Every process imports, before any timed pass, what loaders import on their first pass (Lance,
  lance.torch, elastic-loader's loader: ``peer_workloads.preload``), so no timed pass includes a
  first import (Lance's is about 50 ms, a twentieth of a packed pass), with or without ``--fresh``.
* ``--fresh --warm N``: each new process first makes N untimed passes of the same loader (its
  epochs before the timed one): the timed pass then runs on a heap, thread pools and caches the
  loader has already set up, as every epoch after a training run's first does; without
  ``--warm`` the timed pass is the process's first.
* ``--fresh --prescan COLUMN``: each new process first reads COLUMN of the table once by a
  streamed Lance scan (untimed, nothing kept), before any pass: what a process has read before
  its first pass changes that pass (its heap is already grown; benchmarks/README.md, "A
  process's first pass and the passes after it"). With ``--fresh`` the results also record each
  timed pass's minor page faults and system seconds (``getrusage`` around the pass).
* Results go to ``benchmarks/peers.local.json`` (git-ignored) or, with ``--save``, the
  committed ``benchmarks/peers.json``; both record the environment (``meta.py``).
* ``--pool WORKLOAD OURS THEIRS NAME [NAME ...]`` runs nothing: it reads the saved runs
  ``benchmarks/NAME.json`` and prints loader OURS's per-round ratios to loader THEIRS in
  WORKLOAD (``rows`` or ``packing``), run by run and pooled (median, lowest, highest, rounds
  above 1), so a ratio near 1 is judged on every round measured, not on one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np

import meta
import peer_workloads as pw
import quality
import workloads as w

HERE = Path(__file__).resolve().parent
DEFAULT_ROWS = 2_000_000
LARGE_ROWS = 100_000_000
DEFAULT_DOCS = 200_000
BASELINE = "elastic_loader"


def _items(result: Any) -> int:
    return len(result) if isinstance(result, np.ndarray) else int(result)


Timed = Callable[[str], tuple[int, float, Any]]
"""``timed(name)``: run loader ``name`` once; (items, seconds, what it delivered or its summary)."""


def in_process(runs: dict[str, Callable[[], Any]]) -> Timed:
    """Every run in this process."""

    def timed(name: str) -> tuple[int, float, Any]:
        t0 = time.perf_counter()
        result = runs[name]()
        seconds = time.perf_counter() - t0
        return _items(result), seconds, result

    return timed


def in_new_processes(workload: str, args: argparse.Namespace) -> Timed:
    """Every run in a new Python process (this script with ``--one WORKLOAD/NAME``): no run inherits the
    heap, threads or caches of the ones before it. Its result is the child's summary (``one``)."""

    def timed(name: str) -> tuple[int, float, Any]:
        command = [sys.executable, __file__, "--one", f"{workload}/{name}", "--rows", str(args.rows)]
        command += ["--docs", str(args.docs)]
        if args.mosaic_rows is not None:
            command += ["--mosaic-rows", str(args.mosaic_rows)]
        if args.builder_rows is not None:
            command += ["--builder-rows", str(args.builder_rows)]
        command += ["--warm", str(args.warm)]
        if args.prescan:
            command += ["--prescan", args.prescan]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return summary["items"], summary["seconds"], summary

    return timed


def measure(names: Sequence[str], rounds: int, timed: Timed, on_first: Callable[[str, Any], None]) -> dict:
    """Seconds and items/s of every run over interleaved rounds; ``on_first`` sees each first result."""
    samples: dict[str, list[float]] = {name: [] for name in names}
    counts: dict[str, list[int]] = {name: [] for name in names}
    faults: dict[str, list[int]] = {}
    system: dict[str, list[float]] = {}
    for r in range(rounds):
        for name in names:
            items, seconds, result = timed(name)
            samples[name].append(items / seconds)
            counts[name].append(items)
            if isinstance(result, dict) and "minor_faults" in result:
                faults.setdefault(name, []).append(result["minor_faults"])
                system.setdefault(name, []).append(result["system_s"])
            print(
                f"  round {r + 1}/{rounds} {name:30s} {items / seconds:>14,.0f} items/s ({seconds:.2f} s)",
                flush=True,
            )
            if r == 0:
                on_first(name, result)
            del result
    out: dict[str, dict[str, Any]] = {
        name: {"items_per_s": statistics.median(v), "rounds_items_per_s": v, "rounds_items": counts[name]}
        for name, v in samples.items()
    }
    for name in faults:  # --fresh: what the timed pass cost its process (getrusage around it)
        out[name]["rounds_minor_faults"] = faults[name]
        out[name]["rounds_system_s"] = system[name]
    return out


def select(loaders: Sequence[pw.Loader], only: set[str], skip: set[str]) -> tuple[list[pw.Loader], dict]:
    """The loaders to run, and why the others do not (not selected, package missing)."""
    chosen, skipped = [], {}
    for loader in loaders:
        if (only and loader.name not in only) or loader.name in skip:
            continue
        if loader.requires is not None and not pw.installed(loader.requires):
            skipped[loader.name] = (
                f"skipped: {loader.requires} is not installed (make bench-peers installs it)"
            )
            continue
        chosen.append(loader)
    return chosen, skipped


def _finish(measured: dict, chosen: Sequence[pw.Loader], skipped: dict) -> dict:
    base = measured.get(BASELINE, {}).get("items_per_s")
    out: dict[str, Any] = {}
    for loader in chosen:
        entry = {"description": loader.description, **measured[loader.name]}
        entry["ratio_to_elastic_loader"] = None if not base else entry["items_per_s"] / base
        out[loader.name] = entry
    return {**out, **{name: {"skipped": why} for name, why in skipped.items()}}


def _stopped_early(name: str, args: argparse.Namespace) -> bool:
    """Whether loader ``name`` is stopped before the end of its epoch (``--mosaic-rows``,
    ``--builder-rows``)."""
    return name in _prefixes(args)


def _prefixes(args: argparse.Namespace) -> dict[str, int]:
    """Loaders stopped early, and after how many rows."""
    named = {"mosaic": args.mosaic_rows, BASELINE: args.builder_rows}
    return {name: rows for name, rows in named.items() if rows is not None}


def _judge(ids: np.ndarray, rows: int, stopped_early: bool) -> dict[str, Any]:
    """What a pass delivered and its shuffle quality; a pass stopped early has no quality columns:
    they describe a whole epoch (a whole pass that delivers too few rows keeps them)."""
    return {
        "delivered": len(ids),
        "distinct": len(np.unique(ids)),
        "quality": None if stopped_early else quality.summary(ids, rows),
    }


def row_workload(args: argparse.Namespace) -> dict:
    rows = args.rows
    table = w.rows_table(rows)
    chosen, skipped = select(pw.ROW_LOADERS, args.only, args.skip)
    print(f"row mode: {rows:,} rows; preparing {', '.join(x.name for x in chosen)}", flush=True)
    runs = {loader.name: loader.make(table) for loader in chosen}  # builds the peers' copies once
    found: dict[str, dict] = {}

    def judge(name: str, got: Any) -> None:
        found[name] = (
            {key: got[key] for key in ("delivered", "distinct", "quality")}
            if args.fresh
            else _judge(got, rows, _stopped_early(name, args))
        )

    timed = in_new_processes("rows", args) if args.fresh else in_process(runs)
    measured = measure(list(runs), args.rounds, timed, judge)
    for name, extra in found.items():
        measured[name].update(extra)
    return {"table_rows": rows, "unit": "rows/s", "loaders": _finish(measured, chosen, skipped)}


def packing_workload(args: argparse.Namespace) -> dict:
    spec = pw.token_spec(args.docs)
    table = w.token_table(spec)
    chosen, skipped = select(pw.TOKEN_LOADERS, args.only, args.skip)
    print(f"packing: {args.docs:,} documents of 128-2048 tokens, L={spec.pack}", flush=True)
    runs = {loader.name: loader.make(table, spec) for loader in chosen}
    timed = in_new_processes("packing", args) if args.fresh else in_process(runs)
    measured = measure(list(runs), args.rounds, timed, lambda name, tokens: None)
    return {
        "documents": args.docs,
        "pack": spec.pack,
        "unit": "tokens/s",
        "loaders": _finish(measured, chosen, skipped),
    }


def prescan(table: Any, column: str) -> None:
    """Read ``column`` of ``table`` once by a streamed Lance scan, keeping nothing (``--prescan``)."""
    for batch in table.to_lance().to_batches(columns=[column]):
        del batch


def one(what: str, args: argparse.Namespace) -> dict[str, Any]:
    """The body of ``--one WORKLOAD/NAME``: one timed run of one loader, and its summary."""
    workload, name = what.split("/")
    if workload == "rows":
        loader = {x.name: x for x in pw.ROW_LOADERS}[name]
        run = loader.make(w.rows_table(args.rows))
    else:
        spec = pw.token_spec(args.docs)
        loader = {x.name: x for x in pw.TOKEN_LOADERS}[name]
        run = loader.make(w.token_table(spec), spec)
    if args.prescan:
        table = w.rows_table(args.rows) if workload == "rows" else w.token_table(spec)
        prescan(table, args.prescan)
    for _ in range(args.warm):
        run()
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    out: dict[str, Any] = {
        "items": _items(result),
        "seconds": seconds,
        "minor_faults": after.ru_minflt - before.ru_minflt,
        "system_s": after.ru_stime - before.ru_stime,
    }
    if workload == "rows":
        out.update(_judge(result, args.rows, _stopped_early(name, args)))
    return out


def print_table(title: str, workload: dict) -> None:
    print(f"\n{title} ({workload['unit']})")
    header = f"{'loader':30s} {'items/s':>13s} {'ratio':>7s}"
    if any("quality" in entry for entry in workload["loaders"].values()):
        header += f" {'|corr|':>7s} {'adjacent':>8s} {'head10':>7s} {'headKS':>7s} {'rows':>12s}"
    print(header)
    for name, entry in workload["loaders"].items():
        if "skipped" in entry:
            print(f"{name:30s} {entry['skipped']}")
            continue
        ratio = entry["ratio_to_elastic_loader"]
        line = f"{name:30s} {entry['items_per_s']:>13,.0f} {'' if ratio is None else f'{ratio:.2f}':>7s}"
        q = entry.get("quality")
        if q is None and "delivered" in entry:
            line += f" {'(stopped early: no quality columns)':>33s} {entry['delivered']:>12,d}"
        elif q is not None:
            line += (
                f" {q['abs_corr']:>7.3f} {q['adjacent']:>8.3f} {q['head_decile_spread']:>7.3f}"
                f" {q['head_ks']:>7.3f} {entry['delivered']:>12,d}"
            )
        print(line)


def pooled(
    workload: str, ours: str, theirs: str, names: Sequence[str], directory: Path = HERE
) -> list[float]:
    """``ours``'s per-round ratios to ``theirs`` in ``workload`` of each saved run ``names`` (in
    ``directory``), printed run by run and pooled (``meta.pool``); returns the pooled ratios."""
    runs = []
    for name in names:
        saved = meta.saved_run(name, directory)
        loaders = saved[workload]["loaders"]
        pairs = zip(loaders[ours]["rounds_items_per_s"], loaders[theirs]["rounds_items_per_s"], strict=True)
        runs.append((name, saved, [a / b for a, b in pairs]))
    return meta.pool(runs, f"{ours} / {theirs}")


def _names(text: str) -> set[str]:
    return {name for name in text.split(",") if name}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=None, help=f"row-table size (default {DEFAULT_ROWS:,})")
    parser.add_argument("--large", action="store_true", help=f"{LARGE_ROWS:,} rows (also BENCH_LARGE=1)")
    parser.add_argument("--docs", type=int, default=DEFAULT_DOCS, help="documents of the packing table")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", type=_names, default=set(), help="comma-separated loader names")
    parser.add_argument("--skip", type=_names, default=set(), help="comma-separated loader names")
    parser.add_argument("--no-packing", action="store_true")
    parser.add_argument("--no-rows", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="every run in a new process")
    parser.add_argument(
        "--warm",
        type=int,
        default=0,
        help="with --fresh: untimed passes of the same loader before the timed one, in its process",
    )
    parser.add_argument(
        "--mosaic-rows",
        type=int,
        default=None,
        help="stop mosaicml-streaming after this many rows (its rate over them; no quality columns)",
    )
    parser.add_argument(
        "--builder-rows",
        type=int,
        default=None,
        help="stop elastic_loader (the default builder permutation) after this many rows, as --mosaic-rows",
    )
    parser.add_argument(
        "--prescan",
        metavar="COLUMN",
        default=None,
        help="with --fresh: each new process first reads COLUMN of the table by a streamed scan (untimed)",
    )
    parser.add_argument(
        "--pool",
        nargs="+",
        metavar="ARG",
        help="WORKLOAD OURS THEIRS NAME [NAME ...]: pool saved runs' per-round ratios (runs nothing)",
    )
    parser.add_argument("--one", metavar="WORKLOAD/NAME", help=argparse.SUPPRESS)  # a --fresh child
    parser.add_argument("--json", type=Path, default=None, help="write the results here instead")
    parser.add_argument(
        "--save", action="store_true", help="write the committed peers.json (else peers.local.json)"
    )
    args = parser.parse_args(argv)
    if args.warm and not (args.fresh or args.one):
        parser.error("--warm needs --fresh (the untimed passes run in each loader's own process)")
    if args.prescan and not (args.fresh or args.one):
        parser.error("--prescan needs --fresh (the scan runs in each loader's own process)")
    large = args.large or os.environ.get("BENCH_LARGE") == "1"
    args.rows = args.rows or (LARGE_ROWS if large else DEFAULT_ROWS)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.pool:
        if len(args.pool) < 4 or args.pool[0] not in ("rows", "packing"):
            raise SystemExit("--pool WORKLOAD OURS THEIRS NAME [NAME ...] (WORKLOAD: rows or packing)")
        pooled(args.pool[0], args.pool[1], args.pool[2], args.pool[3:])
        return 0
    pw.PREFIX_ROWS.update(_prefixes(args))
    w.quiet()
    pw.preload()
    if args.one:
        print(json.dumps(one(args.one, args)))
        return 0
    results: dict[str, Any] = {
        **meta.provenance(),
        "fresh_processes": args.fresh,
        "warm_passes": args.warm,
        "prescan": args.prescan,
        "rounds": args.rounds,
        "mosaic_rows": args.mosaic_rows,
        "builder_rows": args.builder_rows,
        "quality_definitions": quality.DEFINITIONS,
    }
    if not args.no_rows:
        results["rows"] = row_workload(args)
        print_table(f"row mode, {args.rows:,} rows", results["rows"])
    if not args.no_packing:
        results["packing"] = packing_workload(args)
        print_table(f"packing, {args.docs:,} documents, L=2048", results["packing"])
    print("\nratio: median items/s over elastic_loader's; |corr|, adjacent, head10 (first-1% decile spread),")
    print("headKS: shuffle quality of the delivered id order, 0 is best (benchmarks/quality.py)")
    meta.write(args.json or meta.results_path("peers", args.save), results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
