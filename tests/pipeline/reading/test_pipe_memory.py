"""Memory bound with a slow consumer (docs/PIPELINE.md "Memory and threads").

Rows held ahead of the consumer are measured independently of the gauges:
*transformed ahead* = rows the (counting) transform has returned minus rows
yielded; *fetched ahead* = ``bytes_loaded / 8`` (one int64 column, exact) minus
rows yielded. The documented bound is about ``2 x (target + quota)`` rows per
owned split: a split is requested while its ready plus in-flight rows are below
``target = quota x io_queue_depth`` (at most ``transform_queue_depth x
read_batch_size``), a request adds at most ``quota`` rows, and the chunk being
yielded can hold as many again. ``pytest -rP`` prints the observed values.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pyarrow as pa
import pytest

from elastic_loader import StreamingDataset

MAX_UNIT_ROWS = 16384  # documented ceiling of one read unit


class CountingTransform:
    """Row-wise transform returning ``id``; counts the rows it returned (thread-safe)."""

    def __init__(self) -> None:
        self.rows = 0
        self._lock = threading.Lock()

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        values = batch.column("id").to_pylist()
        with self._lock:
            self.rows += len(values)
        return values


def slow_run(table: Any, rows: int, **kwargs: Any) -> dict[str, int]:
    """Consume ``rows`` rows with a pause per row; the maxima of what was held ahead."""
    transform = CountingTransform()
    ds = StreamingDataset(table, columns=["id"], transform=transform, **kwargs)
    seen = {"transformed_ahead": 0, "fetched_ahead": 0, "gauges": 0}
    it = iter(ds)
    for n, _ in enumerate(it, 1):
        seen["transformed_ahead"] = max(seen["transformed_ahead"], transform.rows - n)
        if n % 4 == 1:  # a snapshot reads every worker slot: sample a quarter of the rows
            stats = ds.statistics()
            seen["fetched_ahead"] = max(seen["fetched_ahead"], stats.bytes_loaded // 8 - n)
            seen["gauges"] = max(seen["gauges"], stats.raw_queue_depth + stats.prefetch_queue_depth)
        time.sleep(0.0002)
        if n == rows:
            break
    it.close()
    return seen


@pytest.mark.parametrize(
    ("num_splits", "read_batch_size", "io_queue_depth", "transform_queue_depth"),
    [(2, 16, 1, 1), (4, 8, 2, 2), (1, 16, 1, None), (4, 16, 2, None)],
)
def test_slow_consumer_memory_stays_bounded(
    big_table: Any,
    num_splits: int,
    read_batch_size: int,
    io_queue_depth: int,
    transform_queue_depth: int | None,
) -> None:
    seen = slow_run(
        big_table,
        2000,
        num_splits=num_splits,
        read_batch_size=read_batch_size,
        io_queue_depth=io_queue_depth,
        transform_queue_depth=transform_queue_depth,
    )
    if transform_queue_depth is not None:
        target = transform_queue_depth * read_batch_size  # quota is capped at the target too
        bound = 2 * num_splits * (target + target)
    else:
        quota = -(-MAX_UNIT_ROWS // num_splits)
        bound = 2 * num_splits * (quota * io_queue_depth + quota)
    print(f"observed {seen}, bound {bound}")
    assert seen["fetched_ahead"] <= bound, seen
    assert seen["gauges"] <= bound, seen
    assert seen["fetched_ahead"] > 0  # the pipeline does read ahead
