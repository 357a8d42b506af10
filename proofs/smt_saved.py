"""SMT lemmas of the save-protocol invariants: the delivery arithmetic of ``spec/schedule.py``.

Rules: as in :mod:`proofs.smt` -- every free constant is universally quantified, sizes are
symbolic and unbounded, sums over a symbolic number of splits (or workers) are recursive z3
functions, and facts about them are proved by induction (base and step obligations). Where a
later obligation needs an earlier fact, it takes an *instance* of it as a hypothesis (the fact
at the terms it is used for); the earlier obligation proves the fact for every value, so the
instance is sound. The terms the sums fold are the ones of :mod:`proofs.encodings`, which the
bounded checks evaluate on Python ints next to the model (``proofs.bounded_saved``).

Theory of operation
-------------------
``canonical_counts`` and ``round_robin_turns`` are *water levels*: the counts after ``t`` items
are the start counts raised to a level ``lam`` plus one for the first ``rest`` splits that sit at
the level. The lemmas show that the closed form is the step-by-step process: after ``t + 1``
items it is the closed form after ``t`` items with exactly one entry raised, the first (in
order) of the smallest, which is the next pair of the canonical ``(index, split)`` order (the
heap pop of ``iterate_rows``) or of torch's ``(batch, worker)`` order. ``canonical_capacity``
is the number of pairs before the *end pair*, the first pair the iterator cannot yield.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import z3

from . import encodings as enc
from .framework import Lemma, Obligation, induction
from .smt import INT, INT_ARRAY, _ints, _lex_gt, _within


def _lex_lt(a: tuple[enc.Num, enc.Num], b: tuple[enc.Num, enc.Num]) -> z3.BoolRef:
    """``a < b`` in lexicographic order."""
    return z3.Or(a[0] < b[0], z3.And(a[0] == b[0], a[1] < b[1]))


def _all(x: z3.ArithRef, n: enc.Num, body: z3.BoolRef) -> z3.BoolRef:
    """``body`` for every ``x`` in ``[0, n)``."""
    return z3.ForAll([x], z3.Implies(_within(x, 0, n), body))


# ---------------------------------------------------------------- the water level of canonical_counts


@functools.cache
def _water() -> tuple[z3.FuncDeclRef, z3.FuncDeclRef]:
    """``P(a, l, n)``: pairs below level ``l`` of the first ``n`` splits (``_pairs_below``);
    ``E(a, l, n)``: how many of them are at or below ``l`` (``E(a, l, i)`` is the ``before`` of
    split ``i``)."""
    pairs = z3.RecFunction("P", INT_ARRAY, INT, INT, INT)
    level = z3.RecFunction("E", INT_ARRAY, INT, INT, INT)
    a = z3.Array("a_def", INT, INT)
    lv, n = _ints("l_def n_def")
    z3.RecAddDefinition(
        pairs, [a, lv, n], z3.If(n <= 0, 0, pairs(a, lv, n - 1) + enc.pairs_term(a[n - 1], lv))
    )
    z3.RecAddDefinition(
        level, [a, lv, n], z3.If(n <= 0, 0, level(a, lv, n - 1) + enc.at_or_below(a[n - 1], lv))
    )
    return pairs, level


def _water_facts() -> list[Obligation]:
    """The facts about ``P`` and ``E`` the step uses, each by induction on the number of splits."""
    pairs, level = _water()
    a = z3.Array("a", INT, INT)
    n, lv, l1, l2, i = _ints("n l l1 l2 i")
    return [
        *induction(
            "P is monotone in the level",
            n,
            lambda n: z3.Implies(l1 <= l2, pairs(a, l1, n) <= pairs(a, l2, n)),
        ),
        *induction(
            "raising the level by one adds E pairs: P(l+1) = P(l) + E(l)",
            n,
            lambda n: pairs(a, lv + 1, n) == pairs(a, lv, n) + level(a, lv, n),
        ),
        *induction(
            "P >= 0 and P(l) >= l - a[i] for every split i (so P(l) = 0 puts every split at >= l)",
            n,
            lambda n: z3.And(
                pairs(a, lv, n) >= 0, z3.Implies(_within(i, 0, n), pairs(a, lv, n) >= lv - a[i])
            ),
        ),
        *induction(
            "P(lo) = 0 when lo is at most every count (the bisection's lower end)",
            n,
            lambda n: z3.Implies(_all(i, n, a[i] >= lv), pairs(a, lv, n) == 0),
        ),
        *induction(
            "E is monotone in the prefix: E(a, l, i) <= E(a, l, n) for 0 <= i <= n",
            n,
            lambda n: z3.Implies(z3.And(i >= 0, i <= n), level(a, lv, i) <= level(a, lv, n)),
        ),
        *induction(
            "E is monotone in the level",
            n,
            lambda n: z3.Implies(l1 <= l2, level(a, l1, n) <= level(a, l2, n)),
        ),
    ]


def _water_char(lam: enc.Num, rest: enc.Num, t: enc.Num, a: z3.ArrayRef, n: z3.ArithRef) -> z3.BoolRef:
    """``(lam, rest)`` is the water level of ``t`` items: ``P(lam) + rest = t``, ``0 <= rest < E(lam)``."""
    pairs, level = _water()
    return z3.And(pairs(a, lam, n) + rest == t, rest >= 0, rest < level(a, lam, n))


def _water_value(a: z3.ArrayRef, lam: enc.Num, rest: enc.Num, x: z3.ArithRef) -> enc.Num:
    _, level = _water()
    return enc.water_value(a[x], lam, level(a, lam, x), rest)


def _water_level() -> list[Obligation]:
    """The closed form of ``canonical_counts`` is the canonical order, one item at a time."""
    pairs, level = _water()
    a = z3.Array("a", INT, INT)
    n, t, lam, rest, star, j, lam_b, rest_b, low = _ints("n t lam rest star j lam_b rest_b low")
    big = level(a, lam, n)
    wrap = rest + 1 >= big
    lam2, rest2 = z3.If(wrap, lam + 1, lam), z3.If(wrap, 0, rest + 1)

    def prefix(x: enc.Num, y: enc.Num, lv: enc.Num) -> z3.BoolRef:
        """Instance of "E is monotone in the prefix"."""
        return z3.Implies(z3.And(x >= 0, x <= y), level(a, lv, x) <= level(a, lv, y))

    step_facts = z3.And(
        pairs(a, lam + 1, n) == pairs(a, lam, n) + big,
        big <= level(a, lam + 1, n),
        prefix(j + 1, star, lam),
        prefix(star + 1, j, lam),
        prefix(j + 1, n, lam),
        prefix(star + 1, n, lam),
        prefix(0, j, lam + 1),
    )
    star_ok = z3.And(_within(star, 0, n), a[star] <= lam, level(a, lam, star) == rest)
    hyp = z3.And(n >= 1, t >= 0, _water_char(lam, rest, t, a, n), star_ok, _within(j, 0, n), step_facts)
    before, after = _water_value(a, lam, rest, j), _water_value(a, lam2, rest2, j)
    at_star = _water_value(a, lam, rest, star)
    mono = z3.And(
        z3.Implies(lam + 1 <= lam_b, pairs(a, lam + 1, n) <= pairs(a, lam_b, n)),
        z3.Implies(lam_b + 1 <= lam, pairs(a, lam_b + 1, n) <= pairs(a, lam, n)),
        pairs(a, lam + 1, n) == pairs(a, lam, n) + big,
        pairs(a, lam_b + 1, n) == pairs(a, lam_b, n) + level(a, lam_b, n),
    )
    return [
        (
            "bisection: P(low) <= t < P(low+1) is the water level (lam, rest) = (low, t - P(low))",
            z3.Implies(
                z3.And(
                    pairs(a, low, n) <= t,
                    t < pairs(a, low + 1, n),
                    pairs(a, low + 1, n) == pairs(a, low, n) + level(a, low, n),
                ),
                _water_char(low, t - pairs(a, low, n), t, a, n),
            ),
        ),
        (
            "the water level of t items is unique",
            z3.Implies(
                z3.And(_water_char(lam, rest, t, a, n), _water_char(lam_b, rest_b, t, a, n), mono),
                z3.And(lam == lam_b, rest == rest_b),
            ),
        ),
        (
            "t = 0: the closed form gives the start counts",
            z3.Implies(
                z3.And(
                    _water_char(lam, rest, 0, a, n),
                    _within(j, 0, n),
                    pairs(a, lam, n) >= lam - a[j],
                    pairs(a, lam, n) >= 0,
                    level(a, lam, j) >= level(a, lam, 0),
                ),
                _water_value(a, lam, rest, j) == a[j],
            ),
        ),
        (
            "t -> t+1: the next water level is (lam, rest+1), or (lam+1, 0) when the level is full",
            z3.Implies(hyp, _water_char(lam2, rest2, t + 1, a, n)),
        ),
        (
            "t -> t+1: exactly one count grows by one, the one of split star",
            z3.Implies(hyp, after == before + z3.If(j == star, 1, 0)),
        ),
        (
            "split star is the first split at the smallest count: (counts[j], j) >= (counts[star], star)",
            z3.Implies(
                hyp,
                z3.And(
                    at_star == lam,
                    z3.Not(_lex_lt((before, j), (at_star, star))),
                    z3.Implies(j != star, _lex_gt((before, j), (at_star, star))),
                ),
            ),
        ),
        (
            "split star is the only split at or below the level with rest earlier ones",
            z3.Implies(z3.And(hyp, a[j] <= lam, level(a, lam, j) == rest), j == star),
        ),
    ]


def _water_star() -> list[Obligation]:
    """Split ``star`` exists: some split at or below the level has exactly ``r`` such splits before it."""
    _, level = _water()
    a = z3.Array("a", INT, INT)
    n, lv, r, x = _ints("n l r x")

    def claim(n: z3.ArithRef) -> z3.BoolRef:
        exists = z3.Exists([x], z3.And(_within(x, 0, n), a[x] <= lv, level(a, lv, x) == r))
        return z3.Implies(z3.And(r >= 0, r < level(a, lv, n)), exists)

    return induction("for 0 <= r < E(l), split star with E(a, l, star) = r exists", n, claim, base=1)


# ---------------------------------------------------------------- canonical_capacity


def _capacity() -> list[Obligation]:
    """The end pair of ``canonical_capacity`` is the first pair the iterator cannot yield."""
    c, cap = z3.Array("c", INT, INT), z3.Array("cap", INT, INT)
    n, top, i0, end_k, end_i, k, i, x = _ints("n M i0 end_k end_i k i x")
    hyp = z3.And(
        n >= 1,
        _all(x, n, z3.And(c[x] >= 0, c[x] <= cap[x], c[x] <= top)),
        _within(i0, 0, n),
        c[i0] == top,
        _within(end_i, 0, n),
        cap[end_i] == end_k,
        _all(x, n, z3.Or(cap[x] > end_k, z3.And(cap[x] == end_k, x >= end_i))),
    )
    catch_up = end_k < top
    ek, ei = end_k, z3.If(catch_up, end_i, 0)

    def blocked(k: enc.Num, i: enc.Num) -> z3.BoolRef:
        """Catch-up pair (k < M): its split is at its cap. Cycle pair: some split is at its cap."""
        cycle_refused = z3.Exists([x], z3.And(_within(x, 0, n), cap[x] <= k))
        return z3.Or(z3.And(k < top, cap[i] <= k), z3.And(k >= top, cycle_refused))

    valid = z3.And(_within(i, 0, n), c[i] <= k)
    code_term = z3.If(catch_up, enc.imax(0, end_k + z3.If(i < end_i, 1, 0) - c[i]), enc.imax(0, end_k - c[i]))
    return [
        (
            "the end pair is a pair of the iterator (k >= c[i]) that it cannot yield",
            z3.Implies(hyp, z3.And(_within(ei, 0, n), c[ei] <= ek, blocked(ek, ei))),
        ),
        (
            "every pair before the end pair can be yielded, within its split's cap",
            z3.Implies(
                z3.And(hyp, valid, _lex_lt((k, i), (ek, ei))), z3.And(z3.Not(blocked(k, i)), k < cap[i])
            ),
        ),
        (
            "the pairs of split i before the end pair are the k in [c[i], ek + [i < ei])",
            z3.Implies(
                z3.And(hyp, _within(i, 0, n)),
                z3.And(c[i] <= k, _lex_lt((k, i), (ek, ei)))
                == z3.And(c[i] <= k, k < ek + z3.If(i < ei, 1, 0)),
            ),
        ),
        (
            "their number is the code's term in both branches: capacity_term(c[i], i, end pair)",
            z3.Implies(z3.And(hyp, _within(i, 0, n)), code_term == enc.capacity_term(c[i], i, ek, ei)),
        ),
    ]


# ---------------------------------------------------------------- round_robin_turns, next_worker


@functools.cache
def _rounds() -> tuple[z3.FuncDeclRef, z3.FuncDeclRef, z3.FuncDeclRef]:
    """``C(T, J, n)``: batches in ``J`` complete rounds; ``A(T, J, n)``: workers active in round
    ``J``; ``Tot(T, n)``: all turns."""
    complete = z3.RecFunction("C", INT_ARRAY, INT, INT, INT)
    active = z3.RecFunction("A", INT_ARRAY, INT, INT, INT)
    total = z3.RecFunction("Tot", INT_ARRAY, INT, INT)
    tt = z3.Array("T_def", INT, INT)
    jj, n = _ints("J_def n_def")
    z3.RecAddDefinition(
        complete, [tt, jj, n], z3.If(n <= 0, 0, complete(tt, jj, n - 1) + enc.rounds_term(tt[n - 1], jj))
    )
    z3.RecAddDefinition(
        active, [tt, jj, n], z3.If(n <= 0, 0, active(tt, jj, n - 1) + enc.still_active(tt[n - 1], jj))
    )
    z3.RecAddDefinition(total, [tt, n], z3.If(n <= 0, 0, total(tt, n - 1) + tt[n - 1]))
    return complete, active, total


def _rounds_facts() -> list[Obligation]:
    complete, active, total = _rounds()
    tt = z3.Array("T", INT, INT)
    n, jj, j1, j2, i, x = _ints("n J J1 J2 i x")

    def nonneg(n: z3.ArithRef) -> z3.BoolRef:
        return _all(x, n, tt[x] >= 0)

    return [
        *induction(
            "one more round adds the active workers: C(J+1) = C(J) + A(J)",
            n,
            lambda n: complete(tt, jj + 1, n) == complete(tt, jj, n) + active(tt, jj, n),
        ),
        *induction(
            "C is monotone in the rounds",
            n,
            lambda n: z3.Implies(j1 <= j2, complete(tt, j1, n) <= complete(tt, j2, n)),
        ),
        *induction("C(J) <= Tot", n, lambda n: complete(tt, jj, n) <= total(tt, n)),
        *induction(
            "with turns >= 0 and J >= 0: C(J) >= 0 and C(J) >= min(T[i], J) for every worker i",
            n,
            lambda n: z3.Implies(
                z3.And(nonneg(n), jj >= 0),
                z3.And(
                    complete(tt, jj, n) >= 0,
                    z3.Implies(_within(i, 0, n), complete(tt, jj, n) >= enc.rounds_term(tt[i], jj)),
                ),
            ),
        ),
        *induction(
            "A(J) >= 0, and without active workers C(J) = Tot",
            n,
            lambda n: z3.And(
                active(tt, jj, n) >= 0,
                z3.Implies(active(tt, jj, n) == 0, complete(tt, jj, n) == total(tt, n)),
            ),
        ),
        *induction(
            "A is monotone in the prefix: A(T, J, i) <= A(T, J, n) for 0 <= i <= n",
            n,
            lambda n: z3.Implies(z3.And(i >= 0, i <= n), active(tt, jj, i) <= active(tt, jj, n)),
        ),
    ]


def _round_robin() -> list[Obligation]:
    """``round_robin_turns``'s closed form is torch's (batch, worker) order, one batch at a time."""
    complete, active, total = _rounds()
    tt = z3.Array("T", INT, INT)
    n, nb, lam, rest, star, j, lam_b, rest_b, x = _ints("n N lam rest star j lam_b rest_b x")
    big = active(tt, lam, n)
    wrap = rest + 1 >= big
    lam2, rest2 = z3.If(wrap, lam + 1, lam), z3.If(wrap, 0, rest + 1)
    tot = total(tt, n)

    def char(lam: enc.Num, rest: enc.Num, nb: enc.Num) -> z3.BoolRef:
        return z3.And(lam >= 0, complete(tt, lam, n) + rest == nb, rest >= 0, rest < active(tt, lam, n))

    def value(lam: enc.Num, rest: enc.Num, w: z3.ArithRef) -> enc.Num:
        return enc.turns_value(tt[w], lam, active(tt, lam, w), rest)

    def prefix(a: enc.Num, b: enc.Num) -> z3.BoolRef:
        return z3.Implies(z3.And(a >= 0, a <= b), active(tt, lam, a) <= active(tt, lam, b))

    nonneg = _all(x, n, tt[x] >= 0)
    facts = z3.And(
        complete(tt, lam + 1, n) == complete(tt, lam, n) + big,
        z3.Implies(active(tt, lam + 1, n) == 0, complete(tt, lam + 1, n) == tot),
        active(tt, lam + 1, n) >= 0,
        active(tt, lam + 1, j) >= 0,
        prefix(j + 1, star),
        prefix(star + 1, j),
        prefix(j + 1, n),
        prefix(star + 1, n),
    )
    star_ok = z3.And(_within(star, 0, n), tt[star] > lam, active(tt, lam, star) == rest)
    hyp = z3.And(n >= 1, nonneg, nb >= 0, nb < tot, char(lam, rest, nb), star_ok, _within(j, 0, n), facts)
    before, after = value(lam, rest, j), value(lam2, rest2, j)
    at_star = value(lam, rest, star)
    mono = z3.And(
        z3.Implies(lam + 1 <= lam_b, complete(tt, lam + 1, n) <= complete(tt, lam_b, n)),
        z3.Implies(lam_b + 1 <= lam, complete(tt, lam_b + 1, n) <= complete(tt, lam, n)),
        complete(tt, lam + 1, n) == complete(tt, lam, n) + big,
        complete(tt, lam_b + 1, n) == complete(tt, lam_b, n) + active(tt, lam_b, n),
    )
    return [
        (
            "the complete rounds of N < Tot batches are unique",
            z3.Implies(
                z3.And(char(lam, rest, nb), char(lam_b, rest_b, nb), mono),
                z3.And(lam == lam_b, rest == rest_b),
            ),
        ),
        (
            "N = 0: every worker delivered nothing",
            z3.Implies(
                z3.And(
                    nonneg,
                    char(lam, rest, 0),
                    _within(j, 0, n),
                    complete(tt, lam, n) >= enc.rounds_term(tt[j], lam),
                    active(tt, lam, j) >= active(tt, lam, 0),
                ),
                value(lam, rest, j) == 0,
            ),
        ),
        (
            "N = Tot: at a level with no active worker every worker delivered all its turns",
            z3.Implies(z3.And(_within(j, 0, n), tt[j] <= lam), value(lam, 0, j) == tt[j]),
        ),
        (
            "N -> N+1: the next rounds are (lam, rest+1), or (lam+1, 0); at lam+1 nobody may be left",
            z3.Implies(
                hyp,
                z3.And(
                    lam2 >= 0,
                    complete(tt, lam2, n) + rest2 == nb + 1,
                    rest2 >= 0,
                    z3.Or(rest2 < active(tt, lam2, n), nb + 1 == tot),
                ),
            ),
        ),
        (
            "N -> N+1: exactly one worker delivered one more batch, worker star",
            z3.Implies(hyp, after == before + z3.If(j == star, 1, 0)),
        ),
        (
            "worker star has a turn left and comes first in (batch, worker) order among those that do",
            z3.Implies(
                hyp,
                z3.And(
                    at_star < tt[star],
                    z3.Implies(
                        before < tt[j],
                        z3.And(
                            z3.Not(_lex_lt((before, j), (at_star, star))),
                            z3.Implies(j != star, _lex_gt((before, j), (at_star, star))),
                        ),
                    ),
                ),
            ),
        ),
    ]


def _round_robin_star() -> list[Obligation]:
    _, active, _ = _rounds()
    tt = z3.Array("T", INT, INT)
    n, jj, r, x = _ints("n J r x")

    def claim(n: z3.ArithRef) -> z3.BoolRef:
        exists = z3.Exists([x], z3.And(_within(x, 0, n), tt[x] > jj, active(tt, jj, x) == r))
        return z3.Implies(z3.And(r >= 0, r < active(tt, jj, n)), exists)

    return induction("for 0 <= r < A(J), worker star with A(T, J, star) = r exists", n, claim, base=1)


def _next_worker() -> list[Obligation]:
    """The last delivered batch is (rounds - 1, the last worker with the most deliveries)."""
    d = z3.Array("d", INT, INT)
    n, rounds, last, w0, j, w, x = _ints("n R L w0 j w x")
    hyp = z3.And(
        n >= 1,
        rounds >= 1,
        _all(x, n, z3.And(d[x] >= 0, d[x] <= rounds)),
        _within(w0, 0, n),
        d[w0] == rounds,
        _within(last, 0, n),
        d[last] == rounds,
        z3.ForAll([x], z3.Implies(z3.And(last < x, x < n), d[x] < rounds)),
    )
    return [
        ("batch (R - 1, L) was delivered", z3.Implies(hyp, rounds - 1 < d[last])),
        (
            "every delivered batch (j < d[w]) is at or before (R - 1, L) in (batch, worker) order",
            z3.Implies(
                z3.And(hyp, _within(w, 0, n), j >= 0, j < d[w]), z3.Not(_lex_gt((j, w), (rounds - 1, last)))
            ),
        ),
    ]


# ---------------------------------------------------------------- rotation and resumed order


def _rotation() -> list[Obligation]:
    nw, o, w1, w2, r, nb, q, w, x = _ints("NW o w1 w2 r n q w x")
    hyp = z3.And(nw >= 1, _within(o, 0, nw))
    inverse = enc.imod(r - o, nw)
    shifted = enc.imod(w + 1 + o + q * nw, nw) == enc.role_of(w + 1, o, nw)  # instance of the first
    return [
        *induction(
            "q whole rounds later the same role comes: (x + q*NW) mod NW = x mod NW",
            q,
            lambda q: z3.Implies(nw >= 1, enc.imod(x + q * nw, nw) == enc.imod(x, nw)),
        ),
        (
            "w -> (w + o) mod NW is injective on [0, NW)",
            z3.Implies(
                z3.And(
                    hyp,
                    _within(w1, 0, nw),
                    _within(w2, 0, nw),
                    enc.role_of(w1, o, nw) == enc.role_of(w2, o, nw),
                ),
                w1 == w2,
            ),
        ),
        (
            "and onto: role r is played by worker (r - o) mod NW",
            z3.Implies(
                z3.And(hyp, _within(r, 0, nw)),
                z3.And(_within(inverse, 0, nw), enc.role_of(inverse, o, nw) == r),
            ),
        ),
        (
            "no worker exhausted: delivery n-1 is (q, w), n-1 = q*NW + w; the next role is (o + n) mod NW",
            z3.Implies(
                z3.And(hyp, nb >= 1, q >= 0, _within(w, 0, nw), nb - 1 == q * nw + w, shifted),
                enc.role_of(w + 1, o, nw) == enc.imod(o + nb, nw),
            ),
        ),
        (
            "before any delivery the next role is o = (o + 0) mod NW",
            z3.Implies(hyp, enc.imod(o + 0, nw) == o),
        ),
    ]


def _resume_order() -> list[Obligation]:
    """Resuming after the delivery (j0, w0) with rotation next = role of w0+1: the remaining batches
    keep their order, and each keeps its role."""
    nw, o, j0, w0, j1, u1, j2, u2 = _ints("NW o j0 w0 j1 u1 j2 u2")
    hyp = z3.And(nw >= 1, _within(o, 0, nw), j0 >= 0, _within(w0, 0, nw))
    nxt = enc.role_of(w0 + 1, o, nw)

    def new(j: z3.ArithRef, u: z3.ArithRef) -> tuple[z3.ArithRef, z3.ArithRef]:
        """Old batch (j, u) as the resumed loader numbers it: worker (u - w0 - 1) mod NW, batch
        j minus the batches u had delivered (j0 + 1 when u <= w0, else j0)."""
        return j - j0 - z3.If(u <= w0, 1, 0), z3.If(u > w0, u - w0 - 1, u + nw - w0 - 1)

    remaining = z3.And(
        _within(u1, 0, nw), _within(u2, 0, nw), _lex_gt((j1, u1), (j0, w0)), _lex_gt((j2, u2), (j0, w0))
    )
    a, b = new(j1, u1), new(j2, u2)
    return [
        (
            "a remaining batch gets a batch index >= 0 and a worker in [0, NW)",
            z3.Implies(z3.And(hyp, remaining), z3.And(a[0] >= 0, _within(a[1], 0, nw))),
        ),
        (
            "the resumed worker plays the old worker's role: (w' + next) mod NW = (u + o) mod NW",
            z3.Implies(z3.And(hyp, remaining), enc.role_of(a[1], nxt, nw) == enc.role_of(u1, o, nw)),
        ),
        (
            "the remaining batches keep their (batch, worker) order",
            z3.Implies(z3.And(hyp, remaining), _lex_lt((j1, u1), (j2, u2)) == _lex_lt(a, b)),
        ),
        (
            "two remaining batches of one old worker stay apart by the same number of batches",
            z3.Implies(z3.And(hyp, remaining, u1 == u2), z3.And(a[1] == b[1], a[0] - b[0] == j1 - j2)),
        ),
    ]


# ---------------------------------------------------------------- chains, merges, loads


def _chain_cover() -> list[Obligation]:
    """Sessions delivering consecutive index ranges [a(i), a(i+1)) from a(0) = 0 cover [0, a(k)) once."""
    bound = z3.Function("a", INT, INT)
    cover = z3.RecFunction("cover", INT, INT, INT)
    kd, xd = _ints("k_def x_def")
    z3.RecAddDefinition(
        cover,
        [kd, xd],
        z3.If(kd <= 0, 0, cover(kd - 1, xd) + z3.If(z3.And(bound(kd - 1) <= xd, xd < bound(kd)), 1, 0)),
    )
    k, x, i = _ints("k x i")
    chain = z3.And(bound(0) == 0, z3.ForAll([i], z3.Implies(i >= 0, bound(i) <= bound(i + 1))))
    return induction(
        "after k sessions every index x >= 0 was delivered [x < a(k)] times",
        k,
        lambda k: z3.Implies(z3.And(chain, x >= 0), cover(k, x) == z3.If(x < bound(k), 1, 0)),
    )


def _single_reporter() -> list[Obligation]:
    s_, w_, k, x, r, r0 = _ints("S W K x r r0")
    hyp = z3.And(w_ >= 1, k >= 1, s_ == w_ * k)

    def block(r: enc.Num) -> tuple[enc.Num, enc.Num]:
        return enc.worker_block(r, 0, k, k)

    return [
        (
            "split x is in rank r's block iff r = x div K: exactly one rank reports it",
            z3.Implies(
                z3.And(hyp, _within(x, 0, s_), _within(r, 0, w_)),
                _within(x, *block(r)) == (r == enc.idiv(x, k)),
            ),
        ),
        (
            "a merge without rank r0 has no reporter of split r0*K",
            z3.Implies(
                z3.And(hyp, _within(r0, 0, w_), _within(r, 0, w_), r != r0),
                z3.And(_within(r0 * k, 0, s_), z3.Not(_within(r0 * k, *block(r)))),
            ),
        ),
    ]


def _inferred_in_range() -> list[Obligation]:
    c0, p0, m, moved, e0, target, budget = _ints("c0 p0 m moved e0 target b")
    cap = c0 + m - p0
    return [
        (
            "an inferred row value (c0 + moved, p0 + moved) with c0 + moved <= cap stays 0 <= c <= p <= m",
            z3.Implies(
                z3.And(c0 >= 0, c0 <= p0, p0 <= m, moved >= 0, c0 + moved <= cap),
                z3.And(c0 + moved >= 0, c0 + moved <= p0 + moved, p0 + moved <= m),
            ),
        ),
        (
            "a projection target above its base and at most the cap b is in (e0, b]",
            z3.Implies(z3.And(e0 >= 0, e0 < target, target <= budget), z3.And(target > e0, target <= budget)),
        ),
    ]


def _lemma(invariant: str, name: str, statement: str, build: Callable[[], list[Obligation]]) -> Lemma:
    return Lemma(invariant, name, statement, build)


LEMMAS: tuple[Lemma, ...] = (
    _lemma(
        "LockstepInferenceInv",
        "water_facts",
        "pairs below a level: monotone, P(l+1) = P(l) + E(l)",
        _water_facts,
    ),
    _lemma(
        "LockstepInferenceInv",
        "water_level",
        "canonical_counts after t+1 items = after t items with the first smallest count raised",
        _water_level,
    ),
    _lemma("LockstepInferenceInv", "water_star", "the split the next item goes to exists", _water_star),
    _lemma(
        "LockstepInferenceInv",
        "capacity_end",
        "canonical_capacity counts the pairs before the first pair the iterator cannot yield",
        _capacity,
    ),
    _lemma(
        "LockstepInferenceInv", "rounds_facts", "complete rounds: C(J+1) = C(J) + A(J), bounds", _rounds_facts
    ),
    _lemma(
        "LockstepInferenceInv",
        "round_robin",
        "round_robin_turns after N+1 batches = after N with the next (batch, worker) added",
        _round_robin,
    ),
    _lemma(
        "LockstepInferenceInv",
        "round_robin_star",
        "the worker the next batch comes from exists",
        _round_robin_star,
    ),
    _lemma(
        "LockstepInferenceInv",
        "next_worker",
        "the last delivery is (rounds-1, last worker at rounds)",
        _next_worker,
    ),
    _lemma(
        "SameTopologyResumeProp",
        "rotation",
        "w -> (w + o) mod NW is a bijection; without dropouts the next role after n is (o + n) mod NW",
        _rotation,
    ),
    _lemma(
        "SameTopologyResumeProp",
        "resume_order",
        "resuming at the next role keeps every remaining batch's order and role",
        _resume_order,
    ),
    _lemma("ProtocolChainProp", "chain_cover", "consecutive sessions deliver every index once", _chain_cover),
    _lemma(
        "MergeReportedInv", "single_reporter", "every split has exactly one reporting rank", _single_reporter
    ),
    _lemma(
        "ReachableLoadInv",
        "inferred_in_range",
        "inferred values stay within the load bounds",
        _inferred_in_range,
    ),
)
