"""One iteration over the owned splits: the pipeline of its mode, its items, its live progress.

Rules:
* A session is built from the settings, the owned splits with their row ids,
  the progress it starts from, the epoch's block budget (packing), a reader,
  the counters and the test-only timing hook. It never sees the dataset: the
  dataset asks it for items, statistics and progress, and folds the progress
  back when the session ends.
* Both modes assemble the same ``_fetch.Pipeline`` (:meth:`Session._pipeline`)
  with their own stage (``_rows`` / ``_packing``), read-ahead policy
  (``_demand``), start positions and feed, whose buffered bytes count against
  the byte budget (``read_ahead_bytes``) with the units in flight; packing
  reads each unit in row-id order.
* Progress is answered for any base state: the owned splits take the live
  cursor's values, every other split keeps the base's.
* Packed splits the checkpoint projected first replay their documents up to
  their target block count, silently (``_packing.iterate``); then lagging
  splits catch up. ``handed_out`` counts the items yielded, replay excluded.
* A dataset has one :class:`Lease`: at most one active iterator, either a
  StreamingDataLoader (holding a token for its whole iteration, while worker
  processes iterate their own copies) or a running session.
* :class:`EpochLink` is the part of a loader link (``dataset.LoaderLink``,
  ``mixture.MixtureLink``) that needs only the public API of what it serves:
  epochs and checkpoints.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from . import _columnar, _documents, _fetch, _packing, _rows
from ._checkpoint import PackedState, RowState, State
from ._demand import PackDemand, RowDemand
from ._lance import Reader
from ._settings import Settings
from ._stats import Counters, Statistics


@dataclass(eq=False)
class Session:
    """One running iteration over ``owned`` (absolute split ids)."""

    settings: Settings
    owned: list[int]
    split_rows: list[np.ndarray] = field(repr=False)
    """Row ids of every owned split."""
    start: State
    """The dataset's progress when the iteration began."""
    _: KW_ONLY
    blocks_per_epoch: int | None
    reader: Reader
    counters: Counters
    hook: _fetch.TimingHook | None
    targets: dict[int, int] = field(default_factory=dict)
    """Projected owned splits (packing): the block count each replays to before yielding."""
    columnar: _columnar.Columnar | None = None
    """A StreamingDataLoader's columnar mode: yield whole batches of rows (``_columnar``)."""
    row_cursor: _rows.RowCursor | None = field(default=None, init=False)
    pack_cursor: _packing.PackCursor | None = field(default=None, init=False)
    pipeline: _fetch.Pipeline | None = field(default=None, init=False)

    def items(self) -> Iterator[Any]:
        """The items of the owned splits from the start state on, in canonical order."""
        if isinstance(self.start, RowState):
            if self.columnar is not None:
                return self._columnar_items(self.start, self.columnar)
            return self._row_items(self.start)
        return self._packed_items(self.start, self.columnar)

    def _pipeline(
        self,
        stage: _fetch.Stage,
        want: _fetch.Want,
        start: list[int],
        *,
        sorted_reads: bool,
        buffered: Callable[[], int],
    ) -> _fetch.Pipeline:
        """The one pipeline assembly of both modes (``buffered``: the bytes the mode's feed holds)."""
        settings = self.settings
        self.pipeline = _fetch.Pipeline(
            reader=self.reader,
            columns=settings.columns,
            split_rows=self.split_rows,
            start=start,
            stage=stage,
            want=want,
            counters=self.counters,
            limits=_fetch.ReadLimits(
                io_queue_depth=settings.io_queue_depth,
                transform_threads=settings.transform_threads(),
                min_unit_rows=settings.read_batch_size,
                read_ahead_bytes=settings.read_ahead_bytes,
                read_timeout=settings.read_timeout,
                row_bytes_hint=settings.row_bytes_hint,
            ),
            sorted_reads=sorted_reads,
            hook=self.hook,
            buffered=buffered,
        )
        return self.pipeline

    def _row_items(self, start: RowState) -> Iterator[Any]:
        settings, owned, counters = self.settings, self.owned, self.counters
        positions = [start.positions[s] for s in owned]
        self.row_cursor = _rows.RowCursor([start.samples[s] for s in owned], positions)
        feed = _rows.RowFeed(len(owned))
        stage = _rows.make_row_stage(
            settings.transform, settings.on_transform_error, settings.read_batch_size, counters
        )
        queue_depth = settings.transform_queue_depth
        demand = RowDemand(feed, len(owned), settings.io_queue_depth, settings.read_batch_size, queue_depth)
        pipeline = self._pipeline(stage, demand.want, positions, sorted_reads=False, buffered=feed.held_bytes)
        return _rows.iterate(pipeline, feed, self.row_cursor, owned, counters)  # one generator less per row

    def _columnar_items(self, start: RowState, mode: _columnar.Columnar) -> Iterator[Any]:
        settings, owned, counters = self.settings, self.owned, self.counters
        positions = [start.positions[s] for s in owned]
        self.row_cursor = _rows.RowCursor([start.samples[s] for s in owned], positions)
        feed = _columnar.ColumnarFeed(len(owned), positions)
        queue_depth = settings.transform_queue_depth
        demand = RowDemand(feed, len(owned), settings.io_queue_depth, settings.read_batch_size, queue_depth)
        stage = _columnar.make_stage()
        pipeline = self._pipeline(stage, demand.want, positions, sorted_reads=False, buffered=feed.held_bytes)
        yield from _columnar.iterate(pipeline, feed, self.row_cursor, owned, counters, mode)

    def _packed_items(self, start: PackedState, batches: _columnar.Columnar | None) -> Iterator[Any]:
        settings, owned, counters = self.settings, self.owned, self.counters
        length, eos, pad = settings.pack_sequences, settings.eos_id, settings.pad_id
        assert length is not None and eos is not None and pad is not None
        assert self.blocks_per_epoch is not None
        streams = []
        for s in owned:
            tokens, starts = start.buffers.get(s, ([], []))
            streams.append(_packing.SplitStream(tokens, starts, start.consumed[s], start.emitted[s]))
        feed = _packing.PackFeed(streams, eos, counters)
        self.pack_cursor = _packing.PackCursor(streams)
        stage = _documents.make_doc_stage(settings.on_transform_error, counters)
        demand = PackDemand(streams, length, settings.io_queue_depth, settings.read_ahead_bytes)
        consumed = [start.consumed[s] for s in owned]
        pipeline = self._pipeline(stage, demand.want, consumed, sorted_reads=True, buffered=feed.held_bytes)
        blocks = functools.partial(
            _packing.iterate,
            pipeline,
            feed,
            self.pack_cursor,
            length=length,
            pad=pad,
            budget=self.blocks_per_epoch // settings.num_splits,
            counters=counters,
            read_ahead_bytes=settings.read_ahead_bytes,
            targets=[self.targets.get(s) for s in owned] if self.targets else None,
        )
        if batches is None:
            yield from blocks(make=_packing.block)
        else:
            # one owned split: a batch in one chunk is handed out as a view (_columnar._stack)
            align = batches.batch_size if len(owned) == 1 else 1
            yield from _columnar.stacked(blocks(make=_packing.chunk_row, align=align), batches, length)

    def statistics(self) -> Statistics:
        """The counters, with the items of the current chunk handed out so far counted as consumed."""
        stats, handed = self._counted()
        return replace(
            stats,
            consumed_rows=stats.consumed_rows + handed,
            rows_delivered=stats.rows_delivered + handed,
            prefetch_queue_depth=stats.prefetch_queue_depth - handed,
        )

    def _counted(self) -> tuple[Statistics, int]:
        """The counters, and the items of the current chunk handed out but not yet counted.

        Read together under the chunk's lock, so a chunk ending meanwhile is never half seen.
        """
        counters = self.counters
        if self.row_cursor is not None:
            with self.row_cursor.locked():
                return counters.snapshot(), self.row_cursor.cursor
        if self.pack_cursor is not None:
            with self.pack_cursor.locked():
                return counters.snapshot(), self.pack_cursor.docs_pulled()
        return counters.snapshot(), 0

    def progress(self, base: State) -> State:
        """``base`` with the owned splits' live values."""
        if self.row_cursor is not None:
            assert isinstance(base, RowState)
            samples, positions = self.row_cursor.current()
            out_s, out_p = list(base.samples), list(base.positions)
            for i, s in enumerate(self.owned):
                out_s[s], out_p[s] = samples[i], positions[i]
            return RowState(out_s, out_p)
        if self.pack_cursor is not None:
            assert isinstance(base, PackedState)
            consumed, emitted = list(base.consumed), list(base.emitted)
            buffers = dict(base.buffers)
            for i, (c, e, tokens, starts) in enumerate(self.pack_cursor.current()):
                s = self.owned[i]
                consumed[s], emitted[s] = c, e
                if len(tokens):
                    buffers[s] = (tokens, starts)
                else:
                    buffers.pop(s, None)
            return PackedState(consumed, emitted, buffers)
        return base

    def handed_out(self, base: State) -> int:
        """Items this iteration yielded so far (replayed blocks of projected splits not counted)."""
        now = self.progress(base)
        if isinstance(now, RowState):
            assert isinstance(self.start, RowState)
            return sum(now.samples[s] - self.start.samples[s] for s in self.owned)
        assert isinstance(self.start, PackedState)
        first = {s: max(self.start.emitted[s], self.targets.get(s, 0)) for s in self.owned}
        return max(0, sum(now.emitted[s] - first[s] for s in self.owned))

    def close(self) -> None:
        """Stop the pipeline (queued work is cancelled)."""
        if self.pipeline is not None:
            self.pipeline.close()


class Lease:
    """One active iterator per dataset: a StreamingDataLoader's token, or a running session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.token: int | None = None
        self._issued = 0
        self.session: Session | None = None
        """The running iteration of this process, if any."""

    def acquire(self) -> int:
        """A token for a StreamingDataLoader iteration; ``RuntimeError`` when an iterator is active."""
        with self._lock:
            if self.token is not None or self.session is not None:
                raise RuntimeError(
                    "StreamingDataset does not support concurrent iteration (one active iterator per "
                    "instance); finish or close the other iterator (or its StreamingDataLoader iterator) "
                    "first"
                )
            self._issued += 1
            self.token = self._issued
            return self.token

    def release(self, token: int) -> None:
        """Give ``token`` back (a stale token changes nothing)."""
        with self._lock:
            if self.token == token:
                self.token = None

    def refuse_while_active(self, what: str) -> None:
        """Raise ``RuntimeError`` naming ``what`` while an iterator is active."""
        if self.token is not None or self.session is not None:
            raise RuntimeError(f"{what} is not allowed while an iterator over this dataset is active")

    def __getstate__(self) -> dict[str, Any]:
        # a copy keeps the token (worker copies are made while the loader holds it), not the session
        return {"token": self.token, "_issued": self._issued}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self.token, self._issued = state["token"], state["_issued"]
        self.session = None


class Facade(Protocol):
    """What :class:`EpochLink` uses of a ``StreamingDataset`` or a ``StreamingMixture``."""

    @property
    def epoch(self) -> int: ...

    def __len__(self) -> int: ...

    def set_epoch(self, epoch: int) -> None: ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: dict[str, object]) -> None: ...


class EpochLink:
    """A loader link's epochs and checkpoints, through its facade's public API."""

    def __init__(self, facade: Facade) -> None:
        self.facade = facade

    def epoch_items(self, num_workers: int) -> list[int]:
        """Items each worker role (one role without workers) yields in a whole epoch without skipped rows."""
        roles = max(num_workers, 1)
        return [len(self.facade) // roles] * roles

    def next_epoch(self) -> int:
        """Start the facade's next epoch (its epoch number plus one) and return it."""
        epoch = self.facade.epoch + 1
        self.facade.set_epoch(epoch)
        return epoch

    def set_epoch(self, epoch: int) -> None:
        """The facade's ``set_epoch``."""
        self.facade.set_epoch(epoch)

    def state_dict(self) -> dict[str, object]:
        """The facade's ``state_dict``."""
        return self.facade.state_dict()

    def load_state_dict(self, state: dict[str, object]) -> None:
        """The facade's ``load_state_dict``."""
        self.facade.load_state_dict(state)
