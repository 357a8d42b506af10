"""Row mode: transform stage, per-split ready queues, and the yield loop.

Rules:
* A unit's transform runs on read batches of at most ``read_batch_size``
  rows. A failing batch is re-run row by row so that every row gets its own
  outcome (value, skipped, or an error to re-raise when that row is needed);
  a callable ``on_transform_error`` is asked once per failing row. Outcomes
  never depend on batch boundaries for row-wise transforms. The error policy
  (what is dropped, row isolation, the warning) is ``_faults``'s.
* The yield loop first catches up lagging splits (by (samples, split id)),
  then delivers whole cycles: k cycles at once, where every owned split has
  at least k ready rows. A cycle that some split cannot complete ends the
  iteration: the first such split in owned order decides whether that is
  the end of the epoch or its row's error.
* Without a transform a row is the dict ``RecordBatch.to_pylist`` makes, built column by column
  (:func:`pylist`): the same keys in the same order and equal values of the same types; only a
  fixed-size binary column without nulls is sliced from its buffer, every other column is the
  column's own ``to_pylist``; duplicate or no column names fall back to ``to_pylist`` itself.
* Progress is exact after every yielded row but is kept lazily: a chunk of k
  cycles records its base and a counter; per-split values are computed on
  demand (state_dict) and folded in when the chunk ends.
"""

from __future__ import annotations

import heapq
import itertools
import operator
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from ._faults import OnError, forgiving, isolate
from ._fetch import Pipeline, Stage, StageError, Unit
from ._stats import Counters

MAX_CHUNK_CYCLES = 4096


@dataclass
class RowPayload:
    values: list[Any]
    skipped: set[int] | None
    errors: dict[int, BaseException] | None


def _rejected_output(out: object) -> str | None:
    if isinstance(out, Mapping):
        return "a mapping (iterating it would yield its keys)"
    if isinstance(out, (pa.RecordBatch, pa.Table)):
        return "an Arrow batch or table (iterating it would yield its columns)"
    if hasattr(out, "columns") and hasattr(out, "shape") and not isinstance(out, np.ndarray):
        return "a data frame (iterating it would yield its column names)"
    return None


def _column_values(column: pa.Array) -> list[Any]:
    """``column.to_pylist()``; a fixed-size binary column without nulls as slices of its buffer."""
    kind = column.type
    if pa.types.is_fixed_size_binary(kind) and column.null_count == 0 and kind.byte_width > 0:
        width = kind.byte_width
        data = column.buffers()[1]
        raw = data.slice(column.offset * width, len(column) * width).to_pybytes()
        return [raw[at : at + width] for at in range(0, len(raw), width)]
    values: list[Any] = column.to_pylist()
    return values


def pylist(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """``batch.to_pylist()``, built from whole columns (see the module rules)."""
    names = batch.schema.names
    if not names or len(set(names)) != len(names):
        rows: list[dict[str, Any]] = batch.to_pylist()
        return rows
    columns = [_column_values(batch.column(i)) for i in range(len(names))]
    if len(names) == 1:
        (first,) = names
        return [{first: a} for a in columns[0]]
    if len(names) == 2:
        first, second = names
        return [{first: a, second: b} for a, b in zip(*columns)]
    return list(map(dict, map(zip, itertools.repeat(names), zip(*columns))))


def make_row_stage(
    transform: Callable[[pa.RecordBatch], Any] | None,
    on_error: OnError,
    read_batch_size: int,
    counters: Counters,
) -> Stage:
    """The row-mode transform stage for one iterator."""

    def rows_of(batch: pa.RecordBatch, expected: int) -> list[Any]:
        t0 = time.perf_counter_ns()
        try:
            out = pylist(batch) if transform is None else transform(batch)
        except StopIteration as exc:  # an Exception, but it would end the consumer's loop unseen
            error = RuntimeError(
                "transform raised StopIteration; it is an error in every on_transform_error mode "
                "(raise another exception to drop a row)"
            )
            error.__cause__ = exc
            raise StageError(error) from exc
        elapsed = time.perf_counter_ns() - t0
        problem = _rejected_output(out)
        if problem is not None:
            raise StageError(
                TypeError(f"transform returned {problem}; return one item per input row, e.g. a list")
            )
        if not isinstance(out, list) and not hasattr(out, "__iter__"):
            raise StageError(
                TypeError(
                    f"transform returned {type(out).__name__}, not one item per input row; return a list "
                    "(the skip modes drop rows whose transform raised, nothing else)"
                )
            )
        rows = out if isinstance(out, list) else list(out)
        if len(rows) != expected:
            raise StageError(
                ValueError(
                    f"transform returned {len(rows)} rows for a batch of {expected}; a transform must "
                    "return exactly one output row per input row (raise to drop a bad row with "
                    "on_transform_error='skip')"
                )
            )
        counters.add(transform_ns=elapsed)
        return rows

    forgive = forgiving(on_error)

    def run(part: pa.RecordBatch) -> RowPayload:
        try:
            return RowPayload(rows_of(part, part.num_rows), None, None)
        except StageError:
            raise
        except Exception as exc:
            batch_error = exc
        values: list[Any] = []
        skipped: set[int] = set()
        errors: dict[int, BaseException] = {}
        isolate(part, 0, batch_error, values, skipped, errors, rows_of, forgive, on_error, counters)
        return RowPayload(values, skipped or None, errors or None)

    def combine(parts: list[tuple[int, RowPayload]]) -> RowPayload:
        if len(parts) == 1:
            return parts[0][1]
        values: list[Any] = []
        skipped: set[int] = set()
        errors: dict[int, BaseException] = {}
        for start, part in parts:
            values.extend(part.values)
            if part.skipped:
                skipped.update(start + k for k in part.skipped)
            if part.errors:
                errors.update((start + k, e) for k, e in part.errors.items())
        return RowPayload(values, skipped or None, errors or None)

    return Stage(run, combine, None if transform is None else read_batch_size)


def value_bytes(value: object, depth: int = 0) -> int:
    """The payload bytes of one transformed row: buffers, strings, arrays and tensors, through
    dicts, lists and tuples (two levels); anything else counts 0 (its Arrow size stands)."""
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, torch.Tensor):
        return int(value.numel() * value.element_size())
    if depth >= 2:
        return 0
    if isinstance(value, Mapping):
        return sum(value_bytes(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(value_bytes(v, depth + 1) for v in value)
    return 0


def sampled_bytes(values: list[Any]) -> float:
    """Mean :func:`value_bytes` of the first, middle and last of ``values`` that are not ``None``
    (the place of a skipped row); 0 when there is none."""
    picks = [values[k] for k in sorted({0, len(values) // 2, len(values) - 1}) if values]
    sizes = [value_bytes(v) for v in picks if v is not None]
    return sum(sizes) / len(sizes) if sizes else 0.0


class RowFeed:
    """Ready rows of every owned split, fed from the pipeline's units in order.

    Bytes: a row weighs the larger of its unit's Arrow bytes per row and the
    measured size of the unit's transformed values (:func:`value_bytes`, on up
    to three sampled rows); ``held_bytes`` is the weight of the ready rows plus
    the rows taken for the chunk being yielded (``out_bytes``, released when
    the chunk ends).
    """

    def __init__(self, n: int) -> None:
        self.values: list[list[Any]] = [[] for _ in range(n)]
        self.positions: list[list[int]] = [[] for _ in range(n)]
        self.read = [0] * n
        self.error: list[BaseException | None] = [None] * n
        """Per split: the error of its first failing row; nothing after it is kept."""
        self._weights: list[deque[list[float]]] = [deque() for _ in range(n)]
        """Per split: runs ``[rows, bytes per row]`` of its ready rows, oldest first."""
        self.ready_bytes = 0.0
        self.out_bytes = 0.0

    def held_bytes(self) -> int:
        """Bytes of the rows this feed holds (ready, or taken for the current chunk)."""
        return int(self.ready_bytes + self.out_bytes)

    def ready(self, i: int) -> int:
        return len(self.values[i]) - self.read[i]

    def take(self, i: int, k: int) -> tuple[list[Any], list[int], float]:
        """The next ``k`` ready rows of split ``i``: values, positions, and their bytes."""
        r = self.read[i]
        vals, pos = self.values[i][r : r + k], self.positions[i][r : r + k]
        # taken slots are cleared at once (a row the consumer dropped is not kept alive here);
        # the list itself is compacted lazily, so taking one row at a time stays O(1)
        self.values[i][r : r + len(vals)] = [None] * len(vals)
        r += len(vals)
        if r > 4096 and r * 2 > len(self.values[i]):
            del self.values[i][:r]
            del self.positions[i][:r]
            r = 0
        self.read[i] = r
        return vals, pos, self._release(i, len(vals))

    def _release(self, i: int, k: int) -> float:
        """Drop the weights of split ``i``'s ``k`` oldest ready rows; their bytes."""
        runs, weight = self._weights[i], 0.0
        while k > 0 and runs:
            run = runs[0]
            used = min(k, int(run[0]))
            weight += used * run[1]
            k -= used
            run[0] -= used
            if run[0] <= 0:
                runs.popleft()
        self.ready_bytes = max(0.0, self.ready_bytes - weight)
        return weight

    def _hold(self, i: int, rows: int, per_row: float) -> None:
        if rows:
            self._weights[i].append([float(rows), per_row])
            self.ready_bytes += rows * per_row

    def distribute(self, unit: Unit, payload: RowPayload, counters: Counters) -> None:
        values, skipped, errors = payload.values, payload.skipped, payload.errors
        per_row = max((unit.nbytes or 0) / max(1, unit.rows), sampled_bytes(values))
        added = 0
        for seg in unit.segments:
            i, first, count, off = seg.split, seg.first, seg.count, seg.offset
            if self.error[i] is not None:
                continue
            if skipped is None and errors is None:
                self.values[i].extend(values[off : off + count])
                self.positions[i].extend(range(first, first + count))
                added += count
                self._hold(i, count, per_row)
                continue
            kept = 0
            for j in range(count):
                k = off + j
                if errors is not None and k in errors:
                    self.error[i] = errors[k]
                    break
                if skipped is not None and k in skipped:
                    continue
                self.values[i].append(values[k])
                self.positions[i].append(first + j)
                kept += 1
            added += kept
            self._hold(i, kept, per_row)
        counters.add(ready_rows=added)


class RowCursor:
    """The live position of one row iteration: exact per-split progress of the owned splits, kept
    lazily during a chunk (the checkpoint record is ``_checkpoint.RowState``)."""

    def __init__(self, samples: list[int], positions: list[int]) -> None:
        self.samples = samples
        self.positions = positions
        self._lock = threading.Lock()
        self._chunk: Sequence[Sequence[int]] | None = None  # per split: positions of the chunk's rows
        self._handed = 0
        self._source: tuple[Iterator[Any], int] | None = None

    @property
    def cursor(self) -> int:
        """Rows of the current chunk already handed out (read off the chunk's iterator when one
        is tracked: its items left say how many it gave, with no work per row)."""
        source = self._source
        if source is None:
            return self._handed
        return source[1] - operator.length_hint(source[0])

    @cursor.setter
    def cursor(self, value: int) -> None:
        self._source, self._handed = None, value

    def begin(
        self, positions: Sequence[Sequence[int]], source: Iterator[Any] | None = None, total: int = 0
    ) -> None:
        """A chunk starts; ``source`` (an iterator over its ``total`` rows, e.g. a list's) counts
        the rows handed out from now on."""
        with self._lock:
            self._chunk = positions
            self.cursor = 0
            if source is not None:
                self._source = (source, total)

    def end(self, counters: Counters) -> None:
        """The chunk is over: fold its progress and count its handed-out rows (atomically)."""
        with self._lock:
            handed = self.cursor
            self._fold()
            counters.add(ready_rows=-handed, consumed_rows=handed, rows_delivered=handed)

    def locked(self) -> threading.Lock:
        """Held while counters and cursor must be read together."""
        return self._lock

    def _fold(self) -> None:
        if self._chunk is None:
            return
        samples, positions = self._current()
        self.samples[:] = samples
        self.positions[:] = positions
        self._chunk = None
        self.cursor = 0

    def _current(self) -> tuple[list[int], list[int]]:
        if self._chunk is None:
            return list(self.samples), list(self.positions)
        chunk_positions = self._chunk
        n = len(self.samples)
        full, extra = divmod(self.cursor, n)
        samples, positions = list(self.samples), list(self.positions)
        for i in range(n):
            t = full + (1 if i < extra else 0)
            if t:
                samples[i] += t
                positions[i] = chunk_positions[i][t - 1] + 1
        return samples, positions

    def current(self) -> tuple[list[int], list[int]]:
        """Samples and positions of the owned splits right now."""
        with self._lock:
            return self._current()

    def step(self, i: int, position: int) -> None:
        """One row of owned split ``i`` at ``position`` was handed out (catch-up)."""
        with self._lock:
            self._fold()
            self.samples[i] += 1
            self.positions[i] = position + 1


def catch_up_order(samples: Sequence[int], owned: list[int]) -> Iterator[int]:
    """The owned-split index of each catch-up row (row and columnar modes): until every split has
    the samples of the most advanced one, the next row comes from the split with the fewest, ties
    by split id. ``samples`` is read when the iteration starts; a caller whose split runs out stops."""
    start = list(samples)
    target = max(start)  # an iterator owns at least one split
    lagging = [(c, owned[i], i) for i, c in enumerate(start) if c < target]
    heapq.heapify(lagging)
    while lagging:
        count, split, i = heapq.heappop(lagging)
        yield i
        if count + 1 < target:
            heapq.heappush(lagging, (count + 1, split, i))


def iterate(
    pipeline: Pipeline,
    feed: RowFeed,
    progress: RowCursor,
    owned: list[int],
    counters: Counters,
) -> Iterator[Any]:
    """Yield the rows of the owned splits in canonical order (catch-up, then cycles)."""
    n = len(owned)

    def fill(i: int) -> bool:
        """Make split ``i`` have a ready row; False when it cannot (end or error)."""
        while feed.ready(i) == 0:
            if feed.error[i] is not None:
                return False
            got = pipeline.next_unit()
            if got is None:
                return False
            feed.distribute(got[0], got[1], counters)
        return True

    def raise_if_failed(i: int) -> None:
        """Split ``i`` cannot continue: raise its row's error if it has one (else the epoch is over)."""
        error = feed.error[i]
        if error is not None:
            raise error

    for i in catch_up_order(progress.samples, owned):
        if not fill(i):
            raise_if_failed(i)
            return
        (value,), (position,), _ = feed.take(i, 1)
        progress.step(i, position)
        counters.add(ready_rows=-1, consumed_rows=1, rows_delivered=1)
        yield value
    while True:
        for i in range(n):
            if not fill(i):
                raise_if_failed(i)
                return
        k = min(MAX_CHUNK_CYCLES, min(feed.ready(i) for i in range(n)))
        taken = [feed.take(i, k) for i in range(n)]
        if n == 1:
            rows = taken[0][0]
        else:
            rows = list(itertools.chain.from_iterable(zip(*(vals for vals, _, _ in taken))))
        handing = iter(rows)  # a list's iterator: the cursor reads how far it got (no per-row step here)
        progress.begin([pos for _, pos, _ in taken], handing, len(rows))
        weight = sum(w for _, _, w in taken)
        feed.out_bytes += weight
        try:
            yield from handing
        finally:
            # The chunk's rows count as ready until handed out; statistics() adds the cursor live.
            progress.end(counters)
            feed.out_bytes = max(0.0, feed.out_bytes - weight)
            del rows, taken
