"""Row mode: which rows an iterator yields, in which order, and its progress (item 2).

Rules: one iterator owns an ordered tuple of splits. It first *catches up*
(lagging splits, by (samples, split id), until all reach the maximum), then
runs *cycles*: one row from every owned split, in owned order. A cycle starts
only if every owned split can produce its next row; the first owned split that
cannot decides how iteration ends (exhausted -> end, raising row -> error).
Progress is per split: ``samples`` counts yielded rows, ``positions`` is one
past the permutation position of the last yielded row (so skipped rows *before*
a yielded row are counted, skipped rows after it are not). Splits the iterator
does not own keep the values they were loaded with.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar

from .errors import require
from .topology import Permutation, check_permutation


@dataclass(frozen=True)
class Faults:
    """Rows (by row id) whose transform fails: dropped (``skipped``) or re-raised (``raising``).

    ``on_transform_error="raise"`` puts every failing row in ``raising``;
    ``"skip"``/``"warn"`` put them in ``skipped``; a callable handler puts a row
    in ``skipped`` when it returns a truthy value for that row's error.
    """

    skipped: frozenset[int] = field(default_factory=frozenset)
    raising: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        require(not (self.skipped & self.raising), "faults_overlap", "a row cannot both skip and raise")


NO_FAULTS = Faults()


@dataclass(frozen=True)
class RowState:
    """Per-split progress of row mode: ``samples[s]`` yielded rows, ``positions[s]`` scanned."""

    samples: tuple[int, ...]
    positions: tuple[int, ...]

    def __post_init__(self) -> None:
        require(
            len(self.samples) == len(self.positions), "list_length", "samples and positions differ in length"
        )
        require(
            all(0 <= c <= p for c, p in zip(self.samples, self.positions)),
            "positions_below_samples",
            "every split needs 0 <= samples <= positions",
        )


def initial_row_state(num_splits: int) -> RowState:
    """The state of an epoch before any row is read."""
    zeros = (0,) * num_splits
    return RowState(zeros, zeros)


@dataclass(frozen=True)
class Yielded:
    """One yielded row: its split, permutation position and row id."""

    split: int
    position: int
    row_id: int


@dataclass(frozen=True)
class Exhausted:
    """Iteration ended normally (an owned split ran out of rows)."""


@dataclass(frozen=True)
class Raised:
    """Iteration ended by re-raising the transform error of one row."""

    split: int
    position: int
    row_id: int


End = Exhausted | Raised


StateT = TypeVar("StateT")


class Prefixes(Generic[StateT]):
    """The checkpoint after every prefix of one iterator's items (:class:`RowRun`,
    :class:`~.packing.PackedRun`): ``states[i]`` is the one right after item ``i``."""

    start: StateT
    states: tuple[StateT, ...]
    ITEMS: ClassVar[str]
    """What the iterator yields, as error messages name it."""

    def state_after(self, n: int) -> StateT:
        """The checkpoint after the consumer received ``n`` items."""
        require(
            0 <= n <= len(self.states),
            "prefix_out_of_range",
            f"cannot consume more {self.ITEMS} than yielded",
        )
        return self.start if n == 0 else self.states[n - 1]


@dataclass(frozen=True)
class RowRun(Prefixes[RowState]):
    """Everything one iterator yields: ``states[i]`` is the checkpoint right after ``rows[i]``."""

    start: RowState
    rows: tuple[Yielded, ...]
    states: tuple[RowState, ...]
    end: End
    ITEMS: ClassVar[str] = "rows"


@dataclass(frozen=True)
class NextRow:
    """What the next non-skipped position of a split holds."""

    kind: type[Yielded] | type[Exhausted] | type[Raised]
    position: int


def peek(split: Sequence[int], start: int, faults: Faults) -> NextRow:
    """The first position at or after ``start`` whose row is not skipped, and what it holds."""
    p = start
    while p < len(split) and split[p] in faults.skipped:
        p += 1
    if p == len(split):
        return NextRow(Exhausted, p)
    return NextRow(Raised if split[p] in faults.raising else Yielded, p)


def iterate_rows(perm: Permutation, faults: Faults, owned: Sequence[int], state: RowState) -> RowRun:
    """Run one row-mode iterator over ``owned`` splits from ``state`` to its end."""
    size = check_permutation(perm)
    require(len(state.samples) == len(perm), "list_length", "state must have one entry per split")
    require(all(p <= size for p in state.positions), "position_out_of_range", "positions beyond split end")
    require(
        list(owned) == sorted(set(owned)), "owned_not_sorted", "owned splits must be ascending and unique"
    )
    samples, positions = list(state.samples), list(state.positions)
    rows: list[Yielded] = []
    states: list[RowState] = []

    def take(s: int, p: int) -> None:
        samples[s] += 1
        positions[s] = p + 1
        rows.append(Yielded(s, p, perm[s][p]))
        states.append(RowState(tuple(samples), tuple(positions)))

    def finish(s: int, nxt: NextRow) -> RowRun:
        end: End = Exhausted() if nxt.kind is Exhausted else Raised(s, nxt.position, perm[s][nxt.position])
        return RowRun(state, tuple(rows), tuple(states), end)

    if not owned:
        return RowRun(state, (), (), Exhausted())
    target = max(samples[s] for s in owned)
    lagging = [(samples[s], s) for s in owned if samples[s] < target]
    heapq.heapify(lagging)
    while lagging:
        count, s = heapq.heappop(lagging)
        nxt = peek(perm[s], positions[s], faults)
        if nxt.kind is not Yielded:
            return finish(s, nxt)
        take(s, nxt.position)
        if count + 1 < target:
            heapq.heappush(lagging, (count + 1, s))
    while True:
        cycle: list[tuple[int, int]] = []
        for s in owned:
            nxt = peek(perm[s], positions[s], faults)
            if nxt.kind is not Yielded:
                return finish(s, nxt)
            cycle.append((s, nxt.position))
        for s, p in cycle:
            take(s, p)
