"""Bounded checks of the local permutation: every small table, clump and window size; sampled huge ones.

For every table size ``N`` up to a bound, every clump size ``C`` and window size
``W`` up to bounds (and one ``C`` and one ``W`` larger than the table), every
split count dividing ``N`` and one that does not, and several seeds, the model
must satisfy ``LocalBijectionInv`` and ``LocalLocalityInv`` on every slot and
every window; the model's clumped sequence must equal the sequence built here
from the clump order by concatenation (not by the model's case formula); and
the run bound must be reached by some window of the enumeration, with and
without a short clump (so the bound is not loose). ``LocalDegeneracyInv`` is
checked on every slot of every small table and on sampled slots of tables up to
``2**64`` rows, where the other two are checked on sampled slots and windows.
"""

from __future__ import annotations

import random

from elastic_loader.spec import SpecValueError
from elastic_loader.spec.computed import computed_index
from elastic_loader.spec.invariants import LocalBijectionInv, LocalDegeneracyInv, LocalLocalityInv
from elastic_loader.spec.local import LocalPermutation, clumped_index, local_run_bound, local_runs

from .framework import BoundedCheck, Bounds, Recorder
from .universes import divisors

SEEDS: tuple[tuple[int, int], ...] = ((0, 0), (2**64 - 1, 0), (7, 3))
LARGE_ROWS: tuple[int, ...] = (2**40, 2**40 + 1, 3**25, 2**64 - 1, 2**64)


def _split_counts(n: int) -> list[int]:
    non_divisor = next((s for s in range(2, n) if n % s), None)
    return sorted({*divisors(n), *([non_divisor] if non_divisor else [])})


def _concatenated(perm: LocalPermutation) -> list[int]:
    """Clumps ``g(0), g(1), ...`` of ``[0, N)`` concatenated, each in storage order (built here)."""
    out: list[int] = []
    for k in range(perm.clump_count):
        clump = computed_index(perm.clumps, k)
        out += range(clump * perm.clump, min((clump + 1) * perm.clump, perm.num_rows))
    return out


def _rejects(rec: Recorder, code: str, *args: int) -> None:
    try:
        LocalPermutation(*args)
    except SpecValueError as exc:
        rec.require(exc.code == code, f"rejected with {exc.code}, expected {code}")
        return
    rec.require(False, f"accepted LocalPermutation{args} (expected {code})")


def check_local_permutation(rec: Recorder, b: Bounds) -> None:
    """Both predicates on every slot and window of every small configuration; tightness of the bound."""
    reached = {False: False, True: False}
    for seed, epoch in rec.progress(SEEDS[: b["seeds"]], "seeds"):
        for n in range(1, b["rows"] + 1):
            for clump in [*range(1, b["clump"] + 1), n + 1]:
                for window in [*range(1, b["window"] + 1), n + 1]:
                    for s in _split_counts(n):
                        rec.at(seed=seed, epoch=epoch, rows=n, clump=clump, window=window, num_splits=s)
                        perm = LocalPermutation(n, s, seed, epoch, clump, window)
                        sequence = [clumped_index(perm, i) for i in range(n)]
                        rec.require(
                            sequence == _concatenated(perm), "Q is not the concatenation of the clumps"
                        )
                        if rec.invariant == "LocalBijectionInv":
                            rec.apply(LocalBijectionInv, perm)
                            continue
                        rec.apply(LocalLocalityInv, perm)
                        for k in range(s):
                            for q in range(perm.window_count):
                                if len(local_runs(perm, k, q)) == local_run_bound(perm, q) > 2:
                                    reached[n % clump != 0] = True
    if rec.invariant == "LocalLocalityInv":
        rec.require(all(reached.values()), f"the run bound above 2 is never reached: {reached}")
    for args, code in (
        ((10, 2, 0, 0, 0, 1), "local_clump_out_of_range"),
        ((10, 2, 0, 0, 1, 0), "local_window_out_of_range"),
    ):
        _rejects(rec, code, *args)
    _check_large(rec, b["samples"])


def _check_large(rec: Recorder, samples: int) -> None:
    """Tables too large to enumerate: sampled slots and windows."""
    rng = random.Random(11)
    for n in LARGE_ROWS:
        for s, clump, window in ((1, 256, 1024), (7, 3, 5), (4096, 2**33, 64)):
            rec.at(rows=n, num_splits=s, clump=clump, window=window)
            perm = LocalPermutation(n, s, 1234, 3, clump, window)
            m, last = perm.split_len, perm.window_count - 1
            if rec.invariant == "LocalBijectionInv":
                slots = [
                    (0, 0),
                    (s - 1, m - 1),
                    *((rng.randrange(s), rng.randrange(m)) for _ in range(samples)),
                ]
                rec.apply(LocalBijectionInv, perm, slots)
            else:
                windows = [
                    (0, 0),
                    (s - 1, last),
                    *((rng.randrange(s), rng.randrange(last + 1)) for _ in range(2)),
                ]
                rec.apply(LocalLocalityInv, perm, windows)


def check_degeneracy(rec: Recorder, b: Bounds) -> None:
    """``LocalDegeneracyInv`` on every slot of every table of ``<= rows`` rows and every split count
    dividing it (and one not), per seed; sampled slots of tables up to ``2**64`` rows."""
    for seed, epoch in rec.progress(SEEDS[: b["seeds"]], "seeds"):
        for n in range(1, b["rows"] + 1):
            for s in _split_counts(n):
                rec.at(seed=seed, epoch=epoch, rows=n, num_splits=s)
                rec.apply(LocalDegeneracyInv, n, s, seed, epoch)
        rng = random.Random(seed)
        for n in LARGE_ROWS:
            for s in (1, 9):
                rec.at(seed=seed, epoch=epoch, rows=n, num_splits=s)
                m = n // s
                slots = [
                    (0, 0),
                    (s - 1, m - 1),
                    *((rng.randrange(s), rng.randrange(m)) for _ in range(b["samples"])),
                ]
                rec.apply(LocalDegeneracyInv, n, s, seed, epoch, slots)


_DESCRIBE = (
    "{seeds} seeds, every N<={rows}, C<={clump} and C=N+1, W<={window} and W=N+1, every split count "
    "dividing N and one that does not (Q against the clumps concatenated); {samples} sampled slots of 15 "
    "tables of 2**40..2**64 rows"
)

LOCAL_BIJECTION = BoundedCheck(
    "LocalBijectionInv",
    _DESCRIBE,
    quick={"seeds": 1, "rows": 8, "clump": 4, "window": 4, "samples": 4},
    full={"seeds": 3, "rows": 24, "clump": 8, "window": 9, "samples": 100},
    run=check_local_permutation,
)

LOCAL_LOCALITY = BoundedCheck(
    "LocalLocalityInv",
    _DESCRIBE + " (every window; the bound reached with and without a short clump)",
    quick={"seeds": 1, "rows": 10, "clump": 4, "window": 6, "samples": 4},
    full={"seeds": 3, "rows": 30, "clump": 8, "window": 12, "samples": 100},
    run=check_local_permutation,
)

LOCAL_DEGENERACY = BoundedCheck(
    "LocalDegeneracyInv",
    "{seeds} seeds, every slot of every N<={rows} and split count dividing N (and one not); "
    "{samples} sampled slots of 10 tables of 2**40..2**64 rows (5 sizes, 1 and 9 splits)",
    quick={"seeds": 1, "rows": 30, "samples": 10},
    full={"seeds": 3, "rows": 120, "samples": 500},
    run=check_degeneracy,
)
