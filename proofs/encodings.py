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
