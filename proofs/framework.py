"""Machinery shared by every machine check: SMT lemmas, bounded checks, the recorder, results.

Two kinds of check exist for an invariant:

* a :class:`Lemma` is a list of proof obligations over unbounded integers
  (sequences, arrays). Each obligation is a z3 formula whose free constants are
  universally quantified; it is *proved* when its negation is unsatisfiable.
  Induction over ``n`` is spelled out as two obligations (base and step), each
  discharged by the solver.
* a :class:`BoundedCheck` enumerates every configuration up to some bounds, runs
  the executable spec and applies the invariant predicate of
  ``elastic_loader.spec.invariants`` to every reached state, through a
  :class:`Recorder` that counts the evaluations and remembers where it is.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import z3

from elastic_loader.spec.invariants import InvariantViolation

T = TypeVar("T")

Obligation = tuple[str, z3.BoolRef]
"""A label and a formula that must be valid (true for every value of its free constants)."""

SOLVER_TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class Lemma:
    """An unbounded statement about the arithmetic core of an invariant."""

    invariant: str
    name: str
    statement: str
    obligations: Callable[[], Sequence[Obligation]]


@dataclass(frozen=True)
class LemmaResult:
    """The outcome of proving every obligation of one lemma."""

    lemma: Lemma
    proved: bool
    seconds: float
    detail: str = ""


def prove(lemma: Lemma, timeout_ms: int = SOLVER_TIMEOUT_MS) -> LemmaResult:
    """Discharge every obligation of ``lemma``: each negation must be unsatisfiable.

    A satisfiable negation is a counterexample (its model is reported); an
    ``unknown`` answer (timeout, incompleteness) counts as a failure too.
    """
    start = time.perf_counter()
    solver = z3.Solver()
    solver.set(timeout=timeout_ms)
    for label, formula in lemma.obligations():
        vacuous = _vacuous(solver, formula)
        if vacuous:
            return LemmaResult(lemma, False, time.perf_counter() - start, f"obligation {label!r}: {vacuous}")
        solver.push()
        solver.add(z3.Not(formula))
        answer = solver.check()
        if answer == z3.unsat:
            solver.pop()
            continue
        if answer == z3.sat:
            detail = f"obligation {label!r} is false; counterexample: {solver.model()}"
        else:
            detail = f"obligation {label!r}: solver answered unknown ({solver.reason_unknown()})"
        return LemmaResult(lemma, False, time.perf_counter() - start, detail)
    return LemmaResult(lemma, True, time.perf_counter() - start)


def _vacuous(solver: z3.Solver, formula: z3.BoolRef) -> str:
    """Guard against proofs from contradictory assumptions: the hypotheses of ``A => B`` must be satisfiable.

    Returns an explanation when they are not (or when the solver cannot tell), else ``""``.
    """
    if not z3.is_implies(formula):
        return ""
    solver.push()
    solver.add(formula.arg(0))
    answer = solver.check()
    solver.pop()
    if answer == z3.sat:
        return ""
    return (
        f"its hypotheses are {'contradictory' if answer == z3.unsat else 'not shown satisfiable'} (vacuous)"
    )


def induction(
    label: str, n: z3.ArithRef, claim: Callable[[z3.ArithRef], z3.BoolRef], base: int = 0
) -> list[Obligation]:
    """Obligations for ``claim(n)`` for every integer ``n >= base``: base case and inductive step."""
    return [
        (f"{label}: base n={base}", claim(z3.IntVal(base))),
        (f"{label}: step n -> n+1", z3.Implies(z3.And(n >= base, claim(n)), claim(n + 1))),
    ]


class ModelCheckFailure(AssertionError):
    """A bounded check found the model disagreeing with an expectation other than a predicate."""


class Recorder:
    """Counts predicate evaluations of one bounded check and remembers the current configuration.

    ``at(key=value, ...)`` records where the enumeration is; setting a key
    forgets every key recorded after it, so nested loops keep an accurate
    description. On a failure the description is the counterexample's
    configuration.
    """

    def __init__(self, invariant: str, show_progress: bool = False) -> None:
        self.invariant = invariant
        self.states = 0
        self.context: dict[str, object] = {}
        self.show_progress = show_progress

    def at(self, **where: object) -> None:
        """Record the configuration of the current enumeration level."""
        first = next(iter(where))
        if first in self.context:
            keys = list(self.context)
            for key in keys[keys.index(first) :]:
                del self.context[key]
        self.context.update(where)

    def apply(self, predicate: Callable[..., None], *args: object) -> None:
        """Evaluate one invariant predicate (it raises ``InvariantViolation`` when it fails)."""
        self.states += 1
        predicate(*args)

    def require(self, condition: bool, detail: str | Callable[[], str]) -> None:
        """A model expectation that is not an invariant predicate (agreement with a lemma's encoding)."""
        if not condition:
            raise ModelCheckFailure(detail() if callable(detail) else detail)

    def progress(self, items: Iterable[T], label: str = "") -> Iterator[T]:
        """Iterate ``items``, with a progress bar on a terminal."""
        if not self.show_progress:
            yield from items
            return
        from tqdm import tqdm

        materialised = list(items)
        desc = f"{self.invariant} {label}".strip()
        yield from tqdm(materialised, desc=desc, leave=False, file=sys.stderr, dynamic_ncols=True)

    def where(self) -> str:
        """The current configuration as ``key=value`` pairs."""
        return ", ".join(f"{k}={v!r}" for k, v in self.context.items())


Bounds = Mapping[str, int]


@dataclass(frozen=True)
class BoundedCheck:
    """Exhaustive enumeration of the executable spec up to ``bounds``, for one invariant."""

    invariant: str
    describe: str
    """How the bounds read, as a ``str.format`` template over the bound names."""
    quick: Bounds
    full: Bounds
    run: Callable[[Recorder, Bounds], None]

    def bounds(self, quick: bool) -> Bounds:
        """The bounds of the chosen mode."""
        return self.quick if quick else self.full


@dataclass(frozen=True)
class BoundedResult:
    """The outcome of one bounded check."""

    check: BoundedCheck
    bounds_text: str
    states: int
    seconds: float
    failure: str | None = None


def run_bounded(check: BoundedCheck, quick: bool, show_progress: bool = False) -> BoundedResult:
    """Run ``check``; a predicate violation or model error becomes a reported counterexample."""
    bounds = check.bounds(quick)
    text = check.describe.format(**bounds)
    recorder = Recorder(check.invariant, show_progress)
    start = time.perf_counter()
    failure: str | None = None
    try:
        check.run(recorder, bounds)
    except (InvariantViolation, ModelCheckFailure) as exc:
        failure = f"{type(exc).__name__}: {exc}\n    configuration: {recorder.where()}"
    except Exception as exc:  # the model raised where it must not: report it with its configuration
        tb = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        failure = f"unexpected {tb}\n    configuration: {recorder.where()}"
    return BoundedResult(check, text, recorder.states, time.perf_counter() - start, failure)
