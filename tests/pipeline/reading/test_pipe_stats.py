"""Observability (D11, B5, B6): exact counters, zero gauges when idle, thread-safe snapshots.

Worker processes (counters summed over workers) are covered in loader/test_pipe_loader.py.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from lancedb.streaming import StreamingDataset as Reference

from elastic_loader import Statistics, StreamingDataset

GAUGES = ("consumed_rows", "raw_queue_depth", "prefetch_queue_depth", "unscanned_rows")
CUMULATIVE = ("bytes_loaded", "fetch_time", "transform_time", "rows_skipped", "rows_delivered")
PACK = {"columns": ["tokens"], "pack_sequences": 6, "eos_id": 1, "pad_id": 0}


def gauges(ds: StreamingDataset) -> dict[str, int]:
    stats = ds.statistics()
    return {name: getattr(stats, name) for name in GAUGES}


IDLE = dict.fromkeys(GAUGES, 0)


def test_gauges_are_zero_when_idle(big_table: Any) -> None:
    ds = StreamingDataset(big_table, num_splits=2, read_batch_size=16, io_queue_depth=1, columns=["id"])
    assert gauges(ds) == IDLE
    it = iter(ds)
    rows = list(itertools.islice(it, 10))
    assert len(rows) == 10
    live = ds.statistics()
    assert live.consumed_rows == 10
    assert live.unscanned_rows > 0  # the gauges do move while iterating
    assert ds.unscanned_rows == live.unscanned_rows or ds.unscanned_rows < live.unscanned_rows
    it.close()  # early stop
    assert gauges(ds) == IDLE
    assert ds.consumed_rows == 0 and ds.unscanned_rows == 0
    list(ds)  # exhaustion
    assert gauges(ds) == IDLE


def test_packed_gauges_are_zero_when_idle(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=2, blocks_per_epoch=60, **PACK)
    it = iter(ds)
    list(itertools.islice(it, 6))
    assert ds.statistics().consumed_rows > 0
    it.close()
    assert gauges(ds) == IDLE
    list(ds)
    assert gauges(ds) == IDLE


def test_consumed_rows_counts_this_iterations_rows(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4)
    it = iter(ds)
    for k in range(1, 60):
        next(it)
        assert ds.consumed_rows == k
    it.close()
    it = iter(ds)  # the next iteration counts from zero (resumed offsets excluded)
    next(it)
    assert ds.consumed_rows == 1
    it.close()


def test_rows_delivered_is_cumulative_and_exact(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, read_batch_size=7)
    for n in (10, 15, 1):
        it = iter(ds)
        list(itertools.islice(it, n))
        it.close()
    assert ds.statistics().rows_delivered == 26
    list(ds)
    assert ds.statistics().rows_delivered == 200


def test_bytes_loaded_counts_every_fetched_row_once(multi_table: Any) -> None:
    """One int64 column without nulls: Arrow holds 8 bytes per row, and a full epoch reads each row once."""
    for kwargs in (
        {"num_splits": 4, "columns": ["id"]},
        {"num_splits": 2, "columns": ["id"], "read_batch_size": 3},
    ):
        ds = StreamingDataset(multi_table, **kwargs)
        list(ds)
        assert ds.bytes_loaded == 8 * 200
        assert ds.fetch_time > 0
        assert ds.transform_time > 0
        list(ds)  # exhausted: nothing more is read
        assert ds.bytes_loaded == 8 * 200
    # (The reference's value is not asserted: its shared counters are last-writer-wins and
    # written before its pools drain (B5 in spec/REFERENCE.md), so it varies from run to run.)


def test_statistics_from_another_thread_while_iterating_b6(big_table: Any, multi_table: Any) -> None:
    """A thread hammering statistics() and the properties for about a second: no error, no going back."""
    errors: list[BaseException] = []
    snapshots: list[Statistics] = []
    stop = threading.Event()

    def hammer(ds: StreamingDataset) -> None:
        try:
            while not stop.is_set():
                snapshots.append(ds.statistics())
                for name in (*GAUGES, "bytes_loaded", "fetch_time", "transform_time", "rows_skipped"):
                    value = getattr(ds, name)
                    assert value >= 0, (name, value)
        except BaseException as exc:
            errors.append(exc)

    row = StreamingDataset(
        big_table,
        num_splits=4,
        read_batch_size=8,
        io_queue_depth=2,
        transform=lambda b: b.column("id").to_pylist(),
        transform_parallelism=2,
    )
    packed = StreamingDataset(multi_table, num_splits=2, blocks_per_epoch=400, **PACK)
    for ds in (row, packed):
        snapshots.clear()
        stop.clear()
        thread = threading.Thread(target=hammer, args=(ds,))
        thread.start()
        deadline = time.monotonic() + 0.6
        try:
            while time.monotonic() < deadline:
                n = sum(1 for _ in ds)
                assert n > 0
                ds.set_epoch(ds.epoch + 1)
        finally:
            stop.set()
            thread.join()
        assert not errors, errors
        assert len(snapshots) > 10
        for name in CUMULATIVE:
            values = [getattr(s, name) for s in snapshots]
            assert values == sorted(values), name
        assert gauges(ds) == IDLE


def test_unscanned_rows_after_a_resume(small_table: Any) -> None:
    """Resumed at positions (3, 5) of two 12-row splits: the first read requests the 16 rows left.

    Origin: written to kill a surviving mutant (docs/MUTATION.md).
    """
    ds = StreamingDataset(small_table, num_splits=2)
    ds.load_state_dict(
        {
            "shuffle_seed": 0,
            "num_splits": 2,
            "epoch": 0,
            "samples_consumed_per_split": [3, 5],
            "positions_consumed_per_split": [3, 5],
        }
    )
    it: Any = iter(ds)  # a generator: closed below
    next(it)
    assert ds.statistics().unscanned_rows == 0
    it.close()
    assert ds.statistics().unscanned_rows == 0


def test_prefetch_queue_depth_counts_rows_waiting_to_be_yielded(multi_table: Any) -> None:
    """All 200 rows fit the first read: after one row, 199 transformed rows wait to be yielded.

    Origin: regression test of a bug the behavioural suite found, now fixed.
    """
    for cls in (StreamingDataset, Reference):
        ds = cls(multi_table, num_splits=1, read_batch_size=1000)
        it = iter(ds)
        next(it)
        assert ds.prefetch_queue_depth == 199, cls
        assert ds.raw_queue_depth == 0 and ds.unscanned_rows == 0
        it.close()
