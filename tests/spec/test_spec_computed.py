"""The computed permutation of the model: ``ComputedBijectionInv`` and the definition's fixed points.

Exhaustive on small tables, sampled (with the inverse as the witness of
injectivity) on tables up to a million rows and on the largest sizes; the
constants are checked against the published splitmix64 stream; the predicate
is shown to fail on a colliding network, a wrong inverse and a shifted cut.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

import pytest
from hypothesis import given, strategies as st

from elastic_loader.spec import computed, cut_splits, invariants
from elastic_loader.spec.computed import (
    MAX_ROWS,
    ComputedPermutation,
    computed_fingerprint,
    computed_index,
    computed_inverse,
    computed_locate,
    computed_order,
    computed_positions,
    computed_splits,
    feistel_decrypt,
    feistel_encrypt,
    half_width,
    mix64,
    round_keys,
)
from elastic_loader.spec.invariants import ComputedBijectionInv, InvariantViolation, SplitSizeInv
from elastic_loader.testing.strategies import divisors

SEEDS = ((0, 0), (1, 0), (0, 1), (2**64 - 1, 0), (98765, 12))


def _split_counts(n: int) -> Iterator[int]:
    yield from divisors(n)
    yield from (s for s in (2, 3, n - 1) if 1 <= s <= n and n % s)


def test_ComputedBijectionInv_exhaustive_small_tables() -> None:
    """Every table of 1..40 rows, every split count dividing it and a few that do not, five seeds."""
    checked = 0
    for seed, epoch in SEEDS:
        for n in range(1, 41):
            for s in _split_counts(n):
                ComputedBijectionInv(ComputedPermutation(n, s, seed, epoch))
                checked += 1
    assert checked > 900


@pytest.mark.parametrize("n", [255, 256, 257, 1023, 1024, 1025])
def test_ComputedBijectionInv_around_powers_of_four(n: int) -> None:
    """Both sides of a domain boundary: ``4**h`` needs no walk, ``4**h + 1`` the longest ones."""
    for s in (1, 5, 16):
        ComputedBijectionInv(ComputedPermutation(n, s, 3, 1))


rows = st.one_of(
    st.integers(1, 10**6),
    st.integers(1, 63).map(lambda k: 2**k + 1),  # 2**64 + 1 is beyond the largest table
    st.integers(1, MAX_ROWS),
)


@given(st.data())
def test_ComputedBijectionInv_sampled_large_tables(data: st.DataObject) -> None:
    """Random sizes up to ``2**64``: sampled indices and both ends map into range and back."""
    n = data.draw(rows, label="num_rows")
    s = data.draw(st.integers(1, min(n, 4096)), label="num_splits")
    seed = data.draw(st.integers(0, 2**32), label="seed")
    epoch = data.draw(st.integers(0, 20), label="epoch")
    perm = ComputedPermutation(n, s, seed, epoch)
    sample = data.draw(st.lists(st.integers(0, n - 1), max_size=30), label="indices")
    ComputedBijectionInv(perm, [0, n - 1, *sample, min(n - 1, s * perm.split_len)])


@given(st.integers(1, 10**6), st.integers(0, 2**20), st.data())
def test_ComputedBijectionInv_inverse_round_trip(n: int, seed: int, data: st.DataObject) -> None:
    """``f(f^-1(y)) = y`` for sampled positions ``y`` too (the inverse is onto the indices)."""
    perm = ComputedPermutation(n, 1, seed, 0)
    for y in data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20), label="positions"):
        assert computed_index(perm, computed_inverse(perm, y)) == y


def test_ComputedBijectionInv_split_ranges_agree_with_single_positions() -> None:
    perm = ComputedPermutation(10_007, 9, 5, 2)
    m = perm.split_len
    for split, first, count in ((0, 0, m), (8, m - 7, 7), (4, 100, 0), (3, 17, 250)):
        block = computed_positions(perm, split, first, count)
        assert block == tuple(computed_index(perm, split * m + p) for p in range(first, first + count))
        assert [computed_locate(perm, y) for y in block] == [(split, p) for p in range(first, first + count)]
    dropped = [computed_index(perm, i) for i in range(9 * m, 10_007)]
    assert len(dropped) == 10_007 % 9 and all(computed_locate(perm, y) is None for y in dropped)


def test_SplitSizeInv_of_the_computed_permutation() -> None:
    """The split cut is ``cut_splits`` of the permuted order, so the model's split rules hold unchanged."""
    for n, s in ((1, 1), (17, 4), (64, 8), (101, 10)):
        perm = ComputedPermutation(n, s, 11, 0)
        order = computed_order(perm)
        SplitSizeInv(order, s, computed_splits(perm))
        assert computed_splits(perm) == cut_splits(order, s)


# ---------------------------------------------------------------- the definition's constants


def test_round_keys_are_the_splitmix64_stream() -> None:
    """Keys of epoch seed 0 are the first outputs of splitmix64 seeded with 0 (published values)."""
    assert round_keys(0, 0)[:3] == (0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F)
    assert len(round_keys(0, 0)) == computed.ROUNDS == 8


def test_the_vectors_of_COMPUTED_md() -> None:
    small = ComputedPermutation(10, 3, 0, 0)
    assert computed_order(small) == (1, 0, 9, 3, 5, 6, 2, 8, 7, 4)
    assert computed_splits(small) == ((1, 0, 9), (3, 5, 6), (2, 8, 7))
    assert computed_locate(small, 4) is None
    assert computed_positions(ComputedPermutation(1000, 4, 7, 2), 3, 0, 5) == (722, 371, 234, 2, 286)
    large = ComputedPermutation(2**40 + 1, 16, 1234, 3)
    assert large.half == 21
    assert computed_positions(large, 15, 0, 3) == (331469302356, 162648608941, 526431548276)
    assert [f"{k:016x}" for k in round_keys(0, 0)] == [
        "e220a8397b1dcdaf",
        "6e789e6aa1b965f4",
        "06c45d188009454f",
        "f88bb8a8724c81ec",
        "1b39896a51a8749b",
        "53cb9f0c747ea2ea",
        "2c829abe1f4532e1",
        "c584133ac916ab3c",
    ]


def test_mix64_is_a_bijection_on_a_sample() -> None:
    values = [mix64(x) for x in range(0, 2**64, 2**44 + 12345)]
    assert len(set(values)) == len(values) and all(0 <= v < 2**64 for v in values)
    assert mix64(0) == 0 and mix64(2**64) == mix64(0)


def test_half_width_is_the_smallest_domain() -> None:
    assert [half_width(n) for n in (1, 2, 4, 5, 16, 17, 2**40, 2**40 + 1, 2**64)] == [
        1,
        1,
        1,
        2,
        2,
        3,
        20,
        21,
        32,
    ]


def test_network_inverse_on_every_domain_size() -> None:
    keys = round_keys(4, 4)
    for h in range(1, 33):
        for x in (0, 1, (1 << (2 * h)) - 1, (0x5DEECE66D * h) % (1 << (2 * h))):
            y = feistel_encrypt(keys, h, x)
            assert 0 <= y < 1 << (2 * h) and feistel_decrypt(keys, h, y) == x


def test_the_seed_rule_collides_like_the_builder() -> None:
    """``shuffle_seed + epoch * 100003`` keys the network, so ``(100003, 0)`` and ``(0, 1)`` agree (D13)."""
    a, b, c = (ComputedPermutation(1000, 4, seed, epoch) for seed, epoch in ((100003, 0), (0, 1), (0, 0)))
    assert computed_order(a) == computed_order(b) != computed_order(c)
    assert computed_fingerprint(a) != computed_fingerprint(b)


def test_fingerprint_names_every_parameter() -> None:
    base = (1000, 4, 7, 2)
    prints = {computed_fingerprint(ComputedPermutation(*base))}
    for i, changed in enumerate((1001, 5, 8, 3)):
        args = list(base)
        args[i] = changed
        prints.add(computed_fingerprint(ComputedPermutation(*args)))
    assert len(prints) == 5
    assert computed_fingerprint(ComputedPermutation(*base)) == (
        "feistel8-splitmix64-v1:rows=1000:splits=4:seed=7:epoch=2"
    )


def test_first_position_is_spread_over_the_table() -> None:
    """Over 4000 seeds ``f(0)`` of a 10-row table takes every value 300..500 times (400 expected)."""
    counts = collections.Counter(
        computed_index(ComputedPermutation(10, 1, seed, 0), 0) for seed in range(4000)
    )
    assert sorted(counts) == list(range(10))
    assert all(300 <= c <= 500 for c in counts.values()), counts


def test_order_is_not_close_to_the_identity() -> None:
    perm = ComputedPermutation(50_000, 1, 0, 0)
    order = [computed_index(perm, i) for i in range(2000)]
    fixed = sum(1 for i, y in enumerate(order) if i == y)
    near = sum(1 for i, y in enumerate(order) if abs(i - y) < 500)
    assert fixed <= 2 and near < 100, (fixed, near)


# ---------------------------------------------------------------- the predicate can fail


def test_ComputedBijectionInv_rejects_a_colliding_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(computed, "feistel_encrypt", lambda keys, half, x: x // 2)
    with pytest.raises(InvariantViolation, match="ComputedBijectionInv"):
        ComputedBijectionInv(ComputedPermutation(20, 2, 0, 0))


def test_ComputedBijectionInv_rejects_a_wrong_inverse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(computed, "feistel_decrypt", lambda keys, half, y: y)
    with pytest.raises(InvariantViolation, match="f\\^-1"):
        ComputedBijectionInv(ComputedPermutation(20, 2, 0, 0), [0, 5, 19])


def test_ComputedBijectionInv_rejects_a_shifted_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    def shifted(perm: ComputedPermutation, split: int, first: int, count: int) -> tuple[int, ...]:
        return tuple(
            computed_index(perm, (split * perm.split_len + p + 1) % perm.num_rows)
            for p in range(first, first + count)
        )

    monkeypatch.setattr(invariants, "computed_positions", shifted)
    with pytest.raises(InvariantViolation, match="ComputedBijectionInv"):
        ComputedBijectionInv(ComputedPermutation(20, 3, 0, 0))
