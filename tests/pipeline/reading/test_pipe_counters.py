"""Counters add up over passes (issue 13): a later pass's workers continue their slots' counts."""

from __future__ import annotations

from typing import Any

from elastic_loader import StreamingDataLoader, StreamingDataset
from elastic_loader._pipeline._stats import Counters, new_shared

ROWS = 200  # multi_table


def _delivered(loader: StreamingDataLoader) -> int:
    return sum(len(batch["id"]) for batch in loader)


def test_two_loader_passes_with_workers_count_both(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, shuffle_seed=0, columns=["id"])
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2)
    assert _delivered(loader) == ROWS
    assert ds.statistics().rows_delivered == ROWS
    ds.set_epoch(1)
    assert _delivered(loader) == ROWS
    assert ds.statistics().rows_delivered == 2 * ROWS  # was ROWS: the second pass overwrote the first


def test_in_process_iteration_then_a_loader_with_workers_count_both(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, shuffle_seed=0, columns=["id"])
    assert sum(1 for _ in ds) == ROWS
    ds.set_epoch(1)
    assert _delivered(StreamingDataLoader(ds, batch_size=8, num_workers=2)) == ROWS
    stats = ds.statistics()
    assert stats.rows_delivered == 2 * ROWS
    assert stats.consumed_rows == 0  # gauges are zero when idle


def test_a_slot_taken_again_carries_its_cumulative_values() -> None:
    shared = new_shared()
    parent = Counters()
    parent.attach_shared(shared)
    parent.add(rows_delivered=5)  # the parent's own iteration
    first = Counters()
    first.attach_shared(shared)
    first.publish_as_worker(1)
    first.add(rows_delivered=7, bytes_loaded=100, ready_rows=3)
    second = Counters()
    second.attach_shared(shared)
    second.add(rows_delivered=50)  # values it came with (pickled from the parent) are not published
    second.publish_as_worker(1)
    second.add(rows_delivered=2, ready_rows=1)
    stats = parent.snapshot()
    assert stats.rows_delivered == 5 + 7 + 2
    assert stats.bytes_loaded == 100
    assert stats.prefetch_queue_depth == 1  # a gauge is the live worker's, never carried
