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
  buffered rows (ready + in flight) are below its target. The target is the
  read-ahead policy's (``_demand``), which the pipeline asks with what it needs to know.
* Byte budget (``read_ahead_bytes``): what the consumer side holds
  (``buffered()``: the mode's feed) plus every unit in flight, counted twice
  (its read batch and its transformed result), stays within the budget. A unit
  is submitted only if its estimate fits; when nothing is in flight one unit
  always goes (the consumer needs rows), so the bound is exceeded only by a
  single row larger than the budget allows. Before the first unit, the row
  size is known from the schema (every column of fixed width) or measured by
  a *probe*: one read of the first row of up to ``PROBE_SPLITS`` owned splits,
  whose rows are dropped (the units read them again); the reader remembers the
  measured size (``Reader.row_bytes_seen``), so later iterations skip the probe. A row weighs the mean
  Arrow bytes per row read so far, and a unit holds at most
  ``min(8 MiB, budget / (2 * (io_queue_depth + 1)))`` of them (at least one row,
  even below ``read_batch_size``).
* No hang (``read_timeout``): the consumer waits at most that long for a
  unit's read; then it raises ``TimeoutError`` naming the table (the read's
  thread is abandoned, the pipeline closes).
* A split whose sequence has a ``read_align`` (a local permutation: its window) is requested up
  to a multiple of it, so every window is read whole, as its few runs of contiguous positions;
  this reads at most ``read_align - 1`` rows a split more than the policy asked for.
* A pipeline may read a unit's rows in row-id order (``sorted_reads``): a
  LanceDB take of sorted ids has no rows to put back in order, so it is faster. The
  unit's ``where`` then maps each of its positions to its row of the batch,
  and the consumer gathers in unit order (packing does, while it inserts EOS).
* The first pipeline of a process raises glibc's mmap threshold above a unit's buffers
  (``_allocator``), so they are not mapped and faulted in afresh for every unit.
* The consumer thread plans and submits units ("pumps"); pool threads only
  read (stage 1) and transform (stage 2). A unit's slices are transformed in
  parallel and joined in order. A timing hook (tests only) can delay each
  stage, to shake thread interleavings.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ._allocator import raise_mmap_threshold
from ._lance import Reader
from ._stats import Counters

TARGET_UNIT_BYTES = 8 * 2**20
MAX_UNIT_ROWS = 16384
FIRST_UNIT_ROWS = 512
PROBE_SPLITS = 8
"""The probe reads the first row of at most this many owned splits."""
IN_FLIGHT_COPIES = 2
"""A unit in flight counts twice: its read batch and its transformed result."""

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
    read: Future[Any] | None = field(default=None, repr=False)
    """The storage read's future (done once the rows arrived)."""
    nbytes: int | None = None
    """Arrow bytes of the unit's read batch (``None`` until read)."""


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
    the whole unit is one slice). ``one_batch``: the read is joined into one
    ``RecordBatch`` first (a copy); ``False`` hands the stage the read's
    ``pyarrow.Table`` as it came (its batches are not copied). ``max_unit_rows``
    raises the rows a unit may hold (``None``: ``MAX_UNIT_ROWS``); the unit's
    bytes stay within ``TARGET_UNIT_BYTES`` and the budget either way.
    """

    run: Callable[[pa.RecordBatch | pa.Table], Any]
    combine: Callable[[list[tuple[int, Any]]], Any]
    slice_rows: int | None
    one_batch: bool = True
    max_unit_rows: int | None = None


@dataclass(frozen=True)
class ReadLimits:
    """How much a pipeline reads at once and ahead, and how long it waits (from the settings).

    Attributes:
        io_queue_depth: units in flight at most.
        transform_threads: threads of the transform stage.
        min_unit_rows: smallest unit worth reading (the read batch size).
        read_ahead_bytes: the byte budget (``None``: none, only the row bounds).
        read_timeout: seconds the consumer waits for a read (``None``: forever).
        row_bytes_hint: Arrow bytes of a row known from the schema (no probe is needed).
    """

    io_queue_depth: int
    transform_threads: int
    min_unit_rows: int
    read_ahead_bytes: int | None = None
    read_timeout: float | None = None
    row_bytes_hint: int | None = None


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
        counters: observability counters.
        limits: depths, unit size, byte budget and timeout (:class:`ReadLimits`).
        sorted_reads: read each unit in row-id order (see ``Unit.where``).
        hook: test-only timing hook.
        buffered: bytes the consumer side holds (the mode's feed); counted against the budget.
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
        counters: Counters,
        limits: ReadLimits,
        sorted_reads: bool = False,
        hook: TimingHook | None = None,
        buffered: Callable[[], int] | None = None,
    ) -> None:
        raise_mmap_threshold()  # once per process: unit-sized buffers stay mapped (``_allocator``)
        self._reader = reader
        self._columns = columns
        self._rows = split_rows
        self._stage = stage
        self._want = want
        self._counters = counters
        self._hook = hook
        self._sorted = sorted_reads
        self._buffered = buffered
        self._depth = limits.io_queue_depth
        self._min_rows = max(1, limits.min_unit_rows)
        self._max_rows = stage.max_unit_rows or MAX_UNIT_ROWS
        self._budget = limits.read_ahead_bytes
        self._timeout = limits.read_timeout
        self.size = [len(r) for r in split_rows]
        self.head = list(start)
        self.inflight = [0] * len(split_rows)
        self._pending: deque[Unit] = deque()
        self._io = ThreadPoolExecutor(max_workers=self._depth, thread_name_prefix="elastic-loader-io")
        self._tx = ThreadPoolExecutor(
            max_workers=max(1, limits.transform_threads), thread_name_prefix="elastic-loader-tx"
        )
        self._numbers = 0
        self._unit_rows = max(self._min_rows, FIRST_UNIT_ROWS)
        self._ceiling: int | None = None
        self._seen = [0, 0]  # bytes and rows of every read so far (the row-size estimate)
        hint = limits.row_bytes_hint
        if hint is None:  # an earlier pipeline of this reader measured it
            hint = getattr(reader, "row_bytes_seen", None)
        elif getattr(reader, "row_bytes_seen", None) is None:
            with contextlib.suppress(AttributeError):  # the reader picks its read path by row size
                reader.row_bytes_seen = hint
        self._hint = hint if self._budget is not None else None
        self._closed = False
        self._gauge_lock = threading.Lock()
        self._gauges = {"unscanned_rows": 0, "raw_rows": 0}
        self._gauge(unscanned_rows=self.unscanned())
        if self._hint is not None:
            self._ceiling = self._rows_per_unit(float(self._hint))
            self._unit_rows = max(1, min(self._ceiling, self._unit_rows))

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
            align = getattr(self._rows[i], "read_align", 1)
            if align > 1:  # end on a window boundary: a local window's rows are a few contiguous runs
                count = min(room, -(-(self.head[i] + count) // align) * align - self.head[i])
            segments.append(Segment(i, self.head[i], count, offset))
            offset += count
        return segments

    def row_bytes(self) -> float | None:
        """Mean Arrow bytes per row read so far (``None`` before any row arrived)."""
        with self._gauge_lock:
            seen_bytes, seen_rows = self._seen
        if not seen_rows:
            return None if self._hint is None else float(self._hint)
        return seen_bytes / seen_rows

    def held_bytes(self) -> int:
        """What the budget counts now: the consumer side's bytes plus the units in flight."""
        buffered = 0 if self._buffered is None else self._buffered()
        per_row = self.row_bytes() or 0.0
        inflight = 0.0
        for unit in list(self._pending):
            size = unit.nbytes
            inflight += size if size is not None else unit.rows * per_row
        return int(buffered + IN_FLIGHT_COPIES * inflight)

    def _admits(self) -> bool:
        """Whether another unit fits in the byte budget (the first in flight always does)."""
        if self._budget is None or not self._pending:
            return True
        per_row = self.row_bytes()
        if per_row is None:
            return False  # nothing is known about the row size yet: one unit at a time
        upcoming = IN_FLIGHT_COPIES * self._unit_rows * per_row
        return self.held_bytes() + upcoming <= self._budget

    def pump(self) -> None:
        """Submit units while the depth and the byte budget allow and some split wants rows."""
        if self._budget is not None and self._ceiling is None and not self._pending:
            self._probe()
        while not self._closed and len(self._pending) < self._depth and self._admits():
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
        unit = Unit(number, segments, len(ids), done, where)
        self._pending.append(unit)
        unit.read = self._io.submit(self._read, ids, unit)
        unit.read.add_done_callback(lambda f: self._transform(f, done, number))
        self._gauge(unscanned_rows=-len(ids))
        self._grow()

    def _probe(self) -> None:
        """Measure the row size: read the next row of up to ``PROBE_SPLITS`` owned splits (waiting at
        most ``read_timeout``) and drop them. Nothing to read: nothing to learn."""
        firsts = [self._rows[i][self.head[i]] for i in range(len(self._rows)) if self.head[i] < self.size[i]]
        if not firsts:
            return
        ids = np.asarray(firsts[:PROBE_SPLITS])
        read = self._io.submit(self._reader.take, ids, self._columns)
        try:
            table = read.result(timeout=self._timeout)
        except FutureTimeout:
            self.close()
            raise self._timed_out(len(ids)) from None
        batch = _one_batch(table)
        self._counters.add(bytes_loaded=batch.nbytes)
        self._learn(batch.nbytes, max(1, batch.num_rows))

    def _timed_out(self, rows: int) -> TimeoutError:
        return TimeoutError(
            f"reading {rows} rows of {self._reader.where} made no progress for "
            f"{self._timeout:g} s (read_timeout); the storage does not answer"
        )

    def _grow(self) -> None:
        """The next unit's target rows: doubling up to the ceiling."""
        ceiling = self._ceiling or self._max_rows
        floor = self._min_rows if self._budget is None else 1
        self._unit_rows = max(floor, min(ceiling, self._unit_rows * 2))

    def _unit_bytes(self) -> int:
        """Arrow bytes one unit may hold."""
        if self._budget is None:
            return TARGET_UNIT_BYTES
        return max(1, min(TARGET_UNIT_BYTES, self._budget // (IN_FLIGHT_COPIES * (self._depth + 1))))

    def _read(self, ids: np.ndarray, unit: Unit) -> pa.RecordBatch:
        if self._hook is not None:
            self._hook("read", unit.number)
        t0 = time.perf_counter_ns()
        table = self._reader.take(ids, self._columns)
        elapsed = time.perf_counter_ns() - t0
        batch = _one_batch(table) if self._stage.one_batch else _as_table(table)
        unit.nbytes = batch.nbytes
        self._counters.add(bytes_loaded=batch.nbytes, fetch_ns=elapsed)
        self._gauge(raw_rows=batch.num_rows)
        if batch.num_rows:
            self._learn(batch.nbytes, batch.num_rows)
        return batch

    def _learn(self, nbytes: int, rows: int) -> None:
        """A read brought ``rows`` rows of ``nbytes``: update the row size and the unit ceiling."""
        with self._gauge_lock:
            self._seen[0] += nbytes
            self._seen[1] += rows
            per_row = max(1.0, self._seen[0] / self._seen[1])
        with contextlib.suppress(AttributeError):  # the next iteration over this reader needs no probe
            self._reader.row_bytes_seen = max(1, round(per_row))
        if self._budget is None:
            if self._ceiling is None:  # without a budget the first read fixes the ceiling
                self._ceiling = max(self._min_rows, min(self._max_rows, int(TARGET_UNIT_BYTES // per_row)))
            return
        first = self._ceiling is None
        self._ceiling = self._rows_per_unit(per_row)
        if first:  # the first unit starts as usual, within the unit's bytes
            self._unit_rows = max(1, min(self._ceiling, self._unit_rows))

    def _rows_per_unit(self, per_row: float) -> int:
        """Rows of one unit at ``per_row`` bytes (at least one, at most the stage's ``max_unit_rows``)."""
        return max(1, min(self._max_rows, int(self._unit_bytes() // per_row)))

    def _transform(self, read: Future[Any], done: Future[Any], number: int) -> None:
        """Runs in the I/O thread once a read finishes: fan the unit out to the transform stage."""
        if read.cancelled():
            done.cancel()
            return
        error = read.exception()
        if error is not None:
            done.set_exception(error)
            return
        batch: pa.RecordBatch | pa.Table = read.result()  # a Table where the stage is not one_batch
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
        unit = self._pending[0]
        self._wait_read(unit)
        self._pending.popleft()
        try:
            payload = unit.future.result()
        except StageError as exc:
            raise exc.error from exc.error.__cause__  # the wrapped error as it was
        finally:
            for s in unit.segments:
                self.inflight[s.split] -= s.count
        self.pump()
        return unit, payload

    def _wait_read(self, unit: Unit) -> None:
        """Wait for ``unit``'s read at most ``read_timeout`` seconds.

        Raises:
            TimeoutError: the read brought nothing in that time (the pipeline is closed).
        """
        if self._timeout is None or unit.read is None:
            return
        try:
            unit.read.exception(timeout=self._timeout)
        except FutureTimeout:
            self.close()
            raise self._timed_out(unit.rows) from None
        except CancelledError:
            return

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


def _as_table(read: pa.Table | pa.RecordBatch) -> pa.Table:
    return read if isinstance(read, pa.Table) else pa.Table.from_batches([read])


def _one_batch(table: pa.Table | pa.RecordBatch) -> pa.RecordBatch:
    if isinstance(table, pa.RecordBatch):
        return table
    batches = table.combine_chunks().to_batches()
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return pa.concat_batches(batches)
