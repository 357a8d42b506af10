"""The conformance run: every selected machine, then the vectors, into one report.

Rules of this module: machines run in the given order; every violated
invariant is shrunk once, in the first machine that shrinks it (a violation
another machine could not shrink is shrunk again by the next); an invariant
that none of the selected machines exercises is reported *not checked*, never
*pass*; an invariant that only a machine which does not apply to the implementation checks
(the mixture machine, on an implementation without mixtures) is reported *not applicable*,
whichever machines were selected. While running, warnings and log records below ``ERROR`` are silenced
(the reference logs one warning per skipped batch); the machines' tables live
in a temporary directory unless ``tables_dir`` is given.
"""

from __future__ import annotations

import contextlib
import datetime
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from hypothesis import settings as Settings
from hypothesis.errors import FlakyStrategyDefinition

from ...spec.invariants import INVARIANT_NAMES
from .. import defaults
from ..adapters import Implementation, accepts
from ..machines import NOT_CHECKED
from ..machines.runner import (
    NOT_REPRODUCED,
    Machine,
    check_invariants,
    forced_seed,
    search_enforcing,
    shrunk_counterexample,
)
from ..tables import TableCache
from .black_box import run_vectors
from .progress import ProgressCallback, Ticker, counted
from .report import ConformanceReport, InvariantResult, MachineRun, VectorResult
from .resolve import (
    DEFAULT_MACHINES,
    MACHINES,
    ImplementationLike,
    exercised,
    machine_settings,
    not_applicable,
    quiet,
    resolve_implementation,
    versions,
)


def run_conformance(
    implementation: ImplementationLike,
    *,
    settings: Settings | Mapping[str, Settings] | None = None,
    machines: Sequence[str] = DEFAULT_MACHINES,
    tables_dir: Path | str | None = None,
    shrink: bool = True,
    shrink_seconds: int | None = defaults.SHRINK_SECONDS,
    seed: int | None = None,
    vectors: bool = True,
    vectors_dir: Path | str | None = None,
    progress: ProgressCallback | None = None,
) -> ConformanceReport:
    """Run the conformance suite against ``implementation``; report per invariant and per vector family.

    Args:
        implementation: what to test (see :data:`ImplementationLike`), e.g. ``"lancedb.streaming"``,
            ``"elastic_loader"``, ``"mypkg.streaming:make_impl"`` or an ``Implementation`` object.
        settings: Hypothesis settings for every machine, or per machine key; the
            defaults of :func:`conformance_settings` for machines not given.
        machines: keys of :data:`MACHINES` to run, in order (the first machine that
            finds a violation shrinks it).
        tables_dir: where to build the LanceDB test tables (a temporary directory
            when omitted, removed afterwards).
        shrink: shrink every violation to a minimal program (each replay runs the
            implementation for real: this is the expensive part of a failing run).
        shrink_seconds: stop shrinking one violation after this long and report the
            smallest program found so far (``None``: Hypothesis's own limit).
        seed: run with this Hypothesis seed instead of derandomized.
        vectors: also replay the applicable vector families.
        vectors_dir: where the vectors are (default: ``spec/vectors`` of the
            checkout, or ``$ELASTIC_LOADER_VECTORS``); when no files are found the
            cases are generated from the spec in memory (byte-identical, as
            ``tests/conformance/test_vectors.py`` checks).
        progress: called with a :class:`ProgressEvent` for every example and case.

    Raises:
        ValueError: an unknown machine key.
        ImportError, AttributeError, TypeError: ``implementation`` cannot be resolved.
    """
    chosen = machine_settings(settings, machines, seed)
    impl = resolve_implementation(implementation)
    started = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    clock = time.monotonic()
    with contextlib.ExitStack() as stack:
        if tables_dir is None:
            temporary = tempfile.TemporaryDirectory(prefix="elastic-loader-conformance-")
            tables_dir = stack.enter_context(temporary)
        directory = Path(tables_dir)
        stack.enter_context(quiet())
        stack.enter_context(forced_seed(seed))
        tables = TableCache(directory)
        inapplicable = {k: why for k in MACHINES if (why := not_applicable(k, impl)) is not None}
        runnable = {k: s for k, s in chosen.items() if k not in inapplicable}
        found, shown, runs = _run_machines(impl, tables, runnable, shrink, shrink_seconds, progress)
        vector_results: tuple[VectorResult, ...] = ()
        source = ""
        if vectors:
            vector_results, source = run_vectors(impl, directory / "vectors", vectors_dir, progress)
    return ConformanceReport(
        implementation=impl.name,
        invariants=_invariant_results(
            [k for k in machines if k in runnable],
            found,
            shown,
            _unexercised(impl),
            _inapplicable(inapplicable),
        ),
        vectors=vector_results,
        runs=tuple(runs),
        seed=seed,
        shrink=shrink,
        shrink_seconds=shrink_seconds if shrink else None,
        started=started,
        seconds=time.monotonic() - clock,
        versions=versions(impl),
        vectors_source=source,
    )


def _run_machines(
    impl: Implementation,
    tables: TableCache,
    chosen: Mapping[str, Settings],
    shrink: bool,
    shrink_seconds: int | None,
    progress: ProgressCallback | None,
) -> tuple[dict[str, dict[str, str | None]], dict[str, str], list[MachineRun]]:
    """Run every chosen machine in order: what each found, whose counterexample is shown, how each ran.

    ``shown`` maps an invariant to the machine whose counterexample is shown: the
    first that shrank it, else the first that found it.
    """
    found: dict[str, dict[str, str | None]] = {}
    shown: dict[str, str] = {}
    shrunk: set[str] = set()
    runs: list[MachineRun] = []
    for key, machine_settings_ in chosen.items():
        ticker = Ticker(key, machine_settings_.max_examples, progress)
        begin = time.monotonic()
        machine = counted(MACHINES[key], ticker)
        try:
            results = check_invariants(machine, impl, tables, settings_=machine_settings_, shrink=False)
            for name in sorted(n for n, text in results.items() if text):
                shown.setdefault(name, key)
                if not shrink or name in shrunk:
                    continue
                text, done = _shrink_one(
                    machine, impl, tables, name, machine_settings_, shrink_seconds, results[name] or ""
                )
                results[name] = text
                if done:
                    shrunk.add(name)
                    shown[name] = key
        finally:
            ticker.close()
        found[key] = results
        runs.append(
            MachineRun(
                key,
                machine_settings_.max_examples,
                machine_settings_.stateful_step_count,
                machine_settings_.derandomize,
                time.monotonic() - begin,
            )
        )
    return found, shown, runs


def _shrink_one(
    machine: Machine,
    implementation: Implementation,
    tables: TableCache,
    name: str,
    base: Settings,
    seconds: int | None,
    explored: str,
) -> tuple[str, bool]:
    """Search ``name`` again with only it enforced; Hypothesis shrinks the failing program.

    Like the shrinking step of :func:`~elastic_loader.testing.machines.check_invariants`,
    and also robust to implementations whose behaviour varies between replays
    (``FlakyStrategyDefinition``: the replay stopped at another step): then the
    violation is reported as found during exploration, marked as not shrunk.

    Returns:
        The counterexample text, and whether it holds a shrunk program.
    """
    again = search_enforcing(machine, implementation, tables, name, base, seconds)
    if again is None:
        return f"{explored}\n{NOT_REPRODUCED}", False
    if isinstance(again.error, FlakyStrategyDefinition):
        return (
            f"{explored}\n(not shrunk: the implementation behaved differently when the program was "
            "replayed, so Hypothesis could not replay it; timing-dependent behaviour)",
            False,
        )
    return shrunk_counterexample(again), True


PERMUTATION_INVARIANTS = (
    "ComputedBijectionInv",
    "LocalBijectionInv",
    "LocalLocalityInv",
    "LocalDegeneracyInv",
)
"""Invariants of the opt-in permutations: the machines draw them only for a ``permutation=`` keyword."""


def _unexercised(impl: Implementation) -> dict[str, str]:
    """Invariants no machine can exercise on ``impl`` (it lacks the option they concern), with why."""
    if accepts(impl, "permutation"):
        return {}
    why = "the implementation's StreamingDataset has no permutation= keyword (the machines read the builder)"
    return dict.fromkeys(PERMUTATION_INVARIANTS, why)


def _inapplicable(machines: Mapping[str, str]) -> dict[str, str]:
    """The invariants that only machines which do not apply to the implementation check, with why."""
    out: dict[str, str] = {}
    for key, why in machines.items():
        others = set().union(*(exercised(k) for k in MACHINES if k not in machines))
        for name in sorted(exercised(key) - others):
            out[name] = f"{why}; only the {key} machine checks it"
    return out


def _invariant_results(
    machines: Sequence[str],
    found: Mapping[str, Mapping[str, str | None]],
    shown: Mapping[str, str],
    unexercised: Mapping[str, str],
    inapplicable: Mapping[str, str],
) -> tuple[InvariantResult, ...]:
    out: list[InvariantResult] = []
    for name in INVARIANT_NAMES:
        if name in inapplicable:
            out.append(InvariantResult(name, "not-applicable", note=inapplicable[name]))
            continue
        reason = NOT_CHECKED.get(name) or unexercised.get(name)
        if reason is not None and not any(found.get(k, {}).get(name) for k in machines):
            out.append(InvariantResult(name, "not-checked", note=reason))
            continue
        checked_by = tuple(k for k in machines if name in exercised(k))
        found_by = tuple(k for k in machines if found.get(k, {}).get(name))
        if found_by:
            machine = shown.get(name, found_by[0])
            out.append(InvariantResult(name, "fail", found[machine][name], machine, found_by, checked_by))
        elif checked_by:
            out.append(InvariantResult(name, "pass", checked_by=checked_by))
        else:
            owners = [k for k in MACHINES if name in exercised(k)]
            note = "none of the machines run exercises it; " + " or ".join(owners) + " does"
            out.append(InvariantResult(name, "not-checked", note=note))
    return tuple(out)
