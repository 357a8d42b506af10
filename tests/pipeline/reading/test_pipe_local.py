"""The pipeline's local permutation against the spec, and reading windows of a LanceDB table.

Expected values come from the executable spec (``elastic_loader.spec.local``)
or, for reads, from a full scan of the table in storage order; never from the
module under test.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from elastic_loader._pipeline import _positions
from elastic_loader._pipeline._local import LocalPermutation, read_window, window_read_order
from elastic_loader.spec import local as spec

SIZES = [1, 2, 5, 16, 17, 1000, 2**16 + 1, 10**6, 2**40, 2**40 + 1, 2**63 + 7, 2**64]
SHAPES = [
    (1, 1), (1, 64), (3, 2), (4, 1), (16, 16), (64, 256), (256, 1024), (1000, 7), (2**64, 5), (2**64, 1)
]  # fmt: skip
SEEDS = [(0, 0), (2**64 - 1, 0), (123456789, 40)]


def _ranges(m: int, s: int, window: int, rng: random.Random) -> list[tuple[int, int, int]]:
    """(split, first, count): both ends of the table, one crossing a window edge, random ones."""
    edge = min(window, m - 1)
    out = [(0, 0, min(m, 50)), (s - 1, max(0, m - 50), min(m, 50)), (s // 2, max(0, edge - 3), min(m, 7))]
    out = [(sp, f, min(c, m - f)) for sp, f, c in out]
    for _ in range(3):
        split, first = rng.randrange(s), rng.randrange(m)
        out.append((split, first, min(m - first, rng.randint(1, 120))))
    return out


@pytest.mark.parametrize("n", SIZES)
def test_positions_and_locate_match_the_spec(n: int) -> None:
    rng = random.Random(n)
    for seed, epoch in SEEDS:
        for clump, window in SHAPES:
            for s in sorted({1, min(n, 3), min(n, 64)}):
                ours = LocalPermutation(n, s, seed, epoch, clump, window)
                model = spec.LocalPermutation(n, s, seed, epoch, clump, window)
                assert ours.fingerprint == spec.local_fingerprint(model)
                assert (ours.clump_count, ours.short_at) == (model.clump_count, model.short_at)
                for split, first, count in _ranges(ours.split_len, s, window, rng):
                    got = ours.positions(split, first, count)
                    assert got.dtype == np.uint64 and got.shape == (count,)
                    assert got.tolist() == list(spec.local_positions(model, split, first, count))
                    where, at = ours.locate(got)
                    assert where.tolist() == [split] * count
                    assert at.tolist() == list(range(first, first + count))


@given(
    n=st.integers(1, 2**64),
    s=st.integers(1, 5000),
    clump=st.one_of(st.integers(1, 5000), st.integers(1, 2**64)),
    window=st.one_of(st.integers(1, 5000), st.integers(1, 2**64)),
    seed=st.integers(0, 2**64 - 1),
    data=st.data(),
)
@settings(max_examples=60)
def test_positions_match_the_spec_random(
    n: int, s: int, clump: int, window: int, seed: int, data: st.DataObject
) -> None:
    s = min(s, n)
    ours = LocalPermutation(n, s, seed, 0, clump, window)
    model = spec.LocalPermutation(n, s, seed, 0, clump, window)
    m = ours.split_len
    split = data.draw(st.integers(0, s - 1), label="split")
    first = data.draw(st.integers(0, m - 1), label="first")
    count = data.draw(st.integers(0, min(30, m - first)), label="count")
    assert ours.positions(split, first, count).tolist() == list(
        spec.local_positions(model, split, first, count)
    )
    ys = data.draw(st.lists(st.integers(0, n - 1), max_size=5), label="positions")
    where, at = ours.locate(np.array(ys, dtype=np.uint64))
    expected = [spec.local_locate(model, y) for y in ys]
    assert [None if a == s else (a, b) for a, b in zip(where.tolist(), at.tolist())] == expected


def test_whole_small_tables_match_the_spec() -> None:
    for n in range(1, 70):
        for clump, window in ((1, 1), (2, 3), (4, 4), (5, 2), (9, 20)):
            for s in (1, 2, 7):
                if s > n:
                    continue
                ours = LocalPermutation(n, s, 9, 2, clump, window)
                model = spec.LocalPermutation(n, s, 9, 2, clump, window)
                splits = tuple(tuple(ours.positions(k, 0, ours.split_len).tolist()) for k in range(s))
                assert splits == spec.local_splits(model)
                sequence = ours.sequence(np.arange(n, dtype=np.uint64))
                assert sequence.tolist() == [spec.clumped_index(model, i) for i in range(n)]
                assert ours.sequence_inverse(sequence).tolist() == list(range(n))
                for k in range(s):
                    for q in range(ours.window_count):
                        starts, lengths = ours.runs(k, q)
                        assert list(zip(starts.tolist(), lengths.tolist())) == list(
                            spec.local_runs(model, k, q)
                        )


@pytest.mark.parametrize(
    ("n", "clump", "window"), [(2**40 + 1, 256, 1024), (10**9, 64, 4096), (2**64, 512, 512)]
)
def test_runs_of_large_tables_match_the_spec(n: int, clump: int, window: int) -> None:
    ours, model = (
        LocalPermutation(n, 16, 1, 1, clump, window),
        spec.LocalPermutation(n, 16, 1, 1, clump, window),
    )
    rng = random.Random(n)
    for split, q in [
        (0, 0),
        (15, ours.window_count - 1),
        *((rng.randrange(16), rng.randrange(ours.window_count)) for _ in range(3)),
    ]:
        starts, lengths = ours.runs(split, q)
        assert list(zip(starts.tolist(), lengths.tolist())) == list(spec.local_runs(model, split, q))
        assert len(starts) <= spec.local_run_bound(model, q)


@pytest.mark.parametrize(
    ("n", "s", "clump", "window"),
    [(300_007, 3, 1000, 3000), (400_000, 1, 4096, 65536), (100_003, 7, 8, 64)],
)
def test_long_ranges_match_the_spec(n: int, s: int, clump: int, window: int) -> None:
    """Ranges of many windows (the rounds read lookup tables, one per window): a range that ends
    with the short last window, with cycle-walking where a window is not a power of 4, and their
    inverse, against the spec."""
    ours = LocalPermutation(n, s, 5, 1, clump, window)
    model = spec.LocalPermutation(n, s, 5, 1, clump, window)
    count = min(ours.split_len, 3 * ours.window_len + 17)
    first = ours.split_len - count
    got = ours.positions(s - 1, first, count)
    assert got.tolist() == list(spec.local_positions(model, s - 1, first, count))
    where, at = ours.locate(got)
    assert where.tolist() == [s - 1] * count
    assert at.tolist() == list(range(first, first + count))


def test_degenerate_shape_is_the_computed_permutation() -> None:
    from elastic_loader._pipeline._computed import ComputedPermutation

    for n in (10, 1000, 2**40 + 1):
        local, computed = LocalPermutation(n, 4, 3, 1, 1, 1), ComputedPermutation(n, 4, 3, 1)
        for split in range(4):
            assert np.array_equal(
                local.positions(split, 0, 200 if n > 10 else 2),
                computed.positions(split, 0, 200 if n > 10 else 2),
            )


def test_pickles_as_its_parameters() -> None:
    perm = LocalPermutation(10**9, 64, 5, 3, 256, 1024)
    blob = pickle.dumps(perm)
    assert len(blob) < 220 and b"numpy" not in blob
    back = pickle.loads(blob)
    assert repr(back) == repr(perm) and back.fingerprint == perm.fingerprint
    assert np.array_equal(back.positions(63, 123, 3000), perm.positions(63, 123, 3000))


def test_edge_errors() -> None:
    for args in ((10, 2, 0, 0, 0, 1), (10, 2, 0, 0, 1, 0), (10, 2, 0, 0, 2**64 + 1, 1), (10, 11, 0, 0, 1, 1)):
        with pytest.raises(ValueError):
            LocalPermutation(*args)
    perm = LocalPermutation(10, 3, 0, 0, 2, 2)
    for split, first, count in ((3, 0, 1), (-1, 0, 1), (0, 2, 2), (0, -1, 1)):
        with pytest.raises(ValueError):
            perm.positions(split, first, count)
    with pytest.raises(ValueError):
        perm.locate(np.array([10], dtype=np.uint64))
    with pytest.raises(ValueError):
        perm.runs(0, 2)


# ---------------------------------------------------------------- reading windows of a table


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """1000 rows ``id = 0..999`` in four appends, then ids 5, 500..509 deleted (989 live rows)."""
    db = lancedb.connect(str(tmp_path_factory.mktemp("local")))
    t = db.create_table("t", pa.table({"id": pa.array(range(250), pa.int64())}))
    for start in (250, 500, 750):
        t.add(pa.table({"id": pa.array(range(start, start + 250), pa.int64())}))
    t.delete("id = 5 OR (id >= 500 AND id < 510)")
    return t


def test_read_window_reads_the_window_in_its_order(table: Any) -> None:
    dataset = table.to_lance()
    live = dataset.to_table(columns=["id"]).column("id").to_pylist()
    assert len(live) == 989
    model = spec.LocalPermutation(989, 4, 11, 0, 16, 40)
    perm = LocalPermutation(989, 4, 11, 0, 16, 40)
    seen: list[int] = []
    for split in range(4):
        for q in range(perm.window_count):
            got = read_window(dataset, perm, split, q, ["id"]).column("id").to_pylist()
            first = q * 40
            expected = spec.local_positions(model, split, first, spec.window_size(model, q))
            assert got == [live[p] for p in expected]
            seen += got
    assert len(seen) == len(set(seen)) == 4 * 247


def test_window_read_order_is_a_few_ascending_runs() -> None:
    perm = LocalPermutation(10**6, 16, 2, 0, 256, 1024)
    ascending, back = window_read_order(perm, 3, 7)
    assert np.all(np.diff(ascending.astype(np.int64)) > 0)
    assert np.array_equal(ascending[back], perm.positions(3, 7 * 1024, 1024))
    starts, lengths = perm.runs(3, 7)
    assert len(starts) <= 6 and int(lengths.sum()) == 1024


def test_split_views_keep_positions_ahead_and_answer_any_slice() -> None:
    """A split view computes ``AHEAD`` positions at once and keeps them; slices in any order (forward,
    backward, overlapping, across the kept array's end, longer than it) are the permutation's own
    positions, and a pickled view carries no kept positions."""
    perm = LocalPermutation(3 * _positions.AHEAD + 1234, 3, 5, 1, 3, 7)
    whole = [perm.positions(s, 0, perm.split_len) for s in range(3)]
    view = _positions.SplitPositions(perm, 1)
    m = perm.split_len
    for first, stop in [
        (0, 10),
        (5, 2000),
        (10, 3),
        (_positions.AHEAD - 5, _positions.AHEAD + 5),
        (100, 100 + 2 * _positions.AHEAD),
        (m - 4, m),
        (3, 9),
        (m - 1, m),
    ]:
        assert np.array_equal(view[first:stop], whole[1][first:stop])
    assert int(view[7]) == int(whole[1][7]) and int(view[-1]) == int(whole[1][-1])
    got = view[0:50]
    got[:] = 0  # a slice is the caller's: writing to it changes no later answer
    assert np.array_equal(view[0:50], whole[1][:50])
    assert len(pickle.dumps(view)) < 400
