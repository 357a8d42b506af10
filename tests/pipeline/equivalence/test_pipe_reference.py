"""Side by side with ``lancedb.streaming``: same table, same parameters, same items and checkpoints.

The reference is the installed ``lancedb.streaming`` (0.40), run in-process. It
has no ``split_strategy``; that path is checked against LanceDB's permutation
builder read directly (the strategy's splits, round-robin).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from lancedb.permutation import permutation_builder
from lancedb.streaming import StreamingDataset as Reference

from elastic_loader import StreamingDataset


def plain(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's reference keys: what lancedb.streaming writes and reads (no provenance key)."""
    return {k: v for k, v in state.items() if k != "elastic_loader"}


def row_tag(batch: pa.RecordBatch) -> list[str]:
    """A row-wise transform: one string per row built from two columns."""
    return [
        f"{i}:{name}" for i, name in zip(batch.column("id").to_pylist(), batch.column("name").to_pylist())
    ]


def ids(items: Iterator[Any] | list[Any]) -> list[int]:
    return [row["id"] for row in items]


def take(iterator: Iterator[Any], n: int) -> list[Any]:
    return list(itertools.islice(iterator, n))


ROW_CASES = [
    pytest.param({"num_splits": 1}, id="one-split"),
    pytest.param({"num_splits": 4}, id="S4"),
    pytest.param({"num_splits": 4, "world_size": 2, "rank": 0}, id="S4-W2-r0"),
    pytest.param({"num_splits": 4, "world_size": 2, "rank": 1}, id="S4-W2-r1"),
    pytest.param({"num_splits": 6, "world_size": 3, "rank": 2, "shuffle_seed": 7}, id="S6-W3-r2-surplus"),
    pytest.param({"num_splits": 8, "world_size": 4, "rank": 3, "epoch": 2}, id="S8-W4-r3-epoch2"),
    pytest.param({"num_splits": 4, "shuffle": False}, id="sequential"),
    pytest.param({"num_splits": 3, "filter": "id % 3 != 1"}, id="filter"),
    pytest.param({"num_splits": 4, "shuffle_clump_size": 7}, id="clumps"),
    pytest.param({"num_splits": 2, "read_batch_size": 3, "io_queue_depth": 1}, id="tiny-batches"),
    pytest.param({"num_splits": 5, "read_batch_size": 1000}, id="huge-batches"),
]


@pytest.mark.parametrize("kwargs", ROW_CASES)
def test_rows_identical_to_reference(multi_table: Any, kwargs: dict[str, Any]) -> None:
    expected = list(Reference(multi_table, **kwargs))
    got = list(StreamingDataset(multi_table, **kwargs))
    assert got == expected
    assert len(got) > 0


def test_columns_and_transform_identical_to_reference(multi_table: Any) -> None:
    for kwargs in (
        {"num_splits": 4, "columns": ["name"]},
        {"num_splits": 4, "columns": ["tokens", "id"]},
        {"num_splits": 4, "transform": row_tag, "read_batch_size": 5},
        {"num_splits": 2, "world_size": 2, "rank": 1, "transform": row_tag, "columns": ["id", "name"]},
    ):
        expected = list(Reference(multi_table, **kwargs))
        got = list(StreamingDataset(multi_table, **kwargs))
        assert got == expected, kwargs


def test_memory_table_identical_to_reference(memory_table: Any) -> None:
    kwargs = {"num_splits": 4, "world_size": 2, "rank": 1, "read_batch_size": 7}
    assert list(StreamingDataset(memory_table, **kwargs)) == list(Reference(memory_table, **kwargs))


def test_multi_fragment_memory_table_follows_the_permutation(memory_multi_table: Any, perm_of: Any) -> None:
    """The reference fails on a memory table with several fragments; we follow LanceDB's permutation."""
    splits = perm_of(memory_multi_table, num_splits=4, shuffle_seed=3)
    expected = [row for cycle in zip(splits[2], splits[3]) for row in cycle]
    kwargs = {"num_splits": 4, "world_size": 2, "rank": 1, "shuffle_seed": 3, "read_batch_size": 7}
    assert ids(StreamingDataset(memory_multi_table, **kwargs)) == expected
    assert sorted(expected) == sorted(set(expected))


def test_split_strategy_rows_follow_the_strategy(multi_table: Any, perm_of: Any) -> None:
    def strategy(builder: Any) -> Any:
        return builder.split_random(fixed=4, seed=1)

    splits = perm_of(multi_table, num_splits=4, strategy=strategy)
    expected = [row for cycle in zip(*splits) for row in cycle]
    ds = StreamingDataset(multi_table, num_splits=4, split_strategy=strategy, shuffle_seed=99, epoch=3)
    assert ids(ds) == expected
    # shuffle_seed and epoch do not change the order on the strategy path
    other = StreamingDataset(multi_table, num_splits=4, split_strategy=strategy, shuffle_seed=5)
    assert ids(other) == expected


def test_split_strategy_fingerprint_is_sha256_of_the_permutation(multi_table: Any) -> None:
    def strategy(builder: Any) -> Any:
        return builder.split_random(fixed=4, seed=1)

    perm = strategy(permutation_builder(multi_table)).execute().to_arrow()
    digest = hashlib.sha256()
    digest.update(str(perm.num_rows).encode())
    digest.update(np.asarray(perm.column("row_id").to_numpy(), dtype="<u8").tobytes())
    digest.update(np.asarray(perm.column("split_id").to_numpy(), dtype="<u8").tobytes())
    state = StreamingDataset(multi_table, num_splits=4, split_strategy=strategy).state_dict()
    assert state["perm_fingerprint"] == digest.hexdigest()
    assert list(state)[-1] == "elastic_loader"  # our provenance key comes last (D24)
    assert list(plain(state)) == [
        "shuffle_seed",
        "num_splits",
        "perm_fingerprint",
        "epoch",
        "samples_consumed_per_split",
        "positions_consumed_per_split",
    ]


def test_split_strategy_with_rank_and_sequential_split(multi_table: Any, perm_of: Any) -> None:
    def strategy(builder: Any) -> Any:
        return builder.split_sequential(fixed=4)

    splits = perm_of(multi_table, num_splits=4, strategy=strategy)
    expected = [row for cycle in zip(splits[2], splits[3]) for row in cycle]
    ds = StreamingDataset(multi_table, num_splits=4, world_size=2, rank=1, split_strategy=strategy)
    assert ids(ds) == expected


def assert_same_blocks(got: list[dict[str, torch.Tensor]], expected: list[dict[str, torch.Tensor]]) -> None:
    assert len(got) == len(expected)
    for k, (a, b) in enumerate(zip(got, expected)):
        assert set(a) == {"input_ids", "doc_ids"}
        for key in ("input_ids", "doc_ids"):
            assert a[key].dtype == torch.int64, (k, key)
            assert torch.equal(a[key], b[key]), (k, key, a[key], b[key])


PACK_CASES = [
    # budget far above the tokens: exhaustion, a padded partial block, then all-padding blocks
    pytest.param({"num_splits": 4, "pack_sequences": 8, "blocks_per_epoch": 160}, id="padding"),
    # budget below the tokens: truncation
    pytest.param({"num_splits": 2, "pack_sequences": 16, "blocks_per_epoch": 10}, id="truncation"),
    pytest.param(
        {"num_splits": 4, "world_size": 2, "rank": 1, "pack_sequences": 5, "blocks_per_epoch": 200},
        id="rank1",
    ),
    pytest.param(
        {"num_splits": 3, "pack_sequences": 3, "blocks_per_epoch": 300, "read_batch_size": 2},
        id="short-blocks",
    ),
    pytest.param({"num_splits": 1, "pack_sequences": 64, "blocks_per_epoch": 13, "eos_id": -5}, id="eos-neg"),
]


@pytest.mark.parametrize("kwargs", PACK_CASES)
def test_packed_blocks_identical_to_reference(multi_table: Any, kwargs: dict[str, Any]) -> None:
    kwargs = {"columns": ["tokens"], "eos_id": 1, "pad_id": 0, **kwargs}
    ref = Reference(multi_table, **kwargs)
    ours = StreamingDataset(multi_table, **kwargs)
    expected = list(ref)
    got = list(ours)
    assert_same_blocks(got, expected)
    assert len(got) == len(ours)
    # the final state: equal up to empty pack buffers, which we omit (D9)
    ref_state, our_state = ref.state_dict(), ours.state_dict()
    ref_state["pack_buffers"] = {k: v for k, v in ref_state["pack_buffers"].items() if v["tokens"]}
    assert plain(our_state) == ref_state
    assert list(plain(our_state)) == list(ref.state_dict())


def test_packed_state_at_every_step_boundary_matches_reference(multi_table: Any) -> None:
    kwargs = {
        "num_splits": 4,
        "columns": ["tokens"],
        "pack_sequences": 6,
        "eos_id": 1,
        "pad_id": 0,
        "blocks_per_epoch": 140,
    }
    ref, ours = Reference(multi_table, **kwargs), StreamingDataset(multi_table, **kwargs)
    ref_it, our_it = iter(ref), iter(ours)
    for step in range(35):
        assert_same_blocks(take(our_it, 4), take(ref_it, 4))
        ref_state, our_state = ref.state_dict(), ours.state_dict()
        ref_state["pack_buffers"] = {k: v for k, v in ref_state["pack_buffers"].items() if v["tokens"]}
        assert plain(our_state) == ref_state, step


def test_row_state_after_full_epoch_identical(multi_table: Any) -> None:
    for kwargs in (
        {"num_splits": 4},
        {"num_splits": 6, "shuffle_seed": 3},
        {"num_splits": 3, "filter": "id < 151"},
    ):
        ref, ours = Reference(multi_table, **kwargs), StreamingDataset(multi_table, **kwargs)
        list(ref)
        list(ours)
        assert plain(ours.state_dict()) == ref.state_dict()
        assert list(plain(ours.state_dict())) == list(ref.state_dict())


@pytest.mark.parametrize("n", [0, 1, 5, 8, 23, 97])
def test_row_states_in_one_rank_run_identical(multi_table: Any, n: int) -> None:
    ref, ours = Reference(multi_table, num_splits=4), StreamingDataset(multi_table, num_splits=4)
    assert take(iter(ours), n) == take(iter(ref), n)
    assert plain(ours.state_dict()) == ref.state_dict()


@pytest.mark.parametrize("n", [3, 10, 41])
def test_row_checkpoints_interchangeable(multi_table: Any, n: int) -> None:
    kwargs = {"num_splits": 4, "read_batch_size": 8}
    full = ids(StreamingDataset(multi_table, **kwargs))
    ours = StreamingDataset(multi_table, **kwargs)
    ids(take(iter(ours), n))
    ref = Reference(multi_table, **kwargs)
    ref.load_state_dict(ours.state_dict())
    assert ids(ref) == full[n:]

    ref = Reference(multi_table, **kwargs)
    ids(take(iter(ref), n))
    ours = StreamingDataset(multi_table, **kwargs)
    ours.load_state_dict(ref.state_dict())
    assert ids(ours) == full[n:]


@pytest.mark.parametrize("steps", [1, 7, 20])
def test_packed_checkpoints_interchangeable(multi_table: Any, steps: int) -> None:
    kwargs = {
        "num_splits": 2,
        "columns": ["tokens"],
        "pack_sequences": 7,
        "eos_id": 1,
        "pad_id": 0,
        "blocks_per_epoch": 120,
    }
    full = list(StreamingDataset(multi_table, **kwargs))
    ours = StreamingDataset(multi_table, **kwargs)
    take(iter(ours), 2 * steps)
    ref = Reference(multi_table, **kwargs)
    ref.load_state_dict(ours.state_dict())
    assert_same_blocks(list(ref), full[2 * steps :])

    ref = Reference(multi_table, **kwargs)
    take(iter(ref), 2 * steps)
    ours = StreamingDataset(multi_table, **kwargs)
    ours.load_state_dict(ref.state_dict())
    assert_same_blocks(list(ours), full[2 * steps :])


def test_merged_rank_checkpoints_load_into_reference(multi_table: Any) -> None:
    """Two in-step ranks: our merged checkpoint resumes the reference on one rank, and back."""
    kwargs = {"num_splits": 4, "world_size": 2}
    ranks = [StreamingDataset(multi_table, rank=r, **kwargs) for r in range(2)]
    for ds in ranks:
        take(iter(ds), 10)
    merged = StreamingDataset.merge_state_dicts([ds.state_dict() for ds in ranks])
    assert plain(merged) == plain(Reference.merge_state_dicts([ds.state_dict() for ds in ranks]))
    ref = Reference(multi_table, num_splits=4)
    ref.load_state_dict(merged)
    ours = StreamingDataset(multi_table, num_splits=4)
    ours.load_state_dict(merged)
    assert list(ours) == list(ref)


def test_permutation_oracle_agrees_with_reference(multi_table: Any, perm_of: Any) -> None:
    """The builder-based oracle used for the strategy path reads what the reference reads."""
    splits = perm_of(multi_table, num_splits=4, shuffle_seed=11, epoch=1)
    expected = [row for cycle in zip(*splits) for row in cycle]
    assert ids(Reference(multi_table, num_splits=4, shuffle_seed=11, epoch=1)) == expected


@pytest.mark.parametrize("num_splits", [1, 2, 4, 8])
def test_auto_budget_identical_to_reference_d16(multi_table: Any, num_splits: int) -> None:
    kwargs = {
        "num_splits": num_splits,
        "columns": ["tokens"],
        "pack_sequences": 4,
        "eos_id": 1,
        "pad_id": 0,
        "blocks_per_epoch": "auto",
    }
    with pytest.warns(UserWarning, match="estimate"):
        ours = StreamingDataset(multi_table, **kwargs)
    with pytest.warns(UserWarning):
        ref = Reference(multi_table, **kwargs)
    assert ours.blocks_per_epoch == ref.state_dict()["blocks_per_epoch"]
    assert ours.state_dict()["blocks_per_epoch"] == ours.blocks_per_epoch
    assert ours.blocks_per_epoch % num_splits == 0 and ours.blocks_per_epoch >= num_splits
    assert_same_blocks(list(ours), list(ref))


def test_auto_budget_rejects_null_tokens_d16(null_table: Any) -> None:
    kwargs = {
        "columns": ["tokens"],
        "pack_sequences": 4,
        "eos_id": 1,
        "pad_id": 0,
        "blocks_per_epoch": "auto",
    }
    # one row per split, so every row is in the sample
    for flt in ("id IN (7, 8, 9)", "id IN (32, 33, 34)"):  # a null list; a null inside a list
        with pytest.warns(UserWarning), pytest.raises(ValueError, match="null"):
            StreamingDataset(null_table, num_splits=3, filter=flt, **kwargs)
