"""The local (clumped, windowed) permutation of the model: its three invariants and its vectors.

Exhaustive on small tables (every ``N <= 16`` with several clump and window
sizes and every split count that divides ``N`` plus one that does not), sampled
with Hypothesis up to ``2**64`` rows; the predicates are shown to fail on a
colliding window, on reads that ignore clumps and on a shifted clump order.
The vectors of spec/LOCAL.md are pinned here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, strategies as st

from elastic_loader.spec import SpecValueError, local
from elastic_loader.spec.computed import MAX_ROWS, ComputedPermutation, computed_index, computed_splits
from elastic_loader.spec.invariants import (
    InvariantViolation,
    LocalBijectionInv,
    LocalDegeneracyInv,
    LocalLocalityInv,
    SplitSizeInv,
)
from elastic_loader.spec.local import (
    LocalPermutation,
    clumped_index,
    clumped_inverse,
    local_fingerprint,
    local_locate,
    local_positions,
    local_run_bound,
    local_runs,
    local_splits,
    window_keys,
    window_size,
)
from elastic_loader.testing.strategies import divisors

SEEDS = ((0, 0), (2**64 - 1, 0), (98765, 12))
SHAPES = ((1, 1), (1, 4), (2, 1), (3, 3), (4, 2), (5, 16), (8, 3), (40, 7))
"""(clump, window) pairs of the exhaustive tests: degenerate, W < C, W = C, W > C, C > N."""


def _split_counts(n: int) -> Iterator[int]:
    yield from divisors(n)
    yield from (s for s in (2, 3, n - 1) if 1 <= s <= n and n % s)


def _perms(max_rows: int) -> Iterator[LocalPermutation]:
    for seed, epoch in SEEDS:
        for n in range(1, max_rows + 1):
            for clump, window in SHAPES:
                for s in sorted(set(_split_counts(n))):
                    yield LocalPermutation(n, s, seed, epoch, clump, window)


@st.composite
def large_perms(draw: st.DrawFn) -> LocalPermutation:
    n = draw(st.integers(1, MAX_ROWS), label="rows")
    s = draw(st.integers(1, min(n, 4096)), label="splits")
    clump = draw(st.one_of(st.integers(1, 4096), st.integers(1, MAX_ROWS)), label="clump")
    window = draw(st.one_of(st.integers(1, 4096), st.integers(1, MAX_ROWS)), label="window")
    seed = draw(st.integers(0, 2**64 - 1), label="seed")
    epoch = 0 if seed > 2**63 else draw(st.integers(0, 5), label="epoch")
    return LocalPermutation(n, s, seed, epoch, clump, window)


def _sampled_slots(perm: LocalPermutation, data: st.DataObject) -> list[tuple[int, int]]:
    m, last = perm.split_len, perm.num_splits - 1
    drawn = data.draw(
        st.lists(st.tuples(st.integers(0, last), st.integers(0, m - 1)), min_size=1, max_size=8),
        label="slots",
    )
    return [(0, 0), (last, m - 1), *drawn]


# ---------------------------------------------------------------- LocalBijectionInv


def test_LocalBijectionInv_exhaustive_small_tables() -> None:
    count = 0
    for perm in _perms(16):
        LocalBijectionInv(perm)
        count += 1
    assert count > 800


@given(perm=large_perms(), data=st.data())
def test_LocalBijectionInv_sampled_large_tables(perm: LocalPermutation, data: st.DataObject) -> None:
    LocalBijectionInv(perm, _sampled_slots(perm, data))
    i = data.draw(st.integers(0, perm.num_rows - 1), label="index")
    assert clumped_inverse(perm, clumped_index(perm, i)) == i


def test_LocalBijectionInv_split_table_passes_SplitSizeInv() -> None:
    """``local_splits`` is a ``Permutation`` the rest of the model takes: its cut of the order of ``Q`` read
    through the windows satisfies ``SplitSizeInv``, with the last ``N mod S`` positions of ``Q`` dropped."""
    perm = LocalPermutation(50, 7, 3, 1, 4, 5)
    splits = local_splits(perm)
    order = [y for split in splits for y in split] + [clumped_index(perm, i) for i in range(49, 50)]
    SplitSizeInv(order, 7, splits)
    assert local_locate(perm, clumped_index(perm, 49)) is None


def test_LocalBijectionInv_rejects_a_colliding_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "_walk", lambda keys, size, x, inverse: 0)
    with pytest.raises(InvariantViolation, match="LocalBijectionInv"):
        LocalBijectionInv(LocalPermutation(12, 2, 0, 0, 2, 3))


def test_LocalBijectionInv_rejects_a_clump_sequence_without_the_short_clump(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``Q`` that treats the short clump as full reads past the end or twice."""
    perm = LocalPermutation(10, 2, 0, 0, 4, 2)
    assert perm.short_at < perm.clump_count - 1
    monkeypatch.setattr(LocalPermutation, "short_len", property(lambda self: self.clump))
    with pytest.raises((InvariantViolation, SpecValueError)):
        LocalBijectionInv(perm)


# ---------------------------------------------------------------- LocalLocalityInv


def test_LocalLocalityInv_exhaustive_small_tables() -> None:
    for perm in _perms(18):
        LocalLocalityInv(perm)


@given(perm=large_perms(), data=st.data())
def test_LocalLocalityInv_sampled_large_tables(perm: LocalPermutation, data: st.DataObject) -> None:
    if min(perm.window, perm.split_len) > 600:
        perm = LocalPermutation(
            perm.num_rows, perm.num_splits, perm.shuffle_seed, perm.epoch, perm.clump, 5000
        )
    last_window = perm.window_count - 1
    windows = data.draw(
        st.lists(st.tuples(st.integers(0, perm.num_splits - 1), st.integers(0, last_window)), max_size=3),
        label="windows",
    )
    LocalLocalityInv(perm, [(0, 0), (perm.num_splits - 1, last_window), *windows])


def test_LocalLocalityInv_bound_is_reached() -> None:
    """The bound is tight: some window reads exactly ``local_run_bound`` runs, without a short clump
    (``2 + (w-2) // C``) and with one inside the window (one more)."""
    for n, s, seed, clump, window, runs in (
        (2000, 7, 5, 8, 20, 4),
        (2000, 7, 5, 16, 16, 2),
        (41, 1, 4, 4, 7, 4),
    ):
        perm = LocalPermutation(n, s, seed, 0, clump, window)
        reached = [
            (k, q)
            for k in range(s)
            for q in range(perm.window_count)
            if len(local_runs(perm, k, q)) == local_run_bound(perm, q) == runs
        ]
        assert reached, (n, clump, window)
    assert local_runs(LocalPermutation(41, 1, 4, 0, 4, 7), 0, 1) == ((4, 1), (12, 4), (31, 1), (40, 1))


def test_LocalLocalityInv_default_window_reads_few_runs() -> None:
    """``C = 256``, ``W = 1024`` (the defaults of spec/LOCAL.md): at most 6 runs per window, at least 3
    of 256 rows or more, on a table with a short clump."""
    perm = LocalPermutation(2**20 + 77, 16, 0, 0, 256, 1024)
    assert all(local_run_bound(perm, q) <= 6 for q in range(perm.window_count))
    LocalLocalityInv(perm, [(s, q) for s in (0, 15) for q in (0, 1, perm.window_count - 1)])


def test_LocalLocalityInv_rejects_reads_that_ignore_clumps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``Q`` that permutes rows one by one (the computed permutation) breaks the run bound."""
    row_level = ComputedPermutation(400, 1, 0, 0)
    monkeypatch.setattr(local, "clumped_index", lambda perm, i: computed_index(row_level, i))
    with pytest.raises(InvariantViolation, match="LocalLocalityInv"):
        LocalLocalityInv(LocalPermutation(400, 2, 0, 0, 50, 100))


# ---------------------------------------------------------------- LocalDegeneracyInv


def test_LocalDegeneracyInv_small_tables() -> None:
    for seed, epoch in SEEDS:
        for n in range(1, 60):
            for s in sorted(set(_split_counts(n))):
                LocalDegeneracyInv(n, s, seed, epoch)


@given(
    n=st.integers(1, MAX_ROWS),
    s=st.integers(1, 4096),
    seed=st.integers(0, 2**63),
    data=st.data(),
)
def test_LocalDegeneracyInv_sampled_large_tables(n: int, s: int, seed: int, data: st.DataObject) -> None:
    s = min(s, n)
    m = n // s
    slots = data.draw(st.lists(st.tuples(st.integers(0, s - 1), st.integers(0, m - 1)), max_size=6))
    LocalDegeneracyInv(n, s, seed, 1, [(0, 0), (s - 1, m - 1), *slots])


def test_LocalDegeneracyInv_whole_split_tables_equal() -> None:
    for n, s in ((10, 3), (1000, 4), (4**4, 16)):
        perm = LocalPermutation(n, s, 7, 2, 1, 1)
        assert local_splits(perm) == computed_splits(ComputedPermutation(n, s, 7, 2))


def test_LocalDegeneracyInv_rejects_a_shifted_clump_order(monkeypatch: pytest.MonkeyPatch) -> None:
    original = local.computed_index
    monkeypatch.setattr(local, "computed_index", lambda perm, k: original(perm, (k + 1) % perm.num_rows))
    with pytest.raises(InvariantViolation, match="LocalDegeneracyInv"):
        LocalDegeneracyInv(10, 2, 0, 0)


# ---------------------------------------------------------------- the definition's fixed points


def test_vector_small_table() -> None:
    """spec/LOCAL.md, vector 1: ``N = 22`` (a short clump of 2), ``S = 3``, ``C = 4``, ``W = 3``."""
    perm = LocalPermutation(22, 3, 0, 0, 4, 3)
    assert (perm.clump_count, perm.short_len, perm.short_at) == (6, 2, 4)
    assert [clumped_index(perm, i) for i in range(22)] == [
        4, 5, 6, 7, 0, 1, 2, 3, 16, 17, 18, 19, 12, 13, 14, 15, 20, 21, 8, 9, 10, 11,
    ]  # fmt: skip
    assert local_splits(perm) == (
        (5, 6, 4, 0, 7, 1, 2),
        (16, 3, 17, 19, 18, 12, 13),
        (20, 15, 14, 21, 8, 9, 10),
    )
    assert local_runs(perm, 1, 0) == ((3, 1), (16, 2))
    assert local_locate(perm, 11) is None
    assert local_fingerprint(perm) == (
        "clump-window-v1+feistel8-splitmix64-v1:rows=22:splits=3:seed=0:epoch=0:clump=4:window=3"
    )


def test_vector_large_table() -> None:
    """spec/LOCAL.md, vector 2: ``N = 2**40 + 1`` (a short clump of 1 row), ``S = 16``, ``C = 256``,
    ``W = 1024``."""
    perm = LocalPermutation(2**40 + 1, 16, 1234, 3, 256, 1024)
    assert (perm.clump_count, perm.short_at) == (2**32 + 1, 2980456140)
    assert local_positions(perm, 15, 0, 4) == (416974799747, 367327132398, 367327132405, 367327132321)
    assert local_positions(perm, 7, 1000, 3) == (190766503085, 737279586287, 190766503108)
    assert local_runs(perm, 15, 0) == (
        (367327132160, 256),
        (416974799616, 256),
        (479483402752, 256),
        (636027695360, 255),
        (1056036609279, 1),
    )


def test_window_keys_differ_from_the_epoch_keys_and_between_windows() -> None:
    perm = LocalPermutation(10**6, 4, 0, 0, 64, 256)
    keys = {window_keys(perm, s, q) for s in range(4) for q in range(50)}
    assert len(keys) == 200
    assert perm.clumps.keys not in keys
    assert len({k for ks in keys for k in ks}) == 1600


def test_windows_cover_each_split() -> None:
    perm = LocalPermutation(103, 2, 0, 0, 4, 10)
    assert perm.window_count == 6
    assert [window_size(perm, q) for q in range(6)] == [10, 10, 10, 10, 10, 1]


def test_clump_larger_than_the_table_is_the_identity_sequence() -> None:
    perm = LocalPermutation(17, 1, 9, 0, 2**64, 1)
    assert perm.clump_count == 1
    assert local_splits(perm) == (tuple(range(17)),)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"clump": 0}, "local_clump_out_of_range"),
        ({"clump": 2**64 + 1}, "local_clump_out_of_range"),
        ({"clump": True}, "local_clump_out_of_range"),
        ({"window": 0}, "local_window_out_of_range"),
        ({"window": -3}, "local_window_out_of_range"),
        ({"num_rows": 0}, "computed_rows_out_of_range"),
        ({"num_splits": 11}, "fewer_rows_than_splits"),
        ({"epoch": -1}, "epoch_out_of_range"),
    ],
)
def test_construction_errors(kwargs: dict[str, int], code: str) -> None:
    args = {"num_rows": 10, "num_splits": 2, "shuffle_seed": 0, "epoch": 0, "clump": 2, "window": 2, **kwargs}
    with pytest.raises(SpecValueError) as info:
        LocalPermutation(**args)
    assert info.value.code == code
