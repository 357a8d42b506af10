"""Randomized differential tests: the implementation on a real table against the executable spec.

Hypothesis draws the topology, the read settings, the faulty rows and the start
state; the spec's ``iterate_rows`` / ``iterate_packed`` over LanceDB's permutation
(in ``id`` values) give the expected items, checkpoints and end.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import event, given
from hypothesis import strategies as st

from elastic_loader import StreamingDataset
from elastic_loader.spec import Faults, PackingConfig, RowState, iterate_packed, iterate_rows
from elastic_loader.spec.packing import PackBuffer, PackedState
from elastic_loader.spec.rows import Raised

SMALL_ROWS = 24


class Failing(ValueError):
    pass


class FailOn:
    """Row-wise transform returning ``id``; raises :class:`Failing` when the batch holds a listed id."""

    def __init__(self, bad: frozenset[int]) -> None:
        self.bad = bad

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        values = batch.column("id").to_pylist()
        if self.bad.intersection(values):
            raise Failing("bad row")
        return values


_PERMS: dict[tuple[str, int], tuple[tuple[int, ...], ...]] = {}


def cached_perm(table: Any, perm_of: Any, num_splits: int) -> tuple[tuple[int, ...], ...]:
    """The permutation of ``table`` (seed 0, epoch 0), computed once per table and split count."""
    key = (str(table.name), num_splits)
    if key not in _PERMS:
        _PERMS[key] = tuple(tuple(s) for s in perm_of(table, num_splits=num_splits))
    return _PERMS[key]


@st.composite
def row_cases(draw: st.DrawFn) -> dict[str, Any]:
    num_splits = draw(st.sampled_from([1, 2, 3, 4, 6]))
    world_size = draw(st.sampled_from([w for w in (1, 2, 3) if num_splits % w == 0]))
    rank = draw(st.integers(0, world_size - 1))
    m = SMALL_ROWS // num_splits
    low = st.integers(0, max(0, m // 2))  # mostly early states, so that something is left to read
    samples = draw(
        st.lists(st.one_of(st.just(0), low, st.integers(0, m)), min_size=num_splits, max_size=num_splits)
    )
    positions = [draw(st.integers(c, min(m, c + 2))) for c in samples]
    ids = st.integers(0, SMALL_ROWS - 1)
    skipped = draw(st.frozensets(ids, max_size=6))
    raising = draw(st.frozensets(ids, max_size=3)) - skipped
    return {
        "num_splits": num_splits,
        "world_size": world_size,
        "rank": rank,
        "start": RowState(tuple(samples), tuple(positions)),
        "skipped": skipped,
        "raising": raising,
        "read_batch_size": draw(st.integers(1, 30)),
        "io_queue_depth": draw(st.integers(1, 3)),
        "stop": draw(st.integers(1, SMALL_ROWS + 1)),  # consume at most this many rows
    }


@given(case=row_cases())
def test_rows_match_the_spec(small_table: Any, perm_of: Any, case: dict[str, Any]) -> None:
    s, w, r = case["num_splits"], case["world_size"], case["rank"]
    perm = cached_perm(small_table, perm_of, s)
    owned = list(range(r * s // w, (r + 1) * s // w))
    faults = Faults(skipped=case["skipped"], raising=case["raising"])
    model = iterate_rows(perm, faults, owned, case["start"])
    event(f"end: {type(model.end).__name__}, rows: {'some' if model.rows else 'none'}")
    ds = StreamingDataset(
        small_table,
        num_splits=s,
        world_size=w,
        rank=r,
        transform=RaisingFor(case["raising"], FailOn(case["skipped"])),
        on_transform_error=lambda exc: isinstance(exc, Failing),
        read_batch_size=case["read_batch_size"],
        io_queue_depth=case["io_queue_depth"],
    )
    start = case["start"]
    ds.load_state_dict(
        {
            "shuffle_seed": 0,
            "num_splits": s,
            "epoch": 0,
            "samples_consumed_per_split": list(start.samples),
            "positions_consumed_per_split": list(start.positions),
        }
    )
    got: list[int] = []
    it = iter(ds)
    error: BaseException | None = None
    try:
        for row in it:
            got.append(row)
            if len(got) == case["stop"]:
                break
    except Unskippable as exc:
        error = exc
    it.close()
    n = len(got)
    assert got == [y.row_id for y in model.rows[:n]]
    if error is not None:  # the raising row surfaced after every earlier row
        assert isinstance(model.end, Raised) and n == len(model.rows)
    elif n < case["stop"]:  # the epoch ended where the spec ends it
        assert not isinstance(model.end, Raised) and n == len(model.rows)
    state = ds.state_dict()
    expected = model.state_after(n)
    assert state["samples_consumed_per_split"] == list(expected.samples)
    assert state["positions_consumed_per_split"] == list(expected.positions)


class Unskippable(Exception):
    """Raised for a row in ``raising``; not a :class:`Failing`, so the handler refuses it."""


class RaisingFor:
    """Wraps a transform: a batch holding a row of ``raising`` raises :class:`Unskippable`."""

    def __init__(self, raising: frozenset[int], inner: FailOn) -> None:
        self.raising = raising
        self.inner = inner

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        if self.raising.intersection(batch.column("id").to_pylist()):
            raise Unskippable("must raise")
        return self.inner(batch)


NULL_IDS = frozenset({7, 22, 41, 33})  # the null table's ids with a null list or a null token


@st.composite
def packed_cases(draw: st.DrawFn) -> dict[str, Any]:
    num_splits = draw(st.sampled_from([1, 2, 3, 4]))
    world_size = draw(st.sampled_from([w for w in (1, 2) if num_splits % w == 0]))
    return {
        "num_splits": num_splits,
        "world_size": world_size,
        "rank": draw(st.integers(0, world_size - 1)),
        "pack_sequences": draw(st.integers(1, 12)),
        "blocks_per_epoch": num_splits * draw(st.integers(1, 40)),
        "mode": draw(st.sampled_from(["skip", "raise"])),
        "read_batch_size": draw(st.integers(1, 40)),
        "io_queue_depth": draw(st.integers(1, 3)),
    }


def null_corpus(table: Any) -> dict[int, tuple[int, ...]]:
    data = table.to_arrow()
    return {
        i: () if t is None or None in t else tuple(t)
        for i, t in zip(data.column("id").to_pylist(), data.column("tokens").to_pylist())
    }


@given(case=packed_cases())
def test_packed_blocks_match_the_spec(null_table: Any, perm_of: Any, case: dict[str, Any]) -> None:
    s, w, r = case["num_splits"], case["world_size"], case["rank"]
    perm = cached_perm(null_table, perm_of, s)
    owned = tuple(range(r * s // w, (r + 1) * s // w))
    faults = Faults(skipped=NULL_IDS) if case["mode"] == "skip" else Faults(raising=NULL_IDS)
    config = PackingConfig(case["pack_sequences"], -1, -2, case["blocks_per_epoch"])
    model = iterate_packed(
        perm, null_corpus(null_table), faults, owned, config, PackedState((0,) * s, (0,) * s)
    )
    event(f"end: {type(model.end).__name__}, padded: {any(b.real < len(b.input_ids) for b in model.blocks)}")
    ds = StreamingDataset(
        null_table,
        num_splits=s,
        world_size=w,
        rank=r,
        columns=["tokens"],
        pack_sequences=case["pack_sequences"],
        eos_id=-1,
        pad_id=-2,
        blocks_per_epoch=case["blocks_per_epoch"],
        on_transform_error=case["mode"],
        read_batch_size=case["read_batch_size"],
        io_queue_depth=case["io_queue_depth"],
    )
    got: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    raised = False
    try:
        for block in ds:
            got.append((tuple(block["input_ids"].tolist()), tuple(block["doc_ids"].tolist())))
    except ValueError as exc:
        assert "null" in str(exc)
        raised = True
    assert got == [(b.input_ids, b.doc_ids) for b in model.blocks]
    assert raised == isinstance(model.end, Raised)
    state = ds.state_dict()
    expected = model.state_after(len(got))
    assert state["samples_consumed_per_split"] == list(expected.consumed)
    assert state["blocks_emitted_per_split"] == list(expected.emitted)
    buffers = {
        int(k): PackBuffer(tuple(v["tokens"]), tuple(v["starts"])) for k, v in state["pack_buffers"].items()
    }
    assert buffers == dict(expected.buffers)


@given(case=packed_cases(), steps=st.integers(0, 12))
def test_packed_resume_from_a_spec_checkpoint(
    null_table: Any, perm_of: Any, case: dict[str, Any], steps: int
) -> None:
    """A one-rank checkpoint after ``steps`` global steps, resumed on rank ``r`` of ``W``."""
    s, w, r = case["num_splits"], case["world_size"], case["rank"]
    perm = cached_perm(null_table, perm_of, s)
    faults = Faults(skipped=NULL_IDS)  # a raising document would end the one-rank run early
    config = PackingConfig(case["pack_sequences"], -1, -2, case["blocks_per_epoch"])
    corpus = null_corpus(null_table)
    zero = PackedState((0,) * s, (0,) * s)
    whole = iterate_packed(perm, corpus, faults, tuple(range(s)), config, zero)
    at = min(steps, case["blocks_per_epoch"] // s) * s
    start = whole.state_after(at)
    owned = tuple(range(r * s // w, (r + 1) * s // w))
    model = iterate_packed(perm, corpus, faults, owned, config, start)
    ds = StreamingDataset(
        null_table,
        num_splits=s,
        world_size=w,
        rank=r,
        columns=["tokens"],
        pack_sequences=case["pack_sequences"],
        eos_id=-1,
        pad_id=-2,
        blocks_per_epoch=case["blocks_per_epoch"],
        on_transform_error="skip",
        read_batch_size=case["read_batch_size"],
    )
    ds.load_state_dict(
        {
            "shuffle_seed": 0,
            "num_splits": s,
            "epoch": 0,
            "pack_sequences": case["pack_sequences"],
            "eos_id": -1,
            "pad_id": -2,
            "blocks_per_epoch": case["blocks_per_epoch"],
            "samples_consumed_per_split": list(start.consumed),
            "blocks_emitted_per_split": list(start.emitted),
            "pack_buffers": {
                str(k): {"tokens": list(b.tokens), "starts": list(b.starts)} for k, b in start.buffers.items()
            },
        }
    )
    got = [(tuple(b["input_ids"].tolist()), tuple(b["doc_ids"].tolist())) for b in ds]
    assert got == [(b.input_ids, b.doc_ids) for b in model.blocks]
