"""Transform errors on real tables (R5, D7/B9, D10, SkipAccountingInv, RaisePositionProp).

Expected rows and states come from the executable spec (``iterate_rows`` /
``iterate_packed`` over LanceDB's permutation in ``id`` values) and, where the
behaviour is not a deviation, from ``lancedb.streaming`` too.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pyarrow as pa
import pytest
import torch
from lancedb.streaming import StreamingDataset as Reference

from elastic_loader import StreamingDataset, merge_state_dicts
from elastic_loader.spec import Faults, PackingConfig, RowState, iterate_packed, iterate_rows
from elastic_loader.spec.packing import initial_packed_state
from elastic_loader.spec.rows import Raised, initial_row_state


class BadRow(ValueError):
    """The error :class:`Faulty` raises."""


class Faulty:
    """Row-wise transform: ``id`` of every row, raising :class:`BadRow` if the batch holds a bad id."""

    def __init__(self, bad: set[int], error: type[Exception] = BadRow) -> None:
        self.bad = bad
        self.error = error

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        values = batch.column("id").to_pylist()
        hit = [v for v in values if v in self.bad]
        if hit:
            raise self.error(f"bad row {hit[0]}")
        return values


def spec_rows(
    splits: list[list[int]], faults: Faults, owned: list[int], start: RowState | None = None
) -> Any:
    perm = tuple(tuple(s) for s in splits)
    return iterate_rows(perm, faults, owned, start or initial_row_state(len(perm)))


def pick_bad(splits: list[list[int]], where: list[tuple[int, int]]) -> set[int]:
    """The ids at (split, position) pairs."""
    return {splits[s][p] for s, p in where}


# ------------------------------------------------------------------ skip / warn / callable


@pytest.mark.parametrize("mode", ["skip", "warn", "callable"])
def test_skip_modes_drop_exactly_the_failing_rows(
    multi_table: Any, perm_of: Any, mode: str, caplog: Any
) -> None:
    splits = perm_of(multi_table, num_splits=4)
    bad = pick_bad(splits, [(0, 0), (0, 1), (1, 17), (2, 49), (3, 30), (3, 31), (3, 32)])
    handler: Any = (lambda exc: isinstance(exc, BadRow)) if mode == "callable" else mode
    model = spec_rows(splits, Faults(skipped=frozenset(bad)), [0, 1, 2, 3])
    ds = StreamingDataset(
        multi_table, num_splits=4, transform=Faulty(bad), on_transform_error=handler, read_batch_size=8
    )
    with caplog.at_level(logging.WARNING, logger="elastic_loader"):
        got = list(ds)
    assert got == [row.row_id for row in model.rows]
    final = model.states[-1]
    state = ds.state_dict()
    assert state["samples_consumed_per_split"] == list(final.samples)
    assert state["positions_consumed_per_split"] == list(final.positions)
    assert state["positions_consumed_per_split"] != state["samples_consumed_per_split"]  # positions ahead
    # the table is small enough that every row was read and transformed
    assert ds.rows_skipped == len(bad)
    warned = [r for r in caplog.records if r.name == "elastic_loader" and r.levelno == logging.WARNING]
    assert bool(warned) == (mode == "warn")
    # the reference agrees (skipping is not a deviation)
    ref = Reference(
        multi_table, num_splits=4, transform=Faulty(bad), on_transform_error=handler, read_batch_size=8
    )
    assert list(ref) == got
    assert ref.state_dict() == {k: v for k, v in state.items() if k != "elastic_loader"}  # reference keys


def test_skip_states_at_every_row_match_the_spec(small_table: Any, perm_of: Any) -> None:
    splits = perm_of(small_table, num_splits=2)
    bad = pick_bad(splits, [(0, 2), (0, 3), (1, 5), (1, 11)])
    model = spec_rows(splits, Faults(skipped=frozenset(bad)), [0, 1])
    ds = StreamingDataset(small_table, num_splits=2, transform=Faulty(bad), on_transform_error="skip")
    it = iter(ds)
    for k, row in enumerate(model.rows):
        assert next(it) == row.row_id
        state = ds.state_dict()
        assert state["samples_consumed_per_split"] == list(model.states[k].samples), k
        assert state["positions_consumed_per_split"] == list(model.states[k].positions), k
        # resuming right here continues exactly
        resumed = StreamingDataset(
            small_table, num_splits=2, transform=Faulty(bad), on_transform_error="skip"
        )
        resumed.load_state_dict(state)
        assert list(resumed) == [r.row_id for r in model.rows[k + 1 :]], k
    assert list(it) == []


def test_skips_end_the_epoch_at_the_last_complete_cycle(small_table: Any, perm_of: Any) -> None:
    """R4.3: the split with most skips runs out first; the others' leftovers are not yielded."""
    splits = perm_of(small_table, num_splits=3)
    bad = pick_bad(splits, [(1, 0), (1, 4), (1, 7)])
    model = spec_rows(splits, Faults(skipped=frozenset(bad)), [0, 1, 2])
    got = list(StreamingDataset(small_table, num_splits=3, transform=Faulty(bad), on_transform_error="skip"))
    assert got == [row.row_id for row in model.rows]
    assert len(got) == 3 * (len(splits[1]) - 3)


# ------------------------------------------------------------------ raise: deterministic point (D7/B9)


@pytest.mark.parametrize(("split", "position"), [(1, 20), (0, 9), (1, 0), (0, 49)])
def test_raise_surfaces_after_every_earlier_row(
    multi_table: Any, perm_of: Any, split: int, position: int
) -> None:
    splits = perm_of(multi_table, num_splits=4)
    bad = pick_bad(splits, [(split, position)])
    model = spec_rows(splits, Faults(raising=frozenset(bad)), [0, 1, 2, 3])
    assert isinstance(model.end, Raised)
    ds = StreamingDataset(multi_table, num_splits=4, transform=Faulty(bad), read_batch_size=200)
    got: list[int] = []
    with pytest.raises(BadRow, match=f"bad row {model.end.row_id}"):
        for row in ds:
            got.append(row)
    assert got == [row.row_id for row in model.rows]
    # the checkpoint after the error excludes the bad row and everything after it
    state = ds.state_dict()
    expected = model.states[-1] if model.rows else model.start
    assert state["samples_consumed_per_split"] == list(expected.samples)
    assert state["positions_consumed_per_split"] == list(expected.positions)
    # resuming from it raises again, at once, without losing or repeating rows
    again = StreamingDataset(multi_table, num_splits=4, transform=Faulty(bad), read_batch_size=7)
    again.load_state_dict(state)
    with pytest.raises(BadRow):
        assert list(again) == []


def test_raise_on_one_rank_with_mid_cycle_resume(multi_table: Any, perm_of: Any) -> None:
    """A raising row reached during catch-up surfaces at its turn (RaisePositionProp)."""
    splits = perm_of(multi_table, num_splits=4)
    bad = pick_bad(splits, [(3, 6)])
    start = RowState((0, 0, 9, 4), (0, 0, 9, 4))
    model = spec_rows(splits, Faults(raising=frozenset(bad)), [2, 3], start)
    assert isinstance(model.end, Raised) and len(model.rows) == 2  # split 3 positions 4 and 5
    ds = StreamingDataset(multi_table, num_splits=4, world_size=2, rank=1, transform=Faulty(bad))
    ds.load_state_dict(
        {
            "shuffle_seed": 0,
            "num_splits": 4,
            "epoch": 0,
            "samples_consumed_per_split": list(start.samples),
            "positions_consumed_per_split": list(start.positions),
        }
    )
    got: list[int] = []
    with pytest.raises(BadRow):
        for row in ds:
            got.append(row)
    assert got == [row.row_id for row in model.rows]


def test_callable_refusing_an_error_raises_at_the_rows_turn(multi_table: Any, perm_of: Any) -> None:
    """A handler returning False behaves like "raise" for that row; others are dropped."""
    splits = perm_of(multi_table, num_splits=2)
    skipped = pick_bad(splits, [(0, 3), (1, 4)])
    raising = pick_bad(splits, [(1, 30)])

    class Mixed:
        def __call__(self, batch: pa.RecordBatch) -> list[int]:
            values = batch.column("id").to_pylist()
            for v in values:
                if v in raising:
                    raise KeyError(v)
                if v in skipped:
                    raise BadRow(v)
            return values

    model = spec_rows(splits, Faults(skipped=frozenset(skipped), raising=frozenset(raising)), [0, 1])
    ds = StreamingDataset(
        multi_table,
        num_splits=2,
        transform=Mixed(),
        on_transform_error=lambda exc: isinstance(exc, BadRow),
        read_batch_size=64,
    )
    got: list[int] = []
    with pytest.raises(KeyError):
        for row in ds:
            got.append(row)
    assert got == [row.row_id for row in model.rows]
    assert ds.rows_skipped == len(skipped)


# ------------------------------------------------------------------ transform outputs (D10, R5.2)


def as_dict(batch: pa.RecordBatch) -> dict[str, list[Any]]:
    return {f"k{i}": [] for i in range(batch.num_rows)}  # as many keys as rows


@pytest.mark.parametrize("mode", ["raise", "skip"])
@pytest.mark.parametrize(
    "transform",
    [as_dict, lambda b: b, lambda b: pa.Table.from_batches([b])],
    ids=["dict", "record-batch", "table"],
)
def test_columnar_transform_output_is_a_type_error(multi_table: Any, transform: Any, mode: str) -> None:
    ds = StreamingDataset(multi_table, num_splits=2, transform=transform, on_transform_error=mode)
    with pytest.raises(TypeError):
        list(ds)
    assert ds.rows_skipped == 0


@pytest.mark.parametrize("mode", ["raise", "skip", "warn"])
def test_wrong_row_count_is_a_value_error_in_every_mode(multi_table: Any, mode: str) -> None:
    ds = StreamingDataset(
        multi_table, num_splits=2, transform=lambda b: b.column("id").to_pylist()[1:], on_transform_error=mode
    )
    with pytest.raises(ValueError, match="row"):
        list(ds)


ALL_MODES = ["raise", "skip", "warn", lambda exc: True]


def stop_at_five(batch: pa.RecordBatch) -> list[int]:
    values = batch.column("id").to_pylist()
    if 5 in values:
        raise StopIteration  # inside a generator's caller this would end the epoch silently
    return values


@pytest.mark.parametrize("mode", ALL_MODES, ids=["raise", "skip", "warn", "callable"])
def test_stop_iteration_from_a_transform_is_an_error_in_every_mode(multi_table: Any, mode: Any) -> None:
    """Issue 13: StopIteration under "skip" ended the epoch with 236 of 240 rows, no error."""
    ds = StreamingDataset(multi_table, num_splits=2, transform=stop_at_five, on_transform_error=mode)
    with pytest.raises(RuntimeError, match="StopIteration") as info:
        list(ds)
    assert isinstance(info.value.__cause__, StopIteration)
    assert str(info.value) == (
        "transform raised StopIteration; it is an error in every on_transform_error mode "
        "(raise another exception to drop a row)"
    )
    assert ds.rows_skipped == 0


@pytest.mark.parametrize("mode", ALL_MODES, ids=["raise", "skip", "warn", "callable"])
@pytest.mark.parametrize("output", [None, 3, 2.5], ids=["None", "int", "float"])
def test_an_output_that_is_not_one_item_per_row_is_a_type_error_in_every_mode(
    multi_table: Any, mode: Any, output: object
) -> None:
    """Issue 13: returning None or an int under "skip" skipped every row (an empty epoch)."""
    ds = StreamingDataset(multi_table, num_splits=2, transform=lambda b: output, on_transform_error=mode)
    with pytest.raises(TypeError) as info:
        list(ds)
    assert str(info.value) == (
        f"transform returned {type(output).__name__}, not one item per input row; return a list "
        "(the skip modes drop rows whose transform raised, nothing else)"
    )
    assert ds.rows_skipped == 0


def test_base_exceptions_are_never_handled(multi_table: Any) -> None:
    class Stop(BaseException):
        pass

    def boom(batch: pa.RecordBatch) -> list[int]:
        raise Stop

    ds = StreamingDataset(multi_table, num_splits=2, transform=boom, on_transform_error="skip")
    with pytest.raises(Stop):
        list(ds)


# ------------------------------------------------------------------ packing with null token lists

PACK = {"columns": ["tokens"], "pack_sequences": 6, "eos_id": 1, "pad_id": 0}


def corpus_of(table: Any) -> dict[int, tuple[int, ...]]:
    data = table.to_arrow()
    return {
        i: tuple(t) if t is not None and None not in t else ()
        for i, t in zip(data.column("id").to_pylist(), data.column("tokens").to_pylist())
    }


def null_ids(table: Any) -> set[int]:
    data = table.to_arrow()
    return {
        i
        for i, t in zip(data.column("id").to_pylist(), data.column("tokens").to_pylist())
        if t is None or None in t
    }


def test_packing_skips_null_token_lists(null_table: Any, perm_of: Any) -> None:
    kwargs = {**PACK, "num_splits": 2, "blocks_per_epoch": 60, "on_transform_error": "skip"}
    splits = perm_of(null_table, num_splits=2)
    bad = null_ids(null_table)
    assert len(bad) == 4
    config = PackingConfig(6, 1, 0, 60)
    model = iterate_packed(
        tuple(tuple(s) for s in splits),
        corpus_of(null_table),
        Faults(skipped=frozenset(bad)),
        (0, 1),
        config,
        initial_packed_state(2),
    )
    ds = StreamingDataset(null_table, **kwargs)
    got = list(ds)
    assert [tuple(b["input_ids"].tolist()) for b in got] == [b.input_ids for b in model.blocks]
    assert [tuple(b["doc_ids"].tolist()) for b in got] == [b.doc_ids for b in model.blocks]
    assert ds.rows_skipped == len(bad)
    ref = list(Reference(null_table, **kwargs))
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(got, ref)) and len(ref) == len(got)


@pytest.mark.parametrize("bad_id", sorted({7, 22, 41, 33}))
def test_packing_raises_null_tokens_at_the_cycle_that_needs_them(
    null_table: Any, perm_of: Any, bad_id: int
) -> None:
    """Only one bad document at a time (others skipped by a filter), raised when its fill needs it."""
    others = sorted({7, 22, 41, 33} - {bad_id})
    flt = f"id NOT IN ({', '.join(map(str, others))})"
    splits = perm_of(null_table, num_splits=2, filter=flt)
    config = PackingConfig(6, 1, 0, 40)
    model = iterate_packed(
        tuple(tuple(s) for s in splits),
        corpus_of(null_table),
        Faults(raising=frozenset({bad_id})),
        (0, 1),
        config,
        initial_packed_state(2),
    )
    assert isinstance(model.end, Raised)
    ds = StreamingDataset(
        null_table, **PACK, num_splits=2, blocks_per_epoch=40, filter=flt, read_batch_size=64
    )
    got: list[Any] = []
    with pytest.raises(ValueError, match="null"):
        for block in ds:
            got.append(block)
    assert [tuple(b["input_ids"].tolist()) for b in got] == [b.input_ids for b in model.blocks]
    assert len(got) % 2 == 0  # whole cycles only
    if got:
        state = ds.state_dict()
        expected = model.states[-1]
        assert state["samples_consumed_per_split"] == list(expected.consumed)
        assert state["blocks_emitted_per_split"] == list(expected.emitted)


@pytest.mark.parametrize("bad_id", sorted({7, 22, 41, 33}))
def test_a_lagging_splits_bad_document_raises_during_the_packed_catch_up(
    null_table: Any, perm_of: Any, bad_id: int
) -> None:
    """The other rank ahead, the failing split's rank at its start, merged, resumed on one rank: the
    failing split catches up block by block and raises the document's own error at the block that
    needs it, after the blocks before it (Origin: mutants of the packed catch-up's error path survived)."""
    others = sorted({7, 22, 41, 33} - {bad_id})
    flt = f"id NOT IN ({', '.join(map(str, others))})"
    kwargs = {**PACK, "num_splits": 2, "blocks_per_epoch": 40, "filter": flt}
    failing = next(s for s, ids in enumerate(perm_of(null_table, num_splits=2, filter=flt)) if bad_id in ids)
    whole: list[Any] = []  # the single-rank run: cycles of (split 0, split 1) up to the bad block
    with pytest.raises(ValueError, match="null"):
        for block in StreamingDataset(null_table, **kwargs):
            whole.append(tuple(block["input_ids"].tolist()))
    cycles = len(whole) // 2  # the failing split's blocks before its error
    ahead = StreamingDataset(null_table, world_size=2, rank=1 - failing, **kwargs)
    it = iter(ahead)
    assert len(list(itertools.islice(it, cycles + 1))) == cycles + 1  # the other split passes the bad block
    it.close()
    behind = StreamingDataset(null_table, world_size=2, rank=failing, **kwargs)
    resumed = StreamingDataset(null_table, **kwargs)
    resumed.load_state_dict(merge_state_dicts([ahead.state_dict(), behind.state_dict()]))
    got: list[Any] = []
    with pytest.raises(ValueError, match="null"):
        for block in resumed:
            got.append(tuple(block["input_ids"].tolist()))
    assert got == [whole[2 * k + failing] for k in range(cycles)]


def test_first_rows_are_never_lost_before_a_late_error(multi_table: Any, perm_of: Any) -> None:
    """B9: with one big read batch, the 8 good rows before a bad 9th come out before the error."""
    splits = perm_of(multi_table, num_splits=1)
    bad = {splits[0][8]}
    ds = StreamingDataset(multi_table, num_splits=1, transform=Faulty(bad), read_batch_size=1000)
    it = iter(ds)
    assert list(itertools.islice(it, 8)) == splits[0][:8]
    with pytest.raises(BadRow):
        next(it)


def test_iterable_outputs_are_accepted(multi_table: Any) -> None:
    """Any iterable with one item per row passes: a NumPy array, a tuple, a generator (R5.2)."""
    for transform in (
        lambda b: b.column("id").to_numpy(),
        lambda b: tuple(b.column("id").to_pylist()),
        lambda b: (v * 2 for v in b.column("id").to_pylist()),
    ):
        got = list(StreamingDataset(multi_table, num_splits=2, transform=transform, read_batch_size=9))
        assert [int(v) for v in got] == [
            int(v) for v in Reference(multi_table, num_splits=2, transform=transform, read_batch_size=9)
        ]


class FrameLike:
    """Duck-typed data frame (pandas is not installed): iterating yields the column names."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.columns = [f"c{i}" for i in range(batch.num_rows)]
        self.shape = (batch.num_rows, batch.num_rows)

    def __iter__(self) -> Any:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)


def test_data_frame_output_is_a_type_error_d10(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=2, transform=FrameLike, on_transform_error="skip")
    with pytest.raises(TypeError, match="frame"):
        list(ds)


# ------------------------------------------------------------------ packing with uint64 token lists

HUGE = {5: [3, 2**63, 4], 11: [2**64 - 1]}
"""Documents of the uint64 table with a token that does not fit in int64 (2**63 - 1 does, doc 8)."""
NULL_TOKEN = {17: [5, None, 6]}
"""A null token in the same read as 2**63 - 1: the null must not turn the batch into floats."""


@pytest.fixture(scope="module")
def uint64_table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import lancedb

    special: dict[int, list[int | None]] = {**HUGE, **NULL_TOKEN, 8: [2**63 - 1]}
    tokens = [special.get(i, [i + 2] * (1 + i % 4)) for i in range(30)]
    data = pa.table(
        {"id": pa.array(range(30), pa.int64()), "tokens": pa.array(tokens, pa.list_(pa.uint64()))}
    )
    return lancedb.connect(str(tmp_path_factory.mktemp("uint64"))).create_table("u", data)


@pytest.mark.parametrize("read_batch_size", [1, 64])
def test_packing_skips_uint64_tokens_beyond_int64(
    uint64_table: Any, perm_of: Any, read_batch_size: int
) -> None:
    """Tokens are int64 tensors: a larger uint64 token fails its document; 2**63 - 1 is kept."""
    splits = perm_of(uint64_table, num_splits=2)
    bad = frozenset(HUGE) | frozenset(NULL_TOKEN)
    model = iterate_packed(
        tuple(tuple(s) for s in splits),
        corpus_of(uint64_table),
        Faults(skipped=bad),
        (0, 1),
        PackingConfig(6, 1, 0, 12),
        initial_packed_state(2),
    )
    ds = StreamingDataset(
        uint64_table,
        **PACK,
        num_splits=2,
        blocks_per_epoch=12,
        on_transform_error="skip",
        read_batch_size=read_batch_size,
    )
    got = list(ds)
    assert [tuple(b["input_ids"].tolist()) for b in got] == [b.input_ids for b in model.blocks]
    assert [tuple(b["doc_ids"].tolist()) for b in got] == [b.doc_ids for b in model.blocks]
    assert any(2**63 - 1 in b["input_ids"].tolist() for b in got)
    assert ds.rows_skipped == len(bad)
    assert ds.state_dict()["samples_consumed_per_split"] == list(model.states[-1].consumed)


def test_packing_raises_a_uint64_token_beyond_int64_at_its_turn(uint64_table: Any, perm_of: Any) -> None:
    flt = "id NOT IN (5, 17)"
    splits = perm_of(uint64_table, num_splits=2, filter=flt)
    model = iterate_packed(
        tuple(tuple(s) for s in splits),
        corpus_of(uint64_table),
        Faults(raising=frozenset({11})),
        (0, 1),
        PackingConfig(6, 1, 0, 40),
        initial_packed_state(2),
    )
    assert isinstance(model.end, Raised)
    ds = StreamingDataset(uint64_table, **PACK, num_splits=2, blocks_per_epoch=40, filter=flt)
    got: list[Any] = []
    with pytest.raises(ValueError, match="int64"):
        for block in ds:
            got.append(block)
    assert got, "the error should come after the blocks that do not need document 11"
    assert [tuple(b["input_ids"].tolist()) for b in got] == [b.input_ids for b in model.blocks]


class NotRowWise:
    """Fails on any batch of more than one row; every row alone passes (returns its ``id``)."""

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        if batch.num_rows > 1:
            raise LookupError(f"a batch of {batch.num_rows} rows")
        return list(batch.column("id").to_pylist())


def test_a_transform_that_is_not_row_wise_raises_at_the_first_row_of_its_batch(
    multi_table: Any, perm_of: Any
) -> None:
    """Origin: written to kill a surviving mutant (docs/MUTATION.md)."""
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
    """The error re-raised is the one the row raises alone, also when it is the first row of its batch.

    Origin: written to kill a surviving mutant (docs/MUTATION.md).
    """
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
    """Origin: written to kill a surviving mutant (docs/MUTATION.md)."""
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
