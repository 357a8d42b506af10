"""Replaying projected packed splits: a rank resumed from another rank's checkpoint.

Origin: surviving mutants of ``_packing._replay`` (docs/MUTATION.md): one rank's packed
checkpoint projects the other ranks' splits to block counts (lockstep), and the rank that loads
it emits those blocks without yielding them before its first block; no test of the mutation
selection loaded a projection, so a replay that overshot or undershot its target, ignored the
cycles ready, or left the ready-documents gauge wrong passed it. The protocol tests
(``checkpoint/test_pipe_protocols.py``) cover the same path with real loaders; these run in one
process, over reads of every size (``units``: default and tiny), at targets inside the first
chunk, across chunks and in the padded tail of a split. Expected blocks come from an
uninterrupted run of the resumed rank (the projection claims exactly that lockstep).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from elastic_loader import StreamingDataset
from elastic_loader._pipeline import _fetch

PACK = {"columns": ["tokens"], "pack_sequences": 4, "eos_id": -1, "pad_id": -2}
PER_SPLIT = 50  # multi_table: 50 documents per split make about 43 blocks; the rest is padding


def make(table: Any, rank: int, **kwargs: Any) -> StreamingDataset:
    options: dict[str, Any] = {"blocks_per_epoch": 4 * PER_SPLIT, **kwargs}
    return StreamingDataset(table, num_splits=4, shuffle_seed=1, rank=rank, world_size=2, **PACK, **options)


def blocks(items: Any) -> list[tuple[int, ...]]:
    return [tuple(block["input_ids"].tolist()) for block in items]


def saved_by_rank_0(table: Any, taken: int, **kwargs: Any) -> dict[str, Any]:
    ds = make(table, 0, **kwargs)
    iterator = iter(ds)
    list(itertools.islice(iterator, taken))
    state = ds.state_dict()
    iterator.close()  # type: ignore[attr-defined]
    assert state["elastic_loader"]["projected"], "rank 1's splits are projected"
    return state


@pytest.fixture
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads of at most 8 rows with chunks of any size: a split is not fetched in full when its
    replay starts, so the replay is bounded by the cycles ready, not only by its target."""
    monkeypatch.setattr(_fetch, "FIRST_UNIT_ROWS", 1)
    monkeypatch.setattr(_fetch, "MAX_UNIT_ROWS", 8)


@pytest.mark.parametrize("taken", [1, 2, 7, 30, 86, 93])
def test_rank_1_resumes_from_rank_0s_projection(multi_table: Any, units: str, taken: int) -> None:
    state = saved_by_rank_0(multi_table, taken)
    whole = blocks(make(multi_table, 1))
    resumed = make(multi_table, 1)
    resumed.load_state_dict(state)
    assert blocks(resumed) == whole[taken:]


@pytest.mark.parametrize("taken", [1, 7, 30, 93])
def test_a_replay_over_small_reads(multi_table: Any, small_reads: None, taken: int) -> None:
    state = saved_by_rank_0(multi_table, taken)
    whole = blocks(make(multi_table, 1))
    resumed = make(multi_table, 1)
    resumed.load_state_dict(state)
    assert blocks(resumed) == whole[taken:]


def test_the_ready_documents_gauge_after_a_replay(multi_table: Any) -> None:
    """After the replay, documents waiting in rank 1's streams are at most the ones not consumed."""
    state = saved_by_rank_0(multi_table, 80)
    resumed = make(multi_table, 1)
    resumed.load_state_dict(state)
    iterator = iter(resumed)
    next(iterator)
    consumed = resumed.state_dict()["samples_consumed_per_split"]
    waiting = resumed.statistics().prefetch_queue_depth
    assert 0 <= waiting <= 2 * PER_SPLIT - consumed[2] - consumed[3]
    iterator.close()  # type: ignore[attr-defined]


def test_a_projection_behind_a_raising_document_is_refused(null_table: Any, perm_of: Any) -> None:
    """Rank 0 cannot know that a document of rank 1 raises: its projection cannot be replayed."""
    bad = {7, 22, 33, 41}  # null lists and a list holding a null in the null table
    seed = next(
        s
        for s in range(200)
        if not bad & {i for split in perm_of(null_table, num_splits=4, shuffle_seed=s)[:2] for i in split}
        and perm_of(null_table, num_splits=4, shuffle_seed=s)[2][0] in bad
    )
    kwargs: dict[str, Any] = {"num_splits": 4, "shuffle_seed": seed, "world_size": 2, "blocks_per_epoch": 40}
    saver = StreamingDataset(null_table, rank=0, **PACK, **kwargs)
    iterator = iter(saver)
    list(itertools.islice(iterator, 4))
    state = saver.state_dict()
    iterator.close()  # type: ignore[attr-defined]
    resumed = StreamingDataset(null_table, rank=1, **PACK, **kwargs)
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match="cannot reach the 2 blocks its checkpoint infers"):
        next(iter(resumed))
