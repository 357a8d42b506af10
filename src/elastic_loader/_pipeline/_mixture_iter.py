"""One iterator over a mixture's owned (virtual) splits: catch-up, then global cycles.

Rules (spec/MIXTURES.md, "Virtual splits"):

* Lagging owned splits catch up one item at a time in ``(cycles, split)`` order; then every
  global cycle ``u`` takes one item of every owned split from the scheduled source epoch
  ``(source[u], epoch[u])``, in split order.
* Items come from single-table ``_session.Session``s of the source epochs, each started from that
  source epoch's progress in the mixture state: one session per source epoch over all owned splits
  for the global cycles (their counts are equal once the splits are level), and one per
  ``(source epoch, split)`` while catching up. A session's items are exactly its table's.
* A global cycle is taken whole before its first item is yielded: when a split of the scheduled
  source has no item left (skipped rows) the iterator ends there without a partial cycle, and a
  transform error raises before any item of its cycle, as the spec's iterator does.
* The progress after every yielded item is exact (:meth:`MixtureCursor.state`): per split its
  global cycles, per source epoch the single-table progress after the item (the session's values
  for the owned splits after the cycle's items so far; rows: a split's values change only with its
  own row, so the cycle's end values are taken once per cycle).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any

from ._checkpoint import PackedState, State
from ._mixture_schedule import Schedule
from ._mixture_source import SourceReader
from ._mixture_state import MixState, Value, assemble, canonical, value
from ._session import Session
from ._stats import Counters


class MixtureCursor:
    """The live progress of one mixture iterator."""

    def __init__(self, schedule: Schedule, readers: Sequence[SourceReader], start: MixState) -> None:
        self.schedule, self.readers = schedule, readers
        self.cycles = list(start.cycles)
        self.entries: dict[tuple[int, int], State] = dict(start.entries)
        self.packed = readers[0].settings.packed
        # the cycle being handed out: its key and splits, the source epoch's progress before it and
        # after each of its items (rows: after the whole cycle); full-length states, never mutated
        self._key: tuple[int, int] | None = None
        self.splits: tuple[int, ...] = ()
        self._before: State | None = None
        self._after: list[State] = []
        self.handed = 0

    def entry(self, key: tuple[int, int]) -> State:
        self._settle()
        found = self.entries.get(key)
        return self.readers[key[0]].empty() if found is None else found

    def begin(self, key: tuple[int, int], splits: tuple[int, ...], before: State, after: list[State]) -> None:
        """A cycle of ``splits`` from source epoch ``key``: ``after[i]`` is the session's progress after
        its ``i``-th item (rows: one progress, after the whole cycle)."""
        self._settle()
        self._key, self.splits, self.handed = key, splits, 0
        self._before, self._after = before, after

    def _settle(self) -> None:
        """The cycle in hand was handed out whole: its source epoch's progress is the last one."""
        if self._key is not None:
            self.entries[self._key] = self._after[-1]
            self._key = None

    def _merged(self) -> State:
        """The cycle's source epoch after ``handed`` of its items."""
        assert self._key is not None and self._before is not None
        handed, before = self.handed, self._before
        if self.packed:
            return self._after[handed - 1] if handed else before
        last = self._after[-1]
        values = [value(before, s) for s in range(len(self.cycles))]
        for s in self.splits[:handed]:
            values[s] = value(last, s)
        return assemble(values, False)

    def state(self) -> MixState:
        """The canonical state after the last yielded item."""
        entries = dict(self.entries)
        if self._key is not None:
            entries[self._key] = self._merged()

        def current(k: int, e: int, s: int) -> Value | None:
            entry = entries.get((k, e))
            return None if entry is None else value(entry, s)

        return canonical(self.schedule, self.readers, self.cycles, current)


class MixtureIterator:
    """The items of ``owned`` splits from ``start`` (see the module rules)."""

    def __init__(
        self,
        schedule: Schedule,
        readers: Sequence[SourceReader],
        owned: list[int],
        start: MixState,
        counters: Counters,
        label: Any,
    ) -> None:
        self.schedule, self.readers, self.owned, self.counters = schedule, readers, owned, counters
        self.cursor = MixtureCursor(schedule, readers, start)
        self.start = list(start.cycles)
        self.label = label
        self.sessions: dict[tuple[int, int, tuple[int, ...]], tuple[Session, Iterator[Any]]] = {}

    def handed(self) -> int:
        """Items yielded so far."""
        cycles = self.cursor.cycles
        return sum(cycles[s] - self.start[s] for s in self.owned)

    def items(self) -> Iterator[Any]:
        try:
            yield from self._items()
        finally:
            self.close()

    def _items(self) -> Iterator[Any]:
        owned, cycles = self.owned, self.cursor.cycles
        if not owned:
            return
        top = max(cycles[s] for s in owned)
        lagging = [(cycles[s], s) for s in owned if cycles[s] < top]
        heapq.heapify(lagging)
        while lagging:
            g, s = heapq.heappop(lagging)
            got = self._cycle((s,), g)
            if got is None:
                return
            yield from self._hand_out(self.schedule.source[g], got)
            if g + 1 < top:
                heapq.heappush(lagging, (g + 1, s))
        self.close()  # the catch-up sessions
        splits = tuple(owned)
        while True:
            u = cycles[owned[0]]
            got = self._cycle(splits, u)
            if got is None:
                return
            yield from self._hand_out(self.schedule.source[u], got)

    def _hand_out(self, source: int, got: list[Any]) -> Iterator[Any]:
        label, cursor = self.label, self.cursor
        cycles, splits = cursor.cycles, cursor.splits
        for i, item in enumerate(got):
            out = label(source, item)
            cycles[splits[i]] += 1
            cursor.handed = i + 1
            yield out

    def _session(self, key: tuple[int, int], splits: tuple[int, ...]) -> tuple[Session, Iterator[Any]]:
        found = self.sessions.get((*key, splits))
        if found is None:
            k, e = key
            session = self.readers[k].session(e, list(splits), self.cursor.entry(key), self.counters)
            found = (session, session.items())
            self.sessions[(*key, splits)] = found
        return found

    def _cycle(self, splits: tuple[int, ...], u: int) -> list[Any] | None:
        """The items of global cycle ``u`` for ``splits`` (``None``: the iterator ends)."""
        if u >= len(self.schedule):
            return None
        key = (self.schedule.source[u], self.schedule.epoch[u])
        before = self.cursor.entry(key)
        session, it = self._session(key, splits)
        after: list[State] = []
        if isinstance(before, PackedState):  # the state after every block of the cycle
            got: list[Any] = []
            for _ in splits:
                item = next(it, _END)
                if item is _END:
                    return None
                got.append(item)
                after.append(session.progress(before))
        else:  # rows: a split's values change with its own row only, one state after the cycle
            got = list(islice(it, len(splits)))
            if len(got) < len(splits):
                return None
            after.append(session.progress(before))
        self.cursor.begin(key, splits, before, after)
        return got

    def close(self) -> None:
        for session, it in self.sessions.values():
            close = getattr(it, "close", None)
            if close is not None:
                close()
            session.close()
        self.sessions.clear()


_END = object()
