"""Row mode on real tables (``_pipeline/_rows.py``): transform outputs, counters, order, progress.

The tests pin the text of the errors a wrong transform output raises (D10, R5.2), outputs that
only look like arrays, the transform time counter, exact gauges across many unit and chunk
boundaries (D11), the rows of other splits while one split holds a raising row, the read position
of a long split, the progress a chunk reports between its cut, its rows and its end, and the state
after every row with skipped rows and a lagging start. Expected values come from the executable
spec, from LanceDB's permutation (``perm_of``) or from first principles, never from the
implementation. Origin: most were written to kill surviving mutants of ``_rows`` (docs/MUTATION.md).
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import torch

from elastic_loader import StreamingDataset
from elastic_loader._pipeline import _fetch, _rows
from elastic_loader._pipeline._rows import RowCursor
from elastic_loader._pipeline._stats import Counters
from elastic_loader.spec import Faults, RowState, iterate_rows
from elastic_loader.spec.rows import Raised


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """Units of at most 8 rows and chunks of at most 2 cycles: an epoch of a small table crosses
    many unit and chunk boundaries (by default it is one of each)."""
    monkeypatch.setattr(_fetch, "FIRST_UNIT_ROWS", 1)
    monkeypatch.setattr(_fetch, "MAX_UNIT_ROWS", 8)
    monkeypatch.setattr(_rows, "MAX_CHUNK_CYCLES", 2)


def as_perm(splits: list[list[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(s) for s in splits)


class Faulty:
    """Row-wise transform: the ``id`` of every row; raises :class:`LookupError` for a ``bad`` id."""

    def __init__(self, bad: set[int]) -> None:
        self.bad = bad

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        ids = batch.column("id").to_pylist()
        hit = [i for i in ids if i in self.bad]
        if hit:
            raise LookupError(f"bad row {hit[0]}")
        return list(ids)


# ------------------------------------------------------------------ transform output errors (D10, R5.2)


class FrameLike:
    """Duck-typed data frame (pandas is not installed): iterating yields the column names."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.columns = [f"c{i}" for i in range(batch.num_rows)]
        self.shape = (batch.num_rows, batch.num_rows)

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)


REJECTED_OUTPUTS = {
    "mapping": (
        lambda b: {f"k{i}": i for i in range(b.num_rows)},
        "a mapping (iterating it would yield its keys)",
    ),
    "record-batch": (lambda b: b, "an Arrow batch or table (iterating it would yield its columns)"),
    "table": (
        lambda b: pa.Table.from_batches([b]),
        "an Arrow batch or table (iterating it would yield its columns)",
    ),
    "data-frame": (FrameLike, "a data frame (iterating it would yield its column names)"),
}


@pytest.mark.parametrize("kind", sorted(REJECTED_OUTPUTS))
def test_a_columnar_output_is_rejected_with_its_reason(multi_table: Any, kind: str) -> None:
    """D10: the TypeError names what was returned and why iterating it would be wrong (any mode)."""
    transform, reason = REJECTED_OUTPUTS[kind]
    expected = f"transform returned {reason}; return one item per input row, e.g. a list"
    ds = StreamingDataset(multi_table, num_splits=2, transform=transform, on_transform_error="skip")
    with pytest.raises(TypeError, match=f"^{re.escape(expected)}$"):
        next(iter(ds))


def test_a_wrong_row_count_names_both_counts_and_the_way_to_drop_a_row(multi_table: Any) -> None:
    """R5.2: a ValueError in every mode; every read batch has 8 rows (200 rows, one unit)."""
    expected = (
        "transform returned 7 rows for a batch of 8; a transform must return exactly one output row per "
        "input row (raise to drop a bad row with on_transform_error='skip')"
    )
    ds = StreamingDataset(
        multi_table,
        num_splits=1,
        read_batch_size=8,
        transform=lambda b: b.column("id").to_pylist()[1:],
        on_transform_error="skip",
    )
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        next(iter(ds))


def test_an_output_with_a_shape_but_no_columns_is_accepted(multi_table: Any, perm_of: Any) -> None:
    """A tensor is an iterable of one item per row (its first dimension), not a data frame."""
    (split,) = perm_of(multi_table, num_splits=1)
    ds = StreamingDataset(
        multi_table, num_splits=1, read_batch_size=16, transform=lambda b: torch.tensor(b.column("id"))
    )
    got = list(ds)
    assert all(isinstance(v, torch.Tensor) and v.shape == () for v in got)
    assert [int(v) for v in got] == split


# ------------------------------------------------------------------ counters (D11)


class Timed:
    """Row-wise transform that sleeps a little and measures its own running time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds = 0.0

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        t0 = time.perf_counter()
        time.sleep(0.002)
        out = batch.column("id").to_pylist()
        with self.lock:
            self.seconds += time.perf_counter() - t0
        return out


def test_transform_time_is_the_time_spent_in_the_transform(multi_table: Any) -> None:
    """One transform thread: at least the transform's own time, at most the iteration's wall time."""
    transform = Timed()
    ds = StreamingDataset(
        multi_table, num_splits=2, read_batch_size=25, transform=transform, transform_parallelism=1
    )
    t0 = time.perf_counter()
    assert len(list(ds)) == 200
    wall = time.perf_counter() - t0
    assert transform.seconds <= ds.transform_time <= wall


def resume(ds: StreamingDataset, state: RowState) -> None:
    """Load ``state`` (e.g. a merged checkpoint whose splits lag behind each other) into ``ds``."""
    checkpoint = ds.state_dict()
    del checkpoint["elastic_loader"]  # a hand-made checkpoint: no digest, every split reported
    checkpoint["samples_consumed_per_split"] = list(state.samples)
    checkpoint["positions_consumed_per_split"] = list(state.positions)
    ds.load_state_dict(checkpoint)


@pytest.mark.usefixtures("tiny")
@pytest.mark.parametrize("mode", ["clean", "skip", "catch-up"])
def test_gauges_are_exact_at_every_row(multi_table: Any, perm_of: Any, mode: str) -> None:
    """consumed_rows and rows_delivered count the rows handed out, across many units and chunks
    (and the catch-up of lagging splits); prefetch_queue_depth never goes negative and is 0 once
    every split's last row is out."""
    splits = perm_of(multi_table, num_splits=4)
    # skip: one row in the middle of every split, so the splits stay of equal length (49 rows)
    bad = {splits[s][10 + 7 * s] for s in range(4)} if mode == "skip" else set()
    lags = (10, 3, 10, 7) if mode == "catch-up" else (0, 0, 0, 0)
    start = RowState(lags, lags)
    model = iterate_rows(as_perm(splits), Faults(skipped=frozenset(bad)), [0, 1, 2, 3], start)
    ds = StreamingDataset(
        multi_table,
        num_splits=4,
        read_batch_size=1,
        transform=Faulty(bad),
        on_transform_error="skip" if bad else "raise",
    )
    resume(ds, start)
    it = iter(ds)
    got = []
    for k in range(1, len(model.rows) + 1):
        got.append(next(it))
        stats = ds.statistics()
        assert stats.consumed_rows == k
        assert stats.rows_delivered == k
        assert stats.prefetch_queue_depth >= 0, k
    assert got == [row.row_id for row in model.rows]
    stats = ds.statistics()
    assert stats.prefetch_queue_depth == 0
    assert stats.rows_skipped == len(bad)
    assert list(it) == []
    assert ds.statistics().rows_delivered == len(model.rows)


# ------------------------------------------------------------------ feed


@pytest.mark.usefixtures("tiny")
def test_a_raising_split_does_not_hold_back_the_others_rows(multi_table: Any, perm_of: Any) -> None:
    """Catch-up of split 1 while split 0's next row raises: units read ahead still hold split 0's
    positions, and split 1's rows in them must all be delivered before split 0's error."""
    splits = perm_of(multi_table, num_splits=2)
    start = RowState((40, 0), (40, 0))
    bad = splits[0][40]
    model = iterate_rows(as_perm(splits), Faults(raising=frozenset({bad})), [0, 1], start)
    assert model.end == Raised(0, 40, bad)
    ds = StreamingDataset(
        multi_table, num_splits=2, read_batch_size=1, io_queue_depth=4, transform=Faulty({bad})
    )
    resume(ds, start)
    got: list[int] = []
    with pytest.raises(LookupError, match=f"bad row {bad}"):
        for value in ds:
            got.append(value)
    assert got == [row.row_id for row in model.rows]
    assert len(got) == 40


def test_a_long_split_is_read_in_order(big_table: Any, perm_of: Any) -> None:
    """All 20,000 rows once, in order. Units of 3,000, then 6,000 rows: the first chunk cut from the
    second unit (4,096 rows) leaves the feed more than half read, so it drops the 7,096 rows handed
    out while 1,904 rows of that unit are still to come."""
    (split,) = perm_of(big_table, num_splits=1)
    ds = StreamingDataset(big_table, num_splits=1, read_batch_size=3000, columns=["id"])
    assert [row["id"] for row in ds] == split
    assert ds.state_dict()["samples_consumed_per_split"] == [len(split)]


# ------------------------------------------------------------------ lazy chunk progress


def test_a_chunk_reports_exact_progress_from_its_cut_to_its_end() -> None:
    """Before the first row of a chunk nothing moved; at its end, the counters take over exactly
    the rows handed out, and between two chunks counters plus cursor count them once."""
    progress = RowCursor([3, 5], [4, 9])
    progress.begin([[10, 11], [20, 22]])  # two cycles: split 0 at 10, 11; split 1 at 20, 22
    assert progress.current() == ([3, 5], [4, 9])
    progress.cursor = 3  # both rows of cycle 0, then split 0's row of cycle 1
    assert progress.current() == ([5, 6], [12, 21])
    counters = Counters()
    counters.add(ready_rows=4)
    progress.end(counters)  # left after three rows
    stats = counters.snapshot()
    assert (stats.consumed_rows, stats.rows_delivered, stats.prefetch_queue_depth) == (3, 3, 1)
    assert stats.consumed_rows + progress.cursor == 3  # what statistics() reports until the next cut
    assert progress.current() == ([5, 6], [12, 21])
    progress.begin([[30], [31]])
    assert progress.current() == ([5, 6], [12, 21])


class Gate:
    """Row-wise transform that holds the read batch containing ``gate`` until released."""

    def __init__(self, gate: int) -> None:
        self.gate = gate
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        ids = batch.column("id").to_pylist()
        if self.gate in ids:
            self.entered.set()
            self.release.wait(timeout=30)
        return list(ids)


@pytest.mark.usefixtures("tiny")
def test_statistics_while_the_consumer_waits_for_a_slow_unit(multi_table: Any, perm_of: Any) -> None:
    """Between two chunks (the consumer waits in next() for a unit still in its transform), another
    thread reads consumed_rows = the rows the consumer received, and an exact checkpoint."""
    (split,) = perm_of(multi_table, num_splits=1)
    gate = Gate(split[60])
    ds = StreamingDataset(multi_table, num_splits=1, read_batch_size=1, transform=gate)
    got: list[int] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            got.extend(ds)
        except BaseException as exc:
            errors.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    try:
        assert gate.entered.wait(timeout=30)
        waiting = -1
        while waiting != len(got):  # until the consumer has ended its chunk and blocks on the gate
            waiting = len(got)
            time.sleep(0.2)
        assert 0 < waiting < 60
        assert ds.consumed_rows == waiting
        assert ds.statistics().rows_delivered == waiting
    finally:
        gate.release.set()
        consumer.join(timeout=60)
    assert not errors, errors
    assert got == split
    assert ds.consumed_rows == 0  # idle again


class SkipIds:
    """Row-wise transform returning ``id``; raises for the ``bad`` ids (skipped with "skip")."""

    def __init__(self, bad: set[int]) -> None:
        self.bad = bad

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        ids = batch.column("id").to_pylist()
        if self.bad.intersection(ids):
            raise ValueError("bad id")
        return list(ids)


@pytest.mark.parametrize(
    ("s", "w", "r", "start"),
    [(3, 1, 0, (0, 0, 0)), (4, 2, 1, (0, 0, 5, 2)), (3, 1, 0, (4, 1, 6))],
    ids=["fresh", "rank1-catch-up", "catch-up"],
)
def test_row_state_at_every_row_matches_the_spec(
    multi_table: Any, perm_of: Any, units: str, s: int, w: int, r: int, start: tuple[int, ...]
) -> None:
    """Rows and checkpoints after every row, with skipped rows and a lagging start (catch-up).

    Origin: written to kill a surviving mutant (docs/MUTATION.md).
    """
    splits = perm_of(multi_table, num_splits=s)
    bad = {splits[0][1], splits[0][2], splits[-1][7], splits[1][30]}
    owned = list(range(r * s // w, (r + 1) * s // w))
    begin = RowState(start, start)
    model = iterate_rows(tuple(tuple(x) for x in splits), Faults(skipped=frozenset(bad)), owned, begin)
    kwargs: dict[str, Any] = {"num_splits": s, "world_size": w, "rank": r, "read_batch_size": 3}
    ds = StreamingDataset(multi_table, transform=SkipIds(bad), on_transform_error="skip", **kwargs)
    ds.load_state_dict(
        {
            "shuffle_seed": 0,
            "num_splits": s,
            "epoch": 0,
            "samples_consumed_per_split": list(start),
            "positions_consumed_per_split": list(start),
        }
    )
    it = iter(ds)
    for k, row in enumerate(model.rows):
        assert next(it) == row.row_id, k
        state = ds.state_dict()
        expected = model.states[k]
        assert state["samples_consumed_per_split"] == list(expected.samples), k
        assert state["positions_consumed_per_split"] == list(expected.positions), k
    assert list(it) == []


def test_a_long_epoch_crosses_chunk_and_buffer_compaction_limits(big_table: Any, perm_of: Any) -> None:
    """10,000 rows per split: more than one chunk of 4096 cycles and more than 4096 rows read per split.

    Origin: written to kill a surviving mutant (docs/MUTATION.md).
    """
    splits = perm_of(big_table, num_splits=2)
    expected = [i for pair in zip(*splits) for i in pair]
    ds = StreamingDataset(big_table, num_splits=2, columns=["id"])
    it: Any = iter(ds)  # a generator: closed below
    head = [row["id"] for row in itertools.islice(it, 9001)]
    state: dict[str, Any] = ds.state_dict()
    assert state["samples_consumed_per_split"] == [4501, 4500]
    it.close()
    resumed = StreamingDataset(big_table, num_splits=2, columns=["id"])
    resumed.load_state_dict(state)
    assert head + [row["id"] for row in resumed] == expected
