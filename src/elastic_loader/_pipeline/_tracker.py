"""What a dataset's checkpoints say: its progress, the session ledger and a loader's transport.

Rules:
* The tracker holds the progress of every split for one ``StreamingDataset``: after every item of
  a plain iteration, and after every delivered batch under a StreamingDataLoader (the commits),
  never what was read ahead. Splits the running iterator does not own keep their values.
* An epoch start (:meth:`Tracker.start`) or a load (:meth:`Tracker.load`) starts a session
  ledger (``_ledger``) and changes the *generation*, the name a loader's "epoch finished" refers to.
* :meth:`Tracker.record` is what ``state_dict()`` writes: this rank's progress, reported, and the
  other ranks' inferred from the ledger under lockstep (``_provenance.infer``).
* The tracker does no I/O and knows nothing of torch: the dataset hands it the running session.
* A batch carries a :class:`BatchSnapshot` (the dataset's identity and progress, which its own
  iterator made: no parsing), collated in this process or pickled from a worker; a checkpoint
  dict (what the reference's workers send) is parsed and checked instead. Both commit the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import _checkpoint as ckpt, _provenance
from ._ledger import Ledger
from ._session import Session
from ._settings import Settings
from ._topology import owned_splits, role_splits


@dataclass(frozen=True)
class BatchSnapshot:
    """The checkpoint of a batch: the dataset's identity and progress when it was collated, in
    this process or a worker's (pickled with the batch; packed buffers as arrays). It needs no
    parsing: a checkpoint dict would cost a parse per buffered token in the trainer's process."""

    identity: ckpt.Identity
    progress: ckpt.State


class Tracker:
    """The checkpoint-facing state of one dataset (see the module rules)."""

    def __init__(self, settings: Settings, rank_splits: Sequence[int]) -> None:
        self._settings = settings
        self._rank_splits = list(rank_splits)
        self.progress: ckpt.State  # set by start()
        self.ledger: Ledger
        self.rotation = 0  # the role torch worker 0 plays in the running StreamingDataLoader
        self.transport = False  # the running session feeds a StreamingDataLoader in this process
        self.tail: ckpt.State | None = None  # a loader's ended session: its last batch's progress
        self.generation = 0

    # ------------------------------------------------------------ sessions

    def start(self, progress: ckpt.State, table_pin: tuple[int | None, int]) -> None:
        """An epoch starts at ``progress`` over the table version and row count ``table_pin``."""
        self.progress, self.tail = progress, None
        start = _provenance.fresh(progress, table_pin)
        self.ledger = Ledger(start, self._settings.world_size, self._settings.rank)
        self.generation += 1

    def load(self, record: _provenance.Record) -> None:
        """Resume from a checkpoint's ``record``."""
        self.progress = record.state
        self.ledger.reset(record)
        self.generation += 1

    def targets(self, owned: Sequence[int]) -> dict[int, int]:
        """The projected block counts the iterator over ``owned`` replays its splits to."""
        return {s: t for s, t in self.ledger.start.projected.items() if s in owned}

    def begin(self, transport: bool) -> None:
        """An iteration starts (``transport``: it feeds a StreamingDataLoader)."""
        self.transport, self.tail = transport, None

    def end(self, session: Session, owned: list[int]) -> None:
        """The iteration of ``session`` over ``owned`` ended (done, closed or failed)."""
        if self.transport:  # the commits say what the trainer received; the last batch is collated later
            self.tail = session.progress(self.progress)
        else:
            self.ledger.plain_pass(session.handed_out(self.progress), owned)
            self.progress = session.progress(self.progress)
        self.transport = False

    def current(self, session: Session | None) -> ckpt.State:
        """The live progress: the running session's (read ahead included under a loader), or the
        end of a loader's session whose last batch is still being collated."""
        if session is not None:
            return session.progress(self.progress)
        return self.progress if self.tail is None else self.tail

    # ------------------------------------------------------------ checkpoints

    def record(
        self, session: Session | None, split_len: int, blocks_per_epoch: int | None
    ) -> _provenance.Record:
        """What ``state_dict()`` reports: the trainer's progress and the ledger's inference."""
        live, progress = None, self.progress
        if session is not None and not self.transport:
            progress = session.progress(self.progress)
            live = (session.handed_out(self.progress), session.owned)
        passes, touched = self.ledger.now(live)
        s = self._settings
        budget = None if blocks_per_epoch is None else blocks_per_epoch // s.num_splits
        skipping = s.on_transform_error != "raise"
        partial = None
        if s.worker_info_override is not None:  # a simulated worker reports its own splits only
            partial, _ = owned_splits(self._rank_splits, s.worker_info_override, None)
        return _provenance.infer(
            self.ledger.start,
            progress,
            touched,
            passes,
            s.world_size,
            s.rank,
            split_len,
            budget,
            skipping,
            partial,
        )

    def commit(self, identity: ckpt.Identity, state: object, worker: int | None, num_workers: int) -> None:
        """Fold a delivered batch's checkpoint (from torch worker ``worker``) into the progress."""
        if isinstance(state, BatchSnapshot):  # made by this dataset's own iterator: no parsing
            if state.identity != identity:
                raise ValueError(
                    "a batch's checkpoint belongs to another epoch or permutation of this dataset "
                    f"({state.identity}, the dataset is at {identity})"
                )
            self.progress = ckpt.join(self.progress, state.progress)
        else:
            self.progress = ckpt.commit(identity, self.progress, state)
        splits = self._rank_splits
        if worker is not None:
            splits = role_splits(splits, num_workers, (worker + self.rotation) % num_workers)
        self.ledger.delivered(worker, splits)

    # ------------------------------------------------------------ loaders

    def open_loader(self, num_workers: int, batch_size: int) -> None:
        """A loader iteration starts: its workers' roles continue the last loader's rotation."""
        self.rotation = self.ledger.rotation(num_workers)
        self.ledger.open_loader(num_workers, batch_size, self.rotation)

    def close_loader(self) -> None:
        """The loader iteration is over."""
        self.ledger.close_loader()
        self.tail = None

    def remaining(self, num_workers: int, split_len: int, blocks_per_epoch: int | None) -> list[int]:
        """Items each worker role (one role without workers) can still yield from the delivered
        progress, assuming no row is skipped (packing: blocks; a projected split from its target)."""
        progress, targets = self.progress, self.ledger.start.projected
        left: dict[int, int] = {}
        for s in self._rank_splits:
            if isinstance(progress, ckpt.RowState):
                left[s] = split_len - progress.positions[s]
            else:
                assert blocks_per_epoch is not None
                per_split = blocks_per_epoch // self._settings.num_splits
                left[s] = per_split - max(progress.emitted[s], targets.get(s, 0))
        roles = max(num_workers, 1)
        splits = self._rank_splits
        return [sum(left[s] for s in role_splits(splits, num_workers, r)) for r in range(roles)]
