"""benchmarks/quality.py on orders whose shuffle-quality numbers are known.

The table order, its reverse, two swapped fragments and blocks shuffled as blocks have
exact values derived by hand (see each test); a seeded global permutation must score
near the ideal; and on arbitrary id lists every measure equals a plain-Python
transcription of its definition in the module docstring.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "quality.py"
_SPEC = importlib.util.spec_from_file_location("bench_quality", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
quality = importlib.util.module_from_spec(_SPEC)
sys.modules["bench_quality"] = quality
_SPEC.loader.exec_module(quality)


def test_table_order() -> None:
    n = 1000  # head: ids 0..9, delivered at positions 0..9
    q = quality.summary(np.arange(n), n)
    assert q["corr"] == pytest.approx(1.0)
    assert q["adjacent"] == 1.0
    assert q["head_decile_spread"] == pytest.approx(0.9)  # all 10 head ids in decile 0
    assert q["head_ks"] == pytest.approx(1 - 9 / n)  # k = 9: (9+1)/10 - 9/1000


def test_reversed_table_order() -> None:
    n = 1000  # head ids delivered at positions 990..999 (decile 9)
    q = quality.summary(np.arange(n)[::-1], n)
    assert q["corr"] == pytest.approx(-1.0)
    assert q["abs_corr"] == pytest.approx(1.0)
    assert q["adjacent"] == 1.0
    assert q["head_decile_spread"] == pytest.approx(0.9)
    assert q["head_ks"] == pytest.approx(0.99)  # k = 0: u_0 - 0 = 990/1000


def test_two_fragments_in_swapped_order() -> None:
    # ids = (p + n/2) mod n: a permutation, so Pearson = Spearman = 1 - 6 sum d^2 / (n (n^2 - 1))
    # with |d| = n/2 everywhere: 1 - 1.5 n^2 / (n^2 - 1), about -0.5.
    n = 1000
    ids = np.concatenate([np.arange(n // 2, n), np.arange(n // 2)])
    q = quality.summary(ids, n)
    assert q["corr"] == pytest.approx(1 - 1.5 * n**2 / (n**2 - 1))
    assert q["adjacent"] == pytest.approx((n - 2) / (n - 1))  # one jump, from n-1 to 0
    assert q["head_decile_spread"] == pytest.approx(0.9)  # head at positions 500..509: decile 5
    assert q["head_ks"] == pytest.approx(0.5)  # k = 0: u_0 = 0.5


def test_a_small_order_by_hand() -> None:
    # x = 0,1,2,3 and y = 1,0,3,2: cov = 4 * 0.75 = 3, var = 5 for both, so corr = 0.6;
    # diffs -1, 3, -1: two of three pairs are consecutive.
    assert quality.corr([1, 0, 3, 2]) == pytest.approx(0.6)
    assert quality.adjacent([1, 0, 3, 2]) == pytest.approx(2 / 3)


def test_a_global_random_permutation_scores_near_ideal() -> None:
    n = 100_000  # head: 1000 ids
    q = quality.summary(np.random.default_rng(0).permutation(n), n)
    assert q["abs_corr"] < 4 / math.sqrt(n)
    assert q["adjacent"] < 10 / n  # about 2/n expected
    assert q["head_decile_spread"] < 0.05  # share std per decile: sqrt(0.09/1000) = 0.0095
    assert q["head_ks"] < 0.06  # the 1% critical value for m = 1000 is 1.63/sqrt(m) = 0.052


def test_blocks_shuffled_as_blocks() -> None:
    b, blocks = 256, 400
    n = b * blocks
    order = np.random.default_rng(1).permutation(blocks)
    ids = (order[:, None] * b + np.arange(b)[None, :]).reshape(-1)
    # Within a block all b-1 pairs are consecutive; across a boundary only when the next
    # block is the one stored right after.
    lucky = int(np.sum(np.diff(order) == 1))
    q = quality.summary(ids, n)
    assert q["adjacent"] == pytest.approx((blocks * (b - 1) + lucky) / (n - 1))
    assert q["adjacent"] > 0.996
    assert q["abs_corr"] < 0.2
    # Head: ids < 1024 = blocks 0..3, each delivered at one block position.
    expected = _naive_spread(ids.tolist(), n)
    assert q["head_decile_spread"] == pytest.approx(expected)
    assert q["head_decile_spread"] >= 0.025  # 4 blocks touch at most 8 deciles


def test_empty_and_single_orders() -> None:
    for ids in ([], [7]):
        q = quality.summary(ids, 10)
        assert q == {"corr": 0.0, "abs_corr": 0.0, "adjacent": 0.0, "head_decile_spread": 0.0, "head_ks": 0.0}


def test_ids_must_be_one_dimensional() -> None:
    with pytest.raises(ValueError, match="one-dimensional"):
        quality.summary(np.zeros((2, 2), dtype=np.int64), 4)


# ---------------------------------------------------------------- plain transcriptions


def _naive_corr(ids: list[int]) -> float:
    n = len(ids)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(ids) / n
    sxy = sum((p - mx) * (y - my) for p, y in enumerate(ids))
    sxx = sum((p - mx) ** 2 for p in range(n))
    syy = sum((y - my) ** 2 for y in ids)
    return 0.0 if sxx * syy == 0 else sxy / math.sqrt(sxx * syy)


def _naive_head(ids: list[int], table_rows: int) -> list[float]:
    head = math.ceil(table_rows / 100)
    return [p / len(ids) for p, i in enumerate(ids) if i < head]


def _naive_spread(ids: list[int], table_rows: int) -> float:
    u = _naive_head(ids, table_rows)
    if not u:
        return 0.0
    counts = [0] * 10
    for value in u:
        counts[min(int(value * 10), 9)] += 1
    return max(abs(c / len(u) - 0.1) for c in counts)


def _naive_ks(ids: list[int], table_rows: int) -> float:
    u = _naive_head(ids, table_rows)
    m = len(u)
    return max((max((k + 1) / m - x, x - k / m) for k, x in enumerate(u)), default=0.0)


@given(st.data())
def test_measures_match_their_definitions(data: st.DataObject) -> None:
    table_rows = data.draw(st.integers(1, 400), label="table_rows")
    ids = data.draw(st.lists(st.integers(0, table_rows - 1), max_size=300), label="ids")
    q = quality.summary(ids, table_rows)
    assert q["corr"] == pytest.approx(_naive_corr(ids), abs=1e-9)
    assert q["abs_corr"] == pytest.approx(abs(_naive_corr(ids)), abs=1e-9)
    pairs = list(itertools.pairwise(ids))
    consecutive = sum(abs(b - a) == 1 for a, b in pairs)
    assert q["adjacent"] == pytest.approx(consecutive / len(pairs) if pairs else 0.0)
    assert q["head_decile_spread"] == pytest.approx(_naive_spread(ids, table_rows), abs=1e-12)
    assert q["head_ks"] == pytest.approx(_naive_ks(ids, table_rows), abs=1e-12)


def test_the_bar_passes_a_global_shuffle_and_fails_each_kind_of_locality() -> None:
    """``passes``: a seeded global permutation meets the bar; blocks of two, a trend, and a head
    delivered all at once mid-epoch each fail it on their own measure."""
    n = 200_000
    rng = np.random.default_rng(1)
    shuffled = rng.permutation(n)
    assert quality.passes(quality.summary(shuffled, n))
    pairs = (rng.permutation(n // 2)[:, None] * 2 + np.arange(2)).reshape(-1)  # adjacent 1/2
    assert not quality.passes(quality.summary(pairs, n))
    trend = np.argsort(np.arange(n) + rng.normal(0, n / 4, n))  # corr about 0.7
    assert not quality.passes(quality.summary(trend, n))
    head = shuffled[shuffled < n // 100]
    rest = shuffled[shuffled >= n // 100]
    middle = len(rest) // 2
    clustered = np.concatenate([rest[:middle], head, rest[middle:]])  # the head in one decile
    measures = quality.summary(clustered, n)
    assert measures["abs_corr"] <= 0.01 and measures["adjacent"] <= 0.01 and not quality.passes(measures)


_READ_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "permutation_read.py"
_READ_SPEC = importlib.util.spec_from_file_location("bench_permutation_read", _READ_PATH)
assert _READ_SPEC is not None and _READ_SPEC.loader is not None
permutation_read = importlib.util.module_from_spec(_READ_SPEC)
_READ_SPEC.loader.exec_module(permutation_read)


def test_packed_order_by_hand() -> None:
    """Blocks of 4 tokens. Split 0 reads documents 0, 1, 2 of 1, 1 and 5 tokens (each and its EOS:
    2, 2, 6 slots, starting at 0, 2, 4: blocks 0, 0, 1); split 1 reads 3, 4 of 3 tokens (starting at
    0, 4: blocks 0, 1). Cycle 0 delivers split 0's block 0 (0, 1), then split 1's (3); cycle 1
    split 0's block 1 (2), then split 1's (4)."""
    lengths = np.array([1, 1, 5, 3, 3])
    orders = [np.array([0, 1, 2]), np.array([3, 4])]
    assert permutation_read.packed_order(orders, lengths, 4).tolist() == [0, 1, 3, 2, 4]


def test_packed_order_keeps_a_splits_neighbours_together() -> None:
    """One split in storage order: every document is delivered after its predecessor, whatever the
    block cuts, so every neighbour pair is adjacent; with two splits of documents of 3 tokens, each
    with its EOS filling a block, the round robin alternates the splits."""
    lengths = np.full(12, 3)
    one = permutation_read.packed_order([np.arange(12)], lengths, 8)
    assert quality.adjacent(one) == 1.0
    two = permutation_read.packed_order([np.arange(6), np.arange(6, 12)], np.full(12, 3), 4)
    assert two.tolist() == [0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11]
