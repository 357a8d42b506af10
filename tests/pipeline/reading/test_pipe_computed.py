"""The pipeline's computed permutation against the spec, and reading rows by storage position.

Expected values come from the executable spec (``elastic_loader.spec.computed``)
or, for reads, from a full scan of the table in storage order; never from the
module under test.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import lance
import lancedb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from elastic_loader._pipeline import _computed, _lance
from elastic_loader._pipeline._computed import ComputedPermutation, read_positions
from elastic_loader.spec import computed as spec

SIZES = [1, 2, 3, 4, 5, 15, 16, 17, 1000, 2**10, 2**10 + 1, 2**16 + 1, 10**6, 2**40, 2**40 + 1, 2**63 + 7]
SEEDS = [(0, 0), (1, 0), (0, 1), (2**64 - 1, 0), (123456789, 40)]


def _ranges(n: int, s: int, rng: random.Random) -> list[tuple[int, int, int]]:
    """(split, first, count) ranges: whole splits when small, both ends and random windows otherwise."""
    m = n // s
    out = [(0, 0, min(m, 64)), (s - 1, max(0, m - 64), min(m, 64)), (s // 2, m // 2, 0)]
    for _ in range(4):
        split, first = rng.randrange(s), rng.randrange(m)
        out.append((split, first, min(m - first, rng.randint(1, 300))))
    return out


@pytest.mark.parametrize("n", SIZES)
def test_positions_match_the_spec(n: int) -> None:
    rng = random.Random(n)
    for seed, epoch in SEEDS:
        for s in sorted({1, min(n, 3), min(n, 64), n if n < 100 else min(n, 4096)}):
            ours = ComputedPermutation(n, s, seed, epoch)
            model = spec.ComputedPermutation(n, s, seed, epoch)
            assert ours.split_len == model.split_len
            assert ours.fingerprint == spec.computed_fingerprint(model)
            for split, first, count in _ranges(n, s, rng):
                got = ours.positions(split, first, count)
                assert got.dtype == np.uint64 and got.shape == (count,)
                assert got.tolist() == list(spec.computed_positions(model, split, first, count))


@given(
    n=st.integers(1, 2**64),
    s=st.integers(1, 10_000),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 3),
    data=st.data(),
)
@settings(max_examples=60)
def test_positions_match_the_spec_random(n: int, s: int, seed: int, epoch: int, data: st.DataObject) -> None:
    s = min(s, n)
    if seed + epoch * 100003 >= 2**64:
        epoch = 0
    ours, model = ComputedPermutation(n, s, seed, epoch), spec.ComputedPermutation(n, s, seed, epoch)
    m = ours.split_len
    split = data.draw(st.integers(0, s - 1), label="split")
    first = data.draw(st.integers(0, m - 1), label="first")
    count = data.draw(st.integers(0, min(40, m - first)), label="count")
    assert ours.positions(split, first, count).tolist() == list(
        spec.computed_positions(model, split, first, count)
    )


@given(
    half=st.integers(1, 12),
    seed=st.integers(0, 2**64 - 1),
    sets=st.integers(1, 3),
    inverse=st.booleans(),
    block=st.sampled_from([3, 64, _computed.LOOKUP_BLOCK]),
    data=st.data(),
)
@settings(max_examples=80)
def test_lookup_tables_compute_the_spec_network(
    half: int, seed: int, sets: int, inverse: bool, block: int, data: st.DataObject
) -> None:
    """``feistel_lookup`` over ``round_tables`` is the spec's network with each element's key set,
    forwards and backwards, in blocks of any size (a table row per key set and half value)."""
    rng = random.Random(seed)
    keys = [tuple(rng.getrandbits(64) for _ in range(_computed.ROUNDS)) for _ in range(sets)]
    n = data.draw(st.integers(0, 300), label="n")
    x = [rng.randrange(4**half) for _ in range(n)]
    which = [rng.randrange(sets) for _ in range(n)]
    tables = _computed.round_tables(np.array(keys, dtype=np.uint64).T, half)
    old = _computed.LOOKUP_BLOCK
    _computed.LOOKUP_BLOCK = block
    try:
        got = _computed.feistel_lookup(
            tables, half, np.array(x, dtype=np.uint64), np.array(which, dtype=np.uint64), inverse
        )
    finally:
        _computed.LOOKUP_BLOCK = old
    network = spec.feistel_decrypt if inverse else spec.feistel_encrypt
    assert got.tolist() == [network(keys[w], half, v) for w, v in zip(which, x)]


@pytest.mark.parametrize("n", [5, 4**7, 4**7 + 3, 10**6])
def test_long_runs_use_the_tables_and_match_the_spec(n: int) -> None:
    """Calls mapping at least ``2**half`` elements read the network from tables: whole ranges, their
    inverse, and the split each position belongs to, against the spec."""
    ours, model = ComputedPermutation(n, 3, 7, 2), spec.ComputedPermutation(n, 3, 7, 2)
    count = min(ours.split_len, 5000)
    got = ours.positions(1, ours.split_len - count, count)
    assert got.tolist() == list(spec.computed_positions(model, 1, ours.split_len - count, count))
    split, at = ours.locate(got)
    assert split.tolist() == [1] * count
    assert at.tolist() == list(range(ours.split_len - count, ours.split_len))


def test_whole_small_tables_match_the_spec_and_are_permutations() -> None:
    for n in range(1, 130):
        for s in (1, 2, 7):
            if s > n:
                continue
            ours, model = ComputedPermutation(n, s, 9, 2), spec.ComputedPermutation(n, s, 9, 2)
            order = ours.apply(np.arange(n, dtype=np.uint64))
            assert order.tolist() == list(spec.computed_order(model))
            assert np.array_equal(np.sort(order), np.arange(n, dtype=np.uint64))
            assert np.array_equal(ours.invert(order), np.arange(n, dtype=np.uint64))
            rows = np.concatenate([ours.positions(k, 0, ours.split_len) for k in range(s)])
            assert rows.tolist() == order[: s * ours.split_len].tolist()


@pytest.mark.parametrize("n", [7, 16, 17, 1000, 2**40 + 1, 2**64])
def test_invert_and_locate_match_the_spec(n: int) -> None:
    s = min(n, 6)
    ours, model = ComputedPermutation(n, s, 77, 1), spec.ComputedPermutation(n, s, 77, 1)
    rng = random.Random(5)
    ys = sorted({0, n - 1, *(rng.randrange(n) for _ in range(200))})
    got = ours.invert(np.array(ys, dtype=np.uint64))
    assert got.tolist() == [spec.computed_inverse(model, y) for y in ys]
    splits, positions = ours.locate(np.array(ys, dtype=np.uint64))
    expected = [spec.computed_locate(model, y) for y in ys]
    assert [None if sp == s else (sp, p) for sp, p in zip(splits.tolist(), positions.tolist())] == expected


def test_edge_errors() -> None:
    for args in (
        (0, 1, 0, 0),
        (2**64 + 1, 1, 0, 0),
        (3, 4, 0, 0),
        (3, 0, 0, 0),
        (9, 1, -1, 0),
        (9, 1, 2**64 - 1, 1),
    ):
        with pytest.raises(ValueError):
            ComputedPermutation(*args)
    perm = ComputedPermutation(10, 3, 0, 0)
    for split, first, count in ((3, 0, 1), (-1, 0, 1), (0, 2, 2), (0, -1, 1), (0, 0, -1)):
        with pytest.raises(ValueError):
            perm.positions(split, first, count)
    with pytest.raises(ValueError):
        perm.apply(np.array([10], dtype=np.uint64))
    with pytest.raises(ValueError):
        ComputedPermutation(16, 1, 0, 0).apply(np.array([16], dtype=np.uint64))


def test_pickles_as_its_parameters() -> None:
    perm = ComputedPermutation(10**9, 64, 5, 3)
    blob = pickle.dumps(perm)
    assert len(blob) < 200 and b"numpy" not in blob
    back = pickle.loads(blob)
    assert repr(back) == repr(perm) and back.fingerprint == perm.fingerprint
    assert np.array_equal(back.positions(63, 123, 1000), perm.positions(63, 123, 1000))


def test_positions_are_spread_over_the_table() -> None:
    """A split of a 10**6-row table reads from the whole table, not a band of it."""
    got = ComputedPermutation(10**6, 8, 0, 0).positions(0, 0, 20_000)
    counts = np.bincount((got // 100_000).astype(np.int64), minlength=10)
    assert counts.min() > 1800 and counts.max() < 2200, counts


# ---------------------------------------------------------------- reading by storage position


@pytest.fixture(scope="module")
def deleted_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, int, int]:
    """90 rows ``id = 0..89`` in three appends, then ids 3, 4, 31, 88 deleted: (table, v_before, v_after)."""
    db = lancedb.connect(str(tmp_path_factory.mktemp("computed")))
    table = db.create_table("t", pa.table({"id": pa.array(range(30), pa.int64())}))
    table.add(pa.table({"id": pa.array(range(30, 60), pa.int64())}))
    table.add(pa.table({"id": pa.array(range(60, 90), pa.int64())}))
    before = table.version
    table.delete("id IN (3, 4, 31, 88)")
    return table, before, table.version


def _scan_ids(dataset: Any) -> list[int]:
    return list(dataset.to_table(columns=["id"]).column("id").to_pylist())


def test_positions_count_live_rows_in_storage_order(deleted_table: tuple[Any, int, int]) -> None:
    table, _, _ = deleted_table
    dataset = table.to_lance()
    assert len(dataset.get_fragments()) == 3
    live = _scan_ids(dataset)
    assert len(live) == 86 and 3 not in live and 88 not in live
    perm = ComputedPermutation(dataset.count_rows(), 4, 21, 0)
    for split in range(4):
        positions = perm.positions(split, 0, perm.split_len)
        got = read_positions(dataset, positions, ["id"]).column("id").to_pylist()
        assert got == [live[int(p)] for p in positions]
    every = np.concatenate([perm.positions(k, 0, perm.split_len) for k in range(4)])
    read = read_positions(dataset, every, ["id"]).column("id").to_pylist()
    assert len(set(read)) == 4 * perm.split_len == 84 and set(read) <= set(live)


def test_a_pinned_version_keeps_its_positions(deleted_table: tuple[Any, int, int], tmp_path: Path) -> None:
    """Before the deletion, position p is row id p; after it, every later row moved down."""
    table, before, after = deleted_table
    old = lance.dataset(table.to_lance().uri, version=before)
    new = lance.dataset(table.to_lance().uri, version=after)
    positions = np.array([0, 3, 4, 5, 40, 85, 89], dtype=np.uint64)
    assert read_positions(old, positions, ["id"]).column("id").to_pylist() == [0, 3, 4, 5, 40, 85, 89]
    assert read_positions(new, positions[:-1], ["id"]).column("id").to_pylist() == [0, 5, 6, 7, 43, 89]
    with pytest.raises(OSError):
        read_positions(new, np.array([86], dtype=np.uint64), ["id"])


def test_read_positions_keeps_the_order_asked_for(deleted_table: tuple[Any, int, int]) -> None:
    table, _, _ = deleted_table
    dataset = table.to_lance()
    live = _scan_ids(dataset)
    positions = np.array([50, 2, 2, 85, 0, 49], dtype=np.uint64)
    got = read_positions(dataset, positions, ["id"])
    assert got.column("id").to_pylist() == [live[p] for p in positions.tolist()]
    assert read_positions(dataset, np.empty(0, dtype=np.uint64), ["id"]).num_rows == 0


# ---------------------------------------------------------------- range scans


def test_range_runs_cut_ascending_positions_into_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs are returned only when they are long enough on average, in rows and in bytes, and the
    row size is known; a repeated position always goes to ``take``."""
    monkeypatch.setattr(_lance, "RANGE_MIN_RUN_ROWS", 4)
    monkeypatch.setattr(_lance, "RANGE_MIN_RUN_BYTES", 100)
    positions = np.array([3, 4, 5, 6, 7, 20, 21, 22, 23, 40, 41, 42, 43, 44, 45], dtype=np.int64)
    assert _lance.range_runs(positions, 20) == [(3, 8), (20, 24), (40, 46)]
    assert _lance.range_runs(positions, 19) is None  # a mean run of 5 rows is 95 bytes
    assert _lance.range_runs(positions, None) is None
    assert _lance.range_runs(positions[:3], 1000) is None
    assert _lance.range_runs(np.array([1, 3, 5, 7, 9, 11, 13, 15]), 1000) is None
    assert _lance.range_runs(np.array([0, 1, 2, 2, 3, 4, 5, 6]), 1000) is None
    assert _lance.range_runs(np.arange(10, 90), 1000) == [(10, 90)]


def test_range_scans_read_what_take_reads(
    deleted_table: tuple[Any, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs crossing the three fragments and the deleted rows, asked in any order, read the rows a
    scan in storage order puts at those positions, through range scans."""
    monkeypatch.setattr(_lance, "RANGE_MIN_RUN_ROWS", 4)
    monkeypatch.setattr(_lance, "RANGE_MIN_RUN_BYTES", 1)
    table, _, _ = deleted_table
    live = _scan_ids(table.to_lance())
    reader, rows, _ = _lance.position_reader(table, None)
    assert rows == len(live) == 86
    scans: list[list[tuple[int, int]]] = []
    original = _lance._PositionReader.scan_ranges

    def spy(self: Any, ranges: list[tuple[int, int]], columns: Any, count: int) -> pa.Table:
        scans.append(ranges)
        return original(self, ranges, columns, count)

    monkeypatch.setattr(_lance._PositionReader, "scan_ranges", spy)
    runs = np.concatenate([np.arange(0, 12), np.arange(25, 40), np.arange(55, 64), np.arange(80, 86)])
    for order in (runs, runs[::-1], np.random.default_rng(3).permutation(runs)):
        unknown = reader.take(order, ["id"])  # the row size is not known yet: take
        assert unknown.column("id").to_pylist() == [live[p] for p in order.tolist()]
        reader.row_bytes_seen = 8
        got = reader.take(order, ["id"])
        assert got.column("id").to_pylist() == [live[p] for p in order.tolist()]
        reader.row_bytes_seen = None
    assert scans == [[(0, 12), (25, 40), (55, 64), (80, 86)]] * 3
    reader.row_bytes_seen = 8
    with pytest.raises((OSError, ValueError)):  # past the last live row, as with take
        reader.take(np.arange(80, 90), ["id"])


def test_a_range_scan_that_returns_fewer_rows_raises() -> None:
    """Never a short read passed on as if whole: a range scan must bring one row per position."""

    class Short:
        def take_scan(self, ranges: Any, columns: Any, batch_readahead: int) -> Any:
            return iter([pa.record_batch({"id": pa.array([1], pa.int64())})])

    class Dataset:
        _ds = Short()
        uri = "memory://short"

    reader = _lance._PositionReader(Dataset())
    reader.row_bytes_seen = 2**20
    with pytest.raises(OSError, match="memory://short returned 1 rows for 40 positions"):
        reader.take(np.arange(40), ["id"])
