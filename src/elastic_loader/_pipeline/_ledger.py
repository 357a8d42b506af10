"""A rank's session ledger: what it resumed from and what reached the trainer since.

Rules:
* A session starts at an epoch's start or at ``load_state_dict``: :meth:`Ledger.reset` records the
  start (a ``_provenance.Record``) and forgets the passes.
* Every iteration of the session is a *pass*. A StreamingDataLoader pass is opened with its
  worker count, batch size and rotation and counts the batches the trainer received, the worker of
  the last one, and the splits whose iterator delivered something (:meth:`delivered`). A plain
  iteration (``for item in dataset``) is a pass of single items without workers, counted from its
  progress when it ends.
* The rotation of a new loader continues the last loader's round robin when it has the same
  ``world_size`` and ``num_workers`` (from the start's cursor before any loader ran).
* The ledger computes nothing about other ranks itself: ``state_dict()`` hands its start, passes
  and touched splits to ``_provenance.infer``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._provenance import Pass, Record


@dataclass
class _Open:
    """The loader pass in progress."""

    num_workers: int
    batch_size: int
    rotation: int
    batches: int = 0
    last_worker: int | None = None

    def as_pass(self) -> Pass:
        nw = self.num_workers
        if nw <= 1:
            return Pass(nw, self.batch_size, self.batches)
        step = 0 if self.last_worker is None else self.last_worker + 1
        return Pass(nw, self.batch_size, self.batches, self.rotation, (step + self.rotation) % nw)


@dataclass
class Ledger:
    """The session of one rank (see the module rules)."""

    start: Record
    world_size: int
    rank: int
    passes: list[Pass] = field(default_factory=list)
    touched: set[int] = field(default_factory=set)
    _open: _Open | None = None

    def reset(self, start: Record) -> None:
        """A new session starts from ``start``."""
        self.start = start
        self.passes = []
        self.touched = set()
        self._open = None

    def rotation(self, num_workers: int) -> int:
        """The role torch worker 0 of a new loader with ``num_workers`` workers plays."""
        if self.passes:
            last = self.passes[-1]
            return last.next_role if last.num_workers == num_workers >= 2 else 0
        cursor = self.start.cursor
        return 0 if cursor is None else cursor.rotation(self.world_size, self.rank, num_workers)

    def open_loader(self, num_workers: int, batch_size: int, rotation: int) -> None:
        """A StreamingDataLoader iteration starts."""
        self._open = _Open(num_workers, batch_size, rotation)

    def delivered(self, worker: int | None, splits: list[int]) -> None:
        """The trainer received a batch from torch worker ``worker`` (``None``: no workers) whose
        iterator owns ``splits``."""
        assert self._open is not None
        self._open.batches += 1
        self._open.last_worker = worker
        self.touched.update(splits)

    def close_loader(self) -> None:
        """The StreamingDataLoader iteration is over."""
        if self._open is not None and self._open.batches:
            self.passes.append(self._open.as_pass())
        self._open = None

    def plain_pass(self, items: int, splits: list[int]) -> None:
        """A plain iteration over ``splits`` handed out ``items`` items."""
        if items:
            self.passes.append(Pass(0, 1, items))
            self.touched.update(splits)

    def now(self, live: tuple[int, list[int]] | None = None) -> tuple[list[Pass], frozenset[int]]:
        """The passes and touched splits so far, with the open loader pass and a live plain
        iteration (``live``: its items so far and its splits) counted in."""
        passes, touched = list(self.passes), set(self.touched)
        if self._open is not None and self._open.batches:
            passes.append(self._open.as_pass())
        if live is not None and live[0]:
            passes.append(Pass(0, 1, live[0]))
            touched.update(live[1])
        return passes, frozenset(touched)
