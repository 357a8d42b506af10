"""The read pipeline's byte admission, probe and read timeout, on a fake reader (D40, D41).

Rows are ``fixed_size_binary(100)``: exactly 100 Arrow bytes each, so every count below is
exact. Nothing depends on timing except the timeout test, which waits on an event that only
the test releases.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest

from elastic_loader._pipeline import _fetch
from elastic_loader._pipeline._fetch import Pipeline, ReadLimits, Stage
from elastic_loader._pipeline._lance import Reader
from elastic_loader._pipeline._stats import Counters

ROW = 100


class FakeReader(Reader):
    where = "fake://table"

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[int] = []
        self.gate = gate

    def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:
        self.calls.append(len(row_ids))
        if self.gate is not None:
            self.gate.wait(60)
        return pa.table({"b": pa.array([b"x" * ROW] * len(row_ids), pa.binary(ROW))})


STAGE = Stage(
    run=lambda batch: batch.num_rows, combine=lambda parts: sum(p for _, p in parts), slice_rows=None
)


def pipeline(
    reader: Reader,
    held: list[int],
    *,
    budget: int = 2000,
    hint: int | None = ROW,
    read_timeout: float | None = None,
) -> Pipeline:
    return Pipeline(
        reader=reader,
        columns=None,
        split_rows=[np.arange(100, dtype=np.uint64)],
        start=[0],
        stage=STAGE,
        want=lambda i, unit_rows, inflight: unit_rows,
        counters=Counters(),
        limits=ReadLimits(
            io_queue_depth=4,
            transform_threads=1,
            min_unit_rows=64,
            read_ahead_bytes=budget,
            row_bytes_hint=hint,
            read_timeout=read_timeout,
        ),
        buffered=lambda: held[0],
    )


@pytest.mark.parametrize(("buffered", "admitted"), [(0, 4), (1000, 2), (1200, 2), (1300, 1), (5000, 1)])
def test_units_are_admitted_while_they_fit(buffered: int, admitted: int) -> None:
    """A unit is 2000 / (2 x 5) = 200 bytes = 2 rows, counted twice in flight (400): with the
    feed holding ``buffered`` bytes, units go while buffered + 400 x (in flight + 1) <= 2000;
    the first always goes, and never more than io_queue_depth."""
    pipe = pipeline(FakeReader(), [buffered])
    try:
        assert pipe.unit_rows == 2  # 200 bytes, below min_unit_rows=64: the budget wins
        pipe.pump()
        assert len(pipe._pending) == admitted
        assert pipe.held_bytes() == buffered + 400 * admitted
    finally:
        pipe.close()


def test_a_handed_over_unit_frees_its_share() -> None:
    held = [1000]
    reader = FakeReader()
    pipe = pipeline(reader, held)
    try:
        pipe.pump()
        assert len(pipe._pending) == 2
        got = pipe.next_unit()  # pops one and pumps again
        assert got is not None and got[1] == 2
        assert len(pipe._pending) == 2  # one left, one more admitted in its place
        held[0] = 0
        pipe.pump()
        assert len(pipe._pending) == 4
    finally:
        pipe.close()


def test_without_a_hint_a_probe_measures_the_row_size_first() -> None:
    reader = FakeReader()
    pipe = Pipeline(
        reader=reader,
        columns=None,
        split_rows=[np.arange(10, dtype=np.uint64) + 10 * i for i in range(12)],
        start=[0] * 12,
        stage=STAGE,
        want=lambda i, unit_rows, inflight: 1,
        counters=Counters(),
        limits=ReadLimits(io_queue_depth=2, transform_threads=1, min_unit_rows=64, read_ahead_bytes=3000),
        buffered=lambda: 0,
    )
    try:
        assert pipe.row_bytes() is None
        pipe.pump()
        assert reader.calls[0] == _fetch.PROBE_SPLITS  # one row of 8 of the 12 splits
        assert pipe.row_bytes() == ROW
        assert pipe.unit_rows == 3000 // (2 * 3) // ROW  # 5 rows
        got = pipe.next_unit()
        assert got is not None and got[0].rows == 12  # then units: one row of every split each
        assert reader.calls[1] == 12
    finally:
        pipe.close()


def test_the_row_size_follows_the_mean_of_every_read() -> None:
    pipe = pipeline(FakeReader(), [0], budget=10_000, hint=None)
    try:
        pipe._learn(1000, 10)  # 100 bytes per row
        assert pipe._ceiling == 10_000 // 10 // 100
        pipe._learn(3000, 10)  # now 200 per row on average
        assert pipe.row_bytes() == 200
        assert pipe._ceiling == 10_000 // 10 // 200
    finally:
        pipe.close()


def test_a_read_that_does_not_answer_times_out_naming_the_table() -> None:
    gate = threading.Event()
    pipe = pipeline(FakeReader(gate), [0], read_timeout=0.2)
    try:
        with pytest.raises(TimeoutError, match=r"fake://table made no progress for 0\.2 s \(read_timeout\)"):
            pipe.next_unit()
        assert pipe._closed
    finally:
        gate.set()
        pipe.close()


def test_the_probe_times_out_too() -> None:
    gate = threading.Event()
    pipe = pipeline(FakeReader(gate), [0], hint=None, read_timeout=0.2)
    try:
        with pytest.raises(TimeoutError, match="reading 1 rows of fake://table"):
            pipe.pump()
    finally:
        gate.set()
        pipe.close()
