"""SMT lemmas: the arithmetic core of the invariants, proved over unbounded integers with z3.

Every free z3 constant in an obligation is universally quantified: an
obligation holds when its negation is unsatisfiable. Divisibility assumptions
are written as products (``S == W*K``), never as ``%`` constraints, so the
solver reasons about exact quotients. Statements about sums or folds over a
symbolic number of splits or ranks are proved by induction (base and step are
separate obligations, see :func:`proofs.framework.induction`).

What the lemmas do *not* cover is the model code itself: each lemma is about a
closed formula (``proofs.encodings``) or an abstract step, and the bounded
checks (``proofs.bounded_*``) confirm on every small configuration that the
model computes that formula or takes that step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import z3

from . import encodings as enc
from .framework import Lemma, Obligation, induction

INT = z3.IntSort()
INT_ARRAY = z3.ArraySort(INT, INT)


def _ints(names: str) -> list[z3.ArithRef]:
    return list(z3.Ints(names))


def _lex_gt(a: tuple[z3.ArithRef, z3.ArithRef], b: tuple[z3.ArithRef, z3.ArithRef]) -> z3.BoolRef:
    """``a > b`` in lexicographic order."""
    return z3.Or(a[0] > b[0], z3.And(a[0] == b[0], a[1] > b[1]))


def _within(x: z3.ArithRef, lo: enc.Num, hi: enc.Num) -> z3.BoolRef:
    return z3.And(lo <= x, x < hi)


# ---------------------------------------------------------------- PartitionInv


def _topology() -> tuple[list[z3.ArithRef], z3.BoolRef]:
    """``S`` splits, ``W`` ranks of ``K`` splits, ``NW >= 1`` worker slots of ``P`` splits.

    ``num_workers = 0`` is one worker slot (``NW = max(1, num_workers)``).
    """
    s_, w_, nw, k, p = _ints("S W NW K P")
    hyp = z3.And(s_ >= 1, w_ >= 1, nw >= 1, s_ == w_ * k, k == nw * p)
    return [s_, w_, nw, k, p], hyp


def _partition() -> list[Obligation]:
    (s_, w_, nw, k, p), hyp = _topology()
    r, w, r2, w2, x = _ints("r w r2 w2 x")
    ranged = z3.And(r >= 0, r < w_, w >= 0, w < nw)
    lo, hi = enc.worker_block(r, w, k, p)
    successor_lo = z3.If(
        w + 1 < nw,
        enc.worker_block(r, w + 1, k, p)[0],
        z3.If(r + 1 < w_, enc.worker_block(r + 1, 0, k, p)[0], s_),
    )
    lo2, hi2 = enc.worker_block(r2, w2, k, p)
    owner_r = enc.idiv(x, k)
    owner_w = enc.idiv(enc.imod(x, k), p)
    olo, ohi = enc.worker_block(owner_r, owner_w, k, p)
    return [
        ("every block is non-empty (P >= 1)", z3.Implies(hyp, p >= 1)),
        ("block (0, 0) starts at split 0", z3.Implies(hyp, enc.worker_block(0, 0, k, p)[0] == 0)),
        (
            "each block ends where the next (rank-major, then worker) starts; the last ends at S",
            z3.Implies(z3.And(hyp, ranged), hi == successor_lo),
        ),
        ("every block has P splits", z3.Implies(z3.And(hyp, ranged), hi - lo == p)),
        (
            "a split lies in at most one block",
            z3.Implies(
                z3.And(
                    hyp, ranged, r2 >= 0, r2 < w_, w2 >= 0, w2 < nw, _within(x, lo, hi), _within(x, lo2, hi2)
                ),
                z3.And(r == r2, w == w2),
            ),
        ),
        (
            "split x lies in block (x div K, (x mod K) div P)",
            z3.Implies(
                z3.And(hyp, x >= 0, x < s_),
                z3.And(owner_r >= 0, owner_r < w_, owner_w >= 0, owner_w < nw, _within(x, olo, ohi)),
            ),
        ),
    ]


# ---------------------------------------------------------------- SplitSizeInv


def _split_size() -> list[Obligation]:
    n, s_, k = _ints("N S k")
    hyp = z3.And(n >= s_, s_ >= 1)
    m = enc.idiv(n, s_)
    lo, hi = enc.split_range(k, m)
    ranged = z3.And(hyp, k >= 0, k < s_)
    return [
        ("m = N div S >= 1", z3.Implies(hyp, m >= 1)),
        (
            "0 <= N - S*m < S (fewer than S rows dropped)",
            z3.Implies(hyp, z3.And(n - s_ * m >= 0, n - s_ * m < s_)),
        ),
        ("split 0 starts at 0", z3.Implies(hyp, enc.split_range(0, m)[0] == 0)),
        ("split k ends where split k+1 starts", z3.Implies(ranged, hi == enc.split_range(k + 1, m)[0])),
        (
            "split S-1 ends at S*m <= N",
            z3.Implies(hyp, z3.And(enc.split_range(s_ - 1, m)[1] == s_ * m, s_ * m <= n)),
        ),
        ("every split has m rows", z3.Implies(ranged, hi - lo == m)),
    ]


# ---------------------------------------------------------------- row progress


def _take(c: z3.ArithRef, p: z3.ArithRef) -> tuple[z3.ArithRef, z3.ArithRef]:
    """Progress of a split after yielding the row at position ``p`` (``rows.iterate_rows.take``)."""
    return c + 1, p + 1


def _progress_bounds() -> list[Obligation]:
    c, pos, p, size, c2, pos2 = _ints("c pos p L c2 pos2")
    before = z3.And(c >= 0, c <= pos, pos <= size)
    nc, npos = _take(c, p)
    mc, mpos = enc.imax(c, c2), enc.imax(pos, pos2)
    return [
        (
            "yielding position p (pos <= p < L) keeps 0 <= samples <= positions <= L",
            z3.Implies(z3.And(before, pos <= p, p < size), z3.And(nc >= 0, nc <= npos, npos <= size)),
        ),
        (
            "the element-wise max of two bounded states is bounded",
            z3.Implies(
                z3.And(before, c2 >= 0, c2 <= pos2, pos2 <= size), z3.And(mc >= 0, mc <= mpos, mpos <= size)
            ),
        ),
    ]


@functools.cache
def _skip_count() -> tuple[z3.FuncDeclRef, z3.FuncDeclRef]:
    """``skipped(i)``: the row at position ``i`` is skipped; ``sk(i)``: skipped rows in ``[0, i)``.

    z3 accepts one definition of a recursive function per context, hence the cache.
    """
    skipped = z3.Function("skipped", INT, z3.BoolSort())
    sk = z3.RecFunction("sk", INT, INT)
    i = z3.Int("i")
    z3.RecAddDefinition(sk, [i], z3.If(i <= 0, 0, sk(i - 1) + z3.If(skipped(i - 1), 1, 0)))
    return skipped, sk


def _skip_segment() -> list[Obligation]:
    skipped, sk = _skip_count()
    pos, x, n = _ints("pos x n")

    def claim(n: z3.ArithRef) -> z3.BoolRef:
        every_skipped = z3.ForAll([x], z3.Implies(_within(x, pos, pos + n), skipped(x)))
        return z3.Implies(z3.And(pos >= 0, every_skipped), sk(pos + n) == sk(pos) + n)

    return induction("n skipped rows after pos add n to the count", n, claim)


def _skip_lipschitz() -> list[Obligation]:
    _, sk = _skip_count()
    p, d = _ints("p d")

    def claim(d: z3.ArithRef) -> z3.BoolRef:
        return z3.Implies(p >= 0, z3.And(sk(p + d) - sk(p) >= 0, sk(p + d) - sk(p) <= d))

    return induction("0 <= sk(p+d) - sk(p) <= d", d, claim)


def _skip_take() -> list[Obligation]:
    skipped, sk = _skip_count()
    c, pos, p = _ints("c pos p")
    # Instance of the segment lemma for the skipped gap [pos, p) that _peek jumps over.
    gap = sk(p) == sk(pos) + (p - pos)
    nc, npos = _take(c, p)
    return [
        (
            "after yielding the first non-skipped row p >= pos, positions - samples = skipped rows before it",
            z3.Implies(
                z3.And(pos >= 0, pos <= p, pos - c == sk(pos), gap, z3.Not(skipped(p))), npos - nc == sk(npos)
            ),
        ),
    ]


def _skip_join() -> list[Obligation]:
    _, sk = _skip_count()
    p1, p2 = _ints("p1 p2")
    c1, c2 = p1 - sk(p1), p2 - sk(p2)
    lipschitz = z3.And(
        z3.Implies(p1 <= p2, z3.And(sk(p2) - sk(p1) >= 0, sk(p2) - sk(p1) <= p2 - p1)),
        z3.Implies(p2 <= p1, z3.And(sk(p1) - sk(p2) >= 0, sk(p1) - sk(p2) <= p1 - p2)),
    )
    top = enc.imax(p1, p2)
    return [
        (
            "the element-wise max of two accounted states is accounted (the same state wins both fields)",
            z3.Implies(z3.And(p1 >= 0, p2 >= 0, lipschitz), enc.imax(c1, c2) == top - sk(top)),
        )
    ]


# ---------------------------------------------------------------- CatchUpInv


@functools.cache
def _potential() -> z3.FuncDeclRef:
    """``phi(a, M, n) = sum over i < n of (M - a[i])``: the rows still missing to reach ``M``."""
    phi = z3.RecFunction("phi", INT_ARRAY, INT, INT, INT)
    a = z3.Array("a_def", INT, INT)
    top, n = _ints("M_def n_def")
    z3.RecAddDefinition(phi, [a, top, n], z3.If(n <= 0, 0, phi(a, top, n - 1) + top - a[n - 1]))
    return phi


def _catch_up_pop() -> list[Obligation]:
    phi = _potential()
    a = z3.Array("a", INT, INT)
    top, n, q, i = _ints("M n q i")
    after = z3.Store(a, q, a[q] + 1)

    def store_claim(n: z3.ArithRef) -> z3.BoolRef:
        return z3.Implies(q >= 0, phi(after, top, n) == phi(a, top, n) - z3.If(q < n, 1, 0))

    bounded = z3.ForAll([i], z3.Implies(_within(i, 0, n), a[i] <= top))
    bounded_after = z3.ForAll([i], z3.Implies(_within(i, 0, n), after[i] <= top))
    popped = z3.And(_within(q, 0, n), a[q] < top)
    return [
        *induction("one more row for split q lowers the missing-row count by one", n, store_claim),
        (
            "a popped split (count < M) stays <= M, so every owned count stays <= M",
            z3.Implies(z3.And(bounded, popped), bounded_after),
        ),
        (
            "a split is pushed back iff it is still below M (the heap holds exactly the lagging splits)",
            z3.Implies(popped, (after[q] < top) == (a[q] + 1 < top)),
        ),
    ]


def _catch_up_done() -> list[Obligation]:
    phi = _potential()
    a = z3.Array("a", INT, INT)
    top, n, i = _ints("M n i")

    def claim(n: z3.ArithRef) -> z3.BoolRef:
        bounded = z3.ForAll([i], z3.Implies(_within(i, 0, n), a[i] <= top))
        level = z3.ForAll([i], z3.Implies(_within(i, 0, n), a[i] == top))
        return z3.Implies(bounded, z3.And(phi(a, top, n) >= 0, z3.Implies(phi(a, top, n) == 0, level)))

    return induction("counts <= M with no missing row are all M", n, claim)


# ---------------------------------------------------------------- CanonicalOrderProp


def _canonical_keys() -> list[Obligation]:
    c, s, top, t, s1, s2, h0, h1 = _ints("c s M t s1 s2 h0 h1")
    popped = (c, s)
    return [
        (
            "a re-pushed catch-up key (c+1, s) is above the popped key (c, s)",
            _lex_gt((c + 1, s), popped),
        ),
        (
            "keys left in the heap (other splits, >= the popped minimum) are strictly above it",
            z3.Implies(
                z3.And(h1 != s, z3.Or(_lex_gt((h0, h1), popped), z3.And(h0 == c, h1 == s))),
                _lex_gt((h0, h1), popped),
            ),
        ),
        (
            "every catch-up key (c < M) is below every cycle key (M + t, s')",
            z3.Implies(z3.And(c < top, t >= 0), _lex_gt((top + t, s1), popped)),
        ),
        (
            "inside cycle t keys rise with the split id; the last key of cycle t is below the first of t+1",
            z3.And(
                z3.Implies(s1 < s2, _lex_gt((top + t, s2), (top + t, s1))),
                _lex_gt((top + t + 1, s1), (top + t, s2)),
            ),
        ),
    ]


# ---------------------------------------------------------------- MergeLatticeInv


def _row_lattice() -> list[Obligation]:
    a, b, c = (z3.Array(name, INT, INT) for name in "ABC")
    i = z3.Int("i")

    def join(x: z3.ArrayRef, y: z3.ArrayRef) -> z3.ArrayRef:
        return z3.Lambda([i], enc.imax(x[i], y[i]))

    return [
        ("element-wise max is commutative (any split count)", join(a, b) == join(b, a)),
        ("element-wise max is associative", join(join(a, b), c) == join(a, join(b, c))),
        ("element-wise max is idempotent", join(a, a) == a),
    ]


def _packed_lattice() -> list[Obligation]:
    # One split of three packed states; the buffer is a function of (emitted, consumed) on states of one run.
    buffer = z3.Function("buffer", INT, INT, INT)
    e1, c1, e2, c2, e3, c3 = _ints("e1 c1 e2 c2 e3 c3")

    def state(e: z3.ArithRef, c: z3.ArithRef) -> tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef]:
        return e, c, buffer(e, c)

    def join(
        x: tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef], y: tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef]
    ) -> tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef]:
        take_y = _lex_gt((y[0], y[1]), (x[0], x[1]))
        return (z3.If(take_y, y[0], x[0]), z3.If(take_y, y[1], x[1]), z3.If(take_y, y[2], x[2]))

    def same(x: tuple[z3.ArithRef, ...], y: tuple[z3.ArithRef, ...]) -> z3.BoolRef:
        return z3.And(*(u == v for u, v in zip(x, y)))

    a, b, c = state(e1, c1), state(e2, c2), state(e3, c3)
    return [
        ("lexicographic owner choice is commutative", same(join(a, b), join(b, a))),
        ("lexicographic owner choice is associative", same(join(join(a, b), c), join(a, join(b, c)))),
        ("lexicographic owner choice is idempotent", same(join(a, a), a)),
    ]


# ---------------------------------------------------------------- MergeExactProp


def _fold_max() -> list[Obligation]:
    value = z3.Function("X", INT, INT)
    fold = z3.RecFunction("fold_max", INT, INT)
    n, v, r = _ints("n v r")
    nd = z3.Int("n_def")
    z3.RecAddDefinition(fold, [nd], z3.If(nd <= 1, value(0), enc.imax(fold(nd - 1), value(nd - 1))))

    def claim(n: z3.ArithRef) -> z3.BoolRef:
        bound = z3.ForAll([r], z3.Implies(_within(r, 0, n), value(r) <= v))
        attained = z3.Exists([r], z3.And(_within(r, 0, n), value(r) == v))
        return z3.Implies(bound, z3.And(fold(n) <= v, z3.Implies(attained, fold(n) == v)))

    return induction("max over n ranks of values <= v, one equal to v, is v", n, claim, base=1)


def _merge_owner() -> list[Obligation]:
    (s_, w_, _, k, _), hyp = _topology()
    own, start = z3.Array("V", INT, INT), z3.Array("U", INT, INT)
    x, r = _ints("x r")

    def reported(r: enc.Num, x: z3.ArithRef) -> z3.ArithRef:
        """Rank r reports its own progress for its splits and the loaded value for the others (D1)."""
        return z3.If(_within(x, r * k, (r + 1) * k), own[x], start[x])

    owner = enc.idiv(x, k)
    monotone = start[x] <= own[x]
    return [
        (
            "no rank reports more than the owner's progress for split x",
            z3.Implies(z3.And(hyp, _within(x, 0, s_), monotone, _within(r, 0, w_)), reported(r, x) <= own[x]),
        ),
        (
            "rank x div K (a valid rank) reports the owner's progress for split x",
            z3.Implies(
                z3.And(hyp, _within(x, 0, s_)), z3.And(_within(owner, 0, w_), reported(owner, x) == own[x])
            ),
        ),
    ]


def _packed_fold() -> list[Obligation]:
    emitted, consumed = z3.Function("E", INT, INT), z3.Function("C", INT, INT)
    fe, fc = z3.RecFunction("fold_e", INT, INT), z3.RecFunction("fold_c", INT, INT)
    nd = z3.Int("n_def")
    take_last = _lex_gt((emitted(nd - 1), consumed(nd - 1)), (fe(nd - 1), fc(nd - 1)))
    z3.RecAddDefinition(fe, [nd], z3.If(nd <= 1, emitted(0), z3.If(take_last, emitted(nd - 1), fe(nd - 1))))
    z3.RecAddDefinition(fc, [nd], z3.If(nd <= 1, consumed(0), z3.If(take_last, consumed(nd - 1), fc(nd - 1))))
    n, e, c, r = _ints("n e c r")

    def claim(n: z3.ArithRef) -> z3.BoolRef:
        bound = z3.ForAll(
            [r], z3.Implies(_within(r, 0, n), z3.Not(_lex_gt((emitted(r), consumed(r)), (e, c))))
        )
        attained = z3.Exists([r], z3.And(_within(r, 0, n), emitted(r) == e, consumed(r) == c))
        folded = (fe(n), fc(n))
        return z3.Implies(
            bound,
            z3.And(z3.Not(_lex_gt(folded, (e, c))), z3.Implies(attained, z3.And(fe(n) == e, fc(n) == c))),
        )

    return induction(
        "the packed owner choice over n ranks returns the largest (emitted, consumed)", n, claim, base=1
    )


# ---------------------------------------------------------------- ConsumerCommitProp


def _commit() -> list[Obligation]:
    u, v0, v1 = _ints("u v0 v1")
    c, pos, p = _ints("c pos p")
    nc, npos = _take(c, p)
    return [
        (
            "a worker's progress only grows: yielding p >= pos raises samples and positions",
            z3.Implies(z3.And(c >= 0, c <= pos, pos <= p), z3.And(nc > c, npos > pos)),
        ),
        (
            "committing another worker's snapshot (start value u <= v0) keeps the parent's v0",
            z3.Implies(u <= v0, enc.imax(v0, u) == v0),
        ),
        (
            "committing the same worker's next snapshot v1 >= v0 gives v1",
            z3.Implies(v0 <= v1, enc.imax(v0, v1) == v1),
        ),
    ]


# ---------------------------------------------------------------- ElasticDeterminismProp


def _step_composition() -> list[Obligation]:
    (s_, w_, nw, k, p), hyp = _topology()
    g, c, cycle, slot, r, w, x = _ints("g c cycle slot r w x")
    hyp = z3.And(hyp, c >= 1, g >= 0)
    lo, hi = enc.batch_range(g, p, c)
    item = enc.item_of(cycle, slot, p)
    split = enc.worker_block(r, w, k, p)[0] + slot
    # Witness for the backward direction: the (rank, worker, slot) owning split x.
    wr = enc.idiv(x, k)
    ww = enc.idiv(enc.imod(x, k), p)
    wslot = x - enc.worker_block(wr, ww, k, p)[0]
    witem = enc.item_of(cycle, wslot, p)
    return [
        (
            "a worker's batch g of P*c items holds exactly its cycles [g*c, (g+1)*c)",
            z3.Implies(
                z3.And(hyp, _within(slot, 0, p), cycle >= 0),
                _within(item, lo, hi) == _within(cycle, g * c, (g + 1) * c),
            ),
        ),
        (
            "every (split, cycle) pair in some worker's batch g is in [0, S) x [g*c, (g+1)*c)",
            z3.Implies(
                z3.And(
                    hyp,
                    _within(r, 0, w_),
                    _within(w, 0, nw),
                    _within(slot, 0, p),
                    cycle >= 0,
                    _within(item, lo, hi),
                ),
                z3.And(_within(split, 0, s_), _within(cycle, g * c, (g + 1) * c)),
            ),
        ),
        (
            "every pair in [0, S) x [g*c, (g+1)*c) is in batch g of the worker owning the split",
            z3.Implies(
                z3.And(hyp, _within(x, 0, s_), _within(cycle, g * c, (g + 1) * c)),
                z3.And(
                    _within(wr, 0, w_),
                    _within(ww, 0, nw),
                    _within(wslot, 0, p),
                    _within(witem, lo, hi),
                ),
            ),
        ),
    ]


# ---------------------------------------------------------------- packing


def _conservation() -> list[Obligation]:
    seq = z3.SeqSort(INT)
    delivered, buffer, stream, doc = (z3.Const(name, seq) for name in ("D", "B", "T", "doc"))
    eos, length = _ints("eos L")
    held = z3.Concat(delivered, buffer) == stream
    real = enc.imin(length, z3.Length(buffer))
    head = z3.SubSeq(buffer, 0, real)
    rest = z3.SubSeq(buffer, real, z3.Length(buffer) - real)
    return [
        (
            "fill: appending doc + [EOS] to the buffer appends it to the pulled stream",
            z3.Implies(
                held,
                z3.Concat(delivered, z3.Concat(buffer, doc, z3.Unit(eos)))
                == z3.Concat(stream, doc, z3.Unit(eos)),
            ),
        ),
        (
            "emit: delivering the first min(L, |B|) buffered tokens keeps delivered ++ buffer == stream",
            z3.Implies(
                z3.And(held, length >= 1),
                z3.And(
                    z3.Concat(z3.Concat(delivered, head), rest) == stream,
                    z3.Length(head) == real,
                    real <= length,
                ),
            ),
        ),
        (
            "a padded block (fewer than L real tokens) leaves the buffer empty",
            z3.Implies(z3.And(length >= 1, real < length), z3.Length(rest) == 0),
        ),
    ]


def _doc_ids() -> list[Obligation]:
    x, base, k, length, delivered, buffered = _ints("x base k L D B")
    return [
        (
            "a start counted in buffer coordinates (0 < x - base <= k) is one counted in stream coordinates",
            (z3.And(x - base > 0, x - base <= k)) == z3.And(base < x, x <= base + k),
        ),
        (
            "emit keeps a start iff it lies beyond the emitted block, and re-bases it by L",
            z3.And((x - base >= length) == (x >= base + length), (x - base) - length == x - (base + length)),
        ),
        (
            "fill records len(buffer); in stream coordinates that is the stream length (base = delivered)",
            z3.Implies(base == delivered, base + buffered == delivered + buffered),
        ),
    ]


def _budget_loop() -> list[Obligation]:
    bpe, s_, b, e, e0 = _ints("bpe S b e e0")
    hyp = z3.And(s_ >= 1, b >= 1, bpe == b * s_)
    return [
        (
            "b = blocks_per_epoch / S is exact: S splits of b blocks are the whole epoch",
            z3.Implies(hyp, s_ * b == bpe),
        ),
        ("loop invariant e <= b is kept by one more cycle", z3.Implies(z3.And(hyp, e < b), e + 1 <= b)),
        ("the loop exits with e == b", z3.Implies(z3.And(hyp, e >= 0, e <= b, z3.Not(e < b)), e == b)),
        (
            "from an aligned start e0 <= b the loop runs b - e0 cycles, one block per split each",
            z3.Implies(z3.And(hyp, e0 >= 0, e0 <= b), z3.And(b - e0 >= 0, e0 + (b - e0) == b)),
        ),
    ]


def _auto_budget() -> list[Obligation]:
    blocks, s_, n = _ints("blocks S n")
    rounded = enc.auto_round(blocks, s_)
    k = enc.auto_sample_size(n, s_)
    return [
        (
            "max(S, blocks - blocks % S) is a positive multiple of S, for every integer blocks",
            z3.Implies(s_ >= 1, z3.And(rounded >= s_, enc.imod(rounded, s_) == 0)),
        ),
        (
            "the sample size of a non-empty split is in [1, n]",
            z3.Implies(z3.And(s_ >= 1, n >= 1), z3.And(k >= 1, k <= n)),
        ),
    ]


def _lemma(invariant: str, name: str, statement: str, build: Callable[[], list[Obligation]]) -> Lemma:
    return Lemma(invariant, name, statement, build)


LEMMAS: tuple[Lemma, ...] = (
    _lemma(
        "PartitionInv",
        "blocks_tile",
        "the (rank, worker) blocks tile 0..S-1 in order, P >= 1 splits each",
        _partition,
    ),
    _lemma(
        "SplitSizeInv",
        "cut_ranges",
        "cutting N >= S rows gives S contiguous ranges of m = N div S",
        _split_size,
    ),
    _lemma(
        "ProgressBoundsInv",
        "bounds_inductive",
        "yielding a row and joining keep 0 <= c <= p <= L",
        _progress_bounds,
    ),
    _lemma(
        "SkipAccountingInv",
        "skipped_segment",
        "a run of n skipped rows adds n to the skip count",
        _skip_segment,
    ),
    _lemma(
        "SkipAccountingInv",
        "skip_count_lipschitz",
        "the skip count grows by 0..d over d positions",
        _skip_lipschitz,
    ),
    _lemma(
        "SkipAccountingInv",
        "take_step",
        "yielding the next non-skipped row keeps p - c = skipped",
        _skip_take,
    ),
    _lemma("SkipAccountingInv", "join_step", "element-wise max keeps p - c = skipped", _skip_join),
    _lemma("CatchUpInv", "pop_step", "each catch-up pop lowers the missing-row count by one", _catch_up_pop),
    _lemma("CatchUpInv", "zero_missing", "no missing row means every owned split is at M", _catch_up_done),
    _lemma(
        "CanonicalOrderProp",
        "key_order",
        "catch-up then cycles emit (sample, split) keys in order",
        _canonical_keys,
    ),
    _lemma("MergeLatticeInv", "row_join", "element-wise max is a semilattice join", _row_lattice),
    _lemma(
        "MergeLatticeInv",
        "packed_join",
        "the lexicographic owner choice is a semilattice join",
        _packed_lattice,
    ),
    _lemma(
        "ElasticDeterminismProp",
        "step_composition",
        "global step g is [0, S) x [g*c, (g+1)*c)",
        _step_composition,
    ),
    _lemma(
        "MergeExactProp",
        "owner_reports_max",
        "the owning rank reports the largest value of a split",
        _merge_owner,
    ),
    _lemma("MergeExactProp", "fold_max", "max over ranks is the attained upper bound", _fold_max),
    _lemma("MergeExactProp", "packed_fold", "packed merge picks the attained largest key", _packed_fold),
    _lemma(
        "ConsumerCommitProp",
        "commit_step",
        "committing a snapshot keeps each split at its owner's latest",
        _commit,
    ),
    _lemma(
        "PackingConservationInv",
        "stream_steps",
        "fill and emit keep delivered ++ buffer == stream",
        _conservation,
    ),
    _lemma("DocIdsInv", "coordinates", "buffer and stream coordinates of document starts agree", _doc_ids),
    _lemma(
        "PackingBudgetProp", "emit_loop", "the emit loop ends with exactly b blocks per split", _budget_loop
    ),
    _lemma("AutoBudgetInv", "rounding", "the auto estimate rounds to a positive multiple of S", _auto_budget),
)
