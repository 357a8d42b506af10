"""Observability counters.

Rules: every update goes through one lock (pool threads add concurrently).
A process that iterates inside a DataLoader worker also publishes its values
into its own slot of a shared int64 array; readers add the local values and
every *other* slot, so worker counters are summed, never last-writer-wins. A
worker of a later pass that takes a slot continues its cumulative values (it
adds to what the slot's earlier worker left), so passes add up too.
Cumulative counters (bytes, times, skips, deliveries) only grow; gauges
(queue depths, unscanned rows, consumed rows) describe live iterations and
are zero when nothing iterates. The shared array travels only to processes
being started (:func:`spawning`); a plainly pickled copy counts on its own.
"""

from __future__ import annotations

import ctypes
import multiprocessing.context
import threading
from dataclasses import dataclass
from multiprocessing.sharedctypes import RawArray
from typing import Any, Generic, NoReturn, Protocol, TypeVar, overload

import numpy as np

from .._exports import public

MAX_WORKERS = 256
_CUMULATIVE = ("bytes_loaded", "fetch_ns", "transform_ns", "rows_skipped", "rows_delivered")
_GAUGES = ("consumed_rows", "raw_rows", "ready_rows", "unscanned_rows")
_FIELDS = _CUMULATIVE + _GAUGES
_WIDTH = len(_FIELDS)
FLAG_UNTRACKED = 0  # header slot: a plain DataLoader with workers iterated the dataset
_HEADER = 1


@public
@dataclass(frozen=True)
class Statistics:
    """An immutable snapshot of a dataset's pipeline counters (summed over worker processes).

    Attributes:
        bytes_loaded: Arrow bytes fetched from storage, before any transform (cumulative).
        fetch_time: seconds spent inside storage reads, summed over I/O threads (cumulative).
        transform_time: seconds spent inside successful transform calls (cumulative).
        rows_skipped: rows dropped by ``on_transform_error`` (cumulative).
        rows_delivered: rows (or, when packing, documents) handed to consumers (cumulative).
        consumed_rows: rows or documents yielded by the live iterations; 0 when idle.
        raw_queue_depth: fetched rows waiting for a transform; 0 when idle.
        prefetch_queue_depth: transformed rows (or buffered documents) waiting to be yielded; 0 when idle.
        unscanned_rows: rows of the owned splits not yet requested from storage; 0 when idle.
    """

    bytes_loaded: int
    fetch_time: float
    transform_time: float
    rows_skipped: int
    rows_delivered: int
    consumed_rows: int
    raw_queue_depth: int
    prefetch_queue_depth: int
    unscanned_rows: int


T = TypeVar("T", int, float)


class _HasStatistics(Protocol):
    def statistics(self) -> Statistics: ...


class StatisticField(Generic[T]):
    """A read-only attribute answering one field of its owner's ``statistics()``.

    ``bytes_loaded = StatisticField[int]("doc")`` on a class with a
    ``statistics()`` method reads ``obj.statistics().bytes_loaded``, like a
    property of that name with that docstring.
    """

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> StatisticField[T]: ...

    @overload
    def __get__(self, obj: _HasStatistics, owner: type | None = None) -> T: ...

    def __get__(self, obj: _HasStatistics | None, owner: type | None = None) -> T | StatisticField[T]:
        if obj is None:
            return self
        value: T = getattr(obj.statistics(), self._name)
        return value

    def __set__(self, obj: object, value: object) -> NoReturn:
        raise AttributeError(f"property {self._name!r} of {type(obj).__name__!r} object has no setter")


class Counters:
    """Thread-safe counters of one process, optionally published to a shared slot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(_FIELDS, 0)
        self._shared: Any = None
        self._slot: int | None = None
        self._baseline = dict.fromkeys(_CUMULATIVE, 0)
        self._carried = dict.fromkeys(_CUMULATIVE, 0)

    # -- pickling: counters travel with the dataset, the lock and slot do not; the shared
    # array only to a process being started
    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"values": dict(self._values), "shared": self._shared if spawning() else None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(_FIELDS, 0)
        self._values.update({k: state["values"][k] for k in _CUMULATIVE})
        self._shared = state["shared"]
        self._slot = None
        self._baseline = dict.fromkeys(_CUMULATIVE, 0)
        self._carried = dict.fromkeys(_CUMULATIVE, 0)

    def attach_shared(self, shared: Any) -> None:
        """Use ``shared`` (from :func:`new_shared`) for cross-process publishing."""
        self._shared = shared

    @property
    def shared(self) -> Any:
        return self._shared

    def publish_as_worker(self, worker_id: int) -> None:
        """From now on, mirror this process's values into worker slot ``worker_id``.

        The slot's cumulative values are carried on (what workers of earlier
        passes did in that slot stays counted) and this process adds what it
        does since it started; cumulative counters pickled from the parent stay
        local and are not published again.
        """
        if self._shared is None or not 0 <= worker_id < MAX_WORKERS:
            return
        with self._lock:
            self._slot = worker_id
            self._baseline = {k: self._values[k] for k in _CUMULATIVE}
            base = _HEADER + worker_id * _WIDTH
            self._carried = {k: int(self._shared[base + _FIELDS.index(k)]) for k in _CUMULATIVE}
            self._publish()

    def _publish(self) -> None:
        if self._slot is None or self._shared is None:
            return
        base = _HEADER + self._slot * _WIDTH
        for i, name in enumerate(_FIELDS):
            value = self._values[name]
            if name in _CUMULATIVE:
                value += self._carried[name] - self._baseline[name]
            self._shared[base + i] = value

    def add(self, **deltas: int) -> None:
        """Add to cumulative counters (and gauges given as deltas)."""
        with self._lock:
            for name, delta in deltas.items():
                self._values[name] += delta
            self._publish()

    def set(self, **values: int) -> None:
        """Set gauges."""
        with self._lock:
            self._values.update(values)
            self._publish()

    def idle(self) -> None:
        """Zero every gauge (an iteration ended)."""
        self.set(**dict.fromkeys(_GAUGES, 0))

    def snapshot(self) -> Statistics:
        """Local values plus every other worker slot."""
        with self._lock:
            totals = dict(self._values)
            shared, own = self._shared, self._slot
        if shared is not None:
            slots = np.frombuffer(shared, dtype=np.int64)[_HEADER:].reshape(MAX_WORKERS, _WIDTH)
            sums = slots.sum(axis=0) - (slots[own] if own is not None else 0)
            for i, name in enumerate(_FIELDS):
                totals[name] += int(sums[i])
        return Statistics(
            bytes_loaded=totals["bytes_loaded"],
            fetch_time=totals["fetch_ns"] / 1e9,
            transform_time=totals["transform_ns"] / 1e9,
            rows_skipped=totals["rows_skipped"],
            rows_delivered=totals["rows_delivered"],
            consumed_rows=totals["consumed_rows"],
            raw_queue_depth=totals["raw_rows"],
            prefetch_queue_depth=totals["ready_rows"],
            unscanned_rows=totals["unscanned_rows"],
        )


def spawning() -> bool:
    """True while multiprocessing pickles the arguments of a process it starts.

    Shared memory can only travel then; a plain pickle leaves it behind.
    """
    return multiprocessing.context.get_spawning_popen() is not None


def new_shared() -> Any:
    """A zeroed shared array: one header slot plus one slot of counters per worker."""
    return RawArray(ctypes.c_int64, _HEADER + MAX_WORKERS * _WIDTH)


def zero_worker_gauges(shared: Any) -> None:
    """Zero every worker's gauges (their iterations are over)."""
    if shared is None:
        return
    for slot in range(MAX_WORKERS):
        base = _HEADER + slot * _WIDTH
        for i, name in enumerate(_FIELDS):
            if name in _GAUGES:
                shared[base + i] = 0


class StatisticsView:
    """The counters of :meth:`statistics` as read-only attributes (a base of ``StreamingDataset``)."""

    def statistics(self) -> Statistics:
        """A snapshot of the pipeline counters."""
        raise NotImplementedError

    bytes_loaded = StatisticField[int]("Arrow bytes read from storage, before transforms (cumulative).")
    fetch_time = StatisticField[float]("Seconds spent in storage reads (cumulative, summed over threads).")
    transform_time = StatisticField[float]("Seconds spent in successful transform calls (cumulative).")
    raw_queue_depth = StatisticField[int](
        "Rows requested or fetched and waiting for their transform (0 when idle)."
    )
    prefetch_queue_depth = StatisticField[int]("Transformed rows waiting to be yielded (0 when idle).")
    unscanned_rows = StatisticField[int](
        "Rows of the owned splits not yet requested from storage (0 when idle)."
    )
    rows_skipped = StatisticField[int]("Rows dropped by ``on_transform_error`` (cumulative).")
    consumed_rows = StatisticField[int](
        "Rows (packing: documents) yielded by the live iterations (0 when idle)."
    )
