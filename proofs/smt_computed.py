"""SMT lemmas of ``ComputedBijectionInv``: Feistel inversion, cycle-walking, the split cut.

The Feistel lemmas are over 64-bit bit-vectors (the model's arithmetic), with a
symbolic half width ``h`` in ``[1, 32]`` and *uninterpreted* round functions:
a Feistel network is invertible whatever its round function computes, so the
proof does not depend on ``mix64``. The network is written once in
:func:`feistel` and evaluated two ways: on z3 terms here, and on Python ints
with the model's own round function in ``proofs.bounded_computed``, which
requires that the model's ``feistel_encrypt`` / ``feistel_decrypt`` agree with
it. That ties these lemmas to the model code.

The cycle-walking lemmas are over unbounded integers: ``pi`` is an
uninterpreted map of a domain ``D = [0, M)`` into itself with a left inverse
``pinv`` (so ``pi`` is injective on ``D``, a permutation of the finite ``D``),
``N <= M``, and ``it(x, i) = pi^i(x)``, ``back(y, j) = pinv^j(y)`` are
recursive functions. Induction is spelled out as base and step obligations
whose other free constants stay fixed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TypeAlias

import z3

from elastic_loader.spec.computed import ROUNDS

from . import encodings as enc
from .framework import Lemma, Obligation

Word: TypeAlias = int | z3.BitVecRef
"""A Python int below ``2**64`` or a 64-bit z3 bit-vector."""
RoundFunction = Callable[[int, Word], Word]
"""``F(round index, right half)``: the round output before masking."""

INT = z3.IntSort()
BV = 64


def _shr(a: Word, k: Word) -> Word:
    if isinstance(a, z3.BitVecRef) or isinstance(k, z3.BitVecRef):
        return z3.LShR(a, k)
    return a >> k


def _mask(h: Word) -> Word:
    """``2**h - 1``."""
    if isinstance(h, z3.BitVecRef):
        return (z3.BitVecVal(1, BV) << h) - 1
    return (1 << h) - 1


def rounds(
    f: RoundFunction, count: int, mask: Word, left: Word, right: Word, inverse: bool = False
) -> tuple[Word, Word]:
    """``count`` rounds on the halves, round ``i``: ``(L, R) -> (R, L XOR (F(i, R) AND mask))``.

    With ``inverse``, each round undone, last round first: ``(L', R') -> (R' XOR (F(i, L') AND mask), L')``.
    """
    order = range(count - 1, -1, -1) if inverse else range(count)
    for i in order:
        if inverse:
            left, right = right ^ (f(i, left) & mask), left
        else:
            left, right = right, left ^ (f(i, right) & mask)
    return left, right


def feistel(f: RoundFunction, count: int, h: Word, x: Word, inverse: bool = False) -> Word:
    """The network on ``x < 4**h``: split into ``(x >> h, x AND mask)``, ``count`` rounds, join."""
    left, right = rounds(f, count, _mask(h), _shr(x, h), x & _mask(h), inverse)
    return (left << h) | right


def _words(names: str) -> list[z3.BitVecRef]:
    return list(z3.BitVecs(names, BV))


def _below(x: z3.BitVecRef, bits: z3.BitVecRef) -> z3.BoolRef:
    """``x < 2**bits`` for ``bits <= 64`` (a logical shift by 64 is 0)."""
    return _shr(x, bits) == 0


@functools.cache
def _round_functions() -> z3.FuncDeclRef:
    """One uninterpreted round function ``F(i, r)``: every round may compute anything."""
    return z3.Function("F", z3.BitVecSort(BV), z3.BitVecSort(BV), z3.BitVecSort(BV))


def _uninterpreted(i: int, right: Word) -> Word:
    return _round_functions()(z3.BitVecVal(i, BV), right)


def _half(h: z3.BitVecRef) -> z3.BoolRef:
    return z3.And(z3.UGE(h, 1), z3.ULE(h, 32))


def _pair(a: tuple[Word, Word], b: tuple[Word, Word]) -> z3.BoolRef:
    return z3.And(a[0] == b[0], a[1] == b[1])


def _round_inverse() -> list[Obligation]:
    h, left, right, x = _words("h L R x")
    halves = z3.And(_half(h), _below(left, h), _below(right, h))
    mask = _mask(h)
    after = rounds(_uninterpreted, 1, mask, left, right)
    undone = rounds(_uninterpreted, 1, mask, left, right, inverse=True)
    joined = (left << h) | right
    return [
        (
            "a round maps two h-bit halves to two h-bit halves",
            z3.Implies(halves, z3.And(_below(after[0], h), _below(after[1], h))),
        ),
        (
            "undoing a round after it gives the halves back, whatever the round function",
            z3.Implies(halves, _pair(rounds(_uninterpreted, 1, mask, *after, inverse=True), (left, right))),
        ),
        (
            "a round after undoing it gives the halves back",
            z3.Implies(halves, _pair(rounds(_uninterpreted, 1, mask, *undone), (left, right))),
        ),
        (
            "splitting x < 4**h into halves and joining them gives x",
            z3.Implies(z3.And(_half(h), _below(x, h + h)), ((_shr(x, h) << h) | (x & _mask(h))) == x),
        ),
        (
            "joining two h-bit halves gives a value below 4**h whose halves they are",
            z3.Implies(
                halves,
                z3.And(_below(joined, h + h), _shr(joined, h) == left, (joined & _mask(h)) == right),
            ),
        ),
    ]


def _network_inverse() -> list[Obligation]:
    mask, left, right = _words("mask L R")
    there = rounds(_uninterpreted, ROUNDS, mask, left, right)
    back = rounds(_uninterpreted, ROUNDS, mask, left, right, inverse=True)
    return [
        (
            f"undoing {ROUNDS} rounds in reverse order after them gives the halves back, "
            "whatever the round functions and the mask",
            _pair(rounds(_uninterpreted, ROUNDS, mask, *there, inverse=True), (left, right)),
        ),
        (
            f"{ROUNDS} rounds after undoing them give the halves back (so the network is onto)",
            _pair(rounds(_uninterpreted, ROUNDS, mask, *back), (left, right)),
        ),
    ]


# ---------------------------------------------------------------- cycle-walking


@functools.cache
def _walk_functions() -> tuple[z3.FuncDeclRef, z3.FuncDeclRef, z3.FuncDeclRef, z3.FuncDeclRef]:
    """``pi``, ``pinv``, ``it(x, i) = pi^i(x)`` and ``back(y, j) = pinv^j(y)`` (defined once)."""
    pi = z3.Function("pi", INT, INT)
    pinv = z3.Function("pinv", INT, INT)
    it = z3.RecFunction("it", INT, INT, INT)
    back = z3.RecFunction("back", INT, INT, INT)
    x, i = z3.Ints("x_def i_def")
    z3.RecAddDefinition(it, [x, i], z3.If(i <= 0, x, pi(it(x, i - 1))))
    z3.RecAddDefinition(back, [x, i], z3.If(i <= 0, x, pinv(back(x, i - 1))))
    return pi, pinv, it, back


def _in(x: z3.ArithRef, lo: enc.Num, hi: enc.Num) -> z3.BoolRef:
    return z3.And(lo <= x, x < hi)


def _walk_closure() -> list[Obligation]:
    pi, _, it, _ = _walk_functions()
    x, i, size = z3.Ints("x i M")
    inside = _in(it(x, i), 0, size)
    maps_in = z3.Implies(inside, _in(pi(it(x, i)), 0, size))  # pi maps D into D, at pi^i(x)
    return [
        ("pi^0(x) = x is in D", z3.Implies(_in(x, 0, size), _in(it(x, 0), 0, size))),
        (
            "i -> i+1: pi^i(x) in D gives pi^(i+1)(x) in D",
            z3.Implies(z3.And(i >= 0, inside, maps_in), _in(it(x, i + 1), 0, size)),
        ),
    ]


def _walk_backward() -> list[Obligation]:
    pi, pinv, it, back = _walk_functions()
    x, a, j = z3.Ints("x a j")

    def claim(j: z3.ArithRef) -> z3.BoolRef:
        return z3.Implies(z3.And(j >= 0, j <= a), back(it(x, a), j) == it(x, a - j))

    z = it(x, a - j - 1)
    left_inverse = pinv(pi(z)) == z  # pinv(pi(z)) = z for z in D, at z = pi^(a-j-1)(x) (in D by closure)
    return [
        ("pinv^0 of pi^a(x) is pi^a(x)", claim(z3.IntVal(0))),
        (
            "j -> j+1: pinv^(j+1)(pi^a(x)) = pi^(a-j-1)(x)",
            z3.Implies(z3.And(j >= 0, j + 1 <= a, claim(j), left_inverse), claim(j + 1)),
        ),
    ]


def _walk_unique() -> list[Obligation]:
    _, _, it, back = _walk_functions()
    n, x, x2, a, b, y = z3.Ints("N x x2 a b y")

    def walked(x: z3.ArithRef, a: z3.ArithRef) -> z3.BoolRef:
        """``x < N`` walks to ``y`` in ``a >= 1`` steps: ``pi^a(x) = y < N``."""
        return z3.And(_in(x, 0, n), a >= 1, it(x, a) == y, y < n)

    # The instances of the other facts the argument uses (each a universally quantified premise):
    # walk_backward at y = pi^a(x) = pi^b(x2) for j = a and j = b; the walk's "pi^j >= N for 0 < j < steps"
    # at j = |a - b|.
    backward = z3.And(
        back(y, a) == it(x, 0),
        back(y, b) == it(x2, 0),
        z3.Implies(a <= b, back(y, a) == it(x2, b - a)),
        z3.Implies(b <= a, back(y, b) == it(x, a - b)),
    )
    outside = z3.And(
        z3.Implies(_in(b - a, 1, b), it(x2, b - a) >= n),
        z3.Implies(_in(a - b, 1, a), it(x, a - b) >= n),
    )
    hyp = z3.And(walked(x, a), walked(x2, b), backward, outside)
    return [
        (
            "two points of [0, N) that walk to the same y are equal, after the same number of steps",
            z3.Implies(hyp, z3.And(x == x2, a == b)),
        ),
    ]


def _walk_returns() -> list[Obligation]:
    _, _, it, back = _walk_functions()
    n, x, i, k = z3.Ints("N x i k")
    repeat = it(x, i + k) == it(x, i)
    backward = z3.And(back(it(x, i + k), i) == it(x, k), back(it(x, i), i) == it(x, 0))
    return [
        (
            "an orbit that repeats (pi^(i+k)(x) = pi^i(x), k >= 1) returns to x after k steps",
            z3.Implies(z3.And(i >= 0, k >= 1, repeat, backward), it(x, k) == x),
        ),
        (
            "so the walk from x < N reaches [0, N) within k steps",
            z3.Implies(z3.And(_in(x, 0, n), k >= 1, it(x, k) == x), z3.And(it(x, k) < n, it(x, k) >= 0)),
        ),
    ]


# ---------------------------------------------------------------- the split cut


def _split_cut() -> list[Obligation]:
    n, s_, s, p, s2, p2, i = z3.Ints("N S s p s2 p2 i")
    hyp = z3.And(n >= s_, s_ >= 1)
    m = enc.idiv(n, s_)
    slot = z3.And(hyp, _in(s, 0, s_), _in(p, 0, m))
    return [
        (
            "split s position p reads index s*m + p in [0, S*m), S*m <= N",
            z3.Implies(slot, z3.And(_in(s * m + p, 0, s_ * m), s_ * m <= n)),
        ),
        (
            "distinct (split, position) read distinct indices",
            z3.Implies(
                z3.And(slot, _in(s2, 0, s_), _in(p2, 0, m), s * m + p == s2 * m + p2),
                z3.And(s == s2, p == p2),
            ),
        ),
        (
            "every index of [0, S*m) is read, by split i div m at position i mod m",
            z3.Implies(
                z3.And(hyp, _in(i, 0, s_ * m)),
                z3.And(
                    _in(enc.idiv(i, m), 0, s_),
                    _in(enc.imod(i, m), 0, m),
                    enc.idiv(i, m) * m + enc.imod(i, m) == i,
                ),
            ),
        ),
    ]


def _lemma(name: str, statement: str, build: Callable[[], Sequence[Obligation]]) -> Lemma:
    return Lemma("ComputedBijectionInv", name, statement, build)


LEMMAS: tuple[Lemma, ...] = (
    _lemma(
        "feistel_round", "a Feistel round is inverted by its unround, for any round function", _round_inverse
    ),
    _lemma(
        "feistel_network",
        f"the {ROUNDS}-round network is a bijection of [0, 4**h), h <= 32",
        _network_inverse,
    ),
    _lemma("walk_closure", "iterating a map of D into itself stays in D", _walk_closure),
    _lemma("walk_backward", "the inverse walks back along the forward walk", _walk_backward),
    _lemma("walk_unique", "cycle-walking is injective on [0, N)", _walk_unique),
    _lemma("walk_returns", "a repeating orbit returns to its start, so the walk ends", _walk_returns),
    _lemma("split_cut", "the cut reads S*m distinct indices of [0, N)", _split_cut),
)
