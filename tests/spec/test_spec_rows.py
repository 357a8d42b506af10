"""Row mode: progress, catch-up, canonical order and raising rows, against the model alone.

Every run starts from a state the model itself reached (``row_cases``), so the
properties are checked on what an iterator can actually meet after
checkpoints, merges and topology changes.
"""

from __future__ import annotations

from hypothesis import given, strategies as st

from elastic_loader.spec import (
    Exhausted,
    Faults,
    Permutation,
    Raised,
    RowState,
    Yielded,
    cut_splits,
    initial_row_state,
    iterate_rows,
)
from elastic_loader.spec.invariants import (
    CanonicalOrderProp,
    CatchUpInv,
    HonestProgressInv,
    ProgressBoundsInv,
    RaisePositionProp,
    SkipAccountingInv,
)
from elastic_loader.testing.strategies import (
    RowCase,
    RowHistory,
    fault_sets,
    permutations,
    row_cases,
    row_progress,
)

ALL4 = (0, 1, 2, 3)


@st.composite
def progress_cases(draw: st.DrawFn) -> tuple[Permutation, Faults, RowHistory]:
    perm = draw(permutations())
    faults = draw(fault_sets(perm))
    return perm, faults, draw(row_progress(perm, faults))


# ---------------------------------------------------------------- ProgressBoundsInv


@given(row_cases())
def test_ProgressBoundsInv(case: RowCase) -> None:
    for state in (case.run.start, *case.run.states):
        ProgressBoundsInv(state, case.split_len)


@given(progress_cases())
def test_ProgressBoundsInv_after_sessions(
    case: tuple[Permutation, Faults, RowHistory],
) -> None:
    perm, _, progress = case
    ProgressBoundsInv(progress.state, len(perm[0]))


# ---------------------------------------------------------------- SkipAccountingInv


@given(row_cases())
def test_SkipAccountingInv(case: RowCase) -> None:
    for state in (case.run.start, *case.run.states):
        SkipAccountingInv(case.perm, case.faults, state)


@given(row_cases(duplicates=True))
def test_SkipAccountingInv_repeated_rows(case: RowCase) -> None:
    for state in case.run.states:
        SkipAccountingInv(case.perm, case.faults, state)


# ---------------------------------------------------------------- HonestProgressInv


@given(row_cases())
def test_HonestProgressInv(case: RowCase) -> None:
    HonestProgressInv(case.run.start, case.run, case.owned)


# ---------------------------------------------------------------- CatchUpInv


@given(row_cases())
def test_CatchUpInv(case: RowCase) -> None:
    CatchUpInv(case.run.start, case.run, case.owned)


def test_CatchUpInv_reference_example() -> None:
    """R4.1 (verified on the reference): counts [2,0,1,2] catch up as split 1, split 1, split 2."""
    perm = cut_splits(range(100, 116), 4)
    start = RowState((2, 0, 1, 2), (2, 0, 1, 2))
    run = iterate_rows(perm, Faults(), ALL4, start)
    assert [y.split for y in run.rows[:3]] == [1, 1, 2]
    assert run.state_after(3).samples == (2, 2, 2, 2)
    # Then whole cycles in split order, from position 2 of every split.
    assert [(y.split, y.position) for y in run.rows[3:7]] == [(0, 2), (1, 2), (2, 2), (3, 2)]
    CatchUpInv(start, run, ALL4)


# ---------------------------------------------------------------- CanonicalOrderProp


@given(row_cases())
def test_CanonicalOrderProp(case: RowCase) -> None:
    CanonicalOrderProp(case.perm, case.faults, case.owned, case.run)


@given(row_cases(duplicates=True))
def test_CanonicalOrderProp_repeated_rows(case: RowCase) -> None:
    CanonicalOrderProp(case.perm, case.faults, case.owned, case.run)


def test_CanonicalOrderProp_round_robin_example() -> None:
    """R4.2: from the start, one row of every owned split per cycle, in split order."""
    perm = cut_splits([7, 3, 9, 1, 5, 8], 3)
    run = iterate_rows(perm, Faults(), (0, 1, 2), initial_row_state(3))
    assert [y.row_id for y in run.rows] == [7, 9, 5, 3, 1, 8]
    assert run.end == Exhausted()
    CanonicalOrderProp(perm, Faults(), (0, 1, 2), run)


def test_CanonicalOrderProp_skips_end_the_epoch_early() -> None:
    """R4.3: a split that loses rows ends the iterator; other splits' leftovers are not yielded."""
    perm = cut_splits([10, 11, 12, 20, 21, 22], 2)
    faults = Faults(skipped=frozenset({11}))
    run = iterate_rows(perm, faults, (0, 1), initial_row_state(2))
    assert [y.row_id for y in run.rows] == [10, 20, 12, 21]
    assert run.end == Exhausted()
    CanonicalOrderProp(perm, faults, (0, 1), run)


def test_SkipAccountingInv_reference_example() -> None:
    """R4.4 (verified): samples [2,2,2,2] with positions [3,3,3,2].

    Splits 0-2 each skip their first row, split 3 skips nothing; after two
    cycles splits 0-2 scanned positions 0..2 (one skipped, two yielded) and
    split 3 scanned positions 0..1.
    """
    perm = cut_splits(range(16), 4)
    faults = Faults(skipped=frozenset({0, 4, 8}))
    run = iterate_rows(perm, faults, ALL4, initial_row_state(4))
    state = run.state_after(8)
    assert state == RowState((2, 2, 2, 2), (3, 3, 3, 2))
    SkipAccountingInv(perm, faults, state)


def test_SkipAccountingInv_trailing_skips_are_not_counted() -> None:
    """R4.4: a skipped row after the last yielded row is re-read (and skipped again) on resume."""
    perm = cut_splits(range(8), 2)
    faults = Faults(skipped=frozenset({1}))
    run = iterate_rows(perm, faults, (0, 1), initial_row_state(2))
    assert run.state_after(2) == RowState((1, 1), (1, 1))
    resumed = iterate_rows(perm, faults, (0, 1), run.state_after(2))
    assert resumed.rows == run.rows[2:]
    SkipAccountingInv(perm, faults, run.state_after(2))


# ---------------------------------------------------------------- RaisePositionProp


@given(row_cases(allow_skip=True, allow_raise=True))
def test_RaisePositionProp(case: RowCase) -> None:
    RaisePositionProp(case.perm, case.faults, case.owned, case.run)


@given(row_cases(aligned=True))
def test_RaisePositionProp_from_step_boundary(case: RowCase) -> None:
    RaisePositionProp(case.perm, case.faults, case.owned, case.run)


def test_RaisePositionProp_raises_at_the_cycle_that_needs_the_row() -> None:
    """D7: a raising row at position 2 of split 1 surfaces after the two whole cycles before it."""
    perm = cut_splits(range(8), 2)
    faults = Faults(raising=frozenset({6}))
    run = iterate_rows(perm, faults, (0, 1), initial_row_state(2))
    assert [y.row_id for y in run.rows] == [0, 4, 1, 5]
    assert run.end == Raised(split=1, position=2, row_id=6)
    assert run.states[-1] == RowState((2, 2), (2, 2))
    RaisePositionProp(perm, faults, (0, 1), run)


def test_RaisePositionProp_catch_up_reaches_the_row_in_turn() -> None:
    """D7 during catch-up: the raising split is reached at its turn, after the earlier catch-up rows."""
    perm = cut_splits(range(12), 3)
    faults = Faults(raising=frozenset({9}))
    start = RowState((2, 0, 0), (2, 0, 0))
    run = iterate_rows(perm, faults, (0, 1, 2), start)
    # Catch-up order by (count, split): 1, 2, 1, 2 -- the second split-2 row (id 9) raises.
    assert [y.row_id for y in run.rows] == [4, 8, 5]
    assert run.end == Raised(split=2, position=1, row_id=9)
    RaisePositionProp(perm, faults, (0, 1, 2), run)


def test_yielded_rows_name_the_permutation() -> None:
    perm = cut_splits([5, 6, 7, 8], 2)
    run = iterate_rows(perm, Faults(), (1,), initial_row_state(2))
    assert run.rows == (Yielded(1, 0, 7), Yielded(1, 1, 8))
    assert run.states[-1] == RowState((0, 2), (0, 2))
