"""Progress of a conformance run: events for progress bars, counted per Hypothesis example.

Rules of this module: progress is reported, never required (a ``None``
callback costs nothing); a counted machine keeps the name, qualified name and
module of the machine it counts, so printed programs replay and Hypothesis
derives the same derandomized seed from the class's source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from ..machines.runner import Machine


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a run, for progress bars.

    ``machine`` is a key of :data:`MACHINES` or ``"vectors"``; ``phase`` is
    ``"explore"``, ``"shrink <Invariant>"`` or a vector family. ``total`` is
    ``None`` when unknown (shrinking). The last event of a phase has
    ``finished=True``.
    """

    machine: str
    phase: str
    done: int
    total: int | None
    unit: str
    finished: bool = False


ProgressCallback = Callable[[ProgressEvent], None]


class Ticker:
    """Turns machine instantiations (one per Hypothesis example) into :class:`ProgressEvent` values."""

    def __init__(self, machine: str, total: int, progress: ProgressCallback | None) -> None:
        self.machine, self.total, self.progress = machine, total, progress
        self.phase: str | None = None
        self.done = 0

    def tick(self, enforced: frozenset[str]) -> None:
        phase = "explore" if not enforced else "shrink " + ", ".join(sorted(enforced))
        if phase != self.phase:
            self.close()
            self.phase, self.done = phase, 0
        self.done += 1
        self._emit(False)

    def close(self) -> None:
        if self.phase is not None:
            self._emit(True)
        self.phase = None

    def _emit(self, finished: bool) -> None:
        if self.progress is None or self.phase is None:
            return
        explore = self.phase == "explore"
        # Hypothesis may start a few more machines than max_examples (discarded examples).
        done = min(self.done, self.total) if explore else self.done
        self.progress(
            ProgressEvent(
                self.machine,
                self.phase,
                done,
                self.total if explore else None,
                "examples" if explore else "runs",
                finished,
            )
        )


def counted(machine: Machine, ticker: Ticker) -> Machine:
    """A subclass of ``machine`` (same name, so printed programs replay) that reports each example."""

    def __init__(self: Any) -> None:
        machine.__init__(self)
        ticker.tick(self.enforced)

    attrs: dict[str, object] = {
        "__init__": __init__,
        "__qualname__": machine.__qualname__,
        "__module__": machine.__module__,
        "__doc__": machine.__doc__,
    }
    return cast(Machine, type(machine.__name__, (machine,), attrs))
