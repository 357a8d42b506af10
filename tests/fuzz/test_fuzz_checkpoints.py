"""Fuzzing checkpoints (issue 13): mutations of real states from every mode and save protocol.

Real states are taken from real runs: row mode shuffled and in order, packed mode, from the
dataset in-process, from a StreamingDataLoader with two workers, and merged over two ranks
(``merge_state_dicts``). Hypothesis then damages them (a value replaced by a hostile one, a key
dropped or added, a list grown or cut) and loads them into a fresh dataset. Every input is
either rejected with a TypeError or ValueError, or accepted and then resumes: an undamaged
state delivers exactly the rest of the uninterrupted run, a damaged one that is accepted
delivers each id at most once, only ids of the table (row mode), or whole blocks (packing).

``FUZZ_EXAMPLES`` sets the budget (``make fuzz``: deep; default: small, part of ``make test``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest
from fuzz_support import FUZZ, HOSTILE, ROWS, build_table
from hypothesis import given, strategies as st

from elastic_loader import StreamingDataLoader, StreamingDataset, merge_state_dicts

PACKED = {"pack_sequences": 8, "eos_id": 1, "pad_id": 0, "blocks_per_epoch": 16, "columns": ["tokens"]}


@dataclass(frozen=True)
class Case:
    name: str
    kwargs: dict[str, Any]
    state: dict[str, Any]
    rest: list[Any] | None
    """What resuming from the undamaged state delivers (None: not pinned for this case)."""


def items(ds: StreamingDataset) -> list[Any]:
    out = []
    for item in ds:
        out.append(item["id"] if "id" in item else item["input_ids"].tolist())
    return out


def _in_process(table: Any, kwargs: dict[str, Any], k: int) -> tuple[dict[str, Any], list[Any]]:
    whole = items(StreamingDataset(table, **kwargs))
    ds = StreamingDataset(table, **kwargs)
    it = iter(ds)
    for _ in range(k):
        next(it)
    state = ds.state_dict()
    it.close()  # type: ignore[attr-defined]
    return state, whole[k:]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return build_table(str(tmp_path_factory.mktemp("fuzz_ckpt")))


@pytest.fixture(scope="module")
def cases(table: Any) -> list[Case]:
    found: list[Case] = []
    rows = {"num_splits": 4, "shuffle_seed": 5, "columns": ["id"]}
    for name, kwargs, k in [
        ("rows-shuffled", rows, 7),
        ("rows-start", rows, 0),
        ("rows-in-order", {**rows, "shuffle": False}, 41),
        ("packed", {**PACKED, "num_splits": 4, "shuffle_seed": 5}, 5),
        # pack_buffers keys "10" and "11" through JSON: string keys >= 10 sort apart from ints
        ("packed-12-splits", {**PACKED, "num_splits": 12, "shuffle_seed": 5, "blocks_per_epoch": 24}, 12),
    ]:
        state, rest = _in_process(table, kwargs, k)
        found.append(Case(name, kwargs, state, rest))
    ds = StreamingDataset(table, **rows)
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    found.append(Case("loader-2-workers", rows, ds.state_dict(), None))
    it.close()  # type: ignore[attr-defined]
    ranks = []
    for rank in range(2):
        part = StreamingDataset(table, world_size=2, rank=rank, **rows)
        pit = iter(part)
        for _ in range(3 + rank):
            next(pit)
        ranks.append(part.state_dict())
        pit.close()  # type: ignore[attr-defined]
    found.append(Case("merged-2-ranks", rows, merge_state_dicts(ranks), None))
    return found


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _parent(state: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = state
    for step in path[:-1]:
        node = node[step]
    return node


def mutate(data: st.DataObject, state: dict[str, Any]) -> dict[str, Any]:
    """One to three damages at random places of a deep copy of ``state``."""
    state = copy.deepcopy(state)
    for _ in range(data.draw(st.integers(1, 3), label="damages")):
        paths = _paths(state)
        kind = data.draw(st.sampled_from(["replace", "drop", "add", "grow", "cut"]), label="kind")
        if kind == "add" or not paths:
            state[data.draw(st.sampled_from(["extra", "version", "epoch", "pack_buffers"]))] = data.draw(
                st.sampled_from(HOSTILE)
            )
            continue
        path = data.draw(st.sampled_from(paths), label="path")
        parent, last = _parent(state, path), path[-1]
        value = parent[last]
        if kind == "replace":
            parent[last] = copy.deepcopy(data.draw(st.sampled_from(HOSTILE), label="value"))
        elif kind == "drop" and isinstance(parent, dict):
            del parent[last]
        elif kind == "grow" and isinstance(value, list):
            value.append(value[-1] if value else 0)
        elif kind == "cut" and isinstance(value, list) and value:
            value.pop()
        elif isinstance(value, int) and not isinstance(value, bool):
            parent[last] = value + data.draw(st.sampled_from([-1, 1, 2**40]))
    return state


@FUZZ
@given(data=st.data())
def test_a_damaged_checkpoint_is_rejected_typed_or_resumes(
    table: Any, cases: list[Case], data: st.DataObject
) -> None:
    case = data.draw(st.sampled_from(cases), label="case")
    damage = data.draw(st.booleans(), label="damage")
    state = mutate(data, case.state) if damage else copy.deepcopy(case.state)
    ds = StreamingDataset(table, **case.kwargs)
    try:
        ds.load_state_dict(state)
    except (TypeError, ValueError):
        return
    got = items(ds)
    if state == case.state and case.rest is not None:
        assert got == case.rest
    elif "pack_sequences" in case.kwargs:
        assert all(len(block) == 8 for block in got)
    else:
        assert len(got) == len(set(got)) and set(got) <= set(range(ROWS)), got


def test_every_real_checkpoint_through_json_resumes_the_same(table: Any, cases: list[Case]) -> None:
    """Every real state survives JSON (string keys for pack buffers, "10" and "11" on 12 splits)
    and resumes exactly."""
    pinned = [c for c in cases if c.rest is not None]
    assert {c.name for c in pinned} >= {"packed", "packed-12-splits", "rows-shuffled"}
    twelve = next(c for c in pinned if c.name == "packed-12-splits")
    assert any(int(key) >= 10 for key in twelve.state["pack_buffers"])  # the case reaches the keys
    for case in pinned:
        ds = StreamingDataset(table, **case.kwargs)
        ds.load_state_dict(json.loads(json.dumps(case.state)))
        assert items(ds) == case.rest, case.name
