"""Checkpoints on real tables: resume, merge across topologies, validation on load, epochs.

Covers ResumeEquivalenceProp, MergeExactProp, ExactlyOnceProp and HonestProgressInv
on the implementation, and the deviations D1, D2, D5, D6, D9, D12, D18, D19, D21.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from lancedb.streaming import StreamingDataset as Reference

from elastic_loader import LocalShuffle, StreamingDataLoader, StreamingDataset, merge_state_dicts

PACK = {"columns": ["tokens"], "pack_sequences": 5, "eos_id": 1, "pad_id": 0}


def ids(items: Iterator[Any] | list[Any]) -> list[int]:
    return [row["id"] for row in items]


def consume(ds: StreamingDataset, n: int) -> list[Any]:
    """Take ``n`` items from a fresh iterator over ``ds`` and close it."""
    it = iter(ds)
    try:
        return list(itertools.islice(it, n))
    finally:
        it.close()


def blocks_key(blocks: list[dict[str, torch.Tensor]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [(tuple(b["input_ids"].tolist()), tuple(b["doc_ids"].tolist())) for b in blocks]


# ------------------------------------------------------------------ resume at every prefix


@pytest.mark.parametrize("kwargs", [{"num_splits": 4}, {"num_splits": 6, "world_size": 2, "rank": 1}])
def test_row_resume_at_every_prefix(small_table: Any, kwargs: dict[str, Any]) -> None:
    full = ids(StreamingDataset(small_table, read_batch_size=3, **kwargs))
    for n in range(len(full) + 1):
        ds = StreamingDataset(small_table, read_batch_size=3, **kwargs)
        assert ids(consume(ds, n)) == full[:n]
        state = ds.state_dict()
        resumed = StreamingDataset(small_table, read_batch_size=5, **kwargs)
        resumed.load_state_dict(state)
        assert ids(resumed) == full[n:], n


def test_row_resume_while_the_iterator_is_live(small_table: Any) -> None:
    """state_dict() taken between two next() calls counts exactly the rows received so far."""
    full = ids(StreamingDataset(small_table, num_splits=4))
    ds = StreamingDataset(small_table, num_splits=4)
    it = iter(ds)
    for n in range(1, len(full) + 1):
        assert next(it)["id"] == full[n - 1]
        resumed = StreamingDataset(small_table, num_splits=4)
        resumed.load_state_dict(ds.state_dict())
        assert ids(resumed) == full[n:], n
    assert list(it) == []


@pytest.mark.parametrize("blocks_per_epoch", [40, 12])
def test_packed_resume_at_every_step_boundary(small_table: Any, blocks_per_epoch: int) -> None:
    kwargs = {**PACK, "num_splits": 4, "blocks_per_epoch": blocks_per_epoch}
    full = blocks_key(list(StreamingDataset(small_table, **kwargs)))
    assert len(full) == blocks_per_epoch
    for step in range(blocks_per_epoch // 4 + 1):
        ds = StreamingDataset(small_table, **kwargs)
        assert blocks_key(consume(ds, 4 * step)) == full[: 4 * step]
        state = ds.state_dict()
        resumed = StreamingDataset(small_table, **kwargs)
        resumed.load_state_dict(state)
        assert blocks_key(list(resumed)) == full[4 * step :], step


@pytest.mark.parametrize("taken", [1, 3, 6, 37])
def test_packed_state_dict_mid_step_resumes_exactly(small_table: Any, taken: int) -> None:
    """D23: a packed checkpoint after any block (mid-cycle too) resumes with the blocks that follow."""
    kwargs = {**PACK, "num_splits": 4, "blocks_per_epoch": 40}
    full = blocks_key(list(StreamingDataset(small_table, **kwargs)))
    ds = StreamingDataset(small_table, **kwargs)
    assert blocks_key(consume(ds, taken)) == full[:taken]
    state = ds.state_dict()
    resumed = StreamingDataset(small_table, **kwargs)
    resumed.load_state_dict(state)
    assert blocks_key(list(resumed)) == full[taken:]
    row = StreamingDataset(small_table, num_splits=4)
    consume(row, 3)
    assert row.state_dict()["samples_consumed_per_split"] == [1, 1, 1, 0]


# ------------------------------------------------------------------ elastic resume after a merge


def rank_runs(table: Any, world_size: int, num_splits: int, state: dict[str, Any] | None, **kw: Any) -> list:
    out = []
    for rank in range(world_size):
        ds = StreamingDataset(table, num_splits=num_splits, world_size=world_size, rank=rank, **kw)
        if state is not None:
            ds.load_state_dict(state)
        out.append(ds)
    return out


@pytest.mark.parametrize(("old", "new"), [(2, 4), (4, 2), (2, 1), (1, 4)])
def test_resume_on_another_world_size_after_merge(multi_table: Any, old: int, new: int) -> None:
    s = 8
    whole = ids(StreamingDataset(multi_table, num_splits=s))  # the canonical single-rank order
    ranks = rank_runs(multi_table, old, s, None)
    cycles = 9
    seen = [ids(consume(ds, cycles * (s // old))) for ds in ranks]
    merged = merge_state_dicts([ds.state_dict() for ds in ranks])
    assert merged["samples_consumed_per_split"] == [cycles] * s
    resumed = rank_runs(multi_table, new, s, merged)
    rest = [ids(ds) for ds in resumed]
    # exactly once over the epoch
    delivered = Counter(itertools.chain(*seen, *rest))
    assert delivered == Counter(whole)
    # and global step g holds the same rows whatever the topology: cycle c of every split
    per_rank = s // new
    for c in range(len(whole) // s - cycles):
        step = set()
        for r in rest:
            step.update(r[c * per_rank : (c + 1) * per_rank])
        assert step == set(whole[(cycles + c) * s : (cycles + c + 1) * s]), c


def test_packed_resume_on_another_world_size_after_merge(multi_table: Any) -> None:
    kwargs = {**PACK, "blocks_per_epoch": 240}
    whole = blocks_key(list(StreamingDataset(multi_table, num_splits=4, **kwargs)))
    ranks = rank_runs(multi_table, 2, 4, None, **kwargs)
    for ds in ranks:
        consume(ds, 2 * 13)
    merged = merge_state_dicts([ds.state_dict() for ds in ranks])
    one = StreamingDataset(multi_table, num_splits=4, **kwargs)
    one.load_state_dict(merged)
    assert blocks_key(list(one)) == whole[4 * 13 :]
    four = rank_runs(multi_table, 4, 4, merged, **kwargs)
    rest = [blocks_key(list(ds)) for ds in four]
    assert [block for cycle in zip(*rest) for block in cycle] == whole[4 * 13 :]


def test_async_ranks_merge_exactly_once(multi_table: Any) -> None:
    """B1/D1: ranks at different row counts, merged, then resumed: every row exactly once."""
    whole = ids(StreamingDataset(multi_table, num_splits=4))
    r0, r1 = rank_runs(multi_table, 2, 4, None)
    first = ids(consume(r0, 10)) + ids(consume(r1, 3))
    s0, s1 = r0.state_dict(), r1.state_dict()
    # Each rank reports its own splits and infers the other's as if it had taken as many rows
    # (lockstep, D24): wrong here, but a merge takes every split from the rank that reports it.
    assert s0["samples_consumed_per_split"] == [5, 5, 5, 5] and s0["elastic_loader"]["reported"] == [0, 1]
    assert s1["samples_consumed_per_split"] == [2, 1, 2, 1] and s1["elastic_loader"]["reported"] == [2, 3]
    merged = merge_state_dicts([s0, s1])
    assert merged["samples_consumed_per_split"] == [5, 5, 2, 1]
    resumed = StreamingDataset(multi_table, num_splits=4)
    resumed.load_state_dict(merged)
    rest = ids(resumed)  # catches split 3 up first, then full cycles
    assert Counter(first + rest) == Counter(whole)
    # the reference overstates rank 1's splits (B1) and loses rows on the same schedule
    ref0 = Reference(multi_table, num_splits=4, world_size=2, rank=0)
    ref1 = Reference(multi_table, num_splits=4, world_size=2, rank=1)
    ids(itertools.islice(iter(ref0), 10))
    ids(itertools.islice(iter(ref1), 3))
    ref_merged = Reference.merge_state_dicts([ref0.state_dict(), ref1.state_dict()])
    assert ref_merged["samples_consumed_per_split"] == [5, 5, 5, 5]


def test_async_ranks_merge_and_lagging_splits_catch_up_in_order(multi_table: Any) -> None:
    """Row ranks at different row counts, merged, resumed on one rank: the lagging splits give one
    row at a time, fewest taken first (ties by split), until every split is level; then full
    cycles follow (Origin: mutants of the row catch-up order survived; the test above compares
    the rows only as a multiset)."""
    whole = ids(StreamingDataset(multi_table, num_splits=4))

    def row(split: int, k: int) -> int:  # row k of a split in the single-rank cycle order
        return whole[4 * k + split]

    r0, r1 = rank_runs(multi_table, 2, 4, None)
    assert ids(consume(r0, 10)) == [row(s, k) for k in range(5) for s in (0, 1)]
    assert ids(consume(r1, 3)) == [row(2, 0), row(3, 0), row(2, 1)]
    resumed = StreamingDataset(multi_table, num_splits=4)
    resumed.load_state_dict(merge_state_dicts([r0.state_dict(), r1.state_dict()]))
    rest = ids(resumed)
    catch_up = [(3, 1), (2, 2), (3, 2), (2, 3), (3, 3), (2, 4), (3, 4)]
    assert rest[: len(catch_up)] == [row(s, k) for s, k in catch_up]
    assert rest[len(catch_up) :] == whole[4 * 5 :]


def test_a_rank_infers_the_others_from_where_they_were_loaded(multi_table: Any) -> None:
    """Non-owned splits: where their owner stands after as many rows from the loaded values (D24)."""
    start = {
        "shuffle_seed": 0,
        "num_splits": 4,
        "epoch": 0,
        "samples_consumed_per_split": [3, 3, 7, 6],
        "positions_consumed_per_split": [3, 3, 7, 6],
    }
    r0 = StreamingDataset(multi_table, num_splits=4, world_size=2, rank=0)
    r0.load_state_dict(start)
    consume(r0, 4)
    # rank 1 from [7, 6]: split 3 catches up (7, 7), then a cycle (8, 8) and split 2 again (9, 8)
    assert r0.state_dict()["samples_consumed_per_split"] == [5, 5, 9, 8]


# ------------------------------------------------------------------ load_state_dict validation


def row_state(ds: StreamingDataset, **changes: Any) -> dict[str, Any]:
    state = dict(ds.state_dict())
    state.update(changes)
    return state


def test_load_checks_epoch_b2(multi_table: Any) -> None:
    e0 = StreamingDataset(multi_table, num_splits=4)
    consume(e0, 6)
    e1 = StreamingDataset(multi_table, num_splits=4, epoch=1)
    with pytest.raises(ValueError, match="epoch"):
        e1.load_state_dict(e0.state_dict())
    ref1 = Reference(multi_table, num_splits=4, epoch=1)
    ref1.load_state_dict(e0.state_dict())  # the reference accepts it silently (B2)


@pytest.mark.parametrize(
    "changes",
    [
        {"samples_consumed_per_split": [1, 1, 1]},
        {"positions_consumed_per_split": [1, 1, 1, 1, 1]},
        {"samples_consumed_per_split": [2, 2, 2, 2], "positions_consumed_per_split": [2, 2, 1, 2]},
        {"samples_consumed_per_split": [51, 51, 51, 51], "positions_consumed_per_split": [51, 51, 51, 51]},
        {"positions_consumed_per_split": [0, 0, 0, 51]},
        {"samples_consumed_per_split": [-1, 0, 0, 0]},
        {"samples_consumed_per_split": [True, 0, 0, 0]},
        {"num_splits": 2},
        {"shuffle_seed": 1},
        {"epoch": 1},
        {"perm_fingerprint": "0" * 64},
        {"pack_buffers": {}, "blocks_emitted_per_split": [0, 0, 0, 0]},
    ],
)
def test_load_rejects_a_mismatched_or_malformed_row_state(multi_table: Any, changes: dict[str, Any]) -> None:
    ds = StreamingDataset(multi_table, num_splits=4)
    before = ds.state_dict()
    with pytest.raises(ValueError):
        ds.load_state_dict(row_state(ds, **changes))
    assert ds.state_dict() == before


@pytest.mark.parametrize("key", ["shuffle_seed", "num_splits", "epoch", "samples_consumed_per_split"])
def test_load_missing_key_is_value_error_d19(multi_table: Any, key: str) -> None:
    ds = StreamingDataset(multi_table, num_splits=4)
    state = ds.state_dict()
    del state[key]
    with pytest.raises(ValueError, match=key):
        ds.load_state_dict(state)


def test_load_rejects_a_non_dict(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4)
    with pytest.raises(TypeError):
        ds.load_state_dict([("num_splits", 4)])  # type: ignore[arg-type]


def test_packed_load_checks_budget_settings_and_lengths(multi_table: Any) -> None:
    kwargs = {**PACK, "num_splits": 4, "blocks_per_epoch": 40}
    ds = StreamingDataset(multi_table, **kwargs)
    consume(ds, 8)
    good = ds.state_dict()
    for key, value in [
        ("blocks_emitted_per_split", [11, 11, 11, 11]),  # beyond the budget of 10 (D18)
        ("blocks_emitted_per_split", [2, 2, 2]),
        ("samples_consumed_per_split", [51, 0, 0, 0]),
        ("pack_sequences", 6),
        ("eos_id", 2),
        ("pad_id", 3),
        ("blocks_per_epoch", 80),
        ("epoch", 1),
        ("pack_buffers", {"9": {"tokens": [1], "starts": [0]}}),
        ("pack_buffers", {0: {"tokens": [1, 2], "starts": [1, 0]}}),
    ]:
        fresh = StreamingDataset(multi_table, **kwargs)
        with pytest.raises(ValueError):
            fresh.load_state_dict({**good, key: value})
    row_ds = StreamingDataset(multi_table, num_splits=4)
    with pytest.raises(ValueError):
        row_ds.load_state_dict(good)


def test_fingerprint_checks_b14(multi_table: Any) -> None:
    def strategy(builder: Any) -> Any:
        return builder.split_random(fixed=4, seed=1)

    def other(builder: Any) -> Any:
        return builder.split_random(fixed=4, seed=2)

    a = StreamingDataset(multi_table, num_splits=4, split_strategy=strategy)
    consume(a, 5)
    state = a.state_dict()
    same = StreamingDataset(multi_table, num_splits=4, split_strategy=strategy)
    same.load_state_dict(state)
    assert ids(same) == ids(StreamingDataset(multi_table, num_splits=4, split_strategy=strategy))[5:]
    with pytest.raises(ValueError, match="fingerprint"):
        StreamingDataset(multi_table, num_splits=4, split_strategy=other).load_state_dict(state)
    with pytest.raises(ValueError, match="fingerprint"):
        StreamingDataset(multi_table, num_splits=4).load_state_dict(state)
    without = {k: v for k, v in state.items() if k != "perm_fingerprint"}
    with pytest.raises(ValueError, match="fingerprint"):
        StreamingDataset(multi_table, num_splits=4, split_strategy=strategy).load_state_dict(without)
    # merge compares the fingerprint across all states, not only the first (D5)
    with pytest.raises(ValueError, match="fingerprint"):
        merge_state_dicts([without, state])
    with pytest.raises(ValueError, match="fingerprint"):
        merge_state_dicts([state, {**state, "perm_fingerprint": "f" * 64}])


def test_merge_validation_d5_d6(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4)
    consume(ds, 6)
    state = ds.state_dict()
    for bad in (
        {k: v for k, v in state.items() if k != "epoch"},
        {**state, "samples_consumed_per_split": [1, 1, 1]},
        {**state, "positions_consumed_per_split": [1, 1, 1, 1, 1]},
        {**state, "shuffle_seed": 3},
    ):
        with pytest.raises(ValueError):
            merge_state_dicts([state, bad])
    with pytest.raises(ValueError):
        merge_state_dicts([])
    packed = StreamingDataset(multi_table, **PACK, num_splits=4, blocks_per_epoch=40).state_dict()
    with pytest.raises(ValueError):
        merge_state_dicts([state, packed])


def test_legacy_int_checkpoint_d6(multi_table: Any) -> None:
    whole = ids(StreamingDataset(multi_table, num_splits=4))
    legacy = {"shuffle_seed": 0, "num_splits": 4, "epoch": 0, "samples_consumed_per_split": 7}
    ds = StreamingDataset(multi_table, num_splits=4)
    ds.load_state_dict(legacy)
    assert ds.state_dict()["samples_consumed_per_split"] == [7, 7, 7, 7]
    assert ds.state_dict()["positions_consumed_per_split"] == [7, 7, 7, 7]
    assert ids(ds) == whole[28:]
    merged = merge_state_dicts([legacy, {**legacy, "samples_consumed_per_split": [7, 9, 7, 7]}])
    assert merged["samples_consumed_per_split"] == [7, 9, 7, 7]
    ref = Reference(multi_table, num_splits=4)
    ref.load_state_dict(legacy)
    assert ids(ref) == whole[28:]


def test_json_round_trip(multi_table: Any) -> None:
    kwargs = {**PACK, "num_splits": 4, "blocks_per_epoch": 60}
    whole = blocks_key(list(StreamingDataset(multi_table, **kwargs)))
    ds = StreamingDataset(multi_table, **kwargs)
    consume(ds, 12)
    state = ds.state_dict()
    assert state["pack_buffers"], "the test needs a non-empty pack buffer"
    text = json.loads(json.dumps(state))
    assert all(isinstance(k, str) for k in text["pack_buffers"])
    resumed = StreamingDataset(multi_table, **kwargs)
    resumed.load_state_dict(text)
    assert resumed.state_dict() == state
    assert blocks_key(list(resumed)) == whole[12:]
    merged = merge_state_dicts([text])
    assert merged == state

    rows = StreamingDataset(multi_table, num_splits=4)
    consume(rows, 9)
    again = StreamingDataset(multi_table, num_splits=4)
    again.load_state_dict(json.loads(json.dumps(rows.state_dict())))
    assert again.state_dict() == rows.state_dict()


# ------------------------------------------------------------------ iterators, epochs, re-iteration


def test_load_and_set_epoch_refused_while_iterating_d21(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4)
    state = ds.state_dict()
    it = iter(ds)
    next(it)
    with pytest.raises(RuntimeError):
        ds.load_state_dict(state)
    with pytest.raises(RuntimeError):
        ds.set_epoch(1)
    with pytest.raises(RuntimeError):
        next(iter(ds))  # one iterator per instance
    it.close()
    ds.load_state_dict(state)
    assert ids(ds) == ids(StreamingDataset(multi_table, num_splits=4))


def test_set_epoch_equals_a_fresh_dataset_of_that_epoch(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, shuffle_seed=5)
    e0 = ids(ds)
    ds.set_epoch(1)
    assert ds.epoch == 1
    assert (
        ds.state_dict() == StreamingDataset(multi_table, num_splits=4, shuffle_seed=5, epoch=1).state_dict()
    )
    e1 = ids(ds)
    assert e1 == ids(StreamingDataset(multi_table, num_splits=4, shuffle_seed=5, epoch=1))
    assert e1 == ids(Reference(multi_table, num_splits=4, shuffle_seed=5, epoch=1))
    assert e1 != e0 and sorted(e1) == sorted(e0)
    # a checkpoint of the old epoch no longer fits
    old = StreamingDataset(multi_table, num_splits=4, shuffle_seed=5)
    with pytest.raises(ValueError, match="epoch"):
        ds.load_state_dict(old.state_dict())
    with pytest.raises(ValueError):
        ds.set_epoch(-1)
    with pytest.raises(TypeError):
        ds.set_epoch(True)


def test_set_epoch_mid_epoch_starts_from_the_beginning(multi_table: Any) -> None:
    kwargs = {**PACK, "num_splits": 2, "blocks_per_epoch": 20}
    ds = StreamingDataset(multi_table, **kwargs)
    consume(ds, 4)
    ds.set_epoch(2)
    expected = StreamingDataset(multi_table, epoch=2, **kwargs)
    assert ds.state_dict() == expected.state_dict()
    assert blocks_key(list(ds)) == blocks_key(list(expected))


def test_reiterating_continues_b11(multi_table: Any) -> None:
    whole = ids(StreamingDataset(multi_table, num_splits=4))
    ds = StreamingDataset(multi_table, num_splits=4)
    assert ids(consume(ds, 17)) == whole[:17]
    assert ids(consume(ds, 6)) == whole[17:23]  # continues, does not restart
    assert ids(ds) == whole[23:]
    assert list(ds) == []  # exhausted: nothing more until set_epoch
    ds.set_epoch(0)
    assert ids(ds) == whole


class WorkerInfo:
    """What ``worker_info_override`` needs: a worker id and the worker count."""

    def __init__(self, worker_id: int, num_workers: int) -> None:
        self.id = worker_id
        self.num_workers = num_workers


def test_simulated_workers_of_two_ranks_merge_exactly_once(multi_table: Any) -> None:
    """W=2 x nw=2 iterators stop at different points; merged and resumed on W=1: exactly once."""
    whole = ids(StreamingDataset(multi_table, num_splits=8))
    iterators = [
        StreamingDataset(
            multi_table, num_splits=8, world_size=2, rank=r, worker_info_override=WorkerInfo(w, 2)
        )
        for r in range(2)
        for w in range(2)
    ]
    first: list[int] = []
    for ds, n in zip(iterators, (7, 0, 12, 3)):
        first += ids(consume(ds, n))
    states = [ds.state_dict() for ds in iterators]
    # each iterator reports exact values for its two splits and the loaded zeros elsewhere
    assert states[0]["samples_consumed_per_split"] == [4, 3, 0, 0, 0, 0, 0, 0]
    assert states[2]["samples_consumed_per_split"] == [0, 0, 0, 0, 6, 6, 0, 0]
    merged = merge_state_dicts(states)
    assert merged["samples_consumed_per_split"] == [4, 3, 0, 0, 6, 6, 2, 1]
    one = StreamingDataset(multi_table, num_splits=8)
    one.load_state_dict(merged)
    assert Counter(first + ids(one)) == Counter(whole)


def _split_strategy(builder: Any) -> Any:
    return builder.split_random(fixed=4, seed=1)


PERMUTATION_KINDS: dict[str, dict[str, Any]] = {
    "builder": {},
    "split_strategy": {"split_strategy": _split_strategy},
    "computed": {"permutation": "computed"},
    "local": {"permutation": LocalShuffle(clump=4, window=8)},
}


def _names(kind: str, fingerprint: str | None) -> str:
    """How a checkpoint error must name a permutation of ``kind`` (``fingerprint`` is its own)."""
    return {
        "builder": "the permutation builder without split_strategy",
        "split_strategy": "a split_strategy permutation",
        "computed": f"permutation='computed' {fingerprint}",
        "local": f"a local permutation {fingerprint}",
    }[kind]


@pytest.mark.parametrize(("written", "reading"), list(itertools.permutations(PERMUTATION_KINDS, 2)))
def test_a_checkpoint_of_another_permutation_kind_is_refused_naming_both(
    multi_table: Any, written: str, reading: str
) -> None:
    """Loading a checkpoint written with one kind of permutation into a dataset of another kind is a
    ValueError that says which permutation the checkpoint was written for and which this dataset
    reads, so the user knows which argument to change (Origin: mutants of the message helper
    survived the suite)."""
    source = StreamingDataset(multi_table, num_splits=4, **PERMUTATION_KINDS[written])
    consume(source, 3)
    state = source.state_dict()
    target = StreamingDataset(multi_table, num_splits=4, **PERMUTATION_KINDS[reading])
    ours = row_state(target).get("perm_fingerprint")
    if written == "builder":
        expected = (
            "the checkpoint has no perm_fingerprint (it was written for LanceDB's permutation builder), "
            f"but this dataset reads {_names(reading, ours)}"
        )
    else:
        expected = (
            "perm_fingerprint mismatch: the checkpoint was written for a different permutation "
            f"({_names(written, state['perm_fingerprint'])}), this dataset reads {_names(reading, ours)}"
        )
    with pytest.raises(ValueError) as caught:
        target.load_state_dict(state)
    assert str(caught.value) == expected


def test_packed_async_ranks_merge_and_lagging_splits_catch_up_in_order(multi_table: Any) -> None:
    """Packed ranks at different block counts, merged, resumed on one rank: the lagging splits
    emit one block at a time, fewest emitted first (ties by split), until every split is level,
    then full cycles follow; every block of every split arrives exactly once, in its split's order
    (Origin: mutants of the packed catch-up survived; no test resumed splits lagging by two or more)."""
    kwargs = {**PACK, "blocks_per_epoch": 240}
    whole = blocks_key(list(StreamingDataset(multi_table, num_splits=4, **kwargs)))

    def block(split: int, k: int) -> Any:  # block k of a split in the single-rank cycle order
        return whole[4 * k + split]

    r0, r1 = rank_runs(multi_table, 2, 4, None, **kwargs)
    assert blocks_key(consume(r0, 10)) == [block(s, k) for k in range(5) for s in (0, 1)]
    assert blocks_key(consume(r1, 3)) == [block(2, 0), block(3, 0), block(2, 1)]
    merged = merge_state_dicts([r0.state_dict(), r1.state_dict()])
    resumed = StreamingDataset(multi_table, num_splits=4, **kwargs)
    resumed.load_state_dict(merged)
    rest = blocks_key(list(resumed))
    catch_up = [(3, 1), (2, 2), (3, 2), (2, 3), (3, 3), (2, 4), (3, 4)]
    assert rest[: len(catch_up)] == [block(s, k) for s, k in catch_up]
    assert rest[len(catch_up) :] == whole[4 * 5 :]
    # The counters while it runs (the table is one read): every document of the splits left is
    # unscanned, waiting or delivered, and the blocks' documents are delivered as they are yielded.
    again = StreamingDataset(multi_table, num_splits=4, read_batch_size=1000, **kwargs)
    again.load_state_dict(merged)
    seen = []
    for _ in again:
        s = again.statistics()
        seen.append(s.unscanned_rows + s.raw_queue_depth + s.prefetch_queue_depth + s.consumed_rows)
        assert s.rows_delivered == s.consumed_rows
    assert len(seen) == len(rest) and set(seen) == {178}
    after = again.statistics()  # idle: the gauges are 0, the delivered documents stay
    assert (after.rows_delivered, after.consumed_rows, after.prefetch_queue_depth) == (s.rows_delivered, 0, 0)


def reference_keys(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's reference keys (what lancedb.streaming reads), without our provenance key."""
    return {k: v for k, v in state.items() if k != "elastic_loader"}


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("packed", [False, True])
def test_batches_commit_their_progress_without_a_checkpoint_dict(
    multi_table: Any, monkeypatch: pytest.MonkeyPatch, packed: bool, workers: int
) -> None:
    """A batch carries its progress itself (a ``BatchSnapshot``), collated in this process or
    pickled from a worker: no checkpoint dict is built and parsed per batch (the tokens of a packed
    one cost a parse each), and the states are those of plain iteration at the same items (with
    workers: the state after the last batch, and a resume from a mid-epoch one)."""
    from elastic_loader._pipeline import _checkpoint

    kwargs: dict[str, Any] = {"num_splits": 4, "columns": ["id"]}
    if packed:
        kwargs.update(columns=["tokens"], pack_sequences=5, eos_id=1, pad_id=0, blocks_per_epoch=48)
    plain_ds = StreamingDataset(multi_table, **kwargs)
    states = [reference_keys(plain_ds.state_dict()) for _ in plain_ds]

    def refused(*args: Any) -> Any:
        raise AssertionError("a batch's checkpoint went through the dict parser")

    monkeypatch.setattr(_checkpoint, "commit", refused)  # the trainer's process only
    ds = StreamingDataset(multi_table, **kwargs)
    if workers == 0:
        for n, _ in enumerate(StreamingDataLoader(ds, batch_size=3), 1):
            assert reference_keys(ds.state_dict()) == states[min(3 * n, len(states)) - 1]
        assert n == -(-len(states) // 3)
        return
    loader = StreamingDataLoader(ds, batch_size=3, num_workers=workers, collate_fn=list)
    batches, saved = [], []
    for batch in loader:
        batches.append(batch)
        saved.append(loader.state_dict())
    assert reference_keys(ds.state_dict()) == states[-1]
    resumed = StreamingDataLoader(
        StreamingDataset(multi_table, **kwargs), batch_size=3, num_workers=workers, collate_fn=list
    )
    resumed.load_state_dict(saved[5])
    key = (lambda b: [x["input_ids"].tolist() for x in b]) if packed else (lambda b: [x["id"] for x in b])
    assert [key(b) for b in resumed] == [key(b) for b in batches[6:]]


def test_a_batch_snapshot_of_another_epoch_is_refused(multi_table: Any) -> None:
    """A batch's snapshot is checked for the dataset's identity as a checkpoint dict is."""
    import dataclasses

    from elastic_loader._pipeline._tracker import BatchSnapshot

    ds = StreamingDataset(multi_table, num_splits=4)
    tracker, identity = ds._tracker, ds._identity
    snapshot = BatchSnapshot(dataclasses.replace(identity, epoch=identity.epoch + 1), tracker.progress)
    with pytest.raises(ValueError, match="another epoch or permutation"):
        tracker.commit(identity, snapshot, None, 0)
    tracker.open_loader(0, 3)
    tracker.commit(identity, BatchSnapshot(identity, tracker.progress), None, 0)  # its own: accepted


@pytest.mark.parametrize("packed_parent", [False, True])
def test_joining_row_and_packed_progress_is_refused(packed_parent: bool) -> None:
    """``_checkpoint.join`` folds only progress of the same mode (a batch from another mode could
    only come from another dataset).

    Origin: written to kill surviving mutants of ``_checkpoint.join`` (docs/MUTATION.md).
    """
    from elastic_loader._pipeline import _checkpoint as ckpt

    rows, packed = ckpt.RowState([1, 2], [3, 4]), ckpt.PackedState([1, 2], [1, 1], {0: ([5], [0])})
    parent, incoming = (packed, rows) if packed_parent else (rows, packed)
    with pytest.raises(ValueError, match="cannot join row-mode and packed progress"):
        ckpt.join(parent, incoming)
    assert ckpt.join(rows, ckpt.RowState([0, 5], [9, 0])) == ckpt.RowState([1, 5], [9, 4])
    # split 0 moved on (its buffer went with the block it filled), split 1 did not
    assert ckpt.join(packed, ckpt.PackedState([2, 2], [2, 1], {})) == ckpt.PackedState([2, 2], [2, 1], {})
