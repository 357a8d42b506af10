"""StreamingDataset: the public dataset, a thin driver over the pipeline pieces.

Rules:
* Construction validates every parameter, builds the permutation once, and
  holds per-split progress for all splits. Nothing else does I/O up front.
* Iteration resolves the owned splits (rank block, then worker sub-block),
  runs one pipeline over them, and keeps the progress of the owned splits
  exact after every yielded item. Other splits keep the values they had.
* One iterator at a time per instance (a lease); StreamingDataLoader holds
  the lease for its whole iteration and commits worker checkpoints here.
* Pickling sends a recipe to reopen the table, the row ids (a shared-memory
  file during worker start-up, so each worker maps only what it reads), the
  progress and the cumulative counters; never live threads or connections.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal, cast

import numpy as np
import pyarrow.compute as pc
from torch.utils.data import IterableDataset, get_worker_info

from . import _checkpoint as ckpt
from . import _fetch, _packing, _rows
from ._gate import CheckpointGate
from ._lance import Reader, SplitRows, TableSource, build_permutation, column_kind, count_rows, describe
from ._lance import reader_for as _reader_for
from ._rowfile import RowFile, rows_of
from ._stats import Counters, Statistics, new_shared
from ._topology import owned_splits, rank_block
from ._validate import check_epoch, check_parameters

logger = logging.getLogger("elastic_loader")

DEFAULT_READ_BATCH_SIZE = 64
DEFAULT_IO_QUEUE_DEPTH = 4
_AUTO_SAMPLE_CAP = 100_000
_TARGET_UNIT_TOKENS = 1 << 20
_FIRST_DOC_GUESS = 128


class StreamingDataset(IterableDataset[Any]):
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
            environment or ``connection_factory``.

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
    ) -> None:
        super().__init__()
        params = dict(locals())
        for name in ("self", "table", "__class__", "pickle_storage_credentials"):
            params.pop(name, None)
        if not hasattr(table, "schema"):
            raise TypeError(f"table must be a LanceDB table, got {type(table).__name__}")
        rows_seen: list[int] = []

        def rows_after_filter() -> int:
            rows_seen.append(count_rows(table, filter))
            return rows_seen[-1]

        checked = check_parameters(params, lambda name: column_kind(table, name), rows_after_filter)
        self._table = table
        self._num_splits = checked.num_splits
        self._shuffle = shuffle
        self._split_strategy = split_strategy
        self._shuffle_seed: int = random.randrange(2**32) if checked.draw_seed else int(shuffle_seed or 0)
        self._epoch = epoch
        self._rank = rank
        self._world_size = world_size
        self._read_batch_size = read_batch_size
        self._io_queue_depth = checked.io_queue_depth
        self._columns = list(columns) if columns is not None else None
        self._shuffle_clump_size = shuffle_clump_size
        self._filter = filter
        self._transform = transform
        self._transform_parallelism = transform_parallelism
        self._pack_sequences = pack_sequences
        self._eos_id = eos_id
        self._pad_id = pad_id
        self._blocks_requested = blocks_per_epoch
        self._on_transform_error = on_transform_error
        self._transform_queue_depth = transform_queue_depth
        self._connection_factory = connection_factory
        self._worker_info_override = worker_info_override
        self._keep_credentials = pickle_storage_credentials
        self._rows_hint = rows_seen[-1] if rows_seen else 0
        self._uid = uuid.uuid4().hex
        self._counters = Counters()
        self._counters.attach_shared(new_shared())
        self._lease_lock = threading.Lock()
        self._lease: int | None = None
        self._lease_counter = 0
        self._live: _Live | None = None
        self._gate = CheckpointGate(self._counters.shared)
        self._timing_hook: _fetch.TimingHook | None = None
        self._table_source: TableSource | None = None
        self._build_epoch()
        self._rank_splits = rank_block(rank, self._splits_per_rank)

    # ------------------------------------------------------------ epochs

    @property
    def _splits_per_rank(self) -> int:
        return self._num_splits // self._world_size

    def _build_epoch(self) -> None:
        """Build the permutation of ``self._epoch`` and reset progress to its start."""
        self._perm: SplitRows = build_permutation(
            self._table,
            num_splits=self._num_splits,
            shuffle=self._shuffle,
            shuffle_seed=self._shuffle_seed,
            epoch=self._epoch,
            clump_size=self._shuffle_clump_size,
            filter=self._filter,
            split_strategy=self._split_strategy,
            rows_hint=self._rows_hint,
        )
        self._row_ids: np.ndarray = self._perm.rows
        self._row_file = RowFile()  # a file of an earlier epoch holds other row ids
        self._reader_cache: Reader | None = _reader_for(self._table, self._perm.base_version)
        self._blocks_per_epoch: int | None = None
        if self._pack_sequences is not None:
            requested = self._blocks_requested
            self._blocks_per_epoch = self._estimate_blocks() if requested == "auto" else cast(int, requested)
        self._reset_progress()

    def _reset_progress(self) -> None:
        s = self._num_splits
        self._progress: ckpt.State
        if self._pack_sequences is None:
            self._progress = ckpt.RowState([0] * s, [0] * s)
        else:
            self._progress = ckpt.PackedState([0] * s, [0] * s, {})

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``: rebuild the permutation and reset progress to its beginning.

        Raises:
            TypeError: ``epoch`` is not an int.
            ValueError: ``epoch`` is negative or the seed would overflow.
            RuntimeError: an iterator over this dataset is active.
        """
        check_epoch(self._shuffle_seed, epoch)
        self._refuse_while_iterating("set_epoch")
        self._epoch = epoch
        self._build_epoch()
        self._gate.after_load()

    # ------------------------------------------------------------ properties

    @property
    def num_splits(self) -> int:
        """Number of splits."""
        return self._num_splits

    @property
    def shuffle_seed(self) -> int:
        """The shuffle seed (the drawn one when ``shuffle_seed=None`` was passed)."""
        return self._shuffle_seed

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
            return self._blocks_per_epoch // self._world_size
        return self._splits_per_rank * self._perm.split_len

    # ------------------------------------------------------------ reading helpers

    @property
    def _reader(self) -> Reader:
        if self._reader_cache is None:
            self._reader_cache = self._source.open()
        return self._reader_cache

    def _estimate_blocks(self) -> int:
        """The ``blocks_per_epoch="auto"`` estimate (the reference's ~1% sample, seeded)."""
        import warnings

        warnings.warn(
            "blocks_per_epoch='auto' estimates the token count from a ~1% sample; pass an int for an "
            "exact epoch size",
            UserWarning,
            stacklevel=4,
        )
        assert self._pack_sequences is not None and self._columns is not None
        s, m = self._num_splits, self._perm.split_len
        cap = max(1, _AUTO_SAMPLE_CAP // s)
        rng = random.Random(self._shuffle_seed)
        per_split = min(m, max(1, min(math.ceil(m / 100), cap)))
        picks = [sorted(rng.sample(range(m), per_split)) for _ in range(s)]
        ids = np.concatenate([self._row_ids[split, offsets] for split, offsets in enumerate(picks)])
        sampled_tokens = 0
        for start in range(0, len(ids), 16384):
            column = self._reader.take(ids[start : start + 16384], self._columns).column(0)
            if column.null_count or pc.list_flatten(column).null_count:
                raise ValueError("pack_sequences does not support null token lists or null token values")
            sampled_tokens += int(pc.sum(pc.list_value_length(column)).as_py() or 0)
        sampled = per_split * s
        estimated = (sampled_tokens + sampled) * (m * s) // sampled
        blocks = estimated // self._pack_sequences
        return max(s, blocks - blocks % s)

    # ------------------------------------------------------------ worker topology

    def _owned_splits(self) -> tuple[list[int], int | None]:
        """The splits this iterator reads, and the torch worker id when inside a real worker."""
        return owned_splits(self._rank_splits, self._worker_info_override, get_worker_info())

    # ------------------------------------------------------------ leases

    def _acquire(self) -> int:
        with self._lease_lock:
            if self._lease is not None or self._live is not None:
                raise RuntimeError(
                    "StreamingDataset allows one active iterator per instance; finish or close the other "
                    "iterator (or its StreamingDataLoader iterator) first"
                )
            self._lease_counter += 1
            self._lease = self._lease_counter
            return self._lease

    def _release(self, token: int) -> None:
        with self._lease_lock:
            if self._lease == token:
                self._lease = None

    def _refuse_while_iterating(self, what: str) -> None:
        if self._lease is not None or self._live is not None:
            raise RuntimeError(f"{what} is not allowed while an iterator over this dataset is active")

    # ------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[Any]:
        return self._iterate(transport=False)

    def _iterate(self, *, transport: bool) -> Iterator[Any]:
        token = None if transport else self._acquire()
        try:
            yield from self._run(transport)
        finally:
            if token is not None:
                self._release(token)

    def _run(self, transport: bool) -> Iterator[Any]:
        owned, worker = self._owned_splits()
        if worker is not None:
            self._counters.publish_as_worker(worker)
            if not transport:
                self._gate.after_untracked_iteration()
        if transport:
            _ACTIVE[self._uid] = self  # stays after the end: torch collates the last partial batch later
        live = _Live(self, owned)
        self._live = live
        try:
            yield from live.items()
        finally:
            live.close()
            self._live = None
            self._counters.idle()

    # ------------------------------------------------------------ observability

    def statistics(self) -> Statistics:
        """A snapshot of the pipeline counters, summed over this process and its workers."""
        live = self._live
        if live is None:
            return self._counters.snapshot()
        stats, handed = live.statistics()
        return replace(
            stats,
            consumed_rows=stats.consumed_rows + handed,
            rows_delivered=stats.rows_delivered + handed,
            prefetch_queue_depth=stats.prefetch_queue_depth - handed,
        )

    @property
    def bytes_loaded(self) -> int:
        """Arrow bytes read from storage, before transforms (cumulative)."""
        return self.statistics().bytes_loaded

    @property
    def fetch_time(self) -> float:
        """Seconds spent in storage reads (cumulative, summed over threads)."""
        return self.statistics().fetch_time

    @property
    def transform_time(self) -> float:
        """Seconds spent in successful transform calls (cumulative)."""
        return self.statistics().transform_time

    @property
    def raw_queue_depth(self) -> int:
        """Rows requested or fetched and waiting for their transform (0 when idle)."""
        return self.statistics().raw_queue_depth

    @property
    def prefetch_queue_depth(self) -> int:
        """Transformed rows waiting to be yielded (0 when idle)."""
        return self.statistics().prefetch_queue_depth

    @property
    def unscanned_rows(self) -> int:
        """Rows of the owned splits not yet requested from storage (0 when idle)."""
        return self.statistics().unscanned_rows

    @property
    def rows_skipped(self) -> int:
        """Rows dropped by ``on_transform_error`` (cumulative)."""
        return self.statistics().rows_skipped

    @property
    def consumed_rows(self) -> int:
        """Rows (packing: documents) yielded by the live iterations (0 when idle)."""
        return self.statistics().consumed_rows

    # ------------------------------------------------------------ checkpoints

    @property
    def _identity(self) -> ckpt.Identity:
        packing = None
        if self._pack_sequences is not None:
            assert (
                self._eos_id is not None and self._pad_id is not None and self._blocks_per_epoch is not None
            )
            packing = (self._pack_sequences, self._eos_id, self._pad_id, self._blocks_per_epoch)
        return ckpt.Identity(
            self._shuffle_seed, self._num_splits, self._epoch, self._perm.fingerprint, packing
        )

    def _current_progress(self) -> ckpt.State:
        live = self._live
        if live is None:
            return self._progress
        return live.progress_now()

    def _snapshot(self) -> dict[str, object]:
        return ckpt.snapshot(self._identity, self._current_progress())

    def state_dict(self) -> dict[str, object]:
        """The checkpoint: settings plus per-split progress, in ``lancedb.streaming``'s format.

        Row mode: ``samples_consumed_per_split`` (rows yielded) and
        ``positions_consumed_per_split`` (one past the last yielded row's
        permutation position; ahead of samples when rows were skipped). Packed
        mode: positions consumed, blocks emitted and the non-empty partial
        buffers. Splits this rank does not own keep the values last loaded, so
        merging every rank's state is exact.

        Raises:
            RuntimeError: a plain ``DataLoader`` with workers iterated this
                dataset (its prefetching makes the parent's progress unknown; use
                ``StreamingDataLoader``); a delivered batch failed; or the state
                is not at a step boundary where one is needed (packing, or a
                ``StreamingDataLoader`` with several workers).
        """
        progress = self._current_progress()
        self._gate.check_state_dict(progress, self._rank_splits, in_worker=get_worker_info() is not None)
        return ckpt.snapshot(self._identity, progress)

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Resume from ``state`` (a ``state_dict()``, possibly merged over ranks).

        Clears any earlier checkpoint invalidation.

        Raises:
            TypeError: ``state`` is not a dict.
            ValueError: it does not match this dataset (``num_splits``,
                ``shuffle_seed``, ``epoch``, ``perm_fingerprint``, row vs packed,
                packing settings), is malformed, or lies beyond the epoch.
            RuntimeError: an iterator over this dataset is active.
        """
        self._refuse_while_iterating("load_state_dict")
        self._progress = ckpt.parse_for(self._identity, state, self._perm.split_len)
        self._gate.after_load()

    @staticmethod
    def merge_state_dicts(states: list[dict[str, object]]) -> dict[str, object]:
        """Merge every rank's ``state_dict()`` (taken at the same global step) into one.

        See :func:`elastic_loader.merge_state_dicts`.
        """
        return ckpt.merge_state_dicts(states)

    def _commit(self, state: object, *, require_uniform: bool) -> None:
        """Fold a delivered worker batch's checkpoint into this (parent) dataset."""
        self._progress = ckpt.commit(self._identity, self._progress, state)
        self._gate.after_commit(require_uniform)

    def _invalidate(self, reason: str) -> None:
        self._gate.after_failure(reason)

    # ------------------------------------------------------------ pickling

    @property
    def _source(self) -> TableSource:
        if self._table is None:
            assert self._table_source is not None
            return self._table_source
        return describe(
            self._table,
            self._perm.base_version,
            connection_factory=self._connection_factory,
            keep_credentials=self._keep_credentials,
        )

    def __getstate__(self) -> dict[str, Any]:
        if self._live is not None and get_worker_info() is None:
            logger.debug("pickling a dataset while it iterates; the copy starts from the progress so far")
        state = dict(self.__dict__)
        state["_table"] = None if self._table is None else self._source
        state["_reader_cache"] = None
        state["_lease_lock"] = None
        state["_live"] = None
        state["_progress"] = self._current_progress()
        state["_perm"] = replace(self._perm, rows=_NO_ROWS)  # the rows travel once, as _row_ids
        state["_row_ids"] = self._row_file.payload(self._row_ids)
        state["_row_file"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        payload = state.pop("_row_ids")
        source: TableSource | None = state.pop("_table")
        self.__dict__.update(state)
        self._row_ids = rows_of(payload)
        self._row_file = RowFile()
        self._table = None
        self._table_source = source
        self._lease_lock = threading.Lock()
        self._reader_cache = source.open() if source is not None else None
        self._perm = SplitRows(self._row_ids, self._perm.fingerprint, self._perm.base_version)

    def __repr__(self) -> str:
        mode = f"pack_sequences={self._pack_sequences}" if self._pack_sequences else "rows"
        return (
            f"StreamingDataset(num_splits={self._num_splits}, split_size={self._perm.split_len}, "
            f"rank={self._rank}/{self._world_size}, epoch={self._epoch}, shuffle_seed={self._shuffle_seed}, "
            f"{mode})"
        )


_NO_ROWS = np.zeros((0, 0), dtype=np.uint64)
_ACTIVE: weakref.WeakValueDictionary[str, StreamingDataset] = weakref.WeakValueDictionary()
"""Datasets that iterated under StreamingDataLoader in this process, by dataset id."""
class _Live:
    """One running iteration over the owned splits."""

    def __init__(self, dataset: StreamingDataset, owned: list[int]) -> None:
        self.dataset = dataset
        self.owned = owned
        self.row_progress: _rows.RowCursor | None = None
        self.pack_progress: _packing.PackCursor | None = None
        self.pipeline: _fetch.Pipeline | None = None

    def items(self) -> Iterator[Any]:
        ds = self.dataset
        threads = ds._transform_parallelism or os.cpu_count() or 1
        split_rows = [np.asarray(ds._row_ids[s]) for s in self.owned]
        progress = ds._progress
        counters = ds._counters
        if isinstance(progress, ckpt.RowState):
            samples = [progress.samples[s] for s in self.owned]
            positions = [progress.positions[s] for s in self.owned]
            self.row_progress = _rows.RowCursor(samples, positions)
            feed = _rows.RowFeed(len(self.owned))
            stage = _rows.make_row_stage(ds._transform, ds._on_transform_error, ds._read_batch_size, counters)
            holder: list[_fetch.Pipeline] = []
            tq = ds._transform_queue_depth

            def want(i: int) -> int:
                pipe = holder[0]
                if feed.error[i] is not None:
                    return 0
                quota = max(1, -(-pipe.unit_rows // len(self.owned)))
                target = quota * ds._io_queue_depth
                if tq is not None:
                    target = min(target, max(1, tq * ds._read_batch_size))
                    quota = min(quota, target)
                return quota if feed.ready(i) + pipe.inflight[i] < target else 0

            pipeline = _fetch.Pipeline(
                reader=ds._reader,
                columns=ds._columns,
                split_rows=split_rows,
                start=positions,
                stage=stage,
                want=want,
                io_queue_depth=ds._io_queue_depth,
                transform_threads=threads,
                counters=counters,
                min_unit_rows=ds._read_batch_size,
                hook=ds._timing_hook,
            )
            holder.append(pipeline)
            self.pipeline = pipeline
            yield from _rows.iterate(pipeline, feed, self.row_progress, self.owned, counters)
            return
        yield from self._packed_items(progress, split_rows, threads)

    def _packed_items(
        self, progress: ckpt.PackedState, split_rows: list[np.ndarray], threads: int
    ) -> Iterator[Any]:
        ds = self.dataset
        assert ds._pack_sequences is not None and ds._eos_id is not None and ds._pad_id is not None
        assert ds._blocks_per_epoch is not None
        length, eos = ds._pack_sequences, ds._eos_id
        streams = []
        for s in self.owned:
            tokens, starts = progress.buffers.get(s, ([], []))
            streams.append(_packing.SplitStream(tokens, starts, progress.consumed[s], progress.emitted[s]))
        feed = _packing.PackFeed(streams, eos, ds._counters)
        self.pack_progress = _packing.PackCursor(streams)
        counters = ds._counters
        stage = _packing.make_doc_stage(ds._on_transform_error, counters)
        holder: list[_fetch.Pipeline] = []
        doc_tokens = [float(_FIRST_DOC_GUESS)]

        def want(i: int) -> int:
            pipe = holder[0]
            stream = streams[i]
            if stream.error is not None:
                return 0
            if stream.fetched_docs:
                doc_tokens[0] = max(1.0, stream.fetched_tokens / stream.fetched_docs)
            per_split = max(length, _TARGET_UNIT_TOKENS // len(streams))
            buffered = stream.buffered_tokens() + pipe.inflight[i] * doc_tokens[0]
            if buffered >= per_split * ds._io_queue_depth:
                return 0
            # Units start small (fast first block) and grow with the pipeline's unit size.
            growing = -(-pipe.unit_rows // len(streams))
            return max(1, min(growing, math.ceil(per_split / doc_tokens[0])))

        pipeline = _fetch.Pipeline(
            reader=ds._reader,
            columns=ds._columns,
            split_rows=split_rows,
            start=[progress.consumed[s] for s in self.owned],
            stage=stage,
            want=want,
            io_queue_depth=ds._io_queue_depth,
            transform_threads=threads,
            counters=counters,
            min_unit_rows=ds._read_batch_size,
            sorted_reads=True,
            hook=ds._timing_hook,
        )
        holder.append(pipeline)
        self.pipeline = pipeline
        yield from _packing.iterate(
            pipeline,
            feed,
            self.pack_progress,
            length=length,
            pad=ds._pad_id,
            budget=ds._blocks_per_epoch // ds._num_splits,
            counters=counters,
        )

    def statistics(self) -> tuple[Statistics, int]:
        """The counters, and the items of the current chunk handed out but not yet counted.

        Read together under the chunk's lock, so a chunk ending meanwhile is never half seen.
        """
        counters = self.dataset._counters
        if self.row_progress is not None:
            with self.row_progress.locked():
                return counters.snapshot(), self.row_progress.cursor
        if self.pack_progress is not None:
            with self.pack_progress.locked():
                return counters.snapshot(), self.pack_progress.docs_pulled()
        return counters.snapshot(), 0

    def progress_now(self) -> ckpt.State:
        """The dataset's progress with the owned splits' live values."""
        base = self.dataset._progress
        if self.row_progress is not None:
            assert isinstance(base, ckpt.RowState)
            samples, positions = self.row_progress.current()
            out_s, out_p = list(base.samples), list(base.positions)
            for i, s in enumerate(self.owned):
                out_s[s], out_p[s] = samples[i], positions[i]
            return ckpt.RowState(out_s, out_p)
        if self.pack_progress is not None:
            assert isinstance(base, ckpt.PackedState)
            consumed, emitted = list(base.consumed), list(base.emitted)
            buffers = dict(base.buffers)
            for i, (c, e, tokens, starts) in enumerate(self.pack_progress.current()):
                s = self.owned[i]
                consumed[s], emitted[s] = c, e
                if tokens:
                    buffers[s] = (tokens, starts)
                else:
                    buffers.pop(s, None)
            return ckpt.PackedState(consumed, emitted, buffers)
        return base

    def close(self) -> None:
        """Fold the live progress into the dataset and stop the pipeline."""
        self.dataset._progress = self.progress_now()
        if self.pipeline is not None:
            self.pipeline.close()


def merge_state_dicts(states: list[dict[str, object]]) -> dict[str, object]:
    """Merge the ``state_dict()`` of every rank, taken at the same global step, into one.

    Collect the states of *all* ranks of the previous run, merge them, and load
    the same merged dict on every rank of the next run, whatever its world
    size. Each rank's state is exact for its own splits and holds the loaded
    values for the others, so an element-wise maximum recovers every split.

    >>> a = {"shuffle_seed": 0, "num_splits": 2, "epoch": 0,
    ...      "samples_consumed_per_split": [3, 0], "positions_consumed_per_split": [5, 0]}
    >>> b = {"shuffle_seed": 0, "num_splits": 2, "epoch": 0,
    ...      "samples_consumed_per_split": [0, 3], "positions_consumed_per_split": [0, 4]}
    >>> merge_state_dicts([a, b])["positions_consumed_per_split"]
    [5, 4]

    Raises:
        TypeError: a state is not a dict.
        ValueError: no states, mixed modes or settings, wrong lengths, or
            packed states not at one global step.
    """
    return ckpt.merge_state_dicts(states)


__all__ = ["StreamingDataset", "merge_state_dicts", "Statistics"]
