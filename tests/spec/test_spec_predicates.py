"""The invariant predicates can fail: each is fed a deliberately corrupted run or state.

A property test is only as strong as its predicate. These tests take a genuine
model run, break it in one specific way, and require the predicate to raise
``InvariantViolation`` naming the right invariant.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from elastic_loader.spec import (
    Faults,
    PackBuffer,
    PackedRun,
    PackedState,
    Raised,
    RowRun,
    RowState,
    Topology,
    cut_splits,
    initial_row_state,
    iterate_packed,
    iterate_rows,
    owned_splits,
    run_loader,
)
from elastic_loader.spec.invariants import (
    AutoBudgetInv,
    CanonicalOrderProp,
    ConsumerCommitProp,
    DocIdsInv,
    ExactlyOnceProp,
    HonestProgressInv,
    InvariantViolation,
    MergeExactProp,
    MergeLatticeInv,
    PackingBudgetProp,
    PackingConservationInv,
    ProgressBoundsInv,
    RaisePositionProp,
    SkipAccountingInv,
    SplitSizeInv,
)
from elastic_loader.spec.loader import LoaderRun
from elastic_loader.testing.strategies import (
    MAX_SPLITS,
    PackedRunCase,
    PermutationCase,
    RowCase,
    fault_sets,
    job_iterators,
    job_shapes,
    packed_cases,
    packed_run_cases,
    permutation_cases,
    permutations,
    reachable_packed_states,
    reachable_row_states,
    row_cases,
    row_progress,
    run_configs,
)


def _violates(name: str) -> pytest.RaisesExc[InvariantViolation]:
    return pytest.raises(InvariantViolation, match=f"^{name} violated")


# ---------------------------------------------------------------- rows


@given(permutation_cases(), st.data())
def test_SplitSizeInv_rejects_rows_moved_between_splits(case: PermutationCase, data: st.DataObject) -> None:
    assume(case.num_splits > 1)
    a, b = data.draw(st.lists(st.integers(0, case.num_splits - 1), min_size=2, max_size=2, unique=True))
    perm = [list(split) for split in case.perm]
    perm[a][0], perm[b][0] = perm[b][0], perm[a][0]
    with _violates("SplitSizeInv"):
        SplitSizeInv(case.order, case.num_splits, tuple(tuple(split) for split in perm))


@given(row_cases())
def test_ProgressBoundsInv_rejects_position_past_the_end(case: RowCase) -> None:
    state = case.run.states[-1] if case.run.states else case.run.start
    positions = (case.split_len + 1, *state.positions[1:])
    with _violates("ProgressBoundsInv"):
        ProgressBoundsInv(RowState(state.samples, positions), case.split_len)


@given(row_cases())
def test_SkipAccountingInv_rejects_an_uncounted_row(case: RowCase) -> None:
    state = case.run.states[-1] if case.run.states else case.run.start
    split = next((s for s, c in enumerate(state.samples) if c > 0), None)
    assume(split is not None)
    assert split is not None
    samples = list(state.samples)
    samples[split] -= 1
    with _violates("SkipAccountingInv"):
        SkipAccountingInv(case.perm, case.faults, RowState(tuple(samples), state.positions))


@st.composite
def _row_cases_with_an_unowned_split(draw: st.DrawFn) -> RowCase:
    """A :func:`row_cases` case whose iterator leaves at least one split to others.

    Drawn directly rather than filtered: a job of one iterator owns every split,
    and filtering those out starves Hypothesis (its filter health check fails).
    """
    perm = draw(st.integers(2, MAX_SPLITS).flatmap(lambda n: permutations(n)))
    faults = draw(fault_sets(perm))
    world_size, num_workers = draw(job_shapes(len(perm)))
    if world_size * max(1, num_workers) == 1:
        world_size = len(perm)
    rank = draw(st.integers(0, world_size - 1))
    worker = draw(st.integers(0, max(1, num_workers) - 1))
    topology = Topology(world_size, rank, num_workers, worker)
    start = draw(reachable_row_states(perm, faults))
    owned = owned_splits(len(perm), topology)
    return RowCase(perm, faults, topology, owned, iterate_rows(perm, faults, owned, start))


@given(_row_cases_with_an_unowned_split())
def test_HonestProgressInv_rejects_a_moved_unowned_split(case: RowCase) -> None:
    s = next(s for s in range(len(case.perm)) if s not in case.owned)
    last = case.run.states[-1] if case.run.states else case.run.start
    step = 1 if last.positions[s] < case.split_len else -1
    moved = RowState(
        tuple(c + step * (i == s) for i, c in enumerate(last.samples)),
        tuple(p + step * (i == s) for i, p in enumerate(last.positions)),
    )
    states = (*case.run.states[:-1], moved) if case.run.states else (moved,)
    run = dataclasses.replace(case.run, states=states)
    with _violates("HonestProgressInv"):
        HonestProgressInv(case.run.start, run, case.owned)


@given(row_cases())
def test_CanonicalOrderProp_rejects_swapped_rows(case: RowCase) -> None:
    rows = list(case.run.rows)
    i = next((i for i in range(len(rows) - 1) if rows[i].split != rows[i + 1].split), None)
    assume(i is not None)
    assert i is not None
    rows[i], rows[i + 1] = rows[i + 1], rows[i]
    run = RowRun(case.run.start, tuple(rows), case.run.states, case.run.end)
    with _violates("CanonicalOrderProp"):
        CanonicalOrderProp(case.perm, case.faults, case.owned, run)


@given(row_cases(allow_raise=False))
def test_CanonicalOrderProp_rejects_an_early_end(case: RowCase) -> None:
    assume(case.run.rows)
    run = RowRun(case.run.start, case.run.rows[:-1], case.run.states[:-1], case.run.end)
    with _violates("CanonicalOrderProp"):
        CanonicalOrderProp(case.perm, case.faults, case.owned, run)


def test_RaisePositionProp_rejects_a_raise_before_earlier_rows() -> None:
    """B9 as the reference shows it: the raise comes before rows of earlier positions."""
    perm = cut_splits(range(8), 2)
    faults = Faults(raising=frozenset({6}))
    run = iterate_rows(perm, faults, (0, 1), initial_row_state(2))
    early = RowRun(run.start, run.rows[:2], run.states[:2], Raised(1, 2, 6))
    with _violates("RaisePositionProp"):
        RaisePositionProp(perm, faults, (0, 1), early)
    mid_cycle = RowRun(run.start, run.rows[:3], run.states[:3], Raised(1, 2, 6))
    with _violates("RaisePositionProp"):
        RaisePositionProp(perm, faults, (0, 1), mid_cycle)


# ---------------------------------------------------------------- delivery and commits


@given(st.data())
def test_ExactlyOnceProp_rejects_a_repeated_row(data: st.DataObject) -> None:
    perm = data.draw(permutations())
    faults = data.draw(fault_sets(perm))
    progress = data.draw(row_progress(perm, faults))
    assume(progress.delivered)
    k = data.draw(st.integers(0, len(progress.delivered) - 1))
    with _violates("ExactlyOnceProp"):
        ExactlyOnceProp(perm, faults, [*progress.delivered, progress.delivered[k]], finished=False)


@given(st.data())
def test_ExactlyOnceProp_rejects_a_lost_row(data: st.DataObject) -> None:
    perm = data.draw(permutations())
    progress = data.draw(row_progress(perm, Faults()))
    final = iterate_rows(perm, Faults(), tuple(range(len(perm))), progress.state)
    delivered = [*progress.delivered, *final.rows]
    k = data.draw(st.integers(0, len(delivered) - 1))
    with _violates("ExactlyOnceProp"):
        ExactlyOnceProp(perm, Faults(), delivered[:k] + delivered[k + 1 :], finished=True)


@given(st.data())
def test_ConsumerCommitProp_rejects_a_lost_commit(data: st.DataObject) -> None:
    perm = data.draw(permutations())
    faults = data.draw(fault_sets(perm))
    config = data.draw(run_configs(len(perm)))
    world_size, num_workers = data.draw(job_shapes(len(perm)))
    topology = Topology(world_size, data.draw(st.integers(0, world_size - 1)), num_workers)
    run = run_loader(
        config, perm, faults, topology, initial_row_state(len(perm)), data.draw(st.integers(1, 4))
    )
    assume(run.deliveries)
    i = data.draw(st.integers(0, len(run.deliveries) - 1))
    lost = dataclasses.replace(run.deliveries[i], committed=run.state_after(i))
    broken = LoaderRun(run.start, (*run.deliveries[:i], lost, *run.deliveries[i + 1 :]), run.error)
    with _violates("ConsumerCommitProp"):
        ConsumerCommitProp(perm, faults, broken, i + 1)


# ---------------------------------------------------------------- merges


@given(st.data())
def test_MergeExactProp_rejects_a_missing_rank(data: st.DataObject) -> None:
    perm = data.draw(permutations())
    num_splits = len(perm)
    config = data.draw(run_configs(num_splits))
    world_size, num_workers = data.draw(job_shapes(num_splits))
    iterators = job_iterators(num_splits, world_size, num_workers)
    assume(len(iterators) > 1)
    start = initial_row_state(num_splits)
    runs = [iterate_rows(perm, Faults(), owned, start) for owned in iterators]
    t = data.draw(st.integers(1, len(perm[0])))
    per_rank = [run.state_after(t * len(owned)) for run, owned in zip(runs, iterators)]
    single = iterate_rows(perm, Faults(), tuple(range(num_splits)), start).state_after(t * num_splits)
    drop = data.draw(st.integers(0, len(per_rank) - 1))
    with _violates("MergeExactProp"):
        MergeExactProp(config, per_rank[:drop] + per_rank[drop + 1 :], single)


def test_MergeLatticeInv_rejects_ties_with_different_buffers() -> None:
    """Outside its domain (ties carrying different buffers) the packed join is not commutative."""
    a = PackedState((1,), (1,), {0: PackBuffer((5,), (0,))})
    b = PackedState((1,), (1,), {0: PackBuffer((6,), (0,))})
    with _violates("MergeLatticeInv"):
        MergeLatticeInv(a, b, a)


# ---------------------------------------------------------------- packing


@given(packed_run_cases(), st.data())
def test_PackingConservationInv_rejects_a_changed_token(rc: PackedRunCase, data: st.DataObject) -> None:
    real = [i for i, b in enumerate(rc.run.blocks) if b.real > 0]
    assume(real)
    i = data.draw(st.sampled_from(real))
    block = rc.run.blocks[i]
    ids = (block.input_ids[0] + 1, *block.input_ids[1:])
    blocks = (*rc.run.blocks[:i], dataclasses.replace(block, input_ids=ids), *rc.run.blocks[i + 1 :])
    run = PackedRun(rc.run.start, blocks, rc.run.states, rc.run.end)
    case = rc.case
    with _violates("PackingConservationInv"):
        PackingConservationInv(case.perm, case.corpus, case.faults, case.config, run)


@given(packed_run_cases(), st.data())
def test_DocIdsInv_rejects_a_changed_doc_id(rc: PackedRunCase, data: st.DataObject) -> None:
    assume(rc.run.blocks)
    i = data.draw(st.integers(0, len(rc.run.blocks) - 1))
    block = rc.run.blocks[i]
    k = data.draw(st.integers(0, len(block.doc_ids) - 1))
    doc_ids = tuple(d + (j == k) for j, d in enumerate(block.doc_ids))
    blocks = (*rc.run.blocks[:i], dataclasses.replace(block, doc_ids=doc_ids), *rc.run.blocks[i + 1 :])
    run = PackedRun(rc.run.start, blocks, rc.run.states, rc.run.end)
    case = rc.case
    with _violates("DocIdsInv"):
        DocIdsInv(case.perm, case.corpus, case.faults, case.config, run)


@given(st.data())
def test_PackingBudgetProp_rejects_a_missing_iterator(data: st.DataObject) -> None:
    case = data.draw(packed_cases(allow_raise=False))
    num_splits = len(case.perm)
    start = data.draw(reachable_packed_states(case.perm, case.corpus, case.faults, case.config))
    world_size, num_workers = data.draw(job_shapes(num_splits))
    runs = [
        iterate_packed(case.perm, case.corpus, case.faults, owned, case.config, start)
        for owned in job_iterators(num_splits, world_size, num_workers)
    ]
    missing = data.draw(st.integers(0, len(runs) - 1))
    assume(runs[missing].blocks)
    with _violates("PackingBudgetProp"):
        PackingBudgetProp(case.config, num_splits, runs[:missing] + runs[missing + 1 :])


@pytest.mark.parametrize(("blocks", "num_splits"), [(0, 1), (3, 2), (5, 4), (1, 2)])
def test_AutoBudgetInv_rejects_budgets_that_are_not_positive_multiples(blocks: int, num_splits: int) -> None:
    with _violates("AutoBudgetInv"):
        AutoBudgetInv(blocks, num_splits)
