"""Packed epochs of elastic-loader from several source trees side by side (for example the code an
issue was filed against and the code now).

Usage::

    .venv/bin/python benchmarks/packing_trees.py --case LABEL=DIR:ORDER [--case ...] [--docs 200000]
        [--rounds 5] [--name NAME] [--save]

Rules:

* A case is a source tree (``DIR``: a directory holding the ``elastic_loader`` package, for
  example ``git archive COMMIT src`` unpacked; ``.`` for this checkout's ``src``) and a read
  order: ``default`` (no ``permutation`` argument, so any tree takes it) or ``C_W``
  (``permutation=LocalShuffle(C, W)``), either with ``_bB`` appended for one split's packed
  batches (``num_splits=1``, ``StreamingDataLoader(batch_size=B, batch_format="torch")``: a
  ``(B, 2048)`` pair of ``input_ids`` and ``doc_ids`` tensors a step, as ``peers.py``'s
  ``elastic_local_1024_4096_split1_b64``).
* A pass is one packed epoch of ``workloads.packed_epoch`` (``pack_sequences=2048``, 8 splits,
  ``shuffle_seed=0``, ``eos_id=-1``, ``pad_id=-2``, ``blocks_per_epoch`` of the table, iterating the
  dataset) over ``peer_workloads.token_spec(docs)``'s table, in a new process with
  ``PYTHONPATH=DIR``, timed from the dataset's construction; tokens/s, padding included.
* Rounds interleave the cases; the table gives medians and each case's median of per-round ratios
  to the first case, and the median pass's minor page faults and system seconds (``getrusage``
  around the pass) and the process's peak RSS, the cores the process used during the pass (its CPU
  seconds over the wall time) and the consumer's share (the iterating thread's CPU seconds over the
  wall time). Results go to ``benchmarks/NAME.local.json`` or,
  with ``--save``, ``benchmarks/NAME.json`` (default ``packing_trees``), with ``meta.provenance()``.
* ``--pool LABEL NAME [NAME ...]`` runs nothing: it reads the saved runs ``benchmarks/NAME.json`` and
  prints case ``LABEL``'s per-round ratios to each run's first case, run by run and pooled (median,
  lowest, highest), so a target near the noise is judged on every round measured, not on one run.
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
from pathlib import Path
from typing import Any

import meta  # this script's directory is on sys.path (run as a script, or by the tests)

HERE = Path(__file__).resolve().parent
SPLITS, PACK, MIN_LEN, MAX_LEN = 8, 2048, 128, 2048
"""``peer_workloads.token_spec``'s table and packing (that module needs a tree with ``LocalShuffle``)."""


def one(order: str, docs: int) -> dict[str, float]:
    """One packed epoch in this process (the package from ``PYTHONPATH``): tokens per second, the
    pass's minor page faults and system seconds, the process's peak RSS in MiB, the cores it used
    and the iterating thread's share of the wall time."""
    sys.path.insert(1, str(HERE))
    import lance  # noqa: F401 (imported before the clock starts, as LanceDB imports it on first use)

    import permutation_read as pr
    import workloads as w

    w.quiet()
    spec = w.TokenTable(f"docs_{docs}_{MIN_LEN}_{MAX_LEN}", docs, MIN_LEN, MAX_LEN, PACK)
    table = w.token_table(spec)
    shape, options = order_options(order)
    if shape != "default":
        options["permutation"] = pr.permutation(f"local_{shape}")
    epoch = w.packed_epoch("elastic_loader", table, spec, **options)
    before = resource.getrusage(resource.RUSAGE_SELF)
    main0 = time.thread_time()
    t0 = time.perf_counter()
    tokens = epoch()
    seconds = time.perf_counter() - t0
    main = time.thread_time() - main0
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {
        "rate": tokens / seconds,
        "minor_faults": after.ru_minflt - before.ru_minflt,
        "system_s": after.ru_stime - before.ru_stime,
        "peak_rss_mib": after.ru_maxrss / 1024,
        "cores_used": cpu / seconds,
        "consumer_share": main / seconds,
    }


def order_options(order: str) -> tuple[str, dict[str, Any]]:
    """An ORDER's read order (``default`` or ``C_W``) and ``packed_epoch``'s split and batch options."""
    shape, suffix, batch = order.partition("_b")
    if not suffix:
        return order, {"num_splits": SPLITS}
    if not batch.isdigit() or int(batch) < 1:
        raise ValueError(f"order {order!r}: a batch suffix is _bB with B a positive integer")
    return shape, {"num_splits": 1, "batch_size": int(batch), "batch_format": "torch"}


def run(src: Path, order: str, docs: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, str(HERE / "packing_trees.py"), "--one", order, "--docs", str(docs)]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def pooled(label: str, names: list[str], directory: Path = HERE) -> list[float]:
    """Case ``label``'s per-round ratios to the first case of each saved run ``names`` (in
    ``directory``), printed run by run and pooled (``meta.pool``); returns the pooled ratios."""
    runs = []
    for name in names:
        saved = meta.saved_run(name, directory)
        first, case = saved["cases"][saved["first"]], saved["cases"][label]
        runs.append((name, saved, [b / a for a, b in zip(first["rounds"], case["rounds"], strict=True)]))
    return meta.pool(runs, f"{label} / first case")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", action="append", default=[], metavar="LABEL=DIR:ORDER")
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--name", default="packing_trees", help="results file name (without .json)")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--pool", nargs="+", metavar="LABEL NAME", help="pool saved runs' per-round ratios")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pool:
        if len(args.pool) < 2:
            parser.error("--pool LABEL NAME [NAME ...]")
        pooled(args.pool[0], args.pool[1:])
        return
    if args.one:
        print(json.dumps(one(args.one, args.docs)))
        return
    if not args.case:
        parser.error("give at least one --case LABEL=DIR:ORDER")
    cases: dict[str, tuple[Path, str]] = {}
    for text in args.case:
        label, _, rest = text.partition("=")
        where, _, order = rest.rpartition(":")
        src = (HERE.parent / "src") if where == "." else Path(where).resolve()
        if not label or not order or not (src / "elastic_loader").is_dir():
            parser.error(f"--case {text!r}: want LABEL=DIR:ORDER, DIR holding elastic_loader")
        cases[label] = (src, order)
    passes: dict[str, list[dict[str, float]]] = {label: [] for label in cases}
    for round_ in range(args.rounds):
        for label, (src, order) in cases.items():
            passes[label].append(run(src, order, args.docs))
            print(f"round {round_ + 1} {label}: {passes[label][-1]['rate']:,.0f} tokens/s", flush=True)
    rates = {label: [p["rate"] for p in done] for label, done in passes.items()}
    first = next(iter(cases))
    results = {
        label: {
            "src": str(src),
            "order": order,
            "tokens_per_s": round(statistics.median(rates[label])),
            "vs_first": round(
                statistics.median(a / b for a, b in zip(rates[label], rates[first], strict=True)), 3
            ),
            "rounds": [round(r) for r in rates[label]],
            **{
                f"median_{what}": round(statistics.median(p[what] for p in passes[label]), 2)
                for what in ("minor_faults", "system_s", "peak_rss_mib", "cores_used", "consumer_share")
            },
        }
        for label, (src, order) in cases.items()
    }
    print(f"\n{args.docs:,} documents, L=2048, medians of {args.rounds} rounds; ratios to {first} by round")
    for label, entry in results.items():
        print(
            f"{label:28s} {entry['tokens_per_s'] / 1e6:8.1f}M tokens/s  {entry['vs_first']:.2f}x  "
            f"faults {entry['median_minor_faults']:,.0f}  system {entry['median_system_s']:.2f} s  "
            f"peak {entry['median_peak_rss_mib']:,.0f} MiB  cores {entry['median_cores_used']:.2f}  "
            f"consumer {entry['median_consumer_share']:.0%}"
        )
    out = {**meta.provenance(), "docs": args.docs, "rounds": args.rounds, "first": first, "cases": results}
    meta.write(meta.results_path(args.name, args.save), out)


if __name__ == "__main__":
    main()
