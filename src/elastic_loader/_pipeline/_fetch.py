"""The read pipeline shared by row mode and packing.

Rules:
* Work is cut into *units*: one storage read of the next positions of several
  owned splits (split-major inside the unit), then the mode's transform stage
  on that read. Per-row Python work is avoided; bookkeeping is per unit.
* Units are consumed strictly in submission order, and every split's
  positions are requested in increasing order, so each split's stream stays
  in permutation order whatever the thread timing.
* Backpressure: at most ``io_queue_depth`` units are in flight (requested and
  not yet handed to the consumer), and a split is only requested while its
  buffered rows (ready + in flight) are below its target. Memory is bounded
  by about ``(io_queue_depth + 2)`` units. The target is the read-ahead
  policy's (``_demand``), which the pipeline asks with what it needs to know.
* A pipeline may read a unit's rows in row-id order (``sorted_reads``): a
  LanceDB take of sorted ids has no rows to put back in order, so it is faster. The
  unit's ``where`` then maps each of its positions to its row of the batch,
  and the consumer gathers in unit order (packing does, while it inserts EOS).
* The consumer thread plans and submits units ("pumps"); pool threads only
  read (stage 1) and transform (stage 2). A unit's slices are transformed in
  parallel and joined in order. A timing hook (tests only) can delay each
  stage, to shake thread interleavings.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ._lance import Reader
from ._stats import Counters

TARGET_UNIT_BYTES = 8 * 2**20
MAX_UNIT_ROWS = 16384
FIRST_UNIT_ROWS = 512

Want = Callable[[int, int, int], int]
"""The read-ahead policy: ``want(split, unit_rows, inflight)`` = how many positions owned split
``split`` should request now (0: none), given the target rows of the next unit and the split's
positions in flight (see ``_demand``)."""

TimingHook = Callable[[str, int], None]
"""Called as ``hook(stage, unit_number)`` with stage ``"read"`` or ``"transform"``."""


@dataclass
class Segment:
    """Positions ``[first, first + count)`` of owned split ``split``, at ``offset`` in the unit."""

    split: int
    first: int
    count: int
    offset: int


@dataclass
class Unit:
    """One read: its segments, and the future of its transformed batch.

    ``where[p]`` is the batch row holding position ``p`` of the unit (``None``:
    the batch is in unit order).
    """

    number: int
    segments: list[Segment]
    rows: int
    future: Future[Any] = field(repr=False)
    where: np.ndarray | None = field(default=None, repr=False)


class StageError(Exception):
    """Raised inside a transform stage to deliver ``error`` to the consumer as it is.

    Errors that no ``on_transform_error`` mode may skip travel in this wrapper so
    the stage's own error handling lets them through; the consumer re-raises the
    wrapped error itself.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class Stage:
    """A mode's transform stage.

    ``run(batch)`` transforms one slice of a unit and ``combine(parts)`` joins
    the slices' results in order; ``slice_rows`` is the slice size (``None``:
    the whole unit is one slice).
    """

    run: Callable[[pa.RecordBatch], Any]
    combine: Callable[[list[tuple[int, Any]]], Any]
    slice_rows: int | None


class Pipeline:
    """Reads and transforms the owned splits of one iterator, unit by unit.

    Stage 1 (``io_queue_depth`` threads) reads a unit; stage 2
    (``transform_threads`` threads) transforms its slices. The consumer waits
    for units in submission order.

    Args:
        reader: storage access.
        columns: projection passed to every read.
        split_rows: row ids of every owned split (full splits).
        start: first position to read of every owned split.
        stage: the mode's transform stage.
        want: the read-ahead policy (:data:`Want`).
        io_queue_depth: units in flight at most.
        transform_threads: threads of the transform stage.
        counters: observability counters.
        min_unit_rows: smallest unit worth reading (the read batch size).
        sorted_reads: read each unit in row-id order (see ``Unit.where``).
        hook: test-only timing hook.
    """

    def __init__(
        self,
        *,
        reader: Reader,
        columns: list[str] | None,
        split_rows: list[np.ndarray],
        start: list[int],
        stage: Stage,
        want: Want,
        io_queue_depth: int,
        transform_threads: int,
        counters: Counters,
        min_unit_rows: int,
        sorted_reads: bool = False,
        hook: TimingHook | None = None,
    ) -> None:
        self._reader = reader
        self._columns = columns
        self._rows = split_rows
        self._stage = stage
        self._want = want
        self._depth = io_queue_depth
        self._counters = counters
        self._hook = hook
        self._sorted = sorted_reads
        self.size = [len(r) for r in split_rows]
        self.head = list(start)
        self.inflight = [0] * len(split_rows)
        self._pending: deque[Unit] = deque()
        self._io = ThreadPoolExecutor(max_workers=io_queue_depth, thread_name_prefix="elastic-loader-io")
        self._tx = ThreadPoolExecutor(
            max_workers=max(1, transform_threads), thread_name_prefix="elastic-loader-tx"
        )
        self._numbers = 0
        self._min_rows = max(1, min_unit_rows)
        self._unit_rows = max(self._min_rows, FIRST_UNIT_ROWS)
        self._ceiling: int | None = None
        self._closed = False
        self._gauge_lock = threading.Lock()
        self._gauges = {"unscanned_rows": 0, "raw_rows": 0}
        self._gauge(unscanned_rows=self.unscanned())

    def _gauge(self, **deltas: int) -> None:
        """Move this pipeline's share of the gauges; nothing moves once it is closed."""
        with self._gauge_lock:
            if self._closed:
                return
            for name, delta in deltas.items():
                self._gauges[name] += delta
            self._counters.add(**deltas)

    # ------------------------------------------------------------ planning

    @property
    def unit_rows(self) -> int:
        """Target rows of the next unit: doubling from a small first unit up to the byte target."""
        return self._unit_rows

    def unscanned(self) -> int:
        """Rows of the owned splits not yet requested."""
        return sum(s - h for s, h in zip(self.size, self.head))

    def fetched_all(self, i: int) -> bool:
        """Every position of split ``i`` has been requested and handed over."""
        return self.head[i] >= self.size[i] and self.inflight[i] == 0

    def _plan(self) -> list[Segment]:
        segments: list[Segment] = []
        offset = 0
        for i in range(len(self._rows)):
            room = self.size[i] - self.head[i]
            if room <= 0:
                continue
            count = min(room, self._want(i, self._unit_rows, self.inflight[i]))
            if count <= 0:
                continue
            segments.append(Segment(i, self.head[i], count, offset))
            offset += count
        return segments

    def pump(self) -> None:
        """Submit units while the depth allows and some split wants rows."""
        while not self._closed and len(self._pending) < self._depth:
            segments = self._plan()
            if not segments:
                return
            self._submit(segments)

    def _submit(self, segments: list[Segment]) -> None:
        ids = np.concatenate([self._rows[s.split][s.first : s.first + s.count] for s in segments])
        for s in segments:
            self.head[s.split] += s.count
            self.inflight[s.split] += s.count
        number = self._numbers
        self._numbers += 1
        where = None
        if self._sorted:
            order = np.argsort(ids, kind="stable")
            ids = ids[order]
            where = np.empty_like(order)
            where[order] = np.arange(len(order))
        done: Future[Any] = Future()
        read = self._io.submit(self._read, ids, number)
        read.add_done_callback(lambda f: self._transform(f, done, number))
        self._pending.append(Unit(number, segments, len(ids), done, where))
        self._gauge(unscanned_rows=-len(ids))
        ceiling = self._ceiling or MAX_UNIT_ROWS
        self._unit_rows = max(self._min_rows, min(ceiling, self._unit_rows * 2))

    def _read(self, ids: np.ndarray, number: int) -> pa.RecordBatch:
        if self._hook is not None:
            self._hook("read", number)
        t0 = time.perf_counter_ns()
        table = self._reader.take(ids, self._columns)
        elapsed = time.perf_counter_ns() - t0
        batch = _one_batch(table)
        self._counters.add(bytes_loaded=batch.nbytes, fetch_ns=elapsed)
        self._gauge(raw_rows=batch.num_rows)
        if batch.num_rows and self._ceiling is None:
            per_row = max(1, batch.nbytes // batch.num_rows)
            self._ceiling = max(self._min_rows, min(MAX_UNIT_ROWS, TARGET_UNIT_BYTES // per_row))
        return batch

    def _transform(self, read: Future[Any], done: Future[Any], number: int) -> None:
        """Runs in the I/O thread once a read finishes: fan the unit out to the transform stage."""
        if read.cancelled():
            done.cancel()
            return
        error = read.exception()
        if error is not None:
            done.set_exception(error)
            return
        batch: pa.RecordBatch = read.result()
        step = self._stage.slice_rows or max(1, batch.num_rows)
        starts = list(range(0, batch.num_rows, step)) or [0]
        parts: list[tuple[int, Any] | None] = [None] * len(starts)
        remaining = [len(starts)]
        lock = threading.Lock()

        def run(index: int, start: int) -> None:
            size = max(0, min(step, batch.num_rows - start))
            try:
                if self._hook is not None:
                    self._hook("transform", number)
                parts[index] = (start, self._stage.run(batch.slice(start, step)))
            except BaseException as exc:
                if not done.done():
                    done.set_exception(exc)
                return
            finally:
                self._gauge(raw_rows=-size)
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last and not done.done():
                try:
                    done.set_result(self._stage.combine([p for p in parts if p is not None]))
                except BaseException as exc:
                    done.set_exception(exc)

        try:
            for index, start in enumerate(starts):
                self._tx.submit(run, index, start)
        except RuntimeError:  # the pipeline was closed meanwhile
            if not done.done():
                done.cancel()

    # ------------------------------------------------------------ consuming

    def next_unit(self) -> tuple[Unit, Any] | None:
        """Wait for the oldest unit and hand it over (``None`` when nothing is in flight)."""
        self.pump()
        if not self._pending:
            return None
        unit = self._pending.popleft()
        try:
            payload = unit.future.result()
        except StageError as exc:
            raise exc.error from None
        finally:
            for s in unit.segments:
                self.inflight[s.split] -= s.count
        self.pump()
        return unit, payload

    def close(self) -> None:
        """Stop: cancel queued work, do not wait for reads already running."""
        with self._gauge_lock:
            if self._closed:
                return
            self._closed = True
            self._counters.add(**{name: -value for name, value in self._gauges.items()})
        for unit in self._pending:
            unit.future.cancel()
        self._pending.clear()
        self._io.shutdown(wait=False, cancel_futures=True)
        self._tx.shutdown(wait=False, cancel_futures=True)


def _one_batch(table: pa.Table | pa.RecordBatch) -> pa.RecordBatch:
    if isinstance(table, pa.RecordBatch):
        return table
    batches = table.combine_chunks().to_batches()
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return pa.concat_batches(batches)
