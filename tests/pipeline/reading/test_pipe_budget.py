"""The byte budget ``read_ahead_bytes`` (deviation D40, docs/PIPELINE.md "Memory and threads").

The pipeline's own accounting is checked against an independent count: a reader wrapper
records every row id it was asked for, so *rows read ahead* = rows requested from storage
minus rows yielded (probe rows included), and their bytes are exact because every payload
row has the same size. No assertion depends on wall-clock time.
"""

from __future__ import annotations

import threading
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from elastic_loader import StreamingDataset
from elastic_loader._pipeline import _fetch
from elastic_loader._pipeline._lance import Reader, fixed_row_bytes

ROW_BYTES = 16 * 1024
ROWS = 320


@pytest.fixture(scope="module")
def blob_table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``ROWS`` rows: ``id`` and a ``ROW_BYTES`` binary payload."""
    db = lancedb.connect(str(tmp_path_factory.mktemp("budget")))
    rng = np.random.default_rng(0)
    payload = pa.array([rng.bytes(ROW_BYTES) for _ in range(ROWS)], type=pa.binary())
    return db.create_table("blobs", pa.table({"id": np.arange(ROWS), "payload": payload}))


class CountingReader(Reader):
    """Wraps a reader; counts the rows asked for (before the read runs)."""

    def __init__(self, inner: Reader) -> None:
        self.inner = inner
        self.where = inner.where
        self.rows = 0
        self.calls: list[int] = []
        self._lock = threading.Lock()

    def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:
        with self._lock:
            self.rows += len(row_ids)
            self.calls.append(len(row_ids))
        return self.inner.take(row_ids, columns)


def counted(ds: StreamingDataset) -> CountingReader:
    reader = CountingReader(ds._handle.reader())
    ds._handle.use(reader)
    return reader


def most_read_ahead(ds: StreamingDataset, reader: CountingReader, rows: int) -> int:
    """Consume ``rows`` rows; the largest (rows requested - rows yielded) seen at a yield."""
    most = 0
    it = iter(ds)
    for n, _ in enumerate(it, 1):
        most = max(most, reader.rows - n)
        if n == rows:
            break
    it.close()
    return most


CASES = [(1 << 20, 4, 4), (1 << 19, 1, 8), (3 << 20, 8, 2)]


@pytest.mark.parametrize(("budget", "num_splits", "depth"), CASES)
def test_rows_read_ahead_stay_within_the_budget(
    blob_table: Any, budget: int, num_splits: int, depth: int
) -> None:
    """Rows requested from storage but not yet yielded never weigh more than the budget plus one
    unit (the unit that always goes when nothing is in flight, at most budget / (2 (depth + 1)))."""
    ds = StreamingDataset(
        blob_table, num_splits=num_splits, shuffle_seed=1, io_queue_depth=depth, read_ahead_bytes=budget
    )
    reader = counted(ds)
    most = most_read_ahead(ds, reader, 240)
    one_unit = budget // (2 * (depth + 1)) + ROW_BYTES
    assert most * ROW_BYTES <= budget + one_unit, (most, reader.calls)
    assert most >= 1


def test_a_larger_budget_reads_further_ahead(blob_table: Any) -> None:
    """The budget is what bounds the read-ahead here (the row bounds alone allow far more)."""
    small = StreamingDataset(blob_table, num_splits=4, shuffle_seed=1, read_ahead_bytes=1 << 19)
    large = StreamingDataset(blob_table, num_splits=4, shuffle_seed=1, read_ahead_bytes=1 << 30)
    small_reader, large_reader = counted(small), counted(large)
    small_ahead = most_read_ahead(small, small_reader, 200)
    large_ahead = most_read_ahead(large, large_reader, 200)
    assert small_ahead * ROW_BYTES <= (1 << 19) * 2
    assert large_ahead > 2 * small_ahead


def test_the_first_read_of_variable_width_rows_is_a_small_probe(blob_table: Any) -> None:
    """Before the row size is known, one row of at most PROBE_SPLITS owned splits is read, and the
    first unit is sized by bytes (not the usual 512 rows)."""
    ds = StreamingDataset(blob_table, num_splits=16, shuffle_seed=1, read_ahead_bytes=1 << 20)
    reader = counted(ds)
    first = iter(ds)
    assert next(first)["id"] >= 0
    first.close()  # type: ignore[attr-defined]
    assert reader.calls[0] == _fetch.PROBE_SPLITS
    unit_bytes = (1 << 20) // (2 * (4 + 1))
    assert reader.calls[1] * ROW_BYTES <= unit_bytes + 16 * ROW_BYTES  # one row per split at least
    assert reader.row_bytes_seen is not None and abs(reader.row_bytes_seen - ROW_BYTES) < 64
    reader.calls.clear()
    again = iter(ds)  # the same epoch (its reader) again, from the saved progress
    assert next(again)["id"] >= 0
    again.close()  # type: ignore[attr-defined]
    assert reader.calls[0] == 16  # the reader remembers the row size: no second probe


def test_fixed_width_rows_need_no_probe(blob_table: Any) -> None:
    """``id`` alone has a fixed width: its size comes from the schema and the first unit is usual."""
    assert fixed_row_bytes(blob_table, ["id"]) == 8
    assert fixed_row_bytes(blob_table, None) is None
    ds = StreamingDataset(blob_table, num_splits=2, shuffle_seed=1, columns=["id"], read_ahead_bytes=1 << 20)
    reader = counted(ds)
    assert sum(1 for _ in ds) == ROWS
    assert reader.calls[0] == ROWS  # one unit of the whole table (<= 512 rows)
    assert reader.rows == ROWS


def test_every_row_arrives_once_whatever_the_budget(blob_table: Any) -> None:
    """A budget below one row still delivers the epoch (one unit of one row at a time)."""
    whole = [r["id"] for r in StreamingDataset(blob_table, num_splits=4, shuffle_seed=3)]
    ds = StreamingDataset(blob_table, num_splits=4, shuffle_seed=3, read_ahead_bytes=1000)
    reader = counted(ds)
    assert [r["id"] for r in ds] == whole
    assert max(reader.calls[1:]) == 4  # one row per split: nothing more fits
