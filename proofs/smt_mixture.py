"""SMT lemmas of the mixture schedule (``MixtureProportionInv``): the arithmetic of ``edf_pick``.

Rules: as in :mod:`proofs.smt` -- every free constant is universally quantified, sizes are
symbolic and unbounded (the number of sources ``n``, weights, their total ``W``, slots, counts);
sums over the ``n`` sources are recursive z3 functions over arrays and facts about them are
proved by induction (base and step obligations). A later obligation that needs an earlier fact
takes an *instance* of it as a hypothesis; the earlier obligation proves it for every value.

Theory of operation
-------------------
A segment with integer weights ``w_k`` (total ``W``) is a unit-job scheduling problem: job ``j``
(1-based) of source ``k`` is *released* at the first slot ``t`` with ``(t+1)*w_k > W*(j-1)``
(``edf_pick``'s eligibility) and *due* before slot ``d_j = ceil(j*W/w_k)``. The lemmas give
the pieces of the written proof (proofs/MixtureProportionInv.md):

* ``upper_quota``: eligibility alone keeps ``n_k(t)*W < t*w_k + W`` (counts never exceed the
  upper quota), by induction over slots, for one source with symbolic weights;
* ``eligible_exists``: with ``sum(picks) = t`` some source is eligible at slot ``t``, for a
  symbolic number of sources (``edf_pick``'s assertion never fails);
* ``demand_fits``: the jobs of a source released at or after ``a`` and due by ``b`` number at
  most ``(b-a)*w_k/W``, and over a symbolic number of sources at most ``b-a`` (the instance is
  feasible on every interval, which is what earliest-deadline-first needs to meet every deadline,
  i.e. to keep the lower quota ``n_k(t)*W > t*w_k - W``);
* ``window_from_quota``: prefix quotas at ``a`` and ``b`` give ``|count*W - (b-a)*w_k| < 2W``
  for the window ``[a, b)``.

That earliest-deadline-first meets every deadline of a feasible unit-job instance is an exchange
argument over schedules (written proof); the bounded check ``MIXTURE_PROPORTION`` runs the real
``edf_pick`` on every weight vector and tie order up to its bounds.
"""

from __future__ import annotations

import functools

import z3

from .framework import Lemma, Obligation, induction
from .smt import INT, INT_ARRAY, _ints, _within


def _quota_upper(n: z3.ArithRef, t: z3.ArithRef, w: z3.ArithRef, total: z3.ArithRef) -> z3.BoolRef:
    return n * total < t * w + total


def _upper_quota() -> list[Obligation]:
    t, n, w, total = _ints("t n w W")
    sizes = z3.And(total >= 1, w >= 0, w <= total, t >= 0, n >= 0)
    eligible = (t + 1) * w > total * n
    return [
        (
            "base: no slot, no pick",
            z3.Implies(total >= 1, _quota_upper(z3.IntVal(0), z3.IntVal(0), w, total)),
        ),
        (
            "step, picked (eligible): n+1 stays below the upper quota of t+1",
            z3.Implies(
                z3.And(sizes, _quota_upper(n, t, w, total), eligible), _quota_upper(n + 1, t + 1, w, total)
            ),
        ),
        (
            "step, not picked: n stays below the upper quota of t+1",
            z3.Implies(z3.And(sizes, _quota_upper(n, t, w, total)), _quota_upper(n, t + 1, w, total)),
        ),
    ]


@functools.cache
def _sums() -> tuple[z3.FuncDeclRef, z3.FuncDeclRef, z3.FuncDeclRef]:
    """``SP(p, n)``: picks of the first ``n`` sources; ``SW(w, n)``: their weights;
    ``SL(p, w, t, W, n)``: their *slack* ``sum(p_k*W - (t+1)*w_k)``."""
    sp = z3.RecFunction("SP_mix", INT_ARRAY, INT, INT)
    sw = z3.RecFunction("SW_mix", INT_ARRAY, INT, INT)
    sl = z3.RecFunction("SL_mix", INT_ARRAY, INT_ARRAY, INT, INT, INT, INT)
    p = z3.Array("p_def", INT, INT)
    w = z3.Array("w_def", INT, INT)
    t, total, n = _ints("t_def W_def n_def")
    z3.RecAddDefinition(sp, [p, n], z3.If(n <= 0, 0, sp(p, n - 1) + p[n - 1]))
    z3.RecAddDefinition(sw, [w, n], z3.If(n <= 0, 0, sw(w, n - 1) + w[n - 1]))
    z3.RecAddDefinition(
        sl,
        [p, w, t, total, n],
        z3.If(n <= 0, 0, sl(p, w, t, total, n - 1) + p[n - 1] * total - (t + 1) * w[n - 1]),
    )
    return sp, sw, sl


def _eligible_exists() -> list[Obligation]:
    sp, sw, sl = _sums()
    p = z3.Array("p", INT, INT)
    w = z3.Array("w", INT, INT)
    t, total, n, k = _ints("t W n k")

    def none_eligible(n: z3.ArithRef) -> z3.BoolRef:
        return z3.ForAll([k], z3.Implies(_within(k, 0, n), p[k] * total >= (t + 1) * w[k]))

    def slack_nonneg(n: z3.ArithRef) -> z3.BoolRef:
        return z3.Implies(none_eligible(n), sl(p, w, t, total, n) >= 0)

    def slack_is(n: z3.ArithRef) -> z3.BoolRef:
        return sl(p, w, t, total, n) == sp(p, n) * total - (t + 1) * sw(w, n)

    closing = z3.Implies(
        z3.And(
            n >= 1,
            total >= 1,
            t >= 0,
            sp(p, n) == t,
            sw(w, n) == total,
            slack_nonneg(n),  # instance of the first induction
            slack_is(n),  # instance of the second
        ),
        z3.Not(none_eligible(n)),
    )
    return [
        *induction("every source ineligible => the slack sum is >= 0", n, slack_nonneg),
        *induction("the slack sum is W*sum(picks) - (t+1)*sum(weights)", n, slack_is),
        ("sum(picks) = t and sum(weights) = W leave some source eligible", closing),
    ]


def _demand_fits() -> list[Obligation]:
    first, c, a, b, w, total = _ints("j0 c a b w W")
    sizes = z3.And(total >= 1, w >= 1, w <= total, first >= 1, c >= 0, a >= 0, b >= a)
    # jobs j0 .. j0+c-1: the first released at or after a ((j0-1)*W >= a*w), the last due by b.
    jobs = z3.And((first - 1) * total >= a * w, (first + c - 1) * total <= b * w)
    one = (
        "one source: c jobs released >= a and due <= b satisfy c*W <= (b-a)*w",
        z3.Implies(z3.And(sizes, jobs), c * total <= (b - a) * w),
    )
    cs = z3.Array("c", INT, INT)
    ws = z3.Array("ws", INT, INT)
    n, k = _ints("n k")
    _, sw, _ = _sums()
    sc = _count_sum()

    def claim(n: z3.ArithRef) -> z3.BoolRef:
        each = z3.ForAll([k], z3.Implies(_within(k, 0, n), cs[k] * total <= (b - a) * ws[k]))
        return z3.Implies(z3.And(total >= 1, b >= a, each), sc(cs, n) * total <= (b - a) * sw(ws, n))

    closing = z3.Implies(
        z3.And(total >= 1, b >= a, sw(ws, n) == total, sc(cs, n) * total <= (b - a) * sw(ws, n)),
        sc(cs, n) <= b - a,
    )
    return [
        one,
        *induction("n sources: sum(c)*W <= (b-a)*sum(w)", n, claim),
        ("weights summing to W: at most b-a jobs", closing),
    ]


@functools.cache
def _count_sum() -> z3.FuncDeclRef:
    sc = z3.RecFunction("SC_mix", INT_ARRAY, INT, INT)
    c = z3.Array("c_def", INT, INT)
    n = z3.Int("n_def_c")
    z3.RecAddDefinition(sc, [c, n], z3.If(n <= 0, 0, sc(c, n - 1) + c[n - 1]))
    return sc


def _window_from_quota() -> list[Obligation]:
    a, b, na, nb, w, total = _ints("a b na nb w W")
    sizes = z3.And(total >= 1, w >= 0, w <= total, a >= 0, b >= a)

    def quota(n: z3.ArithRef, t: z3.ArithRef) -> z3.BoolRef:
        return z3.And(n * total < t * w + total, n * total > t * w - total)

    count = nb - na
    return [
        (
            "prefix quotas at a and b bound the window [a, b) by 2W",
            z3.Implies(
                z3.And(sizes, quota(na, a), quota(nb, b)),
                z3.And(count * total < (b - a) * w + 2 * total, count * total > (b - a) * w - 2 * total),
            ),
        )
    ]


def _lemma(name: str, statement: str, obligations: object) -> Lemma:
    assert callable(obligations)
    return Lemma("MixtureProportionInv", name, statement, obligations)


LEMMAS: tuple[Lemma, ...] = (
    _lemma(
        "upper_quota", "eligibility keeps n_k(t)*W < t*w_k + W for every slot t (induction)", _upper_quota
    ),
    _lemma(
        "eligible_exists",
        "for any number of sources, sum(picks) = t leaves some source eligible at slot t",
        _eligible_exists,
    ),
    _lemma(
        "demand_fits",
        "jobs released in [a, b) and due by b: at most (b-a)*w_k/W per source, at most b-a in all",
        _demand_fits,
    ),
    _lemma(
        "window_from_quota", "prefix quotas at a and b give |count*W - (b-a)*w_k| < 2W", _window_from_quota
    ),
)
