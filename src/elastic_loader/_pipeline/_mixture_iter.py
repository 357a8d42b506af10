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
  global cycles, per source epoch the single-table progress after the item. The work per cycle is
  kept small and none is done per item (issue 16, throughput): a row session's values are read
  from the session only when a state is asked (before the cycle its splits' values are kept, one
  ``RowCursor.current()``: a split's values change only with its own row); the items are handed
  out by a list iterator whose length says how many went; the source key is set once per cycle
  (``Label``), and an item it refuses still raises at its own turn. Packed cycles keep the state
  after every block (a block is large; its progress is not derivable afterwards).
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Generator, Iterator, Sequence
from itertools import islice
from typing import Any

from ._checkpoint import PackedState, RowState, State
from ._mixture_schedule import Schedule
from ._mixture_source import SourceReader
from ._mixture_state import MixState, Value, canonical, value
from ._session import Session
from ._stats import Counters

Raw = tuple[list[int], list[int]]
"""A row session's ``(samples, positions)`` of its owned splits, in their order."""


Label = Callable[[int, list[Any]], BaseException | None]
"""Labels a cycle's items of a source in place; on the first item it refuses, it cuts the list
before that item and returns the error the item raises at its turn."""


def _overlay(state: State, splits: Sequence[int], raw: Raw) -> RowState:
    """``state`` (rows) with the values ``raw`` for ``splits``."""
    assert isinstance(state, RowState)
    samples, positions = list(state.samples), list(state.positions)
    for i, s in enumerate(splits):
        samples[s], positions[s] = raw[0][i], raw[1][i]
    return RowState(samples, positions)


class MixtureCursor:
    """The live progress of one mixture iterator."""

    def __init__(self, schedule: Schedule, readers: Sequence[SourceReader], start: MixState) -> None:
        self.schedule, self.readers = schedule, readers
        self.cycles = list(start.cycles)  # global cycles of every split, the cycle in hand excluded
        self.entries: dict[tuple[int, int], State] = dict(start.entries)
        self.live: dict[tuple[int, int], list[Session]] = {}  # rows: read the session when asked
        self.packed = readers[0].settings.packed
        # the cycle in hand: its key and splits, the progress before it (rows: its splits' raw values;
        # packed: the source epoch's state) and, packed only, the state after each of its items;
        # the iterator handing out its items says how many were handed (no work per item)
        self._key: tuple[int, int] | None = None
        self.splits: tuple[int, ...] = ()
        self._before: Any = None
        self._after: list[State] = []
        self._hand: Iterator[Any] = iter(())
        self._total = 0

    @property
    def handed(self) -> int:
        """Items of the cycle in hand already handed out."""
        return 0 if self._key is None else self._total - operator.length_hint(self._hand)

    def entry(self, key: tuple[int, int]) -> State:
        """Source epoch ``key``'s progress after the cycles taken so far (the cycle in hand whole)."""
        found = self.entries.get(key)
        state = self.readers[key[0]].empty() if found is None else found
        for session in self.live.get(key, ()):
            state = session.progress(state)
        return state

    def track(self, key: tuple[int, int], session: Session) -> None:
        """Row session ``session`` of source epoch ``key``: its owned splits' values are its own."""
        self.live.setdefault(key, []).append(session)

    def untrack(self, key: tuple[int, int], session: Session, raw: Raw | None = None) -> None:
        """Stop reading ``session``: its values as they are now (or ``raw``) go into the entry."""
        sessions = self.live.get(key, [])
        if session not in sessions:
            return
        state = self.entry(key)
        self.entries[key] = state if raw is None else _overlay(state, session.owned, raw)
        sessions.remove(session)
        if not sessions:
            del self.live[key]

    def begin(self, key: tuple[int, int], splits: tuple[int, ...], before: Any, after: list[State]) -> None:
        """A cycle of ``splits`` from source epoch ``key`` was taken (see ``_before``/``_after``); the
        one before it was settled."""
        assert self._key is None, "settle() the cycle in hand first"
        self._key, self.splits, self._before, self._after = key, splits, before, after
        self._hand, self._total = iter(()), 0

    def hand(self, items: list[Any]) -> Iterator[Any]:
        """The iterator that hands out the cycle's ``items`` (its first ``len(items)`` splits)."""
        self._hand, self._total = iter(items), len(items)
        return self._hand

    def settle(self) -> None:
        """The cycle in hand was handed out whole: its splits' cycles move on."""
        key = self._key
        if key is None:
            return
        assert self.handed == len(self.splits), "a cycle is settled once handed out whole"
        cycles = self.cycles
        for s in self.splits:
            cycles[s] += 1
        if self.packed:
            self.entries[key] = self._after[-1]
        self._key = None

    def _merged(self, after: State, handed: int) -> State:
        """The cycle's source epoch after ``handed`` of its items (``after``: after all of them)."""
        if self.packed:
            return self._after[handed - 1] if handed else self._before
        raw: Raw = self._before
        return _overlay(after, self.splits[handed:], (raw[0][handed:], raw[1][handed:]))

    def state(self) -> MixState:
        """The canonical state after the last yielded item."""
        cycles = list(self.cycles)
        entries = {key: self.entry(key) for key in (*self.entries, *self.live)}
        if self._key is not None:
            handed = self.handed
            for s in self.splits[:handed]:
                cycles[s] += 1
            entries[self._key] = self._merged(entries.get(self._key, self._before), handed)

        def current(k: int, e: int, s: int) -> Value | None:
            entry = entries.get((k, e))
            return None if entry is None else value(entry, s)

        return canonical(self.schedule, self.readers, cycles, current)


class MixtureIterator:
    """The items of ``owned`` splits from ``start`` (see the module rules)."""

    def __init__(
        self,
        schedule: Schedule,
        readers: Sequence[SourceReader],
        owned: list[int],
        start: MixState,
        counters: Counters,
        label: Label,
    ) -> None:
        self.schedule, self.readers, self.owned, self.counters = schedule, readers, owned, counters
        self.cursor = MixtureCursor(schedule, readers, start)
        self.start = list(start.cycles)
        self.label = label
        self.sessions: dict[tuple[tuple[int, int], tuple[int, ...]], tuple[Session, Iterator[Any]]] = {}

    def handed(self) -> int:
        """Items yielded so far."""
        cursor = self.cursor
        cycles = cursor.cycles
        return sum(cycles[s] - self.start[s] for s in self.owned) + cursor.handed

    def items(self) -> Iterator[Any]:
        """Catch-up, then global cycles (the module rules); the sessions close when it ends."""
        try:
            owned, cursor = self.owned, self.cursor
            if not owned or not (yield from self._catch_up()):
                return
            self.close()  # the catch-up sessions
            splits, cycles, source, label = tuple(owned), cursor.cycles, self.schedule.source, self.label
            while True:
                cursor.settle()
                u = cycles[owned[0]]
                got = self._cycle(splits, u)
                if got is None:
                    return
                error = label(source[u], got)
                yield from cursor.hand(got)
                if error is not None:
                    raise error
        finally:
            self.close()

    def _catch_up(self) -> Generator[Any, None, bool]:
        """Lagging owned splits, one item at a time in ``(cycles, split)`` order (returns False when
        the iterator ends there)."""
        cursor = self.cursor
        cycles = cursor.cycles
        top = max(cycles[s] for s in self.owned)
        lagging = [(cycles[s], s) for s in self.owned if cycles[s] < top]
        heapq.heapify(lagging)
        while lagging:
            g, s = heapq.heappop(lagging)
            cursor.settle()
            got = self._cycle((s,), g)
            if got is None:
                return False
            error = self.label(self.schedule.source[g], got)
            yield from cursor.hand(got)
            if error is not None:
                raise error
            if g + 1 < top:
                heapq.heappush(lagging, (g + 1, s))
        cursor.settle()
        return True

    def _session(self, key: tuple[int, int], splits: tuple[int, ...]) -> tuple[Session, Iterator[Any]]:
        found = self.sessions.get((key, splits))
        if found is None:
            k, e = key
            session = self.readers[k].session(e, list(splits), self.cursor.entry(key), self.counters)
            found = (session, session.items())
            if not self.cursor.packed:
                self.cursor.track(key, session)
            self.sessions[(key, splits)] = found
        return found

    def _cycle(self, splits: tuple[int, ...], u: int) -> list[Any] | None:
        """The items of global cycle ``u`` for ``splits`` (``None``: the iterator ends)."""
        schedule = self.schedule
        if u >= len(schedule):
            return None
        key = (schedule.source[u], schedule.epoch[u])
        session, it = self._session(key, splits)
        if self.cursor.packed:
            return self._packed_cycle(key, splits, session, it)
        cursor = session.row_cursor
        assert cursor is not None
        raw = cursor.current()  # the splits' values before the cycle
        try:
            got = list(islice(it, len(splits)))
        except BaseException:
            self.cursor.untrack(key, session, raw)  # the cycle is not taken: its values stay out
            raise
        if len(got) < len(splits):
            self.cursor.untrack(key, session, raw)
            return None
        self.cursor.begin(key, splits, raw, [])
        return got

    def _packed_cycle(
        self, key: tuple[int, int], splits: tuple[int, ...], session: Session, it: Iterator[Any]
    ) -> list[Any] | None:
        """A packed cycle: the source epoch's state after every block of it."""
        before = self.cursor.entry(key)
        assert isinstance(before, PackedState)
        got: list[Any] = []
        after: list[State] = []
        for _ in splits:
            item = next(it, _END)
            if item is _END:
                return None
            got.append(item)
            after.append(session.progress(before))
        self.cursor.begin(key, splits, before, after)
        return got

    def close(self) -> None:
        for key_splits, (session, it) in self.sessions.items():
            self.cursor.untrack(key_splits[0], session)
            close = getattr(it, "close", None)
            if close is not None:
                close()
            session.close()
        self.sessions.clear()


_END = object()
