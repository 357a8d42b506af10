"""StreamingDataset(permutation="computed" | "local" | LocalShuffle): order, resume, errors, identity.

Expected orders come from the executable spec: ``spec.computed.computed_splits`` and
``spec.local.local_splits`` give each split's storage positions, mapped to ``id`` values by a
full scan of the table in storage order (so deletions and several fragments count), then
``iterate_rows`` / ``iterate_packed`` / ``run_loader`` of the spec give the sequence; never
the module under test.
"""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest
import torch

from elastic_loader import LocalShuffle, StreamingDataLoader, StreamingDataset, merge_state_dicts
from elastic_loader._pipeline import _lance
from elastic_loader._pipeline._lance import Reader
from elastic_loader.spec import (
    Faults,
    PackingConfig,
    RowState,
    RunConfig,
    Topology,
    computed as spec_computed,
    iterate_packed,
    local as spec_local,
)
from elastic_loader.spec.loader import run_loader
from elastic_loader.spec.packing import PackedState, estimate_blocks_per_epoch
from elastic_loader.spec.rows import initial_row_state, iterate_rows

KINDS: list[Any] = ["computed", "local", LocalShuffle(clump=3, window=5), LocalShuffle(clump=1, window=1)]


def _spec_perm(kind: Any, n: int, s: int, seed: int, epoch: int) -> tuple[tuple[int, ...], ...]:
    """The spec's splits (storage positions) of ``kind``."""
    if kind == "computed":
        return spec_computed.computed_splits(spec_computed.ComputedPermutation(n, s, seed, epoch))
    local = LocalShuffle() if kind == "local" else kind
    model = spec_local.LocalPermutation(n, s, seed, epoch, local.clump, local.window)
    return spec_local.local_splits(model)


def _ids_in_storage_order(table: Any) -> list[int]:
    return [int(v) for v in table.to_lance().to_table(columns=["id"]).column("id").to_pylist()]


def expected_splits(table: Any, kind: Any, s: int, seed: int = 0, epoch: int = 0) -> list[list[int]]:
    """Every split's ``id`` values in read order, from the spec and a scan."""
    ids = _ids_in_storage_order(table)
    return [[ids[p] for p in split] for split in _spec_perm(kind, len(ids), s, seed, epoch)]


def as_perm(splits: list[list[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(x) for x in splits)


def spec_rows(splits: list[list[int]], owned: list[int], state: RowState) -> list[int]:
    return [y.row_id for y in iterate_rows(as_perm(splits), Faults(), owned, state).rows]


def ids(ds: StreamingDataset) -> list[int]:
    return [int(row["id"]) for row in ds]


@pytest.fixture(scope="module")
def odd_tables(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """Tables of 1, 7, 103 and 1000 rows (1000: four fragments; 103: 8 rows deleted)."""
    db = lancedb.connect(str(tmp_path_factory.mktemp("positions")))
    out = {}
    for n in (1, 7, 103, 1000):
        bounds = (0, 100, 550, 551, 1000) if n == 1000 else (0, n)
        chunks = [
            pa.table({"id": pa.array(range(lo, hi), pa.int64()), "payload": [f"p{i}" for i in range(lo, hi)]})
            for lo, hi in itertools.pairwise(bounds)
        ]
        table = db.create_table(f"t{n}", chunks[0])
        for chunk in chunks[1:]:
            table.add(chunk)
        if n == 103:
            table.delete("id % 13 = 5")  # positions after a deleted row move down by one
        out[n] = table
    return out


@pytest.mark.parametrize("kind", KINDS, ids=str)
@pytest.mark.parametrize(("n", "s"), [(1, 1), (7, 2), (7, 7), (103, 4), (1000, 6), (1000, 1)])
def test_rows_follow_the_spec(odd_tables: dict[int, Any], kind: Any, n: int, s: int) -> None:
    table = odd_tables[n]
    for epoch in (0, 1):
        splits = expected_splits(table, kind, s, seed=7, epoch=epoch)
        ds = StreamingDataset(table, num_splits=s, permutation=kind, shuffle_seed=7, epoch=epoch)
        assert ds.split_size == len(splits[0])
        assert ids(ds) == spec_rows(splits, list(range(s)), initial_row_state(s))
    ds.set_epoch(0)  # set_epoch rebuilds the computed permutation of that epoch
    assert ids(ds) == spec_rows(expected_splits(table, kind, s, 7, 0), list(range(s)), initial_row_state(s))


def test_storage_positions_count_live_rows(odd_tables: dict[int, Any]) -> None:
    """The table of 103 rows has 8 deleted: 95 live rows, every one read once (15 of 6 splits dropped)."""
    table = odd_tables[103]
    ds = StreamingDataset(table, num_splits=6, permutation="computed")
    got = ids(ds)
    assert len(got) == 6 * (95 // 6) == len(set(got))
    assert not {i for i in got if i % 13 == 5}
    assert set(got) <= set(_ids_in_storage_order(table))


@pytest.mark.parametrize("kind", ["computed", LocalShuffle(clump=4, window=16)], ids=str)
def test_ranks_of_any_world_size_cover_the_epoch_in_lockstep(odd_tables: dict[int, Any], kind: Any) -> None:
    table = odd_tables[1000]
    splits = expected_splits(table, kind, 8, seed=3)
    for world in (1, 2, 4):
        per_rank = [
            ids(
                StreamingDataset(
                    table, num_splits=8, permutation=kind, shuffle_seed=3, rank=r, world_size=world
                )
            )
            for r in range(world)
        ]
        for r, got in enumerate(per_rank):
            mine = list(range(r * 8 // world, (r + 1) * 8 // world))
            assert got == spec_rows(splits, mine, initial_row_state(8))
        assert sorted(itertools.chain(*per_rank)) == sorted(itertools.chain(*splits))


@pytest.mark.parametrize("kind", ["computed", "local"], ids=str)
def test_resume_on_another_world_size_is_exact(odd_tables: dict[int, Any], kind: Any) -> None:
    table = odd_tables[1000]
    splits = expected_splits(table, kind, 4, seed=11)
    states = []
    seen: list[int] = []
    for r in range(2):
        ds = StreamingDataset(table, num_splits=4, permutation=kind, shuffle_seed=11, rank=r, world_size=2)
        it = iter(ds)
        seen += [int(next(it)["id"]) for _ in range(37 + r)]  # ranks not in lockstep: merged, exact
        states.append(ds.state_dict())
        it.close()
    merged = merge_state_dicts(states)
    assert merged["perm_fingerprint"] == states[0]["perm_fingerprint"]
    resumed = StreamingDataset(table, num_splits=4, permutation=kind, shuffle_seed=11)
    resumed.load_state_dict(merged)
    rest = ids(resumed)
    state = RowState(
        tuple(merged["samples_consumed_per_split"]), tuple(merged["positions_consumed_per_split"])
    )
    assert rest == spec_rows(splits, [0, 1, 2, 3], state)
    assert sorted(seen + rest) == sorted(itertools.chain(*splits))


@pytest.mark.parametrize("kind", ["computed", LocalShuffle(clump=8, window=32)], ids=str)
def test_loader_with_worker_processes_follows_the_spec_and_resumes(
    odd_tables: dict[int, Any], kind: Any
) -> None:
    """Two real DataLoader workers: batches and committed states equal the spec's ``run_loader``;
    a checkpoint after 5 batches resumes exactly in a loader of one worker."""
    table = odd_tables[1000]
    splits = expected_splits(table, kind, 4, seed=2)
    config = RunConfig(num_splits=4, shuffle_seed=2, epoch=0, perm_fingerprint=None)
    model = run_loader(
        config, as_perm(splits), Faults(), Topology(1, 0, 2, 0), initial_row_state(4), batch_size=7
    )
    ds = StreamingDataset(table, num_splits=4, permutation=kind, shuffle_seed=2, columns=["id"])
    loader = StreamingDataLoader(ds, batch_size=7, num_workers=2)
    delivered = []
    it = iter(loader)
    for n in range(5):
        batch = next(it)
        delivered.append(batch["id"].tolist())
        committed = model.deliveries[n].committed
        assert isinstance(committed, RowState)
        state = ds.state_dict()
        assert state["samples_consumed_per_split"] == list(committed.samples)
    it.close()
    assert delivered == [[y.row_id for y in d.items] for d in model.deliveries[:5]]
    resumed = StreamingDataset(table, num_splits=4, permutation=kind, shuffle_seed=2, columns=["id"])
    resumed.load_state_dict(state)
    rest = [
        int(x) for batch in StreamingDataLoader(resumed, batch_size=7, num_workers=1) for x in batch["id"]
    ]
    assert sorted(itertools.chain(*delivered, rest)) == sorted(itertools.chain(*splits))
    assert rest == spec_rows(
        splits, [0, 1, 2, 3], RowState(tuple(committed.samples), tuple(committed.positions))
    )


@pytest.fixture
def range_scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Runs of 4 positions or more are read as range scans; returns the rows of every range scan."""
    monkeypatch.setattr(_lance, "RANGE_MIN_RUN_ROWS", 4)
    monkeypatch.setattr(_lance, "RANGE_MIN_RUN_BYTES", 1)
    rows: list[int] = []
    original = _lance._PositionReader.scan_ranges

    def counted(self: Any, ranges: list[tuple[int, int]], columns: Any, count: int) -> pa.Table:
        rows.append(count)
        return original(self, ranges, columns, count)

    monkeypatch.setattr(_lance._PositionReader, "scan_ranges", counted)
    return rows


@pytest.mark.parametrize("n", [103, 1000])
def test_range_scans_follow_the_spec(odd_tables: dict[int, Any], range_scans: list[int], n: int) -> None:
    """Rows and columnar batches read by range scans (the 103-row table has deleted rows, the 1000-row
    one four fragments) are the spec's, and so is the rest after a resume."""
    table, kind = odd_tables[n], LocalShuffle(clump=20, window=40)
    splits = expected_splits(table, kind, 3, seed=5)
    expected = spec_rows(splits, [0, 1, 2], initial_row_state(3))
    ds = StreamingDataset(table, num_splits=3, permutation=kind, shuffle_seed=5)
    assert ids(ds) == expected
    assert sum(range_scans) >= len(expected) // 2
    ds = StreamingDataset(table, num_splits=3, permutation=kind, shuffle_seed=5, columns=["id"])
    loader = StreamingDataLoader(ds, batch_size=16, batch_format="numpy")
    it = iter(loader)
    head = [int(x) for _ in range(2) for x in next(it)["id"]]
    state = ds.state_dict()
    it.close()
    resumed = StreamingDataset(table, num_splits=3, permutation=kind, shuffle_seed=5, columns=["id"])
    resumed.load_state_dict(state)
    loader = StreamingDataLoader(resumed, batch_size=16, batch_format="numpy")
    rest = [int(x) for batch in loader for x in batch["id"]]
    assert head + rest == expected


def test_range_scans_can_be_turned_off(
    odd_tables: dict[int, Any], range_scans: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ELASTIC_LOADER_RANGE_SCANS=0``: the same rows, every read a ``take``."""
    table, kind = odd_tables[1000], LocalShuffle(clump=20, window=40)
    expected = spec_rows(expected_splits(table, kind, 3, seed=5), [0, 1, 2], initial_row_state(3))
    monkeypatch.setenv("ELASTIC_LOADER_RANGE_SCANS", "0")
    assert ids(StreamingDataset(table, num_splits=3, permutation=kind, shuffle_seed=5)) == expected
    assert range_scans == []
    monkeypatch.setenv("ELASTIC_LOADER_RANGE_SCANS", "1")
    assert ids(StreamingDataset(table, num_splits=3, permutation=kind, shuffle_seed=5)) == expected
    assert sum(range_scans) >= len(expected) // 2


@pytest.mark.parametrize("reads", ["take", "range scans"])
def test_packing_follows_the_spec(tmp_path: Path, reads: str, request: pytest.FixtureRequest) -> None:
    scanned = request.getfixturevalue("range_scans") if reads == "range scans" else None
    docs = 600
    tokens = [[1000 * i + j for j in range(i % 4)] for i in range(docs)]
    db = lancedb.connect(str(tmp_path))
    table = db.create_table(
        "docs",
        pa.table({"id": pa.array(range(docs), pa.int64()), "tokens": pa.array(tokens, pa.list_(pa.int64()))}),
    )
    corpus = {i: tuple(tokens[i]) for i in range(docs)}
    kinds = ("computed", LocalShuffle(clump=5, window=9), LocalShuffle(clump=40, window=80))
    for kind in kinds:
        splits = expected_splits(table, kind, 3, seed=4)
        config = PackingConfig(8, -1, -2, 3 * 40)
        start = PackedState((0,) * 3, (0,) * 3, {})
        model = iterate_packed(as_perm(splits), corpus, Faults(), (0, 1, 2), config, start)
        ds = StreamingDataset(
            table,
            num_splits=3,
            shuffle_seed=4,
            permutation=kind,
            columns=["tokens"],
            pack_sequences=8,
            eos_id=-1,
            pad_id=-2,
            blocks_per_epoch=3 * 40,
        )
        got = [tuple(block["input_ids"].tolist()) for block in ds]
        assert got == [b.input_ids for b in model.blocks]
        with pytest.warns(UserWarning, match="approximate"):
            auto = StreamingDataset(
                table, num_splits=3, shuffle_seed=4, permutation=kind, columns=["tokens"], pack_sequences=8,
                eos_id=-1, pad_id=-2, blocks_per_epoch="auto",
            )  # fmt: skip
        lengths = [[len(tokens[i]) for i in split] for split in splits]
        assert auto.blocks_per_epoch == estimate_blocks_per_epoch(lengths, 4, 8)
    assert scanned is None or sum(scanned) >= docs  # the clumps of 40 were read by range scans


@pytest.mark.parametrize(("window", "fixed"), [(1, False), (2, False), (2, True)])
def test_long_documents_read_by_range_scans_pack_as_the_spec(
    tmp_path: Path, range_scans: list[int], window: int, fixed: bool
) -> None:
    """Long documents (``LOOP_MIN_DOC_TOKENS`` or more on average) read by range scans come in
    several Arrow batches a read, kept apart and copied once into the streams (runs of consecutive
    rows with ``window=1``, a slice a document with ``window=2``): the blocks are the spec's, and so
    are the rest after a resume from a checkpoint taken mid-epoch."""
    docs = 600
    tokens = [[100_000 * i + j for j in range(300 if fixed else 200 + (37 * i) % 300)] for i in range(docs)]
    kind = pa.list_(pa.int64(), 300) if fixed else pa.list_(pa.int64())  # fixed: a fixed-size list column
    db = lancedb.connect(str(tmp_path))
    table = db.create_table(
        "docs", pa.table({"id": pa.array(range(docs), pa.int64()), "tokens": pa.array(tokens, kind)})
    )
    corpus = {i: tuple(tokens[i]) for i in range(docs)}
    order, budget = LocalShuffle(clump=40, window=window), 3 * 150
    splits = expected_splits(table, order, 3, seed=2)
    config = PackingConfig(512, -1, -2, budget)
    model = iterate_packed(
        as_perm(splits), corpus, Faults(), (0, 1, 2), config, PackedState((0,) * 3, (0,) * 3, {})
    )
    expected = [b.input_ids for b in model.blocks]
    options: dict[str, Any] = dict(
        num_splits=3, shuffle_seed=2, permutation=order, columns=["tokens"], pack_sequences=512,
        eos_id=-1, pad_id=-2, blocks_per_epoch=budget,
    )  # fmt: skip
    ds = StreamingDataset(table, **options)
    it = iter(StreamingDataLoader(ds, batch_size=7, batch_format="numpy"))
    head = [tuple(row.tolist()) for _ in range(5) for row in next(it)["input_ids"]]
    state = ds.state_dict()
    it.close()
    resumed = StreamingDataset(table, **options)
    resumed.load_state_dict(state)
    rest = [tuple(row.tolist()) for batch in StreamingDataLoader(resumed, batch_size=7, batch_format="numpy")
            for row in batch["input_ids"]]  # fmt: skip
    assert head + rest == expected
    assert sum(range_scans) >= docs // 2


# ------------------------------------------------------------------ identity and checkpoints


def test_fingerprint_names_the_algorithm_and_every_parameter(odd_tables: dict[int, Any]) -> None:
    table = odd_tables[1000]
    computed = StreamingDataset(table, num_splits=4, permutation="computed", shuffle_seed=9, epoch=2)
    assert computed.state_dict()["perm_fingerprint"] == spec_computed.computed_fingerprint(
        spec_computed.ComputedPermutation(1000, 4, 9, 2)
    )
    local = StreamingDataset(table, num_splits=4, permutation=LocalShuffle(clump=5, window=7), shuffle_seed=9)
    assert local.state_dict()["perm_fingerprint"] == spec_local.local_fingerprint(
        spec_local.LocalPermutation(1000, 4, 9, 0, 5, 7)
    )
    assert (
        "perm_fingerprint" not in StreamingDataset(table, num_splits=4).state_dict()
    )  # the default is unchanged


@pytest.mark.parametrize(
    ("saved", "loading", "message"),
    [
        ("builder", "computed", "no perm_fingerprint"),
        ("computed", "builder", "perm_fingerprint mismatch"),
        ("computed", "local", "perm_fingerprint mismatch"),
        (LocalShuffle(clump=4, window=8), LocalShuffle(clump=4, window=9), "window=9"),
        (LocalShuffle(clump=4, window=8), "computed", "computed"),
    ],
    ids=str,
)
def test_a_checkpoint_of_another_permutation_is_refused(
    odd_tables: dict[int, Any], saved: Any, loading: Any, message: str
) -> None:
    table = odd_tables[1000]
    ds = StreamingDataset(table, num_splits=4, permutation=saved)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    it.close()
    other = StreamingDataset(table, num_splits=4, permutation=loading)
    with pytest.raises(ValueError, match=message):
        other.load_state_dict(state)


def test_resume_reads_the_table_version_of_the_checkpoint(tmp_path: Path) -> None:
    """Rows appended after a save change N, hence the permutation; the resume uses the pinned version."""
    db = lancedb.connect(str(tmp_path))
    table = db.create_table("grow", pa.table({"id": pa.array(range(90), pa.int64())}))
    splits = expected_splits(table, "computed", 3)
    ds = StreamingDataset(table, num_splits=3, permutation="computed")
    it = iter(ds)
    first = [int(next(it)["id"]) for _ in range(20)]
    state = ds.state_dict()
    it.close()
    table.add(pa.table({"id": pa.array(range(90, 150), pa.int64())}))
    resumed = StreamingDataset(table, num_splits=3, permutation="computed")
    assert resumed.split_size == 50
    resumed.load_state_dict(state)
    assert resumed.split_size == 30
    assert sorted(first + ids(resumed)) == sorted(itertools.chain(*splits))


def test_pickles_are_small_and_independent_of_the_table_size(odd_tables: dict[int, Any]) -> None:
    sizes = []
    for n in (7, 1000):
        ds = StreamingDataset(odd_tables[n], num_splits=1, permutation="computed")
        payload = pickle.dumps(ds)
        copy = pickle.loads(payload)
        assert ids(copy) == ids(ds)
        sizes.append(len(payload))
    assert abs(sizes[0] - sizes[1]) < 64  # the table's name and the row count's digits differ, no rows
    assert isinstance(ds._perm.rows[0][0:3], np.ndarray)


# ------------------------------------------------------------------ bad parameters


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"permutation": 3}, TypeError, "permutation must be"),
        ({"permutation": None}, TypeError, "permutation must be"),
        ({"permutation": "shuffled"}, ValueError, "permutation must be one of"),
        ({"permutation": 3, "read_batch_size": 0}, TypeError, "permutation must be"),  # types first
        ({"permutation": "shuffled", "read_batch_size": 0}, ValueError, "read_batch_size"),  # then ranges
        ({"permutation": "computed", "shuffle": False}, ValueError, "shuffle=False"),
        ({"permutation": "computed", "filter": "id > 3"}, ValueError, "filter"),
        ({"permutation": "local", "split_strategy": lambda b: b}, ValueError, "split_strategy"),
        ({"permutation": "local", "shuffle_clump_size": 4}, ValueError, "shuffle_clump_size"),
        ({"permutation": "computed", "num_splits": 1001}, ValueError, "fewer than num_splits"),
    ],
)
def test_bad_permutation_arguments_raise(
    odd_tables: dict[int, Any], kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        StreamingDataset(odd_tables[1000], **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"clump": 0}, ValueError),
        ({"window": 2**64 + 1}, ValueError),
        ({"clump": 2.0}, TypeError),
        ({"window": True}, TypeError),
    ],
)
def test_bad_local_shuffles_raise(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error, match="LocalShuffle"):
        LocalShuffle(**kwargs)


def test_a_table_without_storage_positions_is_refused() -> None:
    table = lancedb.connect("memory://").create_table("m", pa.table({"id": pa.array(range(10), pa.int64())}))
    with pytest.raises(ValueError, match="Lance dataset"):
        StreamingDataset(table, permutation="computed")
    assert len(list(StreamingDataset(table))) == 10  # the builder reads it


def test_the_default_is_the_builder(odd_tables: dict[int, Any], perm_of: Any) -> None:
    table = odd_tables[1000]
    splits = perm_of(table, num_splits=4)
    got = ids(StreamingDataset(table, num_splits=4, permutation="builder"))
    assert (
        got
        == ids(StreamingDataset(table, num_splits=4))
        == spec_rows(splits, [0, 1, 2, 3], initial_row_state(4))
    )
    assert torch.tensor(got).numel() == 1000


class RunCounting(Reader):
    """Records (rows, runs of contiguous positions) of every read, then reads through ``inner``."""

    def __init__(self, inner: Reader, seen: list[tuple[int, int]]) -> None:
        self.inner, self.seen = inner, seen

    def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:
        ordered = np.sort(np.asarray(row_ids, dtype=np.int64))
        self.seen.append((len(ordered), 1 + int(np.count_nonzero(np.diff(ordered) != 1))))
        return self.inner.take(row_ids, columns)


def test_local_reads_take_contiguous_runs(odd_tables: dict[int, Any]) -> None:
    """A local permutation's reads are ascending runs of about a clump each: far fewer runs than rows
    (a computed permutation's reads are scattered: about one run a row)."""
    table = odd_tables[1000]
    runs: dict[str, list[tuple[int, int]]] = {}
    for name, kind in (("local", LocalShuffle(clump=50, window=100)), ("computed", "computed")):
        ds = StreamingDataset(table, num_splits=2, permutation=kind, columns=["id"], read_batch_size=100)
        ds._handle.use(RunCounting(ds._handle.reader(), runs.setdefault(name, [])))
        assert ids(ds) == spec_rows(expected_splits(table, kind, 2), [0, 1], initial_row_state(2))
    rows = sum(n for n, _ in runs["local"])
    # a whole window of 100 positions is at most ceil(W / C) + 2 = 4 runs (LocalLocalityInv)
    assert rows >= 1000 and sum(r for _, r in runs["local"]) <= 4 * -(-rows // 100)
    assert sum(r for _, r in runs["computed"]) >= sum(n for n, _ in runs["computed"]) // 4
