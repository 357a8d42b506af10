"""SMT lemmas of the local permutation: the clumped sequence, the window cut, the run bound, degeneracy.

All over unbounded integers. The clump order ``g`` is an uninterpreted map with
a left inverse ``ginv`` (so ``g`` is injective; on the finite ``[0, M)`` a
permutation, which ``ComputedBijectionInv`` proves of the computed
permutation); each obligation states the instances of ``ginv(g(x)) = x`` it
uses as hypotheses. Quotients and remainders are written as ``idiv``/``imod``
(z3's integer division, equal to Python's for a positive divisor). The
formulas mirror :func:`elastic_loader.spec.local.clumped_index`,
:func:`~elastic_loader.spec.local.clumped_inverse` and
:func:`~elastic_loader.spec.local.local_run_bound` case by case; the bounded
checks of ``proofs.bounded_local`` run the model itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import z3

from . import encodings as enc
from .framework import Lemma, Obligation

INT = z3.IntSort()


@functools.cache
def _clump_order() -> tuple[z3.FuncDeclRef, z3.FuncDeclRef]:
    return z3.Function("g", INT, INT), z3.Function("ginv", INT, INT)


def _in(x: enc.Num, lo: enc.Num, hi: enc.Num) -> z3.BoolRef:
    return z3.And(lo <= x, x < hi)


def _sequence_cases() -> list[Obligation]:
    """Each case of ``clumped_index`` lands in ``[0, N)`` and ``clumped_inverse`` brings it back."""
    g, ginv = _clump_order()
    c, m_, r, t, i, a, b = z3.Ints("C M r t i a b")
    n = (m_ - 1) * c + r
    shape = z3.And(c >= 1, m_ >= 1, r >= 1, r <= c, _in(t, 0, m_), g(t) == m_ - 1, ginv(m_ - 1) == t)
    before = z3.And(i >= 0, i < t * c)
    k, off = enc.idiv(i, c), enc.imod(i, c)
    y = g(k) * c + off
    maps = z3.And(_in(g(k), 0, m_), ginv(g(k)) == k)  # g maps [0, M) into itself, ginv(g(k)) = k
    back_before = enc.idiv(y, c) * c + enc.imod(y, c) == y
    after = z3.And(i >= t * c + r, i < n)
    k2, off2 = enc.idiv(i - r, c) + 1, enc.imod(i - r, c)
    y2 = g(k2) * c + off2
    maps2 = z3.And(_in(g(k2), 0, m_), ginv(g(k2)) == k2)
    short = z3.And(i >= t * c, i < t * c + r)
    y3 = (m_ - 1) * c + (i - t * c)
    # the instance of "division is unique" (the obligation below) at a = M - 1, b = i - t*C
    unique3 = z3.And(enc.idiv(y3, c) == m_ - 1, enc.imod(y3, c) == i - t * c)
    return [
        (
            "before the short clump: Q[i] = g(i div C)*C + i mod C is in [0, N), not in the short clump",
            z3.Implies(z3.And(shape, before, maps), z3.And(_in(y, 0, (m_ - 1) * c), enc.idiv(y, c) == g(k))),
        ),
        (
            "before the short clump: Q^-1(Q[i]) = ginv(g(k))*C + off = i",
            z3.Implies(
                z3.And(shape, before, maps, back_before), ginv(enc.idiv(y, c)) * c + enc.imod(y, c) == i
            ),
        ),
        (
            "division by C is unique: a*C + b with 0 <= b < C has quotient a and remainder b",
            z3.Implies(
                z3.And(c >= 1, _in(b, 0, c)),
                z3.And(enc.idiv(a * c + b, c) == a, enc.imod(a * c + b, c) == b),
            ),
        ),
        (
            "the short clump: Q[i] = (M-1)*C + (i - t*C) is in the short clump, and Q^-1 gives i back",
            z3.Implies(
                z3.And(shape, short, unique3),
                z3.And(_in(y3, (m_ - 1) * c, n), enc.idiv(y3, c) == m_ - 1, t * c + enc.imod(y3, c) == i),
            ),
        ),
        (
            "after the short clump: k = (i - r) div C + 1 is in (t, M), Q[i] is a full clump's, Q^-1 gives i",
            z3.Implies(
                z3.And(shape, after, maps2),
                z3.And(
                    k2 > t,
                    k2 < m_,
                    _in(y2, 0, (m_ - 1) * c),
                    enc.idiv(y2, c) == g(k2),
                    (ginv(enc.idiv(y2, c)) - 1) * c + r + enc.imod(y2, c) == i,
                ),
            ),
        ),
        (
            "the three cases cover [0, N) and the sizes add up: t*C + r + (M-1-t)*C = N",
            z3.Implies(
                z3.And(shape, _in(i, 0, n)),
                z3.And(z3.Or(before, short, after), t * c + r + (m_ - 1 - t) * c == n),
            ),
        ),
    ]


def _window_cut() -> list[Obligation]:
    """Split position ``j`` <-> window ``q = j div W``, offset ``o = j mod W``, inside a window of size
    ``min(W, m - q*W)``; a bijective window shuffle keeps the window."""
    w_, m, j, o2 = z3.Ints("W m j o2")
    q, o = enc.idiv(j, w_), enc.imod(j, w_)
    size = enc.imin(w_, m - q * w_)
    hyp = z3.And(w_ >= 1, m >= 1, _in(j, 0, m))
    return [
        (
            "position j lies in its window: 0 <= j mod W < min(W, m - (j div W)*W)",
            z3.Implies(hyp, _in(o, 0, size)),
        ),
        (
            "the shuffled position q*W + o2 (o2 in the window) stays in [0, m) and in window q",
            z3.Implies(
                z3.And(hyp, _in(o2, 0, size)),
                z3.And(
                    _in(q * w_ + o2, 0, m), enc.idiv(q * w_ + o2, w_) == q, enc.imod(q * w_ + o2, w_) == o2
                ),
            ),
        ),
    ]


def _bound(w: z3.ArithRef, c: z3.ArithRef, r: z3.ArithRef) -> z3.ArithRef:
    """``local_run_bound`` for ``w >= 2``: ``2 + (w-2) div C`` plus one in the short-clump case."""
    extra = z3.If(z3.And(r < c, w >= r + 2, enc.imod(w - 2, c) >= r), 1, 0)
    return 2 + enc.idiv(w - 2, c) + extra


def _run_count() -> list[Obligation]:
    """A stretch of ``w >= 2`` positions touching ``k`` clumps, with ``k - 2`` whole clumps between its ends,
    all of ``C`` positions (``e = 0``) or one of them the short clump of ``r < C`` (``e = 1``)."""
    w, c, r, k, e, big_w = z3.Ints("w C r k e W")
    shape = z3.And(c >= 1, r >= 1, r <= c, w >= 2, k >= 2, z3.Or(e == 0, z3.And(e == 1, r < c, k >= 3)))
    interior = (k - 2 - e) * c + e * r  # positions of the whole clumps between the two ends
    fits = interior <= w - 2  # both ends hold at least one position each
    return [
        (
            "k clumps fit in w positions only if k <= local_run_bound",
            z3.Implies(z3.And(shape, fits), k <= _bound(w, c, r)),
        ),
        (
            "local_run_bound <= min(w, ceil(W / C) + 2) for w <= W",
            z3.Implies(
                z3.And(c >= 1, r >= 1, r <= c, w >= 2, w <= big_w),
                z3.And(_bound(w, c, r) <= w, _bound(w, c, r) <= enc.idiv(big_w + c - 1, c) + 2),
            ),
        ),
    ]


def _degenerate() -> list[Obligation]:
    """``C = 1``: ``M = N``, ``r = 1`` and every case of ``clumped_index`` is ``g(i)``; ``W = 1``: every
    window is one position, shuffled to itself, so split ``s`` position ``p`` reads ``g(s*m + p)``."""
    g, _ = _clump_order()
    n, t, i, m, s, p, o = z3.Ints("N t i m s p o")
    c, r, m_ = 1, 1, n
    shape = z3.And(n >= 1, _in(t, 0, m_), g(t) == m_ - 1, _in(i, 0, n))
    before = g(enc.idiv(i, c)) * c + enc.imod(i, c)
    short = (m_ - 1) * c + (i - t * c)
    after = g(enc.idiv(i - r, c) + 1) * c + enc.imod(i - r, c)
    return [
        ("C = 1, i < t: Q[i] = g(i)", z3.Implies(z3.And(shape, i < t), before == g(i))),
        ("C = 1, i = t: Q[i] = M - 1 = g(t)", z3.Implies(z3.And(shape, i == t), short == g(i))),
        ("C = 1, i > t: Q[i] = g(i)", z3.Implies(z3.And(shape, i > t), after == g(i))),
        (
            "W = 1: position p is window p, offset 0, its window of size 1 maps 0 to 0, index s*m + p",
            z3.Implies(
                z3.And(m >= 1, s >= 0, _in(p, 0, m), _in(o, 0, enc.imin(1, m - p))),
                z3.And(
                    enc.idiv(p, 1) == p,
                    enc.imod(p, 1) == 0,
                    o == 0,
                    s * m + enc.idiv(p, 1) * 1 + o == s * m + p,
                ),
            ),
        ),
    ]


def _lemma(invariant: str, name: str, statement: str, build: Callable[[], Sequence[Obligation]]) -> Lemma:
    return Lemma(invariant, name, statement, build)


LEMMAS: tuple[Lemma, ...] = (
    _lemma(
        "LocalBijectionInv",
        "clump_sequence",
        "the clumped sequence maps [0, N) into [0, N) and its inverse undoes it, in each of its three cases",
        _sequence_cases,
    ),
    _lemma(
        "LocalBijectionInv",
        "window_cut",
        "the window cut keeps every shuffled position in its window",
        _window_cut,
    ),
    _lemma(
        "LocalLocalityInv",
        "run_count",
        "a stretch of w positions touches at most local_run_bound clumps, <= ceil(W/C) + 2",
        _run_count,
    ),
    _lemma(
        "LocalDegeneracyInv",
        "degenerate_cases",
        "with C = 1 and W = 1 every case of the sequence is g and every window the identity",
        _degenerate,
    ),
)
