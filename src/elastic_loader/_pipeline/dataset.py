"""StreamingDataset: the public dataset, a facade over the pipeline's parts.

Rules:
* Construction validates every parameter (``_settings``), builds the epoch's
  permutation once (``_epoch``), and holds per-split progress for all splits.
  Nothing else does I/O up front.
* Iteration resolves the owned splits (``_topology``: rank block, then worker
  sub-block), runs one ``_session.Session`` over them, and keeps the progress
  of the owned splits exact after every yielded item. Other splits keep the
  values they had.
* One iterator at a time per instance (``_session.Lease``); StreamingDataLoader
  holds the lease for its whole iteration and commits worker checkpoints
  here, through :class:`LoaderLink`, the one interface it uses.
* ``state_dict()`` answers only while the checkpoint gate (``_gate``) is open,
  after any delivered batch. It reports this rank's splits and infers the other
  ranks' (``_provenance``) from the session's ledger (``_ledger``): the start
  and every pass since. Called inside a DataLoader worker (torchdata's
  per-worker snapshots), it tags the state with the worker and the number of
  workers (``_loaderstate.WORKER_KEY``); such a state loads only into that same worker of a
  loader with as many workers (it holds that worker's splits only).
* Under a StreamingDataLoader the progress is what the trainer received (the
  commits), never what was read ahead; a plain iteration's progress is live.
* Pickling sends a recipe to reopen the table, the row ids (``_rowfile``: a
  shared-memory file during worker start-up, so each worker maps only what it
  reads), the progress and the cumulative counters; never live threads or
  connections. A copy that cannot reopen the table keeps the exception and
  raises it at its first read, so a worker fails on its first batch and the
  trainer sees why (not "worker exited unexpectedly").
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator
from typing import Any, Literal

from torch.utils.data import IterableDataset, get_worker_info

from .._exports import public
from . import _checkpoint as ckpt, _fetch, _loaderstate, _provenance
from ._columnar import Columnar
from ._epoch import Perm, build_epoch, pickled, split_rows, start_progress, unpickled
from ._gate import CheckpointGate
from ._handle import TableHandle
from ._positions import LocalShuffle
from ._rowfile import RowFile
from ._session import EpochLink, Lease, Session
from ._settings import Settings, settings_for
from ._stats import Counters, Statistics, StatisticsView, new_shared, zero_worker_gauges
from ._topology import check_workers, owned_splits, rank_block
from ._tracker import BatchSnapshot, Tracker
from ._validate import check_epoch

logger = logging.getLogger("elastic_loader")

DEFAULT_READ_BATCH_SIZE = 64
DEFAULT_IO_QUEUE_DEPTH = 4


@public
class StreamingDataset(StatisticsView, IterableDataset[Any]):
    """An elastic, resumable ``IterableDataset`` over a LanceDB table.

    The table is cut into ``num_splits`` equal splits by a seeded shuffle
    (``shuffle_seed + epoch * 100003``, LanceDB's permutation builder, the same
    permutation as ``lancedb.streaming``). Rank ``r`` owns splits
    ``[r*K, (r+1)*K)`` with ``K = num_splits / world_size``; DataLoader worker
    ``w`` of ``nw`` owns the ``w``-th contiguous ``K/nw`` of them. Rows come
    round-robin, one per owned split per cycle, so global step ``g`` holds the
    same rows whatever ``world_size`` and ``num_workers`` are.

    ``state_dict()`` records per-split progress; ``load_state_dict()`` resumes
    at the exact row, on any topology once every rank's state has been merged
    with :func:`merge_state_dicts`. With ``pack_sequences=L``, items are
    ``{"input_ids", "doc_ids"}`` blocks of ``L`` tokens packed per split.

    Args:
        table: a LanceDB table (local, object storage, ``memory://`` or any
            table with ``take_row_ids``).
        num_splits: number of splits; ``None`` means ``world_size``. Must be a
            multiple of ``world_size`` and at most the number of rows.
        shuffle: shuffle rows into splits (``False``: contiguous storage order).
        split_strategy: ``callable(builder) -> builder`` configuring LanceDB's
            permutation builder instead of ``shuffle``; its splits must be
            exactly ``0..num_splits-1`` with equal sizes. Checkpoints then carry
            a ``perm_fingerprint``.
        shuffle_seed: seed of the shuffle, ``>= 0``; ``None`` draws one (only
            allowed with ``world_size == 1``; read it back from
            ``state_dict()["shuffle_seed"]``).
        epoch: epoch number, mixed into the seed.
        rank: this process's rank, ``0 <= rank < world_size``.
        world_size: number of ranks.
        read_batch_size: rows per transform call (``>= 1``). Storage reads are
            coalesced into larger units across splits.
        io_queue_depth: read units in flight at most (``>= 1``).
        columns: columns to read (``None``: all). Packing needs exactly one
            list-of-integers column.
        shuffle_clump_size: shuffle contiguous clumps of this many rows.
        filter: SQL filter applied before splitting.
        transform: ``callable(pyarrow.RecordBatch) -> iterable`` with exactly
            one item per input row; default ``RecordBatch.to_pylist``.
        transform_parallelism: threads running transforms; default CPU count.
        pack_sequences: pack documents into blocks of this many tokens.
        eos_id: token appended after every document (packing).
        pad_id: token filling the end of a split's last blocks (packing).
        blocks_per_epoch: blocks per epoch over all splits (a multiple of
            ``num_splits``), or ``"auto"`` to estimate it from a ~1% sample.
        on_transform_error: ``"raise"``, ``"skip"``, ``"warn"``, or a callable
            ``handler(exception) -> bool`` (true: drop the row). A failing batch
            is re-run row by row so only failing rows are affected; a row that
            must raise does so exactly when its cycle is needed.
        transform_queue_depth: extra cap on rows read and transformed ahead of
            the consumer: below about ``2 * transform_queue_depth *
            read_batch_size`` rows per owned split.
        connection_factory: ``callable(table_name) -> table`` used by worker
            processes to reopen the table (no connection details are pickled).
        worker_info_override: object with ``.id`` and ``.num_workers`` that
            replaces ``torch.utils.data.get_worker_info()`` (simulated workers).
        prefetch_batches: deprecated alias of ``io_queue_depth``.
        pickle_storage_credentials: also pickle secret storage options (keys,
            tokens) for worker processes; by default workers use their
            environment or ``connection_factory``. Must be a bool.
        read_ahead_bytes: byte budget of the rows (packing: tokens) one
            iterator (one rank, or one DataLoader worker) reads and transforms
            ahead of its consumer; ``None``: 256 MiB. A row weighs the larger of
            its Arrow size and its transformed value's (docs/PIPELINE.md). A
            block (``pack_sequences * 16`` bytes) must fit in it.
        read_timeout: seconds a storage read may make no progress before the
            iterator raises ``TimeoutError`` naming the table; ``None``: 300,
            ``math.inf``: never.
        permutation: ``"builder"`` (as ``lancedb.streaming``), ``"computed"``, ``"local"``
            or ``LocalShuffle(clump=, window=)``: O(1) in the table size (docs/PIPELINE.md).

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: a parameter is out of range or inconsistent.
    """

    def __init__(
        self,
        table: Any,
        *,
        num_splits: int | None = None,
        shuffle: bool = True,
        split_strategy: Callable[[Any], Any] | None = None,
        shuffle_seed: int | None = 0,
        epoch: int = 0,
        rank: int = 0,
        world_size: int = 1,
        read_batch_size: int = DEFAULT_READ_BATCH_SIZE,
        io_queue_depth: int = DEFAULT_IO_QUEUE_DEPTH,
        columns: list[str] | None = None,
        shuffle_clump_size: int | None = None,
        filter: str | None = None,
        transform: Callable[[Any], Any] | None = None,
        transform_parallelism: int | None = None,
        pack_sequences: int | None = None,
        eos_id: int | None = None,
        pad_id: int | None = None,
        blocks_per_epoch: int | Literal["auto"] | None = None,
        on_transform_error: str | Callable[[Exception], object] = "raise",
        transform_queue_depth: int | None = None,
        connection_factory: Callable[[str], Any] | None = None,
        worker_info_override: Any = None,
        prefetch_batches: int | None = None,
        pickle_storage_credentials: bool = False,
        read_ahead_bytes: int | None = None,
        read_timeout: float | None = None,
        permutation: str | LocalShuffle = "builder",
    ) -> None:
        super().__init__()
        arguments = dict(locals())
        for name in ("self", "table", "__class__", "pickle_storage_credentials"):
            arguments.pop(name, None)
        self._settings: Settings = settings_for(table, arguments, pickle_storage_credentials)
        self._handle = TableHandle(table, self._settings)
        self._epoch = epoch
        self._counters = Counters()
        self._counters.attach_shared(new_shared())
        self._gate = CheckpointGate(self._counters.shared)
        self._lease = Lease()
        self._timing_hook: _fetch.TimingHook | None = None
        self._rank_splits = rank_block(rank, self._settings.splits_per_rank)
        self._tracker = Tracker(self._settings, self._rank_splits)
        self._build_epoch()

    # ------------------------------------------------------------ epochs

    def _build_epoch(self, version: int | None = None) -> None:
        """Build epoch ``self._epoch`` (of table version ``version``, default the latest) and reset
        progress and the session ledger to its start."""
        epoch = build_epoch(self._handle.at(version), self._settings, self._epoch)
        self._perm: Perm = epoch.perm
        self._row_file = RowFile()  # a file of an earlier epoch holds other row ids
        self._handle.built(epoch.perm.base_version, epoch.reader)
        self._blocks_per_epoch = epoch.blocks_per_epoch
        # what a checkpoint must agree on: it changes only here (every loader batch carries it)
        self._identity: ckpt.Identity = self._settings.identity(
            self._epoch, self._perm.fingerprint, self._blocks_per_epoch
        )
        self._tracker.start(start_progress(self._settings), self._table_pin())

    def _table_pin(self) -> tuple[int | None, int]:
        """The table version of this epoch's permutation and the rows it holds."""
        return self._perm.base_version, self._perm.num_splits * self._perm.split_len

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``: rebuild the permutation and reset progress to its beginning.

        Raises:
            TypeError: ``epoch`` is not an int.
            ValueError: ``epoch`` is negative or the seed would overflow.
            RuntimeError: an iterator over this dataset is active.
        """
        check_epoch(self._settings.shuffle_seed, epoch)
        self._lease.refuse_while_active("set_epoch")
        self._epoch = epoch
        self._build_epoch()
        self._gate.after_load()

    # ------------------------------------------------------------ properties

    @property
    def num_splits(self) -> int:
        """Number of splits."""
        return self._settings.num_splits

    @property
    def shuffle_seed(self) -> int:
        """The shuffle seed (the drawn one when ``shuffle_seed=None`` was passed)."""
        return self._settings.shuffle_seed

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self._epoch

    @property
    def split_size(self) -> int:
        """Rows in every split."""
        return self._perm.split_len

    @property
    def blocks_per_epoch(self) -> int | None:
        """The packing budget (resolved when ``"auto"`` was requested); ``None`` in row mode."""
        return self._blocks_per_epoch

    @property
    def rank_splits(self) -> list[int]:
        """The splits this rank owns."""
        return list(self._rank_splits)

    def __len__(self) -> int:
        """Items this rank yields in a full epoch without skipped rows."""
        if self._blocks_per_epoch is not None:
            return self._blocks_per_epoch // self._settings.world_size
        return self._settings.splits_per_rank * self._perm.split_len

    # ------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[Any]:
        return self._iterate(transport=False)

    def _iterate(self, *, transport: bool, columnar: Columnar | None = None) -> Iterator[Any]:
        token = None if transport else self._lease.acquire()
        try:  # one generator (not two nested ones) between the rows and the consumer
            session = self._start(transport, columnar)
            try:
                yield from session.items()
            finally:
                self._tracker.end(session, session.owned)
                session.close()
                self._lease.session = None
                self._counters.idle()
        finally:
            if token is not None:
                self._lease.release(token)

    def _start(self, transport: bool, columnar: Columnar | None) -> Session:
        override = self._settings.worker_info_override
        tracker = self._tracker
        owned, worker = owned_splits(self._rank_splits, override, get_worker_info(), tracker.rotation)
        if worker is not None:
            self._counters.publish_as_worker(worker)
            if not transport:
                self._gate.after_untracked_iteration()
        rows = split_rows(self._perm, owned)
        blocks, reader, hook = self._blocks_per_epoch, self._handle.reader(), self._timing_hook
        session = Session(
            self._settings,
            owned,
            rows,
            tracker.progress,
            blocks_per_epoch=blocks,
            reader=reader,
            counters=self._counters,
            hook=hook,
            columnar=columnar,
            targets=tracker.targets(owned),
        )
        self._lease.session = session
        tracker.begin(transport)
        return session

    # ------------------------------------------------------------ observability

    def statistics(self) -> Statistics:
        """A snapshot of the pipeline counters, summed over this process and its workers."""
        session = self._lease.session
        return self._counters.snapshot() if session is None else session.statistics()

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, object]:
        """The checkpoint: settings plus per-split progress, in ``lancedb.streaming``'s format.

        Row mode: ``samples_consumed_per_split`` (rows yielded) and
        ``positions_consumed_per_split`` (one past the last yielded row's
        permutation position; ahead of samples when rows were skipped). Packed
        mode: positions consumed, blocks emitted and the non-empty partial
        buffers. Any delivered batch will do: mid-step, packed, several workers.

        This rank's splits are reported as they are. Every other split is
        inferred by assuming the other ranks delivered the same batches
        (lockstep), so this one state resumes the whole job on any topology; the
        extra key ``elastic_loader`` says which splits are which (and is ignored
        by ``lancedb.streaming``). With ``on_transform_error`` other than
        ``"raise"`` another rank's skipped rows cannot be known: those splits are
        marked unknown, and only a merge of every rank's state resumes them.

        Raises:
            RuntimeError: a plain ``DataLoader`` with workers iterated this
                dataset (its prefetching makes the parent's progress unknown; use
                ``StreamingDataLoader``), or a delivered batch failed.
        """
        info = get_worker_info()
        self._gate.check_state_dict(in_worker=info is not None)
        record = self._tracker.record(self._lease.session, self._perm.split_len, self._blocks_per_epoch)
        state = _provenance.write(self._identity, record)
        if info is not None:  # a worker copy's own state (torchdata's per-worker snapshots)
            state[_loaderstate.WORKER_KEY] = {"worker": int(info.id), "num_workers": int(info.num_workers)}
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Resume from ``state`` (a ``state_dict()``, possibly merged over ranks).

        Clears any earlier checkpoint invalidation. The epoch goes on over the
        table version the checkpoint was written for (Lance time travel), so
        rows added, deleted or changed since do not shift it.

        Raises:
            TypeError: ``state`` is not a dict.
            ValueError: it does not match this dataset (``num_splits``,
                ``shuffle_seed``, ``epoch``, ``perm_fingerprint``, row vs packed,
                packing settings), is malformed, edited or corrupted (digest),
                holds progress no run produces, lies beyond the epoch, does not
                know the progress of a split of this rank, or names a table
                version that no longer exists.
            RuntimeError: an iterator over this dataset is active.
        """
        self._lease.refuse_while_active("load_state_dict")
        info = get_worker_info()
        state = _loaderstate.dataset_state(
            state, None if info is None else (int(info.id), int(info.num_workers))
        )
        version = _provenance.pinned_version(state)
        if version is not None and self._perm.base_version is not None and version != self._perm.base_version:
            self._build_epoch(version)
        record = _provenance.read(self._identity, state, self._perm.split_len)
        _provenance.require_loadable(record, self._rank_splits, self._table_pin())
        self._tracker.load(record)
        self._gate.after_load()

    @staticmethod
    def merge_state_dicts(states: list[dict[str, object]]) -> dict[str, object]:
        """Merge every rank's ``state_dict()`` (taken at the same global step) into one.

        See :func:`elastic_loader.merge_state_dicts`.
        """
        return _provenance.merge(states)

    # ------------------------------------------------------------ pickling

    def __getstate__(self) -> dict[str, Any]:
        if self._lease.session is not None and get_worker_info() is None:
            logger.debug("pickling a dataset while it iterates; the copy starts from the progress so far")
        state = dict(self.__dict__)
        tracker = state["_tracker"] = copy.copy(self._tracker)
        tracker.progress, tracker.tail = self._tracker.current(self._lease.session), None
        state["_perm"], state["_row_ids"] = pickled(self._perm, self._row_file)
        state["_row_file"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        payload = state.pop("_row_ids")
        self.__dict__.update(state)
        self._row_file = RowFile()
        self._perm = unpickled(self._perm, payload)

    def __repr__(self) -> str:
        s = self._settings
        mode = f"pack_sequences={s.pack_sequences}" if s.pack_sequences else "rows"
        return (
            f"StreamingDataset(num_splits={s.num_splits}, split_size={self._perm.split_len}, "
            f"rank={s.rank}/{s.world_size}, epoch={self._epoch}, shuffle_seed={s.shuffle_seed}, "
            f"{mode})"
        )


class LoaderLink(EpochLink):
    """What StreamingDataLoader may do with its dataset: the one interface between the two.

    The loader holds the dataset's lease for its whole iteration, checks that
    its workers and the dataset's progress fit, has torch iterate the items
    with the consumer-commit transport on (worker processes iterate their own
    copies), attaches :meth:`snapshot` to every batch, and commits each
    delivered batch's snapshot into the parent dataset, or closes its
    checkpoint gate when a batch fails.
    """

    def __init__(self, dataset: StreamingDataset) -> None:
        super().__init__(dataset)
        self._dataset = dataset

    def check_workers(self, num_workers: int) -> None:
        """Raise ``ValueError`` when ``num_workers`` cannot share this rank's splits."""
        check_workers(self._dataset._settings.splits_per_rank, num_workers)

    def acquire(self) -> int:
        """Take the dataset's lease (one active iterator); ``RuntimeError`` when taken."""
        return self._dataset._lease.acquire()

    def release(self, token: int) -> None:
        """Give the lease back."""
        self._dataset._lease.release(token)

    def open(self, num_workers: int, batch_size: int) -> None:
        """A loader iteration starts: its workers' roles continue the last loader's rotation."""
        self._dataset._tracker.open_loader(num_workers, batch_size)

    def close(self) -> None:
        """The loader iteration is over."""
        self._dataset._tracker.close_loader()

    def items(self, columnar: Columnar | None = None) -> Iterator[Any]:
        """The dataset's items for torch (no lease of their own: the loader holds it); whole
        batches of rows in ``columnar`` mode."""
        return self._dataset._iterate(transport=True, columnar=columnar)

    def yields(self) -> str | None:
        """What the dataset yields instead of plain rows: ``"pack_sequences"``, ``"transform"``
        (Python rows of a transform), or ``None``."""
        settings = self._dataset._settings
        if settings.pack_sequences is not None:
            return "pack_sequences"
        return None if settings.transform is None else "transform"

    def read_types(self) -> dict[str, Any]:
        """The Arrow type of every column the dataset reads (none known: empty)."""
        schema, columns = self._dataset._handle.schema(), self._dataset._settings.columns
        if schema is None:
            return {}
        return {f.name: f.type for f in schema if columns is None or f.name in columns}

    def snapshot(self) -> object:
        """The checkpoint of this process's dataset right now (no gate: it travels with a batch),
        as a ``BatchSnapshot`` in this process and in a worker alike (pickled as it is)."""
        ds = self._dataset
        return BatchSnapshot(ds._identity, ds._tracker.current(ds._lease.session))

    def commit(self, state: object, worker: int | None, num_workers: int) -> None:
        """Fold a delivered batch's checkpoint (from torch worker ``worker``) into the dataset."""
        self._dataset._tracker.commit(self._dataset._identity, state, worker, num_workers)

    def invalidate(self, reason: str) -> None:
        """A batch failed before it reached the trainer: close the checkpoint gate."""
        self._dataset._gate.after_failure(reason)

    def workers_done(self) -> None:
        """The loader's workers are gone: zero their gauges."""
        zero_worker_gauges(self._dataset._counters.shared)

    def keep_shared(self, old: LoaderLink) -> None:
        """This link's dataset replaces ``old``'s in a persistent worker: keep the shared memory
        only the worker's start-up copy carries (counters slot, gate flags)."""
        new, before = self._dataset, old._dataset
        new._counters.attach_shared(before._counters.shared)
        new._gate = CheckpointGate(before._counters.shared)

    def generation(self) -> int:
        """Changes at every ``set_epoch`` and ``load_state_dict`` (names the epoch start the progress
        counts from)."""
        return self._dataset._tracker.generation

    def remaining(self, num_workers: int) -> list[int]:
        """Items each worker role (one role without workers) can still yield from the delivered
        progress, assuming no row is skipped (packing: blocks; a projected split from its target)."""
        ds = self._dataset
        return ds._tracker.remaining(num_workers, ds._perm.split_len, ds._blocks_per_epoch)


@public
def merge_state_dicts(states: list[dict[str, object]]) -> dict[str, object]:
    """Merge the ``state_dict()`` of every rank into one that resumes on any topology.

    Collect the states of *all* ranks of the previous run, merge them, and load
    the same merged dict on every rank of the next run, whatever its world
    size. Every split takes the furthest value among the states that *report*
    it (written by the rank that owned it), so the merge is exact even when the
    ranks were not in lockstep. States written by ``lancedb.streaming`` report
    every split.

    >>> a = {"shuffle_seed": 0, "num_splits": 2, "epoch": 0,
    ...      "samples_consumed_per_split": [3, 0], "positions_consumed_per_split": [5, 0]}
    >>> b = {"shuffle_seed": 0, "num_splits": 2, "epoch": 0,
    ...      "samples_consumed_per_split": [0, 3], "positions_consumed_per_split": [0, 4]}
    >>> merge_state_dicts([a, b])["positions_consumed_per_split"]
    [5, 4]

    Raises:
        TypeError: a state is not a dict.
        ValueError: no states, mixed modes or settings, wrong lengths, a
            split that no state reports (a rank was left out), or packed states
            of ``lancedb.streaming`` not at one global step.
    """
    return _provenance.merge(states)


__all__ = ["StreamingDataset", "merge_state_dicts", "Statistics"]
