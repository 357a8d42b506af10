"""Command line of the machine checks: ``python -m proofs [--quick] [--only NAME ...]``.

Prints, per invariant, ``proved <lemma>`` for every SMT lemma and ``checked
up to <bounds>: N states`` for every bounded check, then a summary; exits 1
when a lemma is not proved or a bounded check finds a counterexample (both
are printed). ``--quick`` (or ``PROOFS_QUICK=1``) uses the small bounds that
``make test`` runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from elastic_loader.spec.invariants import INVARIANT_NAMES

from .framework import BoundedResult, LemmaResult, prove, run_bounded
from .registry import REGISTRY


@dataclass(frozen=True)
class Task:
    """One lemma or bounded check, by position in the registry (picklable)."""

    invariant: str
    kind: str
    index: int


def _run_task(task: Task, quick: bool, show_progress: bool) -> LemmaResult | BoundedResult:
    entry = REGISTRY[task.invariant]
    if task.kind == "lemma":
        return prove(entry.lemmas[task.index])
    return run_bounded(entry.bounded[task.index], quick, show_progress)


def _line(result: LemmaResult | BoundedResult) -> tuple[bool, str]:
    if isinstance(result, LemmaResult):
        lemma = result.lemma
        if result.proved:
            return True, f"  proved   {lemma.name}: {lemma.statement} (z3, {result.seconds:.2f} s)"
        return False, f"  FAILED   lemma {lemma.name}: {lemma.statement}\n    {result.detail}"
    text = f"checked up to {result.bounds_text}: {result.states} states"
    if result.failure is None:
        return True, f"  {text} ({result.seconds:.1f} s)"
    return (
        False,
        f"  FAILED   bounded check ({result.bounds_text}) after {result.states} states\n    {result.failure}",
    )


def _tasks(names: Sequence[str], smt: bool, bounded: bool) -> list[Task]:
    tasks: list[Task] = []
    for name in names:
        entry = REGISTRY[name]
        if smt:
            tasks += [Task(name, "lemma", i) for i in range(len(entry.lemmas))]
        if bounded:
            tasks += [Task(name, "bounded", i) for i in range(len(entry.bounded))]
    return tasks


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected checks; return the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m proofs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small bounds (also PROOFS_QUICK=1)")
    parser.add_argument(
        "--only", action="append", default=[], metavar="NAME", help="check only this invariant"
    )
    parser.add_argument("--smt-only", action="store_true", help="only the SMT lemmas")
    parser.add_argument("--bounded-only", action="store_true", help="only the bounded checks")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("PROOFS_QUICK", "") not in ("", "0")
    unknown = [n for n in args.only if n not in REGISTRY]
    if unknown:
        parser.error(f"unknown invariant(s) {unknown}; known: {', '.join(INVARIANT_NAMES)}")
    names = [n for n in INVARIANT_NAMES if not args.only or n in args.only]
    tasks = _tasks(names, smt=not args.bounded_only, bounded=not args.smt_only)
    show_progress = not args.no_progress and args.jobs == 1 and sys.stderr.isatty()

    print(f"machine checks of {len(names)} invariants, {'quick' if quick else 'full'} bounds", flush=True)
    start = time.perf_counter()
    failures = proved = states = checks = 0
    results: dict[Task, LemmaResult | BoundedResult] = {}
    pool = ProcessPoolExecutor(args.jobs) if args.jobs > 1 else None
    futures = {t: pool.submit(_run_task, t, quick, False) for t in tasks} if pool else {}
    try:
        for name in names:
            print(name, flush=True)
            for task in (t for t in tasks if t.invariant == name):
                result = futures[task].result() if pool else _run_task(task, quick, show_progress)
                results[task] = result
                ok, text = _line(result)
                print(text, flush=True)
                failures += not ok
                if isinstance(result, LemmaResult):
                    proved += result.proved
                else:
                    checks += 1
                    states += result.states
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    elapsed = time.perf_counter() - start
    print(
        f"summary: {len(names)} invariants, {proved} lemmas proved, {checks} bounded checks, "
        f"{states} states, {failures} failure(s), {elapsed:.1f} s",
        flush=True,
    )
    return 1 if failures else 0
