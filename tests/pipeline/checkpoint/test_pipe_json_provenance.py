"""One rank's checkpoint of 12 splits through JSON: the provenance key survives string keys.

Origin: issue 13, item 7 ("paths only ... many splits (>= 12 through JSON) ... reach"): JSON
turns the split keys of ``pack_buffers`` and of the provenance's ``projected`` map into strings,
and ``"10" < "2"`` as text; the JSON tests use 4 splits and the 12-split protocol tests pass
dicts. Here rank 0 of 2 saves after some items (rank 1's splits 6 to 11 are inferred: projected
block counts in packing, unknown rows when the transform may skip), the state goes through
``json.dumps``/``json.loads``, and it must load, keep its digest, merge and resume exactly as the
dict does: rank 1 continues its uninterrupted run, one rank continues the rest of the epoch.
Expected items come from uninterrupted runs of the same datasets (the topology-free order of
the spec is checked by the protocol tests; here the question is only whether JSON changes
anything).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

import pytest

from elastic_loader import StreamingDataset, merge_state_dicts

SPLITS = 12
FILTER = "id < 192"  # 16 rows per split
PACK = {"columns": ["tokens"], "pack_sequences": 4, "eos_id": -1, "pad_id": -2, "blocks_per_epoch": 72}
TAKEN = 15


class DropSevens:
    """A row transform that raises for ids ending in 7 (dropped under ``on_transform_error='skip'``)."""

    def __call__(self, batch: Any) -> list[int]:
        ids = batch.column("id").to_pylist()
        if any(i % 10 == 7 for i in ids):
            raise ValueError("a seven")
        return ids


def make(table: Any, rank: int, world_size: int, packed: bool) -> StreamingDataset:
    extra: dict[str, Any] = (
        dict(PACK) if packed else {"columns": ["id"], "transform": DropSevens(), "on_transform_error": "skip"}
    )
    return StreamingDataset(
        table, num_splits=SPLITS, shuffle_seed=3, filter=FILTER, rank=rank, world_size=world_size, **extra
    )


def key(item: Any) -> Any:
    return tuple(item["input_ids"].tolist()) if isinstance(item, dict) else int(item)


def keys(items: Any) -> list[Any]:
    return [key(item) for item in items]


def saved_after(table: Any, rank: int, packed: bool) -> dict[str, Any]:
    """Rank ``rank`` of 2 takes ``TAKEN`` items and saves, in the middle of its iteration."""
    ds = make(table, rank, 2, packed)
    iterator = iter(ds)
    list(itertools.islice(iterator, TAKEN))
    state = ds.state_dict()
    iterator.close()  # type: ignore[attr-defined]
    return state


def through_json(state: dict[str, Any]) -> dict[str, Any]:
    text = json.loads(json.dumps(state))
    assert text != state or not state.get("pack_buffers"), "JSON should have turned keys into strings"
    return text


def test_packed_one_rank_checkpoint_of_12_splits_through_json(multi_table: Any) -> None:
    state = saved_after(multi_table, 0, packed=True)
    projected = state["elastic_loader"]["projected"]
    assert {s for s in projected if s >= 10}, "the test needs projected split ids >= 10"
    text = through_json(state)
    assert set(text["elastic_loader"]["projected"]) == {str(s) for s in projected}
    whole = [keys(make(multi_table, r, 2, packed=True)) for r in range(2)]
    for rank in range(2):  # each rank resumes from rank 0's state exactly where lockstep left it
        for loaded in (state, text):
            ds = make(multi_table, rank, 2, packed=True)
            ds.load_state_dict(loaded)
            assert keys(ds) == whole[rank][TAKEN:], f"rank {rank} ({'json' if loaded is text else 'dict'})"
    alone_dict, alone_json = make(multi_table, 0, 1, True), make(multi_table, 0, 1, True)
    alone_dict.load_state_dict(state)
    alone_json.load_state_dict(text)
    rest = keys(alone_json)
    assert rest == keys(alone_dict)
    expected = Counter(whole[0][TAKEN:] + whole[1][TAKEN:])
    assert Counter(rest) == expected  # the rest of the epoch, on one rank


def test_row_one_rank_checkpoint_with_unknown_splits_through_json(multi_table: Any) -> None:
    states = [saved_after(multi_table, r, packed=False) for r in range(2)]
    unknown = states[0]["elastic_loader"]["unknown"]
    assert unknown == list(range(6, 12))  # another rank's skipped rows cannot be known
    texts = [through_json(s) for s in states]
    with pytest.raises(ValueError, match=r"does not know the progress of splits \[6, 7, 8, 9, 10, 11\]"):
        make(multi_table, 1, 2, packed=False).load_state_dict(texts[0])
    merged = merge_state_dicts(texts)
    assert merged == merge_state_dicts(states)
    whole = [keys(make(multi_table, r, 2, packed=False)) for r in range(2)]
    for rank in range(2):
        ds = make(multi_table, rank, 2, packed=False)
        ds.load_state_dict(json.loads(json.dumps(merged)))
        assert keys(ds) == whole[rank][TAKEN:]
