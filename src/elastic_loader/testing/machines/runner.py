"""Running a machine: explore, then shrink each violation to a minimal program.

:func:`check_invariants` runs a machine against an implementation and returns,
per checked invariant, ``None`` or the violation's text followed by the
program Hypothesis shrank it to.

Rules of this module: it is the only place in the suite that touches
Hypothesis internals, and each use is guarded and documented:

* :func:`shrink_limit` sets ``hypothesis.internal.conjecture.engine.MAX_SHRINKING_SECONDS``
  (Hypothesis's own limit is five minutes and not a public setting); when the
  constant is missing, shrinking runs without the limit.
* :func:`forced_seed` sets ``hypothesis.core.global_force_seed`` (what
  ``pytest --hypothesis-seed`` sets) for the runs inside; when it is missing, a
  seeded run raises ``RuntimeError`` instead of silently running unseeded.

``pyproject.toml`` pins Hypothesis below the first release not tested with them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import hypothesis.core
from hypothesis import Phase, settings
from hypothesis.errors import FlakyFailure
from hypothesis.internal.conjecture import engine as _engine
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from ...spec import invariants as inv
from ..adapters import Implementation
from ..tables import TableCache
from .differential import DifferentialMachine
from .judges import DIFFERENTIAL_CHECKED
from .mixture import MixtureMachine

Machine = type[DifferentialMachine] | type[MixtureMachine]
"""A conformance machine class: a single-table differential machine or the mixture machine."""


def checks(machine: Machine) -> tuple[str, ...]:
    """The invariants ``machine`` judges (the mixture machine's four, else the single-table ones)."""
    declared = getattr(machine, "checks", None)
    return declared if isinstance(declared, tuple) else DIFFERENTIAL_CHECKED


@contextlib.contextmanager
def shrink_limit(seconds: int | None) -> Iterator[None]:
    """Bound Hypothesis's shrinking time (an engine constant, not a public setting)."""
    if seconds is None or not hasattr(_engine, "MAX_SHRINKING_SECONDS"):
        yield
        return
    saved = _engine.MAX_SHRINKING_SECONDS
    _engine.MAX_SHRINKING_SECONDS = seconds
    try:
        yield
    finally:
        _engine.MAX_SHRINKING_SECONDS = saved


@contextlib.contextmanager
def forced_seed(seed: int | None) -> Iterator[None]:
    """Force Hypothesis's seed (what ``pytest --hypothesis-seed`` does) for the runs inside."""
    if seed is None:
        yield
        return
    if not hasattr(hypothesis.core, "global_force_seed"):
        raise RuntimeError(
            f"hypothesis {hypothesis.__version__} has no hypothesis.core.global_force_seed; "
            "a seeded conformance run needs a Hypothesis version that has it (see pyproject.toml)"
        )
    saved = hypothesis.core.global_force_seed
    hypothesis.core.global_force_seed = seed  # type: ignore[assignment]
    try:
        yield
    finally:
        hypothesis.core.global_force_seed = saved


_INVARIANT_CALL = re.compile(r"state\.[A-Z][A-Za-z]*(Inv|Prop)\(\)")


def violation(error: BaseException | None, seen: set[int] | None = None) -> inv.InvariantViolation | None:
    """The :class:`InvariantViolation` inside ``error`` (grouped, as its cause, or as its context)."""
    seen = set() if seen is None else seen
    if error is None or id(error) in seen:
        return None
    seen.add(id(error))
    if isinstance(error, inv.InvariantViolation):
        return error
    inner: list[BaseException | None] = list(getattr(error, "exceptions", None) or ())
    inner += [error.__cause__, error.__context__]
    for candidate in inner:
        found = violation(candidate, seen)
        if found is not None:
            return found
    return None


def check_invariants(
    machine: Machine,
    implementation: Implementation,
    tables: TableCache,
    *,
    settings_: settings | None = None,
    shrink: bool | Collection[str] = True,
    shrink_seconds: int | None = None,
) -> dict[str, str | None]:
    """Run ``machine`` against ``implementation``; report every checked invariant.

    A first run (generation only) records, without stopping, the first
    violation of every name. Then each violated name selected by ``shrink``
    (``True``: all of them) is searched again with only that name enforced, so
    Hypothesis shrinks it to a minimal program, which is appended to the text.

    Args:
        machine: :class:`RowMachine`, :class:`PackedMachine`, :class:`ProcessMachine`,
            another subclass of :class:`DifferentialMachine`, or the mixture machine.
        implementation: the implementation under test (see :mod:`.adapters`).
        tables: where the test tables live (reused across examples).
        settings_: Hypothesis settings (``max_examples``, ``stateful_step_count``,
            ``derandomize``...); the default profile when omitted.
        shrink: which violations to shrink.
        shrink_seconds: stop shrinking each violation after this long and report the
            smallest program found so far (Hypothesis's own limit is five minutes;
            every replay runs the implementation for real, so shrinking is the
            expensive part of a run).

    Returns:
        ``{name: None}`` for every name the machine judges (:func:`checks`) that held and
        ``{name: text}`` for every violation.
    """
    base = settings_ if settings_ is not None else settings()
    observed: dict[str, str] = {}
    explore = machine.bind(implementation, tables, enforced=frozenset(), observed=observed)
    run_state_machine_as_test(
        explore, settings=settings(base, phases=(Phase.explicit, Phase.generate), database=None)
    )
    results: dict[str, str | None] = {name: observed.get(name) for name in checks(machine)}
    selected = set(observed) if shrink is True else set(observed) & set(shrink or ())
    for name in sorted(selected):
        again = search_enforcing(machine, implementation, tables, name, base, shrink_seconds)
        results[name] = (
            f"{observed[name]}\n{NOT_REPRODUCED}" if again is None else shrunk_counterexample(again)
        )
    return results


NOT_REPRODUCED = "(not reproduced when searching again; not shrunk)"
"""Appended to the exploration's text of a violation that searching again did not find."""


@dataclass(frozen=True)
class Reproduced:
    """A violation that :func:`search_enforcing` found again."""

    found: inv.InvariantViolation
    error: Exception
    """What the run raised (the violation, or an error holding it)."""
    reported: list[object]
    """Hypothesis's report lines."""


def search_enforcing(
    machine: Machine,
    implementation: Implementation,
    tables: TableCache,
    name: str,
    base: settings,
    shrink_seconds: int | None,
) -> Reproduced | None:
    """Search again with only ``name`` enforced, so Hypothesis shrinks its violation.

    Returns the violation found, or ``None`` when the search did not find it again; an
    error that holds no violation propagates. Shrinking stops after ``shrink_seconds``.
    """
    reported: list[object] = []
    try:
        bound = machine.bind(implementation, tables, enforced=frozenset({name}))
        with shrink_limit(shrink_seconds), with_reporter(reported.append):
            run_state_machine_as_test(
                bound, settings=settings(base, database=None, report_multiple_bugs=False)
            )
    except Exception as error:
        found = violation(error)
        if found is None:
            raise
        return Reproduced(found, error, reported)
    return None


def shrunk_counterexample(again: Reproduced) -> str:
    """The violation's text, then the program Hypothesis shrank it to (from the error's notes)."""
    found, error, reported = again.found, again.error, again.reported
    notes = list(getattr(found, "__notes__", []) or getattr(error, "__notes__", []))
    program: list[str] = []
    for line in notes:
        if line.startswith("Explanation:"):
            break
        if not _INVARIANT_CALL.fullmatch(line):
            program.append(line)
    remarks = " (flaky: did not fail on every replay)" if isinstance(error, FlakyFailure) else ""
    if any("shrink" in str(line) for line in reported):
        remarks += " (shrinking stopped at its time limit; the program may not be minimal)"
    return f"{found.detail}{remarks}\n" + "\n".join(program)
