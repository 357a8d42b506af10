"""The conformance report: the verdicts, and how they are rendered (text table, JSON).

Rules of this module: the report is frozen data, in
:data:`~elastic_loader.spec.invariants.INVARIANT_NAMES` order and vector
family order; rendering never changes it, and the JSON form
(:meth:`ConformanceReport.to_dict`) is what ``--json`` writes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ...spec.invariants import INVARIANT_NAMES
from ..vectors.codec import Json, JsonObject
from .resolve import MACHINES

InvariantStatus = Literal["pass", "fail", "not-checked", "not-applicable"]
"""``not-checked``: no selected machine observes it (or none can); ``not-applicable``: the
implementation lacks the feature it concerns (no mixtures), so the machine that checks it did not run."""
VectorStatus = Literal["pass", "fail", "not-applicable"]


@dataclass(frozen=True)
class InvariantResult:
    """The verdict on one named invariant."""

    name: str
    status: InvariantStatus
    counterexample: str | None = None
    """The violation and the minimal program that shows it (``status == "fail"``)."""
    machine: str | None = None
    """The machine whose counterexample is shown."""
    found_by: tuple[str, ...] = ()
    """Every machine whose exploration found a violation."""
    checked_by: tuple[str, ...] = ()
    """The selected machines that exercise this invariant."""
    note: str | None = None
    """Why the invariant was not checked, or is not applicable."""


@dataclass(frozen=True)
class VectorCaseResult:
    """A vector case that failed or could not be run, and why."""

    case: str
    detail: str


@dataclass(frozen=True)
class VectorResult:
    """The verdict on one vector family."""

    family: str
    status: VectorStatus
    passed: int = 0
    failures: tuple[VectorCaseResult, ...] = ()
    skipped: tuple[VectorCaseResult, ...] = ()
    """Cases of an applicable family that this implementation cannot run, with the reason."""
    note: str = ""
    """How the family is run, or why it is not applicable."""


@dataclass(frozen=True)
class MachineRun:
    """How one machine was run."""

    machine: str
    examples: int
    steps: int
    derandomized: bool
    seconds: float


@dataclass(frozen=True)
class ConformanceReport:
    """Everything :func:`run_conformance` found, in :data:`INVARIANT_NAMES` and family order."""

    implementation: str
    invariants: tuple[InvariantResult, ...]
    vectors: tuple[VectorResult, ...]
    runs: tuple[MachineRun, ...]
    seed: int | None
    shrink: bool
    shrink_seconds: int | None
    started: str
    """When the run started (UTC, ISO 8601)."""
    seconds: float
    versions: tuple[tuple[str, str], ...]
    vectors_source: str = ""

    @property
    def passed(self) -> bool:
        """No invariant and no vector family failed."""
        return not self.violated() and not any(v.status == "fail" for v in self.vectors)

    def result(self, name: str) -> InvariantResult:
        """The result of invariant ``name``."""
        for result in self.invariants:
            if result.name == name:
                return result
        raise KeyError(name)

    def violated(self) -> tuple[str, ...]:
        """The names of the failed invariants."""
        return tuple(r.name for r in self.invariants if r.status == "fail")

    def vector_failures(self) -> dict[str, tuple[str, ...]]:
        """Family -> names of its failed cases (families without failures omitted)."""
        return {v.family: tuple(f.case for f in v.failures) for v in self.vectors if v.failures}

    def to_dict(self) -> JsonObject:
        """The report as JSON-ready data (``to_json`` writes exactly this)."""

        def cases(items: Sequence[VectorCaseResult]) -> list[Json]:
            return [{"case": c.case, "detail": c.detail} for c in items]

        return {
            "implementation": self.implementation,
            "passed": self.passed,
            "started": self.started,
            "seconds": round(self.seconds, 1),
            "settings": {
                "machines": [
                    {
                        "machine": r.machine,
                        "examples": r.examples,
                        "steps": r.steps,
                        "derandomized": r.derandomized,
                        "seconds": round(r.seconds, 1),
                    }
                    for r in self.runs
                ],
                "seed": self.seed,
                "shrink": self.shrink,
                "shrink_seconds": self.shrink_seconds,
            },
            "versions": {name: version for name, version in self.versions},
            "invariants": [
                {
                    "name": r.name,
                    "status": r.status,
                    "machine": r.machine,
                    "found_by": list(r.found_by),
                    "checked_by": list(r.checked_by),
                    "counterexample": r.counterexample,
                    "note": r.note,
                }
                for r in self.invariants
            ],
            "vectors_source": self.vectors_source,
            "vectors": [
                {
                    "family": v.family,
                    "status": v.status,
                    "passed": v.passed,
                    "failures": cases(v.failures),
                    "skipped": cases(v.skipped),
                    "note": v.note,
                }
                for v in self.vectors
            ],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent) + "\n"

    def to_table(self, *, counterexamples: bool = True, width: int = 100) -> str:
        """A plain-text report: the per-invariant table, the vector table, then the counterexamples."""
        lines = [*self._heading(), "", *_invariant_rows(self.invariants, width)]
        if self.vectors:
            lines += ["", *_vector_rows(self.vectors, width)]
        failed = [r for r in self.invariants if r.status == "fail"]
        checked = sum(1 for r in self.invariants if r.status in ("pass", "fail"))
        inapplicable = sum(1 for r in self.invariants if r.status == "not-applicable")
        lines.append("")
        lines.append(
            f"{checked - len(failed)} of {checked} checked invariants hold, {len(failed)} violated, "
            f"{len(self.invariants) - checked - inapplicable} not checked, {inapplicable} not applicable; "
            f"vector families: {sum(v.status == 'fail' for v in self.vectors)} failing"
        )
        lines.append("PASSED" if self.passed else "FAILED")
        if counterexamples:
            lines += _counterexamples(failed, self.vectors)
        return "\n".join(lines) + "\n"

    def _heading(self) -> list[str]:
        runs = ", ".join(f"{r.machine} {r.examples}x{r.steps}" for r in self.runs) or "none"
        mode = "derandomized" if self.seed is None else f"seed {self.seed}"
        shrink = (
            "off"
            if not self.shrink
            else ("on" if self.shrink_seconds is None else f"<= {self.shrink_seconds}s per violation")
        )
        return [
            f"Conformance of {self.implementation} to the elastic-loader spec",
            f"machines (examples x steps): {runs}; {mode}; shrinking {shrink}",
            f"started {self.started}, {self.seconds:.0f}s",
        ]


def _invariant_rows(results: Sequence[InvariantResult], width: int) -> list[str]:
    name_w = max(len(n) for n in INVARIANT_NAMES)
    lines = [f"{'invariant':<{name_w}}  {'status':<14}  {'machine':<8}  detail"]
    lines.append(f"{'-' * name_w}  {'-' * 14}  {'-' * 8}  {'-' * 30}")
    for r in results:
        status = {
            "pass": "pass",
            "fail": "FAIL",
            "not-checked": "not checked",
            "not-applicable": "not applicable",
        }[r.status]
        if r.status == "fail":
            detail = first_line(r.counterexample or "", width - name_w - 28)
        elif r.status == "pass":
            detail = "checked by " + ", ".join(r.checked_by)
        else:
            detail = r.note or ""
        lines.append(f"{r.name:<{name_w}}  {status:<14}  {r.machine or '-':<8}  {detail}")
    return lines


def _vector_rows(results: Sequence[VectorResult], width: int) -> list[str]:
    fam_w = max(len("vectors"), *(len(v.family) for v in results))
    lines = [f"{'vectors':<{fam_w}}  {'status':<14}  cases"]
    lines.append(f"{'-' * fam_w}  {'-' * 14}  {'-' * 30}")
    for v in results:
        status = {"fail": "FAIL"}.get(v.status, v.status)
        if v.status in ("pass", "fail"):
            total = v.passed + len(v.failures)
            detail = f"{v.passed}/{total} pass"
            if v.skipped:
                detail += f", {len(v.skipped)} not applicable"
        else:
            detail = first_line(v.note, width - fam_w - 20)
        lines.append(f"{v.family:<{fam_w}}  {status:<14}  {detail}")
    return lines


def _counterexamples(failed: Sequence[InvariantResult], vectors: Sequence[VectorResult]) -> list[str]:
    lines: list[str] = []
    for r in failed:
        cls = MACHINES.get(r.machine or "")
        machine = cls.__name__ if cls is not None else str(r.machine)
        lines += ["", f"=== {r.name} ({machine}; found by {', '.join(r.found_by)}) ==="]
        lines.append(r.counterexample or "")
    for v in vectors:
        for failure in v.failures:
            lines += ["", f"=== vector {v.family}/{failure.case} ===", failure.detail]
    return lines


def first_line(text: str, limit: int) -> str:
    """The first line of ``text``, cut to ``limit`` (at least 20) characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    limit = max(limit, 20)
    return line if len(line) <= limit else line[: limit - 3] + "..."
