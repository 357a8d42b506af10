"""StreamingDataLoader with real worker processes (R8, D8, D17, D22, ConsumerCommitProp).

Expected batches and committed states come from the spec's ``run_loader`` over
LanceDB's permutation (in ``id`` values). Spawning workers costs seconds, so
the worker tests are few: each checks several things on one run.
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader

from elastic_loader import StreamingDataLoader, StreamingDataset
from elastic_loader.spec import Faults, RowState, RunConfig, Topology, iterate_rows, run_loader
from elastic_loader.spec.rows import initial_row_state

GAUGES = ("consumed_rows", "raw_queue_depth", "prefetch_queue_depth", "unscanned_rows")


class SkipIds:
    """Picklable row-wise transform: the ``id`` of every row, failing on the ids in ``bad``."""

    def __init__(self, bad: frozenset[int]) -> None:
        self.bad = bad

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        values = batch.column("id").to_pylist()
        if any(v in self.bad for v in values):
            raise ValueError("bad row")
        return values


def as_ids(batch: Any) -> list[int]:
    return batch.tolist() if isinstance(batch, torch.Tensor) else batch["id"].tolist()


def perm_tuple(splits: list[list[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(s) for s in splits)


def uniform(state: RowState, splits: range) -> bool:
    return len({state.samples[s] for s in splits}) == 1


def plain(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's reference keys (what lancedb.streaming reads), without our provenance key."""
    return {k: v for k, v in state.items() if k != "elastic_loader"}


def row_checkpoint(state: RowState, num_splits: int) -> dict[str, Any]:
    return {
        "shuffle_seed": 0,
        "num_splits": num_splits,
        "epoch": 0,
        "samples_consumed_per_split": list(state.samples),
        "positions_consumed_per_split": list(state.positions),
    }


class WorkerInfo:
    """What ``worker_info_override`` needs: a worker id and the worker count."""

    def __init__(self, worker_id: int, num_workers: int) -> None:
        self.id = worker_id
        self.num_workers = num_workers


def simulated_delivery(
    table: Any, kwargs: dict[str, Any], num_workers: int, batch_size: int
) -> list[list[int]]:
    """Each worker's rows from an in-process run with ``worker_info_override``, cut into batches and
    delivered in torch's order (batch index, then worker)."""
    per_worker = []
    for w in range(num_workers):
        rows = list(StreamingDataset(table, worker_info_override=WorkerInfo(w, num_workers), **kwargs))
        per_worker.append([rows[i : i + batch_size] for i in range(0, len(rows), batch_size)])
    return [b[j] for j in range(max(map(len, per_worker))) for b in per_worker if j < len(b)]


def gauges(ds: StreamingDataset) -> dict[str, int]:
    stats = ds.statistics()
    return {name: getattr(stats, name) for name in GAUGES}


# ------------------------------------------------------------------ construction (no workers start)


def test_default_start_method_is_spawn_not_fork(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4)
    loader = StreamingDataLoader(ds, batch_size=2, num_workers=2)
    assert loader.multiprocessing_context.get_start_method() in ("spawn", "forkserver")  # D17: never fork
    chosen = StreamingDataLoader(ds, batch_size=2, num_workers=2, multiprocessing_context="forkserver")
    assert chosen.multiprocessing_context.get_start_method() == "forkserver"
    ctx = multiprocessing.get_context("spawn")
    positional = StreamingDataLoader(ds, 2, False, None, None, 2, None, False, False, 0, None, ctx)
    assert positional.multiprocessing_context is ctx
    assert StreamingDataLoader(ds, batch_size=2).multiprocessing_context is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"in_order": False},
        {"in_order": 0},
    ],
)
def test_unsupported_options_rejected_d22(multi_table: Any, kwargs: dict[str, Any]) -> None:
    ds = StreamingDataset(multi_table, num_splits=4)
    with pytest.raises(ValueError):
        StreamingDataLoader(ds, batch_size=2, **kwargs)
    StreamingDataLoader(ds, batch_size=2, in_order=True)


def test_loader_needs_a_streaming_dataset(multi_table: Any) -> None:
    with pytest.raises(TypeError):
        StreamingDataLoader([1, 2, 3], batch_size=2)  # type: ignore[arg-type]

    class Custom(StreamingDataset):
        def __iter__(self) -> Any:
            return iter([])

    with pytest.raises(TypeError):
        StreamingDataLoader(Custom(multi_table, num_splits=2), batch_size=2)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_workers_not_dividing_the_rank_splits_fail_in_the_parent_d8(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    it = iter(ds)
    next(it)
    it.close()
    before = ds.state_dict()
    loader = StreamingDataLoader(ds, batch_size=2, num_workers=3)
    with pytest.raises(ValueError, match="divisible"):
        iter(loader)
    # no invalidation and no lease left behind
    assert ds.state_dict() == before
    assert len(list(StreamingDataLoader(ds, batch_size=50))) == 4


def test_multi_worker_loader_starts_mid_step(multi_table: Any, perm_of: Any) -> None:
    """D23: two workers start from a mid-step state; each catches its splits up, as the spec says."""
    splits = perm_of(multi_table, num_splits=4)
    start = RowState((2, 2, 1, 1), (2, 2, 1, 1))
    config = RunConfig(num_splits=4, shuffle_seed=0, epoch=0)
    model = run_loader(config, perm_tuple(splits), Faults(), Topology(1, 0, 2, 0), start, batch_size=2)
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    ds.load_state_dict(row_checkpoint(start, 4))
    delivered = [as_ids(b) for b in StreamingDataLoader(ds, batch_size=2, num_workers=2)]
    assert delivered == [[y.row_id for y in d.items] for d in model.deliveries]
    ds.load_state_dict(row_checkpoint(start, 4))  # the lease was released


# ------------------------------------------------------------------ in-process loader (num_workers=0)


def test_failed_batch_invalidates_until_load_d8(multi_table: Any, perm_of: Any) -> None:
    splits = perm_of(multi_table, num_splits=2)
    bad = frozenset({splits[1][30]})
    ds = StreamingDataset(multi_table, num_splits=2, transform=SkipIds(bad))
    loader = StreamingDataLoader(ds, batch_size=4)
    got: list[int] = []
    with pytest.raises(ValueError, match="bad row"):
        for batch in loader:
            got.extend(as_ids(batch))
            good = ds.state_dict()
    assert got == [r for cycle in zip(splits[0][:30], splits[1][:30]) for r in cycle]  # 15 full batches
    with pytest.raises(RuntimeError, match="load"):
        ds.state_dict()
    ds.load_state_dict(good)
    assert ds.state_dict() == good


def test_collate_error_invalidates(multi_table: Any) -> None:
    def collate(items: list[Any]) -> Any:
        if len(items) < 4:
            raise RuntimeError("short batch")
        return items

    ds = StreamingDataset(multi_table, num_splits=2, filter="id < 98")
    loader = StreamingDataLoader(ds, batch_size=4, collate_fn=collate)
    with pytest.raises(RuntimeError, match="short batch"):
        list(loader)
    with pytest.raises(RuntimeError, match="checkpoint"):
        ds.state_dict()


def test_packed_loader_commits_at_step_boundaries(multi_table: Any) -> None:
    kwargs = {
        "num_splits": 4,
        "columns": ["tokens"],
        "pack_sequences": 5,
        "eos_id": 1,
        "pad_id": 0,
        "blocks_per_epoch": 48,
    }
    one = StreamingDataset(multi_table, **kwargs)
    blocks, states = [], []
    it = iter(one)
    for block in it:
        blocks.append(block["input_ids"])
        states.append(one.state_dict())
    ds = StreamingDataset(multi_table, **kwargs)
    for n, batch in enumerate(StreamingDataLoader(ds, batch_size=2), 1):
        assert torch.equal(batch["input_ids"], torch.stack(blocks[2 * n - 2 : 2 * n]))
        assert plain(ds.state_dict()) == plain(states[2 * n - 1])  # any batch, mid-cycle too (D23)
    assert n == 24
    with pytest.raises(ValueError, match="digest"):  # an edited checkpoint is refused (D26)
        ds.load_state_dict({**states[15], "blocks_emitted_per_split": [5, 5, 4, 4]})
    ds.load_state_dict(states[15])
    rest = torch.cat([b["input_ids"] for b in StreamingDataLoader(ds, batch_size=4)])
    assert torch.equal(rest, torch.stack(blocks[16:]))


# ------------------------------------------------------------------ real worker processes


def test_two_workers_deliver_and_commit_exactly(multi_table: Any, perm_of: Any) -> None:
    """nw=2: batches and committed states equal the spec at every batch; counters summed (D11)."""
    splits = perm_of(multi_table, num_splits=4)
    bad = frozenset({splits[0][3], splits[1][10], splits[2][49], splits[3][0]})  # one per split
    faults = Faults(skipped=bad)
    config = RunConfig(num_splits=4, shuffle_seed=0, epoch=0)
    model = run_loader(
        config, perm_tuple(splits), faults, Topology(1, 0, 2, 0), initial_row_state(4), batch_size=5
    )
    kwargs = {"num_splits": 4, "columns": ["id"], "transform": SkipIds(bad), "on_transform_error": "skip"}
    ds = StreamingDataset(multi_table, **kwargs)
    loader = StreamingDataLoader(ds, batch_size=5, num_workers=2)
    assert loader.multiprocessing_context.get_start_method() != "fork"
    delivered: list[list[int]] = []
    mid_step = 0
    for n, batch in enumerate(loader):
        delivered.append(as_ids(batch))
        committed = model.deliveries[n].committed
        assert isinstance(committed, RowState)
        assert plain(ds.state_dict()) == row_checkpoint(committed, 4), n  # after any batch (D23)
        mid_step += not uniform(committed, range(4))
    assert delivered == [[y.row_id for y in d.items] for d in model.deliveries]
    assert delivered == simulated_delivery(multi_table, kwargs, num_workers=2, batch_size=5)
    assert mid_step >= 5
    assert Counter(itertools.chain(*delivered)) == Counter(set(itertools.chain(*splits)) - bad)
    # observability: worker counters are summed and equal a single in-process run (D11, B5)
    single = StreamingDataset(multi_table, **kwargs)
    assert sorted(single) == sorted(itertools.chain(*delivered))  # same rows, another order (R4.8)
    ours, ref = ds.statistics(), single.statistics()
    assert ours.rows_delivered == ref.rows_delivered == 196
    assert ours.rows_skipped == ref.rows_skipped == 4
    assert ours.bytes_loaded == ref.bytes_loaded == 8 * 200  # one int64 column, every row read once
    assert gauges(ds) == dict.fromkeys(GAUGES, 0)
    assert gauges(single) == dict.fromkeys(GAUGES, 0)


def test_two_workers_stop_early_then_resume_exactly_once(multi_table: Any, perm_of: Any) -> None:
    splits = perm_of(multi_table, num_splits=4, shuffle_seed=0)
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"], read_batch_size=4)
    loader = StreamingDataLoader(ds, batch_size=6, num_workers=2)
    it = iter(loader)
    delivered = [as_ids(next(it)) for _ in range(6)]  # 3 rounds of 2 workers x 6 rows = 9 cycles
    state = ds.state_dict()
    assert state["samples_consumed_per_split"] == [9, 9, 9, 9]
    it.close()
    assert gauges(ds) == dict.fromkeys(GAUGES, 0)
    assert ds.state_dict() == state  # prefetched but undelivered batches are not counted
    # worker w's batch j holds cycles of its own two splits
    assert delivered[0] == [r for cycle in zip(splits[0][:3], splits[1][:3]) for r in cycle]
    assert delivered[1] == [r for cycle in zip(splits[2][:3], splits[3][:3]) for r in cycle]
    resumed = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    resumed.load_state_dict(state)
    rest = [row["id"] for row in resumed]
    assert rest == [r for cycle in zip(*(s[9:] for s in splits)) for r in cycle]
    assert sorted(itertools.chain(*delivered, rest)) == sorted(itertools.chain(*splits))


def test_one_worker_allows_mid_cycle_checkpoints(multi_table: Any, perm_of: Any) -> None:
    """nw=1 from a loaded mid-cycle state: the worker starts there; every committed state is exact."""
    splits = perm_of(multi_table, num_splits=4)
    start = RowState((3, 3, 2, 2), (3, 3, 2, 2))
    config = RunConfig(num_splits=4, shuffle_seed=0, epoch=0)
    model = run_loader(config, perm_tuple(splits), Faults(), Topology(1, 0, 1, 0), start, batch_size=3)
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    ds.load_state_dict(row_checkpoint(start, 4))
    loader = StreamingDataLoader(ds, batch_size=3, num_workers=1)
    it = iter(loader)
    for n in range(7):
        assert as_ids(next(it)) == [y.row_id for y in model.deliveries[n].items]
        committed = model.deliveries[n].committed
        assert isinstance(committed, RowState)
        assert plain(ds.state_dict()) == row_checkpoint(committed, 4), n
    mid = ds.state_dict()
    assert len(set(mid["samples_consumed_per_split"])) > 1  # really mid-cycle
    del it  # abandoning the iterator shuts the worker down and releases the dataset
    resumed = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    resumed.load_state_dict(mid)
    rest = iterate_rows(perm_tuple(splits), Faults(), (0, 1, 2, 3), model.deliveries[6].committed)
    assert [row["id"] for row in resumed] == [y.row_id for y in rest.rows]
    ds.load_state_dict(mid)  # the lease was released


def test_plain_dataloader_with_workers_disables_state_dict_b7(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=2, columns=["id"])
    good = ds.state_dict()
    loader = DataLoader(ds, batch_size=10, num_workers=1, multiprocessing_context="forkserver")
    batches = list(itertools.islice(iter(loader), 3))
    assert len(batches) == 3
    with pytest.raises(RuntimeError, match=r"Use StreamingDataLoader \(or torchdata's StatefulDataLoader\)"):
        ds.state_dict()
    ds.load_state_dict(good)  # D8: loading a checkpoint clears the flag
    assert ds.state_dict() == good


def test_batch_size_none_and_reiteration_continue(multi_table: Any) -> None:
    whole = [row["id"] for row in StreamingDataset(multi_table, num_splits=4, columns=["id"])]
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    got: list[int] = []
    for n, item in enumerate(StreamingDataLoader(ds, batch_size=None), 1):
        got.append(int(item["id"]))
        if n == 7:
            break
    assert ds.state_dict()["samples_consumed_per_split"] == [2, 2, 2, 1]  # mid-cycle, in-process
    loader = StreamingDataLoader(ds, batch_size=5)
    for n, batch in enumerate(loader, 1):
        got += as_ids(batch)
        if n == 3:
            break
    assert ds.state_dict()["samples_consumed_per_split"] == [6, 6, 5, 5]
    got += [r for batch in loader for r in as_ids(batch)]
    assert got == whole
    # iterating the loader again starts the next epoch, never silently empty (D27; B11 for the dataset)
    again = [r for batch in loader for r in as_ids(batch)]
    assert ds.epoch == 1
    epoch1 = StreamingDataset(multi_table, num_splits=4, columns=["id"], epoch=1)
    assert again == [row["id"] for row in epoch1]


def test_packed_two_workers_deliver_and_commit_at_steps(multi_table: Any) -> None:
    kwargs = {
        "num_splits": 4,
        "columns": ["tokens"],
        "pack_sequences": 5,
        "eos_id": 1,
        "pad_id": 0,
        "blocks_per_epoch": 80,
    }
    expected = simulated_delivery(multi_table, kwargs, num_workers=2, batch_size=2)
    one = StreamingDataset(multi_table, **kwargs)
    steps = []
    it = iter(one)
    for _ in range(20):
        list(itertools.islice(it, 4))
        steps.append(one.state_dict())
    it.close()
    ds = StreamingDataset(multi_table, **kwargs)
    loader = StreamingDataLoader(ds, batch_size=2, num_workers=2)
    for n, batch in enumerate(loader, 1):
        want = expected[n - 1]
        assert torch.equal(batch["input_ids"], torch.stack([b["input_ids"] for b in want])), n
        assert torch.equal(batch["doc_ids"], torch.stack([b["doc_ids"] for b in want])), n
        if n % 2 == 0:  # both workers delivered one cycle of their two splits
            assert plain(ds.state_dict()) == plain(steps[n // 2 - 1]), n
        if n == 12:
            break
    del loader  # workers had prefetched more; only delivered batches count
    assert plain(ds.state_dict()) == plain(steps[5])
    resumed = StreamingDataset(multi_table, **kwargs)
    resumed.load_state_dict(ds.state_dict())
    rest = [b["input_ids"].tolist() for b in resumed]
    assert rest == [b["input_ids"].tolist() for b in StreamingDataset(multi_table, **kwargs)][4 * 6 :]


def test_one_active_iterator_per_dataset(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=2, columns=["id"])
    first = iter(StreamingDataLoader(ds, batch_size=4))
    next(first)
    with pytest.raises(RuntimeError, match="does not support concurrent iteration"):
        iter(StreamingDataLoader(ds, batch_size=4))
    with pytest.raises(RuntimeError):
        next(iter(ds))
    with pytest.raises(RuntimeError):
        ds.load_state_dict(ds.state_dict())
    rest = sum(len(as_ids(b)) for b in first)  # exhaustion releases the dataset
    assert rest == 196
    # a new loader over the consumed dataset continues it, as the reference does (B11; D27 is the
    # same loader iterated again)
    assert list(StreamingDataLoader(ds, batch_size=4)) == []
    assert ds.epoch == 0


@pytest.mark.parametrize(("world_size", "rank", "num_workers"), [(2, 1, 2), (1, 0, 4), (2, 0, 1)])
def test_simulated_worker_delivery_matches_the_spec(
    multi_table: Any, perm_of: Any, world_size: int, rank: int, num_workers: int
) -> None:
    """Worker sub-blocks of a rank (``worker_info_override``) in torch's delivery order, as the spec says."""
    splits = perm_of(multi_table, num_splits=8)
    config = RunConfig(num_splits=8, shuffle_seed=0, epoch=0)
    topology = Topology(world_size, rank, num_workers, 0)
    model = run_loader(config, perm_tuple(splits), Faults(), topology, initial_row_state(8), batch_size=7)
    kwargs = {"num_splits": 8, "world_size": world_size, "rank": rank, "columns": ["id"]}
    got = simulated_delivery(multi_table, kwargs, num_workers=num_workers, batch_size=7)
    assert [[row["id"] for row in batch] for batch in got] == [
        [y.row_id for y in d.items] for d in model.deliveries
    ]


def test_len_counts_the_items_of_an_epoch(multi_table: Any) -> None:
    for kwargs in ({"num_splits": 6}, {"num_splits": 6, "world_size": 3, "rank": 2}):
        ds = StreamingDataset(multi_table, columns=["id"], **kwargs)
        assert len(ds) == len(list(ds))
    packed = {"columns": ["tokens"], "pack_sequences": 4, "eos_id": 1, "pad_id": 0, "blocks_per_epoch": 40}
    for kwargs in ({"num_splits": 4}, {"num_splits": 4, "world_size": 2, "rank": 1}):
        ds = StreamingDataset(multi_table, **packed, **kwargs)
        assert len(ds) == len(list(ds))


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("taken", [1, 3, 6])
def test_two_workers_resume_mid_round_continues_the_batch_sequence(
    multi_table: Any, packed: bool, taken: int
) -> None:
    """D23: a checkpoint after any batch of a 2-worker loader, resumed on the same topology, goes on
    with exactly the batches the uninterrupted loader delivered next (the cursor rotates workers)."""
    kwargs: dict[str, Any] = {"num_splits": 4, "columns": ["id"]}
    if packed:
        kwargs = {
            "num_splits": 4,
            "columns": ["tokens"],
            "pack_sequences": 5,
            "eos_id": 1,
            "pad_id": 0,
            "blocks_per_epoch": 48,
        }
    key = "input_ids" if packed else "id"

    def batches(loader: StreamingDataLoader) -> list[list[int]]:
        return [b[key].tolist() for b in loader]

    whole = batches(StreamingDataLoader(StreamingDataset(multi_table, **kwargs), batch_size=3, num_workers=2))
    ds = StreamingDataset(multi_table, **kwargs)
    it = iter(StreamingDataLoader(ds, batch_size=3, num_workers=2))
    head = [next(it)[key].tolist() for _ in range(taken)]
    state = ds.state_dict()
    it.close()
    assert head == whole[:taken]
    resumed = StreamingDataset(multi_table, **kwargs)
    resumed.load_state_dict(state)
    assert batches(StreamingDataLoader(resumed, batch_size=3, num_workers=2)) == whole[taken:]


def test_len_of_a_streaming_dataloader(multi_table: Any) -> None:
    """Origin: regression test of a bug the behavioural suite found, now fixed."""
    from elastic_loader import StreamingDataLoader

    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    loader = StreamingDataLoader(ds, batch_size=3)
    assert len(loader) == -(-len(ds) // 3) == 67
    it = iter(loader)
    assert len(it) == 67
    it.close()
