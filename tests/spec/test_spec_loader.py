"""Runs across topologies, resumes and ``StreamingDataLoader`` commits, against the model alone."""

from __future__ import annotations

from hypothesis import assume, given, strategies as st

from elastic_loader.spec import (
    Faults,
    PackingConfig,
    Permutation,
    RowState,
    RunConfig,
    Topology,
    Yielded,
    cut_splits,
    initial_packed_state,
    initial_row_state,
    iterate_packed,
    iterate_rows,
    load_row,
    merge_state_dicts,
    owned_splits,
    rank_splits,
    run_loader,
    snapshot_row,
)
from elastic_loader.spec.invariants import (
    ConsumerCommitProp,
    ElasticDeterminismProp,
    ExactlyOnceProp,
    ResumeEquivalenceProp,
)
from elastic_loader.testing.strategies import (
    fault_sets,
    job_shapes,
    packed_cases,
    permutations,
    reachable_packed_states,
    reachable_row_states,
    row_progress,
    run_configs,
    topologies,
)

# ---------------------------------------------------------------- ElasticDeterminismProp


@given(st.data())
def test_ElasticDeterminismProp(data: st.DataObject) -> None:
    perm = data.draw(permutations(), label="perm")
    faults = data.draw(fault_sets(perm), label="faults")
    config = data.draw(run_configs(len(perm)), label="config")
    world_size, num_workers = data.draw(job_shapes(len(perm)), label="shape")
    cycles = data.draw(st.integers(1, 3), label="cycles_per_step")
    ElasticDeterminismProp(config, perm, faults, world_size, num_workers, cycles)


def test_ElasticDeterminismProp_every_shape_of_twelve_splits() -> None:
    """R4.8: with S = 12 every (W, nw) gives the same global steps (no faults, then skips)."""
    perm = cut_splits(range(100, 160), 12)
    config = RunConfig(num_splits=12, shuffle_seed=0, epoch=0)
    shapes = [
        (w, nw) for w in (1, 2, 3, 4, 6, 12) for nw in (0, 1, 2, 3, 4, 6, 12) if nw == 0 or 12 // w % nw == 0
    ]
    for faults in (Faults(), Faults(skipped=frozenset({101, 130, 131}))):
        for world_size, num_workers in shapes:
            ElasticDeterminismProp(config, perm, faults, world_size, num_workers, 2)


# ---------------------------------------------------------------- ResumeEquivalenceProp


def _catch_up_deficit(state: RowState) -> int:
    """Rows an iterator over every split yields before its catch-up ends (R4.1)."""
    return sum(max(state.samples) - c for c in state.samples)


@given(st.data())
def test_ResumeEquivalenceProp_rows(data: st.DataObject) -> None:
    """Checkpoints taken once the uninterrupted run's catch-up is over (any faults).

    The predicate's domain: see ``test_ResumeEquivalenceProp_catch_up_limit``
    for why a checkpoint taken *during* that catch-up is excluded when rows
    skip or raise.
    """
    perm = data.draw(permutations(), label="perm")
    faults = data.draw(fault_sets(perm), label="faults")
    start = data.draw(reachable_row_states(perm, faults), label="start")
    uninterrupted = iterate_rows(perm, faults, tuple(range(len(perm))), start)
    deficit = _catch_up_deficit(start)
    assume(deficit <= len(uninterrupted.rows))
    n = data.draw(st.integers(deficit, len(uninterrupted.rows)), label="n")
    topology = data.draw(topologies(len(perm)), label="topology")
    ResumeEquivalenceProp(perm, faults, uninterrupted, n, topology)


@given(st.data())
def test_ResumeEquivalenceProp_rows_prefix_comparable(data: st.DataObject) -> None:
    """Any checkpoint, any faults: the resumed rows and the uninterrupted rest never disagree.

    Both are prefixes of the owned splits' canonical sequence, so one is a
    prefix of the other; only where they stop may differ (R4.3, D7).
    """
    perm = data.draw(permutations(), label="perm")
    faults = data.draw(fault_sets(perm), label="faults")
    start = data.draw(reachable_row_states(perm, faults), label="start")
    uninterrupted = iterate_rows(perm, faults, tuple(range(len(perm))), start)
    n = data.draw(st.integers(0, len(uninterrupted.rows)), label="n")
    topology = data.draw(topologies(len(perm)), label="topology")
    owned = owned_splits(len(perm), topology)
    got = iterate_rows(perm, faults, owned, uninterrupted.state_after(n)).rows
    expected = tuple(y for y in uninterrupted.rows[n:] if y.split in owned)
    shorter = min(len(got), len(expected))
    assert got[:shorter] == expected[:shorter]


def test_ResumeEquivalenceProp_catch_up_limit() -> None:
    """Why the prefix claim only holds past the uninterrupted run's catch-up (the predicate knows).

    Ranks out of step leave split 0 one row ahead: samples [1, 0, 0, 0]. Split
    3's only row is skipped. One iterator over all four splits catches up split
    by split (R4.1) and yields split 1's and split 2's rows before it finds
    split 3 empty. Rank 1 of two owns splits 2 and 3, which are level, so it
    runs a cycle (R4.2): split 3 is empty, nothing is yielded. Both follow the
    reference; the stop point depends on the topology, as R4.3 says.
    """
    perm = cut_splits([10, 11, 12, 13], 4)
    faults = Faults(skipped=frozenset({13}))
    start = RowState((1, 0, 0, 0), (1, 0, 0, 0))
    uninterrupted = iterate_rows(perm, faults, (0, 1, 2, 3), start)
    assert [y.row_id for y in uninterrupted.rows] == [11, 12]
    assert iterate_rows(perm, faults, (2, 3), start).rows == ()
    # The strong claim fails here (row 12 of split 2 is not resumed), the predicate does not
    # make it: the checkpoint lies inside the uninterrupted run's catch-up (3 rows were due).
    assert len(uninterrupted.rows) < _catch_up_deficit(start) == 3
    ResumeEquivalenceProp(perm, faults, uninterrupted, 0, Topology(2, 1))


@given(st.data())
def test_ResumeEquivalenceProp_rows_no_faults(data: st.DataObject) -> None:
    """Without faults the resumed iterator yields exactly the rest (the predicate checks lengths too)."""
    perm = data.draw(permutations(), label="perm")
    start = data.draw(reachable_row_states(perm, Faults()), label="start")
    uninterrupted = iterate_rows(perm, Faults(), tuple(range(len(perm))), start)
    n = data.draw(st.integers(0, len(uninterrupted.rows)), label="n")
    topology = data.draw(topologies(len(perm)), label="topology")
    ResumeEquivalenceProp(perm, Faults(), uninterrupted, n, topology)


@given(st.data())
def test_ResumeEquivalenceProp_packed(data: st.DataObject) -> None:
    case = data.draw(packed_cases(), label="case")
    num_splits = len(case.perm)
    start = data.draw(reachable_packed_states(case.perm, case.corpus, case.faults, case.config))
    everything = tuple(range(num_splits))
    uninterrupted = iterate_packed(case.perm, case.corpus, case.faults, everything, case.config, start)
    n = data.draw(st.integers(0, len(uninterrupted.blocks)), label="blocks")  # any block (D23)
    topology = data.draw(topologies(num_splits), label="topology")
    ResumeEquivalenceProp(
        case.perm, case.faults, uninterrupted, n, topology, corpus=case.corpus, packing=case.config
    )


def test_ResumeEquivalenceProp_mid_cycle_example() -> None:
    """R4.1/R4.4 (verified): a checkpoint mid-cycle resumes with the rest of that cycle."""
    perm = cut_splits(range(100, 116), 4)
    run = iterate_rows(perm, Faults(), (0, 1, 2, 3), initial_row_state(4))
    resumed = iterate_rows(perm, Faults(), (0, 1, 2, 3), run.state_after(6))
    assert [(y.split, y.position) for y in resumed.rows[:2]] == [(2, 1), (3, 1)]
    assert resumed.rows == run.rows[6:]
    ResumeEquivalenceProp(perm, Faults(), run, 6, Topology())


# ---------------------------------------------------------------- ExactlyOnceProp


@given(st.data())
def test_ExactlyOnceProp(data: st.DataObject) -> None:
    """Sessions on changing topologies, merged each time, then one iterator to the end."""
    perm = data.draw(permutations(), label="perm")
    faults = data.draw(fault_sets(perm), label="faults")
    progress = data.draw(row_progress(perm, faults), label="progress")
    ExactlyOnceProp(perm, faults, progress.delivered, finished=False)
    final = iterate_rows(perm, faults, tuple(range(len(perm))), progress.state)
    ExactlyOnceProp(perm, faults, [*progress.delivered, *final.rows], finished=True)


@given(st.data())
def test_ExactlyOnceProp_no_faults(data: st.DataObject) -> None:
    """Without faults a finished epoch delivered every row (the predicate's completeness clause)."""
    perm = data.draw(permutations(), label="perm")
    progress = data.draw(row_progress(perm, Faults()), label="progress")
    final = iterate_rows(perm, Faults(), tuple(range(len(perm))), progress.state)
    ExactlyOnceProp(perm, Faults(), [*progress.delivered, *final.rows], finished=True)


def _loader_session(
    data: st.DataObject, config: RunConfig, perm: Permutation, faults: Faults, state: RowState
) -> tuple[list[Yielded], RowState]:
    """Every rank runs a StreamingDataLoader, stops after some batches; their checkpoints are merged."""
    num_splits = len(perm)
    world_size, num_workers = data.draw(job_shapes(num_splits), label="shape")
    batch = data.draw(st.integers(1, 4), label="batch_size")
    delivered: list[Yielded] = []
    snapshots = []
    for rank in range(world_size):
        mine = rank_splits(num_splits, world_size, rank)
        workers = num_workers if len({state.samples[s] for s in mine}) == 1 else min(num_workers, 1)
        run = run_loader(config, perm, faults, Topology(world_size, rank, workers), state, batch)
        n = data.draw(st.integers(0, len(run.deliveries)), label=f"batches of rank {rank}")
        delivered += [y for d in run.deliveries[:n] for y in d.items if isinstance(y, Yielded)]
        parent = run.state_after(n)
        assert isinstance(parent, RowState)
        snapshots.append(snapshot_row(config, parent))
    return delivered, load_row(config, merge_state_dicts(snapshots), len(perm[0]))


@given(st.data())
def test_ExactlyOnceProp_loader(data: st.DataObject) -> None:
    """End to end: loaders on every rank, consumer commits, merge, resume on another topology."""
    perm = data.draw(permutations(), label="perm")
    faults = data.draw(fault_sets(perm), label="faults")
    config = data.draw(run_configs(len(perm)), label="config")
    state = initial_row_state(len(perm))
    delivered: list[Yielded] = []
    for _ in range(data.draw(st.integers(1, 3), label="sessions")):
        more, state = _loader_session(data, config, perm, faults, state)
        delivered += more
        ExactlyOnceProp(perm, faults, delivered, finished=False)
    final = iterate_rows(perm, faults, tuple(range(len(perm))), state)
    ExactlyOnceProp(perm, faults, [*delivered, *final.rows], finished=True)


# ---------------------------------------------------------------- ConsumerCommitProp


@given(st.data())
def test_ConsumerCommitProp(data: st.DataObject) -> None:
    perm = data.draw(permutations(), label="perm")
    faults = data.draw(fault_sets(perm), label="faults")
    config = data.draw(run_configs(len(perm)), label="config")
    topology = data.draw(topologies(len(perm)), label="topology")
    # Any start: a loader starts mid-cycle too (D23).
    start = data.draw(reachable_row_states(perm, faults), label="start")
    batch = data.draw(st.integers(1, 5), label="batch_size")
    run = run_loader(config, perm, faults, topology, start, batch)
    for n in range(len(run.deliveries) + 1):
        ConsumerCommitProp(perm, faults, run, n)


def test_ConsumerCommitProp_two_workers_uniform_every_second_batch() -> None:
    """R8.6 (verified): nw=2, batch = 2 splits x 2 cycles; the rank is uniform after every 2nd batch."""
    perm = cut_splits(range(32), 4)
    config = RunConfig(num_splits=4, shuffle_seed=0, epoch=0)
    run = run_loader(config, perm, Faults(), Topology(1, 0, 2), initial_row_state(4), 4)
    assert [(d.worker, d.index) for d in run.deliveries[:4]] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    uniform = [
        len(set(d.committed.samples)) == 1 for d in run.deliveries if isinstance(d.committed, RowState)
    ]
    assert uniform == [i % 2 == 1 for i in range(len(uniform))]
    for n in range(len(run.deliveries) + 1):
        ConsumerCommitProp(perm, Faults(), run, n)


def test_loader_packed_start_catches_up_from_mid_cycle() -> None:
    """D23: a packed loader starting mid-cycle catches up (the lagging split first), then cycles."""
    packing = PackingConfig(pack_sequences=2, eos_id=9, pad_id=0, blocks_per_epoch=4)
    config = RunConfig(num_splits=2, shuffle_seed=0, epoch=0, packing=packing)
    perm = cut_splits(range(4), 2)
    corpus = {r: (r,) for r in range(4)}
    whole = run_loader(config, perm, Faults(), Topology(), initial_packed_state(2), 1, corpus)
    assert len(whole.deliveries) == 4
    mid = whole.state_after(1)
    resumed = run_loader(config, perm, Faults(), Topology(), mid, 1, corpus)
    assert [d.items for d in resumed.deliveries] == [d.items for d in whole.deliveries[1:]]
