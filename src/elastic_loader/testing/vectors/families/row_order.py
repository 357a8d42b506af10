"""The ``row_order`` family: the rows one row-mode iterator yields, in order, and how it ends.

Input: a permutation, faults, the owned splits and a start state; output: the
rows, the state after each, and the end. Every case is checked against every
row-mode invariant that applies to one iterator run (:func:`check_row_run`).

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ....spec.rows import Exhausted, Faults, RowRun, RowState, initial_row_state, iterate_rows
from ....spec.topology import Permutation
from ..codec import FAULTS, INTS, PERMUTATION, ROW_STATE, enc_end, enc_row, enc_row_state, record
from ..plumbing import NO_FAULTS, faults_of, random_faults, random_perm, rows_after, seq_perm
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case


@dataclass(frozen=True)
class RowOrderInput:
    """One row iterator: permutation, faults, owned splits and start state."""

    permutation: Permutation
    faults: Faults
    owned: tuple[int, ...]
    start: RowState


_encode, _decode = record(RowOrderInput, PERMUTATION, FAULTS, INTS, ROW_STATE)


def _skip_accounting_holds(perm: Permutation, faults: Faults, state: RowState) -> bool:
    try:
        inv.SkipAccountingInv(perm, faults, state)
    except inv.InvariantViolation:
        return False
    return True


def check_row_run(perm: Permutation, faults: Faults, owned: Sequence[int], run: RowRun) -> None:
    """Every row-mode invariant that applies to one iterator run.

    An iterator that owns no split is checked directly: it yields nothing and
    ends exhausted (the order predicates speak about owned splits only).
    """
    if not owned:
        if run.rows or not isinstance(run.end, Exhausted):
            raise AssertionError("an iterator without splits must yield nothing and end exhausted")
        return
    split_len = len(perm[0])
    for state in run.states:
        inv.ProgressBoundsInv(state, split_len)
    if _skip_accounting_holds(perm, faults, run.start):
        for state in run.states:
            inv.SkipAccountingInv(perm, faults, state)
    inv.HonestProgressInv(run.start, run, owned)
    inv.CatchUpInv(run.start, run, owned)
    inv.CanonicalOrderProp(perm, faults, owned, run)
    inv.RaisePositionProp(perm, faults, owned, run)


def _run(x: RowOrderInput) -> JsonObject:
    run = attempt(lambda: iterate_rows(x.permutation, x.faults, x.owned, x.start))
    if isinstance(run, SpecError):
        return error_json(run)
    check_row_run(x.permutation, x.faults, x.owned, run)
    return {
        "rows": [enc_row(y) for y in run.rows],
        "states": [enc_row_state(s) for s in run.states],
        "end": enc_end(run.end),
    }


CODEC = Codec(_encode, _decode, _run)


_P1 = seq_perm(1, 5)
_P3 = random_perm(random.Random(3), 3, 4)
_P4 = random_perm(random.Random(4), 4, 5)
_ALL4 = (0, 1, 2, 3)


def _case(
    name: str,
    description: str,
    perm: Permutation,
    faults: Faults,
    owned: Sequence[int],
    start: RowState | None = None,
) -> CaseDef:
    """A case of this family; ``start`` defaults to the initial state."""
    state = initial_row_state(len(perm)) if start is None else start
    return make_case("row_order", CODEC, name, description, RowOrderInput(perm, faults, tuple(owned), state))


def cases() -> list[CaseDef]:
    """Which rows one iterator yields, in which order, with which progress, and how it ends."""
    return [*(_case(*row) for row in _CASES), *_random_cases()]


_BEHIND = faults_of(skipped=[_P4[0][1], _P4[2][0]])
_FIRST_DECIDES = "the first owned split that cannot continue decides"
_DISTINCT = "owned splits must be ascending and distinct"

_Row = tuple[str, str, Permutation, Faults, tuple[int, ...]]
_Resumed = tuple[str, str, Permutation, Faults, tuple[int, ...], RowState]

_CASES: tuple[_Row | _Resumed, ...] = (
    # name, description, permutation, faults, owned splits[, start (default: the initial state)]
    # round robin over the owned splits, unowned splits untouched, a resume at a step boundary
    ("single_split_fresh", "one split read from the start to its end", _P1, NO_FAULTS, (0,)),
    ("three_splits_round_robin", "one row of every owned split per cycle, in split order",
     _P3, NO_FAULTS, (0, 1, 2)),
    ("worker_owns_one_split_of_four", "unowned splits keep the values they were loaded with",
     _P4, NO_FAULTS, (2,), RowState((3, 1, 0, 2), (3, 2, 0, 2))),
    ("worker_owns_two_middle_splits", "an iterator over splits 1 and 2 of 4", _P4, NO_FAULTS, (1, 2)),
    ("resume_at_step_boundary", "every owned split has the same count: no catch-up",
     _P4, NO_FAULTS, _ALL4, rows_after(_P4, NO_FAULTS, _ALL4, 8)),
    # resumes from uneven counts: lagging splits catch up first, in (count, split) order
    ("catch_up_from_uneven_counts", "counts [2,0,1,2]: split 1, split 1, split 2, then cycles",
     _P4, NO_FAULTS, _ALL4, RowState((2, 0, 1, 2), (2, 0, 1, 2))),
    ("catch_up_ties_go_to_lower_split_id", "counts [1,0,0,1]: split 1 before split 2",
     _P4, NO_FAULTS, _ALL4, RowState((1, 0, 0, 1), (1, 0, 0, 1))),
    ("catch_up_lagging_by_several_rows", "one split lags three rows behind the others",
     _P4, NO_FAULTS, _ALL4, RowState((3, 3, 0, 3), (3, 3, 0, 3))),
    ("catch_up_mid_cycle_checkpoint", "resume after 10 rows of a one-rank run (mid-cycle)",
     _P4, NO_FAULTS, _ALL4, rows_after(_P4, NO_FAULTS, _ALL4, 10)),
    ("catch_up_skips_rows", "the lagging split skips rows while catching up",
     _P4, faults_of(skipped=[_P4[1][0], _P4[1][2]]), _ALL4, RowState((2, 0, 2, 2), (2, 0, 2, 2))),
    ("catch_up_hits_raising_row", "a lagging split's next row raises: the run ends during catch-up",
     _P4, faults_of(raising=[_P4[2][1]]), _ALL4, RowState((2, 0, 0, 2), (2, 0, 0, 2))),
    ("catch_up_exhausts_lagging_split", "a lagging split has only skipped rows left",
     _P4, faults_of(skipped=[_P4[1][3], _P4[1][4]]), _ALL4, RowState((4, 3, 4, 4), (4, 3, 4, 4))),
    # skipped rows: counted in positions when a yielded row follows, and ending splits early
    ("skip_first_row_counts_position", "a skipped row before a yielded row is counted in positions",
     _P3, faults_of(skipped=[_P3[0][0]]), (0, 1, 2)),
    ("skip_trailing_rows_not_counted", "skipped rows after the last yielded row are not counted",
     _P3, faults_of(skipped=[_P3[0][3]]), (0, 1, 2)),
    ("skips_end_epoch_early_for_other_splits",
     "a split with fewer usable rows ends the run; the others' last rows are never yielded",
     _P4, faults_of(skipped=[_P4[3][0], _P4[3][1]]), _ALL4),
    ("resume_with_skips_behind", "resume from positions that include skipped rows",
     _P4, _BEHIND, _ALL4, rows_after(_P4, _BEHIND, _ALL4, 6)),
    # raising rows: where the run ends, and which of several ends decides
    ("raise_on_very_first_row", "the first row of the first split raises: nothing is yielded",
     _P3, faults_of(raising=[_P3[0][0]]), (0, 1, 2)),
    ("raise_discards_the_whole_cycle",
     "a raising row in the last split stops the cycle before any of its rows",
     _P3, faults_of(raising=[_P3[2][1]]), (0, 1, 2)),
    ("raise_after_skips", "skipped rows before a raising row are passed over",
     _P3, faults_of(skipped=[_P3[1][1], _P3[1][2]], raising=[_P3[1][3]]), (0, 1, 2)),
    ("exhausted_split_before_raising_split", _FIRST_DECIDES,
     _P3, faults_of(skipped=[_P3[0][2], _P3[0][3]], raising=[_P3[1][2]]), (0, 1, 2)),
    ("raising_split_before_exhausted_split", _FIRST_DECIDES,
     _P3, faults_of(skipped=[_P3[1][2], _P3[1][3]], raising=[_P3[0][2]]), (0, 1, 2)),
    ("raising_row_on_unowned_split_is_never_read", "faults of other workers' splits do not matter",
     _P4, faults_of(raising=[_P4[0][0], _P4[3][0]]), (1, 2)),
    # nothing left to read, nothing owned, a legacy uniform count
    ("resume_at_epoch_end", "every owned split is at its end: nothing is yielded",
     _P3, NO_FAULTS, (0, 1, 2), RowState((4, 4, 4), (4, 4, 4))),
    ("all_rows_skipped", "every row is dropped: nothing is yielded",
     _P1, faults_of(skipped=list(_P1[0])), (0,)),
    ("no_owned_splits", "an iterator that owns nothing ends at once and changes nothing",
     _P3, NO_FAULTS, (), RowState((1, 0, 2), (1, 0, 3))),
    ("uniform_legacy_resume", "a legacy uniform count resumes every split at the same row",
     _P4, NO_FAULTS, _ALL4, RowState((3, 3, 3, 3), (3, 3, 3, 3))),
    # inputs the model rejects
    ("error_position_beyond_split_end", "a position past the split end is rejected",
     _P3, NO_FAULTS, (0, 1, 2), RowState((0, 0, 0), (0, 5, 0))),
    ("error_owned_not_ascending", _DISTINCT, _P3, NO_FAULTS, (2, 1)),
    ("error_owned_repeated", _DISTINCT, _P3, NO_FAULTS, (1, 1)),
    ("error_state_length", "the state has one entry per split",
     _P3, NO_FAULTS, (0, 1), RowState((0, 0), (0, 0))),
    ("error_unequal_split_lengths", "every split of a permutation has the same length",
     ((0, 1, 2), (3, 4)), NO_FAULTS, (0, 1)),
)  # fmt: skip
"""The hand-made cases, a row each, by theme (a comment heads each theme)."""


def _random_cases() -> list[CaseDef]:
    """Seeded random permutations, faults, owned blocks and reachable resume points."""
    cases: list[CaseDef] = []
    for seed in range(16):
        rng = random.Random(1000 + seed)
        s = rng.choice((1, 2, 3, 4, 6))
        perm = random_perm(rng, s, rng.randint(1, 6))
        faults = random_faults(rng, s * len(perm[0]), rng.choice((0.0, 0.15, 0.3)), rng.choice((0.0, 0.05)))
        divisors = [d for d in range(1, s + 1) if s % d == 0]
        block = rng.choice(divisors)
        first = rng.randrange(0, s, block)
        owned = tuple(range(first, first + block))
        origin = tuple(range(s)) if rng.random() < 0.7 else owned
        prior = iterate_rows(perm, faults, origin, initial_row_state(s))
        # Resume somewhere before the prior run's end, so the case usually yields rows.
        start = prior.state_after(rng.randint(0, max(0, len(prior.rows) - 1)))
        description = f"random(seed={1000 + seed}): {s} splits, owned {list(owned)}"
        cases.append(_case(f"random_{seed:02d}", description, perm, faults, owned, start))
    return cases


FAMILY = family("row_order", cases, CODEC)
