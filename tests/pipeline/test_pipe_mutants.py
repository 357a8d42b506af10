"""Tests written to kill surviving mutants of the pipeline's row and packing code (docs/MUTATION.md).

Each test pins a behaviour the rest of the suite left open: packed checkpoints at every step
boundary inside a chunk, the raise point of a transform that is not row-wise, which error a
failing row raises, the warning of the "warn" mode, and the progress a packed chunk reports
before its first block. Expected values come from the executable spec, from LanceDB's
permutation (``perm_of``) or from the transform itself, never from the implementation.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

from elastic_loader import StreamingDataset
from elastic_loader._pipeline import _fetch, _packing, _rows
from elastic_loader._pipeline._packing import PackCursor, SplitStream, emit_cycles
from elastic_loader._pipeline._stats import Counters
from elastic_loader.spec import Faults, PackingConfig, RowState, iterate_packed, iterate_rows
from elastic_loader.spec.packing import PackedState

EOS, PAD = -1, -2


def corpus_of(table: Any) -> dict[int, tuple[int, ...]]:
    data = table.to_arrow()
    return {
        i: () if t is None or None in t else tuple(t)
        for i, t in zip(data.column("id").to_pylist(), data.column("tokens").to_pylist())
    }


def block_key(block: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(block["input_ids"].tolist()), tuple(block["doc_ids"].tolist())


PACKED_CASES = [
    # (num_splits, world_size, rank, pack_sequences, blocks_per_epoch, read_batch_size)
    (1, 1, 0, 4, 30, 3),
    (2, 1, 0, 3, 40, 4),
    (4, 2, 1, 5, 48, 7),
    (3, 1, 0, 6, 60, 64),
    (2, 2, 0, 2, 50, 1),
]


@pytest.fixture(params=["default", "tiny"])
def units(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``tiny``: reads of at most 8 rows and chunks of one or two cycles, so that an epoch of the
    small test tables crosses many unit and chunk boundaries (by default it is one of each)."""
    if request.param == "tiny":
        monkeypatch.setattr(_fetch, "FIRST_UNIT_ROWS", 1)
        monkeypatch.setattr(_fetch, "MAX_UNIT_ROWS", 8)
        monkeypatch.setattr(_packing, "MAX_CHUNK_CYCLES", 1)
        monkeypatch.setattr(_rows, "MAX_CHUNK_CYCLES", 2)
    return str(request.param)


@pytest.mark.parametrize(("s", "w", "r", "length", "budget", "batch"), PACKED_CASES)
def test_packed_state_at_every_step_matches_the_spec(
    multi_table: Any,
    perm_of: Any,
    packed_state_of: Any,
    units: str,
    s: int,
    w: int,
    r: int,
    length: int,
    budget: int,
    batch: int,
) -> None:
    """Checkpoints taken between steps inside a chunk (buffers, document starts at offset 0, counts)."""
    perm = tuple(tuple(split) for split in perm_of(multi_table, num_splits=s))
    owned = tuple(range(r * s // w, (r + 1) * s // w))
    config = PackingConfig(length, EOS, PAD, budget)
    model = iterate_packed(
        perm, corpus_of(multi_table), Faults(), owned, config, PackedState((0,) * s, (0,) * s)
    )
    ds = StreamingDataset(
        multi_table,
        num_splits=s,
        world_size=w,
        rank=r,
        columns=["tokens"],
        pack_sequences=length,
        eos_id=EOS,
        pad_id=PAD,
        blocks_per_epoch=budget,
        read_batch_size=batch,
    )
    it = iter(ds)
    for k, expected in enumerate(model.blocks):
        if k % len(owned) == 0:
            assert packed_state_of(ds.state_dict()) == model.state_after(k), k
        block = next(it)
        assert block_key(block) == (expected.input_ids, expected.doc_ids), k
        assert block["input_ids"].dtype == block["doc_ids"].dtype == torch.int64
    assert list(it) == []
    assert packed_state_of(ds.state_dict()) == model.state_after(len(model.blocks))


def test_a_packed_chunk_reports_the_old_progress_until_its_first_block() -> None:
    """Between cutting a chunk and handing out its first block, progress is what it was before."""
    streams = [SplitStream([7, 8], [0], consumed=3, emitted=2), SplitStream([], [], consumed=1, emitted=2)]
    for i, stream in enumerate(streams):
        lengths = np.array([2, 0, 3], dtype=np.int64)
        values = np.arange(10 * i, 10 * i + int(lengths.sum()), dtype=np.int64)
        starts = np.cumsum(lengths) - lengths
        stream.append(values, starts, lengths, np.array([5, 6, 8], dtype=np.int64), EOS)
    progress = PackCursor(streams)
    before = progress.current()
    assert before == [(3, 2, [7, 8], [0]), (1, 2, [], [])]
    records = [emit_cycles(stream, 2, 3, PAD)[2] for stream in streams]
    progress.begin(records, 3)
    assert progress.current() == before
    # Block 0 of cycle 0 is out: every split's first fill shows (as in the reference), and split 0
    # emitted [7, 8, 0]. Split 0 pulled document 5 (tokens 0, 1 and EOS), split 1 document 5
    # (tokens 10, 11 and EOS); neither needed the empty document 6.
    progress.cursor = 1
    after_one = [(6, 3, [1, EOS], []), (6, 2, [10, 11, EOS], [0])]
    assert progress.current() == after_one
    progress.end(False, Counters())  # left early: that progress is final
    assert progress.current() == after_one


class NotRowWise:
    """Fails on any batch of more than one row; every row alone passes (returns its ``id``)."""

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        if batch.num_rows > 1:
            raise LookupError(f"a batch of {batch.num_rows} rows")
        return list(batch.column("id").to_pylist())


def test_a_transform_that_is_not_row_wise_raises_at_the_first_row_of_its_batch(
    multi_table: Any, perm_of: Any
) -> None:
    ds = StreamingDataset(multi_table, num_splits=1, shuffle=False, read_batch_size=8, transform=NotRowWise())
    got: list[int] = []
    with pytest.raises(LookupError, match="a batch of 8 rows"):
        for value in ds:
            got.append(value)
    assert got == []


class SaysWhichBatch:
    """Row-wise: raises for ``bad`` ids; the message names the size of the batch it was given."""

    def __init__(self, bad: set[int]) -> None:
        self.bad = bad

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        ids = batch.column("id").to_pylist()
        for i in ids:
            if i in self.bad:
                raise KeyError(f"row {i} in a batch of {len(ids)}")
        return list(ids)


@pytest.mark.parametrize("position", [0, 3])
def test_a_failing_row_raises_its_own_error(multi_table: Any, perm_of: Any, position: int) -> None:
    """The error re-raised is the one the row raises alone, also when it is the first row of its batch."""
    (split,) = perm_of(multi_table, num_splits=1, shuffle=False)
    bad = split[8 + position]  # read batches of 8: the first or the fourth row of the second batch
    ds = StreamingDataset(
        multi_table, num_splits=1, shuffle=False, read_batch_size=8, transform=SaysWhichBatch({bad})
    )
    got: list[int] = []
    with pytest.raises(KeyError, match=f"row {bad} in a batch of 1"):
        for value in ds:
            got.append(value)
    assert got == split[: 8 + position]


def test_warn_mode_logs_the_first_error_of_a_batch(
    multi_table: Any, perm_of: Any, caplog: pytest.LogCaptureFixture
) -> None:
    (split,) = perm_of(multi_table, num_splits=1, shuffle=False)
    bad = {split[2], split[5]}
    ds = StreamingDataset(
        multi_table,
        num_splits=1,
        shuffle=False,
        read_batch_size=8,
        transform=SaysWhichBatch(bad),
        on_transform_error="warn",
    )
    with caplog.at_level(logging.WARNING, logger="elastic_loader"):
        got = list(itertools.islice(ds, 10))
    assert got == [i for i in split if i not in bad][:10]
    messages = [r.getMessage() for r in caplog.records if r.name == "elastic_loader"]
    assert any(f"row {split[2]} in a batch of 1" in m and "2 of 8" in m for m in messages), messages


def test_packed_counters_across_chunks(multi_table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With one cycle per chunk, the document counters stay exact from chunk to chunk.

    The first read holds the whole table (200 documents), so at every step the documents
    waiting (``prefetch_queue_depth``) and those pulled (``consumed_rows``) add up to 200.
    """
    monkeypatch.setattr(_packing, "MAX_CHUNK_CYCLES", 1)
    ds = StreamingDataset(
        multi_table,
        num_splits=2,
        columns=["tokens"],
        pack_sequences=3,
        eos_id=EOS,
        pad_id=PAD,
        blocks_per_epoch=100,
    )
    it: Any = iter(ds)  # a generator: closed below
    for step in range(1, 40):
        list(itertools.islice(it, 2))
        state: dict[str, Any] = ds.state_dict()
        pulled = sum(state["samples_consumed_per_split"])
        stats = ds.statistics()
        assert stats.consumed_rows == stats.rows_delivered == pulled, step
        assert stats.prefetch_queue_depth + stats.consumed_rows == 200, step
    it.close()


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
    """Rows and checkpoints after every row, with skipped rows and a lagging start (catch-up)."""
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
    """10,000 rows per split: more than one chunk of 4096 cycles and more than 4096 rows read per split."""
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


def test_unscanned_rows_after_a_resume(small_table: Any) -> None:
    """Resumed at positions (3, 5) of two 12-row splits: the first read requests the 16 rows left."""
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
