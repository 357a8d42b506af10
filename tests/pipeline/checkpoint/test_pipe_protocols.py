"""The ways users save and resume, on real LanceDB tables: one rank saves, every rank merges, each
rank reloads its own, a save after any batch, chains of resumes on changing topologies, and a table
that changed since (spec/INVARIANTS.md, "Save protocols"; D23-D26).

Ranks of one job are datasets with the same settings and their own ``rank``; a *lockstep* session
has every rank take the same number of batches, as synchronous training does.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest

from elastic_loader import StreamingDataLoader, StreamingDataset, merge_state_dicts

ROWS, SPLITS = 240, 12
PACKING = {"columns": ["tokens"], "pack_sequences": 6, "eos_id": -1, "pad_id": -2, "blocks_per_epoch": 96}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = lancedb.connect(str(tmp_path_factory.mktemp("protocols")))
    tokens = [[i * 10 + k for k in range(i % 5)] for i in range(ROWS)]
    data = pa.table(
        {"id": pa.array(range(ROWS), pa.int64()), "tokens": pa.array(tokens, pa.list_(pa.int64()))}
    )
    return db.create_table("t", data)


def dataset(table: Any, rank: int, world_size: int, packed: bool, **kwargs: Any) -> StreamingDataset:
    extra = PACKING if packed else {"columns": ["id"]}
    return StreamingDataset(
        table, num_splits=SPLITS, shuffle_seed=5, rank=rank, world_size=world_size, **extra, **kwargs
    )


def key(item: Any, packed: bool) -> Any:
    """A hashable identity of one item: a row's id, or a block's tokens and split order."""
    return tuple(item["input_ids"].tolist()) if packed else int(item["id"])


class Rank:
    """One rank of a session: its dataset and a loader iterator, taken batch by batch."""

    def __init__(self, ds: StreamingDataset, workers: int, batch: int) -> None:
        self.ds = ds
        self.loader = StreamingDataLoader(ds, batch_size=batch, num_workers=workers)
        self.it: Iterator[Any] | None = None

    def take(self, n: int, packed: bool) -> list[Any]:
        if self.it is None:
            self.it = iter(self.loader)
        out: list[Any] = []
        for batch in itertools.islice(self.it, n):
            rows = batch["input_ids"] if packed else batch["id"]
            out.extend(tuple(r.tolist()) if packed else int(r) for r in rows)
        return out

    def close(self) -> None:
        if self.it is not None:
            self.it.close()  # type: ignore[attr-defined]


def session(
    table: Any,
    starts: list[dict[str, Any] | None],
    world_size: int,
    workers: int,
    batch: int,
    steps: int,
    packed: bool,
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Every rank loads its start, takes ``steps`` batches (lockstep), then checkpoints."""
    ranks = []
    for r in range(world_size):
        ds = dataset(table, r, world_size, packed)
        start = starts[r]
        if start is not None:
            ds.load_state_dict(start)
        ranks.append(Rank(ds, workers, batch))
    delivered = [item for rank in ranks for item in rank.take(steps, packed)]
    states = [rank.ds.state_dict() for rank in ranks]
    for rank in ranks:
        rank.close()
    return delivered, states


def whole_epoch(table: Any, packed: bool) -> Counter[Any]:
    return Counter(key(item, packed) for item in dataset(table, 0, 1, packed))


# ------------------------------------------------------------------ one rank saves


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("saver", [0, 1])
def test_one_rank_state_resumes_a_lockstep_job_exactly(
    table: Any, packed: bool, workers: int, saver: int
) -> None:
    """The issue's first row: two ranks in lockstep, one rank's state_dict() loaded on both."""
    full = [Rank(dataset(table, r, 2, packed), workers, 4).take(10**6, packed) for r in range(2)]
    first, states = session(table, [None, None], 2, workers, 4, 5, packed)
    assert set(states[saver]["elastic_loader"]["reported"]) == set(range(saver * 6, saver * 6 + 6))
    rest = []
    for r in range(2):
        ds = dataset(table, r, 2, packed)
        ds.load_state_dict(states[saver])
        rest.append(Rank(ds, workers, 4).take(10**6, packed))
    per_rank = len(first) // 2
    for r in range(2):
        assert first[r * per_rank : (r + 1) * per_rank] + rest[r] == full[r], r


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize(
    "chain",
    [
        [(2, 2, 4, 3), (2, 2, 4, 2), (2, 0, 3, 4)],
        [(2, 0, 4, 3), (4, 0, 3, 2), (1, 0, 5, 0)],
        [(3, 2, 2, 3), (6, 2, 1, 5), (2, 2, 3, 1), (4, 0, 2, 2)],
        [(1, 2, 5, 3), (3, 0, 5, 1), (12, 0, 1, 4), (2, 2, 6, 1)],
    ],
    ids=["2-2-2", "2-4-1", "3-6-2-4", "1-3-12-2"],
)
def test_chains_of_one_rank_saves_lose_and_repeat_nothing(
    table: Any, packed: bool, chain: list[tuple]
) -> None:
    """Resume, train, save from one rank, resume on another world size, again and again; then run
    the last topology to the end of the epoch: every row (block) exactly once."""
    rng = random.Random(len(chain))
    delivered: list[Any] = []
    start: dict[str, Any] | None = None
    for world_size, workers, batch, steps in chain:
        got, states = session(table, [start] * world_size, world_size, workers, batch, steps, packed)
        delivered += got
        start = states[rng.randrange(world_size)]
    last = chain[-1][0]
    for r in range(last):
        ds = dataset(table, r, last, packed)
        ds.load_state_dict(start)
        delivered += [key(item, packed) for item in ds]
    assert Counter(delivered) == whole_epoch(table, packed)


def test_each_rank_reloads_its_own_state(table: Any) -> None:
    delivered, states = session(table, [None] * 3, 3, 2, 4, 3, False)
    more, states = session(table, states, 3, 2, 4, 2, False)
    rest = []
    for r in range(3):
        ds = dataset(table, r, 3, False)
        ds.load_state_dict(states[r])
        rest += [key(item, False) for item in ds]
    assert Counter(delivered + more + rest) == whole_epoch(table, False)


# ------------------------------------------------------------------ merges and refusals


def test_merge_of_one_rank_is_refused_and_all_ranks_merge_exactly_when_not_in_lockstep(table: Any) -> None:
    """The issue's asynchronous row: rank 0 took 7 batches, rank 1 took 2."""
    ranks = [Rank(dataset(table, r, 2, False), 0, 3) for r in range(2)]
    delivered = ranks[0].take(7, False) + ranks[1].take(2, False)
    states = [r.ds.state_dict() for r in ranks]
    with pytest.raises(ValueError, match="every rank"):
        merge_state_dicts([states[0]])
    merged = merge_state_dicts(states)
    one = dataset(table, 0, 1, False)
    one.load_state_dict(merged)
    assert Counter(delivered + [key(i, False) for i in one]) == whole_epoch(table, False)


def test_one_rank_state_with_skipping_transforms_is_refused_by_the_other_ranks(table: Any) -> None:
    """Another rank's skipped rows cannot be known: its splits are unknown, and it says so."""

    def drop_sevens(batch: Any) -> list[Any]:
        rows = batch.to_pylist()
        if any(r["id"] % 7 == 0 for r in rows):
            raise ValueError("seven")
        return rows

    kwargs = {"transform": drop_sevens, "on_transform_error": "skip"}
    r0 = dataset(table, 0, 2, False, **kwargs)
    list(itertools.islice(iter(r0), 12))
    state = r0.state_dict()
    assert state["elastic_loader"]["unknown"] == list(range(6, 12))
    mine = dataset(table, 0, 2, False, **kwargs)
    mine.load_state_dict(state)  # rank 0's own splits are known
    other = dataset(table, 1, 2, False, **kwargs)
    with pytest.raises(ValueError, match="merge every rank"):
        other.load_state_dict(state)


def test_edited_state_is_refused_and_a_state_without_digest_loads(table: Any) -> None:
    ds = dataset(table, 0, 1, False)
    list(itertools.islice(iter(ds), 30))
    state = ds.state_dict()
    edited = dict(state, samples_consumed_per_split=[0] * SPLITS)
    with pytest.raises(ValueError, match="digest"):
        dataset(table, 0, 1, False).load_state_dict(edited)
    del edited["elastic_loader"]["digest"]
    dataset(table, 0, 1, False).load_state_dict(edited)  # on purpose: the digest is dropped


# ------------------------------------------------------------------ the table under a checkpoint


@pytest.fixture
def changing_table(tmp_path: Path) -> Any:
    db = lancedb.connect(str(tmp_path))
    return db.create_table("t", pa.table({"id": pa.array(range(120), pa.int64())}))


@pytest.mark.parametrize("change", ["append", "delete", "update"])
def test_a_resumed_epoch_reads_the_table_version_of_its_checkpoint(changing_table: Any, change: str) -> None:
    """The issue's table rows: rows appended, deleted or updated between save and resume."""
    kwargs = {"num_splits": 4, "shuffle_seed": 1, "columns": ["id"]}
    whole = [r["id"] for r in StreamingDataset(changing_table, **kwargs)]
    ds = StreamingDataset(changing_table, **kwargs)
    head = [r["id"] for r in itertools.islice(iter(ds), 37)]
    state = ds.state_dict()
    if change == "append":
        changing_table.add(pa.table({"id": pa.array(range(1000, 1040), pa.int64())}))
    elif change == "delete":
        changing_table.delete("id < 12")
    else:
        changing_table.update(where="id < 10", values={"id": -1})
    resumed = StreamingDataset(changing_table, **kwargs)
    resumed.load_state_dict(state)
    assert head + [r["id"] for r in resumed] == whole
    # a new epoch reads the latest version
    resumed.set_epoch(1)
    latest = Counter(r["id"] for r in resumed)
    now = Counter(r["id"] for r in changing_table.search().limit(None).to_list())
    assert latest <= now and latest.total() == now.total() // 4 * 4  # the tail of N mod S is dropped
    assert (
        state["elastic_loader"]["table"]["version"]
        != resumed.state_dict()["elastic_loader"]["table"]["version"]
    )


def test_a_cleaned_up_table_version_is_named(changing_table: Any) -> None:
    from datetime import timedelta

    kwargs = {"num_splits": 4, "shuffle_seed": 1, "columns": ["id"]}
    ds = StreamingDataset(changing_table, **kwargs)
    list(itertools.islice(iter(ds), 5))
    state = ds.state_dict()
    version = state["elastic_loader"]["table"]["version"]
    changing_table.add(pa.table({"id": pa.array(range(1000, 1010), pa.int64())}))
    with pytest.warns(UserWarning, match="removes every version"):  # what this test wants
        changing_table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
    resumed = StreamingDataset(changing_table, **kwargs)
    with pytest.raises(ValueError, match=f"version {version}"):
        resumed.load_state_dict(state)


def test_a_buffer_token_beyond_int64_is_refused_at_load(table: Any) -> None:
    """D26: checked at load, not at the first next()."""
    ds = dataset(table, 0, 1, True)
    list(itertools.islice(iter(ds), 5))
    state = ds.state_dict()
    del state["elastic_loader"]
    _split, buffer = next(iter(state["pack_buffers"].items()))
    buffer["tokens"] = [2**63, *buffer["tokens"]]
    buffer["starts"] = [s + 1 for s in buffer["starts"]]
    with pytest.raises(ValueError, match="int64"):
        dataset(table, 0, 1, True).load_state_dict(state)
