"""Bounded checks of ``ComputedBijectionInv``: the network, cycle-walking and the split cut, exhaustively.

For every half width ``h`` up to a bound and several seeds, the model's
network is tabulated over its whole domain ``[0, 4**h)``; the table must be a
permutation, inverted by the model's ``feistel_decrypt``, and equal to the
network of the SMT lemmas (``proofs.smt_computed.feistel``) with the model's
round function plugged in. For every table size ``N`` up to a bound the
model's order must equal the cycle-walk of that table (computed here, not by
the model), and ``ComputedBijectionInv`` must hold for every split count that
divides ``N`` and for one that does not; ``N + 1`` splits must be rejected.
Very large tables are checked on sampled indices.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from elastic_loader.spec import SpecValueError
from elastic_loader.spec.computed import (
    MAX_ROWS,
    ROUNDS,
    ComputedPermutation,
    computed_order,
    feistel_decrypt,
    feistel_encrypt,
    half_width,
    mix64,
    round_keys,
)
from elastic_loader.spec.invariants import ComputedBijectionInv

from .framework import BoundedCheck, Bounds, Recorder
from .smt_computed import Word, feistel
from .universes import divisors

SEEDS: tuple[tuple[int, int], ...] = ((0, 0), (2**64 - 1, 0), (100003, 1), (7, 3), (0, 1))
"""(shuffle_seed, epoch) pairs: the quick bounds take the first ``seeds`` of them."""
LARGE_ROWS: tuple[int, ...] = (2**40, 2**40 + 1, 3**25, 2**63 + 5, 2**64 - 1, 2**64)


def _rejects(rec: Recorder, code: str, *args: int) -> None:
    try:
        ComputedPermutation(*args)
    except SpecValueError as exc:
        rec.require(exc.code == code, f"rejected with {exc.code}, expected {code}")
        return
    rec.require(False, f"accepted ComputedPermutation{args} (expected {code})")


def _network_table(rec: Recorder, keys: tuple[int, ...], h: int) -> list[int]:
    """The model's ``E`` over ``[0, 4**h)``, checked against the lemma's network and the model's inverse."""

    def model_round(i: int, right: Word) -> Word:
        assert isinstance(right, int)
        return mix64(right ^ keys[i])

    domain = 1 << (2 * h)
    table = [feistel_encrypt(keys, h, x) for x in range(domain)]
    rec.require(sorted(table) == list(range(domain)), f"E is not a permutation of [0, 4**{h})")
    for x, y in enumerate(table):
        rec.require(feistel_decrypt(keys, h, y) == x, f"feistel_decrypt(E({x})) != {x}")
        rec.require(feistel(model_round, ROUNDS, h, x) == y, f"E({x}) differs from the lemma's network")
        rec.require(feistel(model_round, ROUNDS, h, y, inverse=True) == x, "the lemma's inverse differs")
    return table


def _walked(table: Sequence[int], n: int) -> list[int]:
    """Cycle-walking of ``table`` into ``[0, n)``, computed here; a walk longer than the domain fails."""
    out = []
    for x in range(n):
        y, steps = table[x], 1
        while y >= n:
            y, steps = table[y], steps + 1
            if steps > len(table):
                raise AssertionError(f"the walk from {x} does not return to [0, {n})")
        out.append(y)
    return out


def _split_counts(n: int, cut_rows: int) -> list[int]:
    """Every divisor of ``n`` if ``n <= cut_rows``, else 1; and the least split count not dividing ``n``."""
    non_divisor = next((s for s in range(2, n) if n % s), None)
    chosen = divisors(n) if n <= cut_rows else [1]
    return sorted({*chosen, *([non_divisor] if non_divisor else [])})


def _edges(half: int) -> list[int]:
    """Both ends ``4**(h-1) + 1`` and ``4**h`` of every half width ``h <= half`` (longest and no walks)."""
    return sorted({n for h in range(1, half + 1) for n in (4 ** (h - 1) + 1, 4**h)})


def check_computed_bijection(rec: Recorder, b: Bounds) -> None:
    """Per seed: the network table of every ``h <= half``; cycle-walking of each table into every
    ``[0, N)`` it covers; the model on every ``N <= rows`` and at both ends of every ``h``; large tables."""
    for seed, epoch in rec.progress(SEEDS[: b["seeds"]], "seeds"):
        rec.at(seed=seed, epoch=epoch)
        keys = round_keys(seed, epoch)
        tables = {h: _network_table(rec, keys, h) for h in range(1, b["half"] + 1)}
        walks: dict[int, list[int]] = {}
        for n in range(1, 4 ** b["half"] + 1):
            rec.at(rows=n)
            walks[n] = _walked(tables[half_width(n)], n)
            rec.require(sorted(walks[n]) == list(range(n)), "the walk of the network is not a bijection")
        for n in sorted({*range(1, b["rows"] + 1), *_edges(b["half"])}):
            rec.at(rows=n)
            order = list(computed_order(ComputedPermutation(n, 1, seed, epoch)))
            rec.require(order == walks[n], "the model's order is not the walk of the network table")
            for s in _split_counts(n, b["cut_rows"]):
                rec.at(num_splits=s)
                rec.apply(ComputedBijectionInv, ComputedPermutation(n, s, seed, epoch))
            _rejects(rec, "fewer_rows_than_splits", n, n + 1, seed, epoch)
        _check_large(rec, seed, epoch, b["samples"])


def _check_large(rec: Recorder, seed: int, epoch: int, samples: int) -> None:
    """Tables too large to enumerate: ``ComputedBijectionInv`` on sampled indices (both ends included)."""
    for n in LARGE_ROWS:
        for s in (1, 7, 4096):
            rec.at(seed=seed, epoch=epoch, rows=n, num_splits=s)
            perm = ComputedPermutation(n, s, seed, epoch)
            rng = random.Random(n * 31 + s)
            edges = [0, 1, n - 1, n - 2, s * perm.split_len - 1, min(n - 1, s * perm.split_len)]
            rec.apply(
                ComputedBijectionInv, perm, sorted({*edges, *(rng.randrange(n) for _ in range(samples))})
            )


def check_sizes(rec: Recorder, b: Bounds) -> None:
    """Both ends ``4**(h-1) + 1`` and ``4**h`` of every half width ``h <= 32``, on sampled indices; sizes,
    seeds and split counts the model must reject."""
    rng = random.Random(4)
    for h in range(1, 33):
        for n in (4 ** (h - 1) + 1, 4**h):
            rec.at(rows=n)
            rec.require(half_width(n) == h, f"half_width({n}) = {half_width(n)}, expected {h}")
            perm = ComputedPermutation(n, 1, 5, 0)
            sample = {0, n - 1, *(rng.randrange(n) for _ in range(b["samples"]))}
            rec.apply(ComputedBijectionInv, perm, sorted(sample))
    rec.require(half_width(1) == 1, "half_width(1) != 1")
    for n in (0, -1, MAX_ROWS + 1):
        rec.at(rows=n)
        _rejects(rec, "computed_rows_out_of_range", n, 1, 0, 0)
    for seed, epoch in ((-1, 0), (0, -1), (2**64 - 1, 1)):
        rec.at(seed=seed, epoch=epoch)
        code = "epoch_out_of_range" if epoch < 0 else "shuffle_seed_out_of_range"
        _rejects(rec, code, 10, 2, seed, epoch)
    rec.at(rows=10, num_splits=0)
    _rejects(rec, "num_splits_not_positive", 10, 0, 0, 0)


COMPUTED_BIJECTION = BoundedCheck(
    "ComputedBijectionInv",
    "{seeds} seeds: the network over [0, 4**h) for h<={half}, its walk into every [0, N), N<=4**{half}; "
    "the model on every N<={rows} and both ends of every h<={half} (every split count dividing "
    "N<={cut_rows}, one that does not, N+1 rejected); {samples} sampled indices of 6 tables of "
    "2**40..2**64 rows",
    quick={"half": 4, "rows": 96, "cut_rows": 24, "seeds": 2, "samples": 50},
    full={"half": 6, "rows": 400, "cut_rows": 96, "seeds": 3, "samples": 1000},
    run=check_computed_bijection,
)

SIZES = BoundedCheck(
    "ComputedBijectionInv",
    "N=4**(h-1)+1 and N=4**h for every h<=32 ({samples} sampled indices each); "
    "sizes, seeds and split counts the model rejects",
    quick={"samples": 8},
    full={"samples": 200},
    run=check_sizes,
)
