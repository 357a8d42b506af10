"""The ``row_order`` family: the rows one row-mode iterator yields, in order, and how it ends.

Input: a permutation, faults, the owned splits and a start state; output: the
rows, the state after each, and the end. Every case is checked against every
row-mode invariant that applies to one iterator run (:func:`check_row_run`).

Rules of this module (the same for every family module): the input is a frozen
dataclass with a JSON codec (``_encode``/``_decode``) and a model run
(``_run``) that checks the invariants of the result; :func:`cases` builds the
cases, deterministically, in the order the vector file lists them, and the
first line of its docstring is the family's summary in that file.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ....spec import invariants as inv
from ....spec.errors import SpecError
from ....spec.rows import Exhausted, Faults, RowRun, RowState, initial_row_state, iterate_rows
from ....spec.topology import Permutation
from ..codec import (
    JsonObject,
    as_ints,
    dec_faults,
    dec_permutation,
    dec_row_state,
    enc_end,
    enc_faults,
    enc_permutation,
    enc_row,
    enc_row_state,
    error_json,
)
from ..plumbing import (
    NO_FAULTS,
    CaseDef,
    Codec,
    attempt,
    family,
    faults_of,
    make_case,
    random_faults,
    random_perm,
    rows_after,
    seq_perm,
)


@dataclass(frozen=True)
class RowOrderInput:
    permutation: Permutation
    faults: Faults
    owned: tuple[int, ...]
    start: RowState


def _encode(x: RowOrderInput) -> JsonObject:
    return {
        "permutation": enc_permutation(x.permutation),
        "faults": enc_faults(x.faults),
        "owned": list(x.owned),
        "start": enc_row_state(x.start),
    }


def _decode(j: JsonObject) -> RowOrderInput:
    return RowOrderInput(
        dec_permutation(j["permutation"]),
        dec_faults(j["faults"]),
        as_ints(j["owned"]),
        dec_row_state(j["start"]),
    )


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


def cases() -> list[CaseDef]:
    """Which rows one iterator yields, in which order, with which progress, and how it ends."""

    def case(
        name: str,
        description: str,
        perm: Permutation,
        faults: Faults,
        owned: Sequence[int],
        start: RowState | None = None,
    ) -> CaseDef:
        state = initial_row_state(len(perm)) if start is None else start
        return make_case(
            "row_order", CODEC, name, description, RowOrderInput(perm, faults, tuple(owned), state)
        )

    p1 = seq_perm(1, 5)
    p3 = random_perm(random.Random(3), 3, 4)
    p4 = random_perm(random.Random(4), 4, 5)
    all4 = (0, 1, 2, 3)
    cases = [
        case("single_split_fresh", "one split read from the start to its end", p1, NO_FAULTS, (0,)),
        case(
            "three_splits_round_robin",
            "one row of every owned split per cycle, in split order",
            p3,
            NO_FAULTS,
            (0, 1, 2),
        ),
        case(
            "worker_owns_one_split_of_four",
            "unowned splits keep the values they were loaded with",
            p4,
            NO_FAULTS,
            (2,),
            RowState((3, 1, 0, 2), (3, 2, 0, 2)),
        ),
        case("worker_owns_two_middle_splits", "an iterator over splits 1 and 2 of 4", p4, NO_FAULTS, (1, 2)),
        case(
            "resume_at_step_boundary",
            "every owned split has the same count: no catch-up",
            p4,
            NO_FAULTS,
            all4,
            rows_after(p4, NO_FAULTS, all4, 8),
        ),
        case(
            "catch_up_from_uneven_counts",
            "counts [2,0,1,2]: split 1, split 1, split 2, then cycles",
            p4,
            NO_FAULTS,
            all4,
            RowState((2, 0, 1, 2), (2, 0, 1, 2)),
        ),
        case(
            "catch_up_ties_go_to_lower_split_id",
            "counts [1,0,0,1]: split 1 before split 2",
            p4,
            NO_FAULTS,
            all4,
            RowState((1, 0, 0, 1), (1, 0, 0, 1)),
        ),
        case(
            "catch_up_lagging_by_several_rows",
            "one split lags three rows behind the others",
            p4,
            NO_FAULTS,
            all4,
            RowState((3, 3, 0, 3), (3, 3, 0, 3)),
        ),
        case(
            "catch_up_mid_cycle_checkpoint",
            "resume after 10 rows of a one-rank run (mid-cycle)",
            p4,
            NO_FAULTS,
            all4,
            rows_after(p4, NO_FAULTS, all4, 10),
        ),
        case(
            "catch_up_skips_rows",
            "the lagging split skips rows while catching up",
            p4,
            faults_of(skipped=[p4[1][0], p4[1][2]]),
            all4,
            RowState((2, 0, 2, 2), (2, 0, 2, 2)),
        ),
        case(
            "catch_up_hits_raising_row",
            "a lagging split's next row raises: the run ends during catch-up",
            p4,
            faults_of(raising=[p4[2][1]]),
            all4,
            RowState((2, 0, 0, 2), (2, 0, 0, 2)),
        ),
        case(
            "catch_up_exhausts_lagging_split",
            "a lagging split has only skipped rows left",
            p4,
            faults_of(skipped=[p4[1][3], p4[1][4]]),
            all4,
            RowState((4, 3, 4, 4), (4, 3, 4, 4)),
        ),
        case(
            "skip_first_row_counts_position",
            "a skipped row before a yielded row is counted in positions",
            p3,
            faults_of(skipped=[p3[0][0]]),
            (0, 1, 2),
        ),
        case(
            "skip_trailing_rows_not_counted",
            "skipped rows after the last yielded row are not counted",
            p3,
            faults_of(skipped=[p3[0][3]]),
            (0, 1, 2),
        ),
        case(
            "skips_end_epoch_early_for_other_splits",
            "a split with fewer usable rows ends the run; the others' last rows are never yielded",
            p4,
            faults_of(skipped=[p4[3][0], p4[3][1]]),
            all4,
        ),
        case(
            "resume_with_skips_behind",
            "resume from positions that include skipped rows",
            p4,
            faults_of(skipped=[p4[0][1], p4[2][0]]),
            all4,
            rows_after(p4, faults_of(skipped=[p4[0][1], p4[2][0]]), all4, 6),
        ),
        case(
            "raise_on_very_first_row",
            "the first row of the first split raises: nothing is yielded",
            p3,
            faults_of(raising=[p3[0][0]]),
            (0, 1, 2),
        ),
        case(
            "raise_discards_the_whole_cycle",
            "a raising row in the last split stops the cycle before any of its rows",
            p3,
            faults_of(raising=[p3[2][1]]),
            (0, 1, 2),
        ),
        case(
            "raise_after_skips",
            "skipped rows before a raising row are passed over",
            p3,
            faults_of(skipped=[p3[1][1], p3[1][2]], raising=[p3[1][3]]),
            (0, 1, 2),
        ),
        case(
            "exhausted_split_before_raising_split",
            "the first owned split that cannot continue decides",
            p3,
            faults_of(skipped=[p3[0][2], p3[0][3]], raising=[p3[1][2]]),
            (0, 1, 2),
        ),
        case(
            "raising_split_before_exhausted_split",
            "the first owned split that cannot continue decides",
            p3,
            faults_of(skipped=[p3[1][2], p3[1][3]], raising=[p3[0][2]]),
            (0, 1, 2),
        ),
        case(
            "raising_row_on_unowned_split_is_never_read",
            "faults of other workers' splits do not matter",
            p4,
            faults_of(raising=[p4[0][0], p4[3][0]]),
            (1, 2),
        ),
        case(
            "resume_at_epoch_end",
            "every owned split is at its end: nothing is yielded",
            p3,
            NO_FAULTS,
            (0, 1, 2),
            RowState((4, 4, 4), (4, 4, 4)),
        ),
        case(
            "all_rows_skipped",
            "every row is dropped: nothing is yielded",
            p1,
            faults_of(skipped=list(p1[0])),
            (0,),
        ),
        case(
            "no_owned_splits",
            "an iterator that owns nothing ends at once and changes nothing",
            p3,
            NO_FAULTS,
            (),
            RowState((1, 0, 2), (1, 0, 3)),
        ),
        case(
            "uniform_legacy_resume",
            "a legacy uniform count resumes every split at the same row",
            p4,
            NO_FAULTS,
            all4,
            RowState((3, 3, 3, 3), (3, 3, 3, 3)),
        ),
        case(
            "error_position_beyond_split_end",
            "a position past the split end is rejected",
            p3,
            NO_FAULTS,
            (0, 1, 2),
            RowState((0, 0, 0), (0, 5, 0)),
        ),
        case(
            "error_owned_not_ascending", "owned splits must be ascending and distinct", p3, NO_FAULTS, (2, 1)
        ),
        case("error_owned_repeated", "owned splits must be ascending and distinct", p3, NO_FAULTS, (1, 1)),
        case(
            "error_state_length",
            "the state has one entry per split",
            p3,
            NO_FAULTS,
            (0, 1),
            RowState((0, 0), (0, 0)),
        ),
        case(
            "error_unequal_split_lengths",
            "every split of a permutation has the same length",
            ((0, 1, 2), (3, 4)),
            NO_FAULTS,
            (0, 1),
        ),
    ]
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
        cases.append(
            case(
                f"random_{seed:02d}",
                f"random(seed={1000 + seed}): {s} splits, owned {list(owned)}",
                perm,
                faults,
                owned,
                start,
            )
        )
    return cases


FAMILY = family("row_order", cases, CODEC)
