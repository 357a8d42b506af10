"""Closed-form arithmetic the SMT lemmas reason about, usable on Python ints and on z3 terms.

Each function here is written once and evaluated two ways: on z3 integer
terms inside a lemma (unbounded), and on Python ints inside a bounded check,
where the check also requires that the model's own output agrees with it. That
agreement is what ties an unbounded lemma about a formula to the model code
that is supposed to compute the formula.
"""

from __future__ import annotations

from typing import TypeAlias

import z3

Num: TypeAlias = int | z3.ArithRef
"""A Python int or a z3 integer term."""


def _symbolic(*values: Num) -> bool:
    return any(isinstance(v, z3.ExprRef) for v in values)


def imax(a: Num, b: Num) -> Num:
    """``max(a, b)``."""
    if _symbolic(a, b):
        return z3.If(a >= b, a, b)
    assert isinstance(a, int) and isinstance(b, int)
    return max(a, b)


def imin(a: Num, b: Num) -> Num:
    """``min(a, b)``."""
    if _symbolic(a, b):
        return z3.If(a <= b, a, b)
    assert isinstance(a, int) and isinstance(b, int)
    return min(a, b)


def idiv(a: Num, b: Num) -> Num:
    """Floor division for ``b > 0`` (z3's integer division agrees with Python's there)."""
    if _symbolic(a, b):
        return a / b
    assert isinstance(a, int) and isinstance(b, int)
    return a // b


def imod(a: Num, b: Num) -> Num:
    """Remainder for ``b > 0`` (z3's ``mod`` agrees with Python's ``%`` there)."""
    if _symbolic(a, b):
        return a % b
    assert isinstance(a, int) and isinstance(b, int)
    return a % b


# ---------------------------------------------------------------- topology


def worker_block(rank: Num, worker: Num, per_rank: Num, per_worker: Num) -> tuple[Num, Num]:
    """Half-open range ``[lo, hi)`` of split ids owned by ``(rank, worker)``.

    ``per_rank = K = S / world_size``, ``per_worker = P = K / max(1, num_workers)``.
    """
    lo = rank * per_rank + worker * per_worker
    return lo, lo + per_worker


def split_range(k: Num, split_len: Num) -> tuple[Num, Num]:
    """Half-open range of the shuffled order that split ``k`` holds: ``[k*m, (k+1)*m)``."""
    return k * split_len, (k + 1) * split_len


def item_of(cycle: Num, slot: Num, per_worker: Num) -> Num:
    """Index, in one worker's row stream, of the row of ``cycle`` from its ``slot``-th split."""
    return cycle * per_worker + slot


def batch_range(g: Num, per_worker: Num, cycles_per_step: Num) -> tuple[Num, Num]:
    """Item indices ``[lo, hi)`` of a worker's batch ``g`` of ``P * c`` items."""
    size = per_worker * cycles_per_step
    return g * size, (g + 1) * size


# ---------------------------------------------------------------- packing budget


def auto_round(blocks: Num, num_splits: Num) -> Num:
    """The last step of the ``"auto"`` estimate: ``max(S, blocks - blocks % S)``."""
    return imax(num_splits, blocks - imod(blocks, num_splits))


def auto_sample_size(n: Num, num_splits: Num) -> Num:
    """Documents sampled from a split of ``n``: ``min(n, max(1, min(ceil(n/100), cap)))``."""
    cap = imax(1, idiv(100_000, num_splits))
    return imin(n, imax(1, imin(idiv(n + 99, 100), cap)))


# ---------------------------------------------------------------- delivery arithmetic (schedule.py)
#
# Terms of the water-level formulas of ``schedule.py``, one split (or worker) at a time. A lemma
# folds them over a symbolic number of splits with a recursive z3 function; a bounded check folds
# them with ``sum`` (``water_counts`` and friends below) and compares the model with the result.

Cond: TypeAlias = bool | z3.BoolRef
"""A Python bool or a z3 Boolean term."""


def ite(cond: Cond, a: Num, b: Num) -> Num:
    """``a if cond else b``."""
    if isinstance(cond, z3.ExprRef) or _symbolic(a, b):
        return z3.If(cond, a, b)
    return a if cond else b


def both(a: Cond, b: Cond) -> Cond:
    """``a and b``."""
    if isinstance(a, z3.ExprRef) or isinstance(b, z3.ExprRef):
        return z3.And(a, b)
    return a and b


def pairs_term(count: Num, level: Num) -> Num:
    """Pairs ``(k, i)`` of one split at ``count`` with ``count <= k < level``: ``max(0, level - count)``."""
    return imax(0, level - count)


def at_or_below(count: Num, level: Num) -> Num:
    """1 when a split at ``count`` takes part in level ``level`` (``count <= level``), else 0."""
    return ite(count <= level, 1, 0)


def water_value(count: Num, level: Num, before: Num, rest: Num) -> Num:
    """A split's count after the water level ``level`` with ``rest`` extra items: raised to the
    level, plus one when it is at most the level and fewer than ``rest`` earlier splits (``before``)
    are (``canonical_counts``)."""
    return imax(count, level) + ite(both(count <= level, before < rest), 1, 0)


def capacity_term(count: Num, split: Num, end_k: Num, end_i: Num) -> Num:
    """Pairs of split ``split`` (at ``count``) before the end pair ``(end_k, end_i)`` in
    ``(k, split)`` order: ``max(0, end_k + [split < end_i] - count)`` (``canonical_capacity``)."""
    return imax(0, end_k + ite(split < end_i, 1, 0) - count)


def rounds_term(turns: Num, rounds: Num) -> Num:
    """Batches a worker with ``turns`` turns delivered in ``rounds`` complete rounds."""
    return imin(turns, rounds)


def still_active(turns: Num, rounds: Num) -> Num:
    """1 when a worker with ``turns`` turns takes part in round ``rounds`` (``turns > rounds``)."""
    return ite(turns > rounds, 1, 0)


def turns_value(turns: Num, rounds: Num, before: Num, rest: Num) -> Num:
    """A worker's deliveries after ``rounds`` complete rounds and ``rest`` more batches: one more
    when it is still active and fewer than ``rest`` earlier workers (``before``) are
    (``round_robin_turns``)."""
    return rounds_term(turns, rounds) + ite(both(turns > rounds, before < rest), 1, 0)


def role_of(worker: Num, rotation: Num, num_workers: Num) -> Num:
    """The role torch worker ``worker`` plays in a loader with ``rotation``: ``(w + o) mod nw``."""
    return imod(worker + rotation, num_workers)


def water_level(counts: list[int], items: int) -> tuple[int, int]:
    """The level ``lam`` and the remainder ``rest`` with ``P(lam) + rest == items`` and
    ``0 <= rest < E(lam)``, found by walking up from the lowest count (no bisection)."""
    level = min(counts)

    def pairs(x: int) -> int:
        return sum(int(pairs_term(c, x)) for c in counts)

    while pairs(level + 1) <= items:
        level += 1
    return level, items - pairs(level)


def water_counts(counts: list[int], items: int) -> tuple[int, ...]:
    """The closed form the ``water_level`` lemma is about, on Python ints."""
    level, rest = water_level(counts, items)
    before = 0
    out = []
    for c in counts:
        out.append(int(water_value(c, level, before, rest)))
        before += int(at_or_below(c, level))
    return tuple(out)


def end_pair(counts: list[int], caps: list[int]) -> tuple[int, int]:
    """The pair an iterator over splits at ``counts`` with ``caps`` cannot yield: the smallest
    ``(cap, split)`` when it lies below the top count (catch-up), else ``(smallest cap, 0)``."""
    end_k, end_i = min((cap, i) for i, cap in enumerate(caps))
    return (end_k, end_i) if end_k < max(counts) else (end_k, 0)


def capacity_formula(counts: list[int], caps: list[int]) -> int:
    """Pairs before the end pair, summed split by split."""
    end_k, end_i = end_pair(counts, caps)
    return sum(int(capacity_term(c, i, end_k, end_i)) for i, c in enumerate(counts))


def turns_counts(turns: list[int], batches: int) -> tuple[int, ...]:
    """Round-robin deliveries per worker by the closed form (complete rounds found by walking)."""
    batches = min(batches, sum(turns))
    rounds = 0

    def complete(j: int) -> int:
        return sum(int(rounds_term(t, j)) for t in turns)

    while rounds < max(turns, default=0) and complete(rounds + 1) <= batches:
        rounds += 1
    rest = batches - complete(rounds)
    before = 0
    out = []
    for t in turns:
        out.append(int(turns_value(t, rounds, before, rest)))
        before += int(still_active(t, rounds))
    return tuple(out)
