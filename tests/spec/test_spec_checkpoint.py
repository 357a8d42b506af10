"""Checkpoints: join lattice, save/load round trip, exact merges, and the reference's examples."""

from __future__ import annotations

import functools
import json

from hypothesis import given, strategies as st

from elastic_loader.spec import (
    CheckpointGate,
    Faults,
    PackBuffer,
    PackedState,
    PackingConfig,
    RowState,
    RunConfig,
    Topology,
    commit_packed,
    commit_row,
    cut_splits,
    gate_after_failure,
    gate_after_load,
    gate_after_untracked_iteration,
    gate_check_state_dict,
    initial_packed_state,
    initial_row_state,
    iterate_packed,
    iterate_rows,
    join_packed,
    join_row,
    load_packed,
    load_row,
    merge_state_dicts,
    owned_splits,
    run_loader,
    snapshot_packed,
    snapshot_row,
)
from elastic_loader.spec.errors import SpecRuntimeError
from elastic_loader.spec.invariants import CheckpointRoundTripInv, MergeExactProp, MergeLatticeInv
from elastic_loader.testing.strategies import (
    PackedCase,
    fault_sets,
    job_iterators,
    job_shapes,
    packed_cases,
    permutations,
    reachable_packed_states,
    reachable_row_states,
    run_configs,
)

# ---------------------------------------------------------------- MergeLatticeInv


@given(st.data())
def test_MergeLatticeInv_rows(data: st.DataObject) -> None:
    perm = data.draw(permutations(), label="perm")
    faults = data.draw(fault_sets(perm), label="faults")
    a, b, c = (data.draw(reachable_row_states(perm, faults), label=name) for name in "abc")
    MergeLatticeInv(a, b, c)


@given(st.data())
def test_MergeLatticeInv_packed_one_run(data: st.DataObject) -> None:
    """Packed join on three states of one iterator's run (the predicate's stated domain)."""
    case = data.draw(packed_cases(), label="case")
    start = data.draw(reachable_packed_states(case.perm, case.corpus, case.faults, case.config))
    owned = tuple(range(len(case.perm)))
    run = iterate_packed(case.perm, case.corpus, case.faults, owned, case.config, start)
    index = st.integers(0, len(run.blocks))
    a, b, c = (run.state_after(data.draw(index, label=name)) for name in "abc")
    MergeLatticeInv(a, b, c)


@given(st.data())
def test_MergeLatticeInv_packed_reachable(data: st.DataObject) -> None:
    """Packed join on three independently reached states of one epoch (any topologies, mid-cycle).

    A split's packed state is a function of its ``(emitted, consumed)`` along
    the one deterministic fill/emit trajectory of that split, so ties carry
    equal buffers and the join is a lattice on every reachable state.
    """
    case = data.draw(packed_cases(), label="case")
    a, b, c = (
        data.draw(reachable_packed_states(case.perm, case.corpus, case.faults, case.config, aligned=False))
        for _ in range(3)
    )
    MergeLatticeInv(a, b, c)


# ---------------------------------------------------------------- CheckpointRoundTripInv


@given(st.data())
def test_CheckpointRoundTripInv_rows(data: st.DataObject) -> None:
    perm = data.draw(permutations(), label="perm")
    faults = data.draw(fault_sets(perm), label="faults")
    config = data.draw(run_configs(len(perm)), label="config")
    state = data.draw(reachable_row_states(perm, faults), label="state")
    CheckpointRoundTripInv(config, state, len(perm[0]))


@given(st.data())
def test_CheckpointRoundTripInv_packed(data: st.DataObject) -> None:
    case = data.draw(packed_cases(), label="case")
    config = data.draw(run_configs(len(case.perm), case.config), label="config")
    state = data.draw(
        reachable_packed_states(case.perm, case.corpus, case.faults, case.config, aligned=False),
        label="state",
    )
    CheckpointRoundTripInv(config, state, len(case.perm[0]))


# ---------------------------------------------------------------- MergeExactProp


@given(st.data())
def test_MergeExactProp_rows(data: st.DataObject) -> None:
    """Every iterator of a job stops after ``t`` cycles; the merge equals one iterator after ``t*S`` rows."""
    perm = data.draw(permutations(), label="perm")
    num_splits = len(perm)
    faults = data.draw(fault_sets(perm), label="faults")
    config = data.draw(run_configs(num_splits), label="config")
    start = data.draw(reachable_row_states(perm, faults, aligned=True), label="start")
    world_size, num_workers = data.draw(job_shapes(num_splits), label="shape")
    iterators = job_iterators(num_splits, world_size, num_workers)
    runs = [iterate_rows(perm, faults, owned, start) for owned in iterators]
    t = data.draw(st.integers(0, min(len(r.rows) // len(o) for r, o in zip(runs, iterators))), label="t")
    single = iterate_rows(perm, faults, tuple(range(num_splits)), start)
    per_rank = [run.state_after(t * len(owned)) for run, owned in zip(runs, iterators)]
    MergeExactProp(config, per_rank, single.state_after(t * num_splits))


@given(st.data())
def test_MergeExactProp_rows_loader(data: st.DataObject) -> None:
    """Each rank's StreamingDataLoader parent state after ``g`` global steps, merged."""
    perm = data.draw(permutations(), label="perm")
    num_splits = len(perm)
    faults = data.draw(fault_sets(perm), label="faults")
    config = data.draw(run_configs(num_splits), label="config")
    start = data.draw(reachable_row_states(perm, faults, aligned=True), label="start")
    world_size, num_workers = data.draw(job_shapes(num_splits), label="shape")
    cycles = data.draw(st.integers(1, 3), label="cycles_per_step")
    nw = max(1, num_workers)
    batch = num_splits // world_size // nw * cycles
    loaders = [
        run_loader(config, perm, faults, Topology(world_size, r, num_workers), start, batch)
        for r in range(world_size)
    ]
    full = [
        min(sum(1 for d in run.deliveries if d.worker == w and len(d.items) == batch) for w in range(nw))
        for run in loaders
    ]
    g = data.draw(st.integers(0, min(full)), label="steps")
    per_rank = [run.state_after(g * nw) for run in loaders]
    single = iterate_rows(perm, faults, tuple(range(num_splits)), start)
    MergeExactProp(config, per_rank, single.state_after(g * cycles * num_splits))


@given(st.data())
def test_MergeExactProp_packed(data: st.DataObject) -> None:
    case: PackedCase = data.draw(packed_cases(), label="case")
    num_splits = len(case.perm)
    config = data.draw(run_configs(num_splits, case.config), label="config")
    start = data.draw(reachable_packed_states(case.perm, case.corpus, case.faults, case.config))
    world_size, num_workers = data.draw(job_shapes(num_splits), label="shape")
    iterators = job_iterators(num_splits, world_size, num_workers)
    runs = [iterate_packed(case.perm, case.corpus, case.faults, o, case.config, start) for o in iterators]
    t = data.draw(st.integers(0, min(len(r.blocks) // len(o) for r, o in zip(runs, iterators))), label="t")
    single = iterate_packed(case.perm, case.corpus, case.faults, tuple(range(num_splits)), case.config, start)
    per_rank = [run.state_after(t * len(owned)) for run, owned in zip(runs, iterators)]
    MergeExactProp(config, per_rank, single.state_after(t * num_splits))


# ---------------------------------------------------------------- examples from the reference


CONFIG2 = RunConfig(num_splits=2, shuffle_seed=0, epoch=0)


def test_merge_reference_docstring_example() -> None:
    """The reference's ``merge_state_dicts`` docstring: positions merge to [5, 4]."""
    rank0 = {
        "shuffle_seed": 0,
        "num_splits": 2,
        "epoch": 0,
        "samples_consumed_per_split": [3, 3],
        "positions_consumed_per_split": [5, 3],
    }
    rank1 = dict(rank0, positions_consumed_per_split=[3, 4])
    merged = merge_state_dicts([rank0, rank1])
    assert merged["positions_consumed_per_split"] == [5, 4]
    assert merged["samples_consumed_per_split"] == [3, 3]


def test_merge_row_async_ranks_exact() -> None:
    """B1 fixed (D1): rank 0 ahead of rank 1; the merge keeps rank 1's true progress."""
    perm = cut_splits(range(40), 4)
    config = RunConfig(num_splits=4, shuffle_seed=0, epoch=0)
    states = [
        iterate_rows(perm, Faults(), owned_splits(4, Topology(2, r)), initial_row_state(4)).state_after(n)
        for r, n in ((0, 10), (1, 4))
    ]
    assert states[0] == RowState((5, 5, 0, 0), (5, 5, 0, 0))
    merged = merge_state_dicts([snapshot_row(config, s) for s in states])
    assert merged["samples_consumed_per_split"] == [5, 5, 2, 2]


PACKING = PackingConfig(pack_sequences=4, eos_id=9, pad_id=0, blocks_per_epoch=4)
PCONFIG = RunConfig(num_splits=2, shuffle_seed=0, epoch=0, packing=PACKING)


def _packed(consumed: list[int], emitted: list[int], buffers: dict[object, object]) -> dict[str, object]:
    return {
        "shuffle_seed": 0,
        "num_splits": 2,
        "epoch": 0,
        "pack_sequences": 4,
        "eos_id": 9,
        "pad_id": 0,
        "blocks_per_epoch": 4,
        "samples_consumed_per_split": consumed,
        "blocks_emitted_per_split": emitted,
        "pack_buffers": buffers,
    }


def test_packed_merge_ties_go_to_the_earlier_state() -> None:
    """R7.5: equal ``(emitted, consumed)`` keeps the buffer of the state listed first."""
    first = _packed(
        [3, 2], [1, 1], {0: {"tokens": [1, 9], "starts": [0]}, 1: {"tokens": [2, 9], "starts": [0]}}
    )
    second = _packed(
        [3, 2], [1, 1], {0: {"tokens": [5, 9], "starts": [0]}, 1: {"tokens": [6, 9], "starts": [0]}}
    )
    assert merge_state_dicts([first, second])["pack_buffers"] == first["pack_buffers"]
    assert merge_state_dicts([second, first])["pack_buffers"] == second["pack_buffers"]


def test_packed_merge_larger_progress_wins_per_split() -> None:
    """R7.5: per split, the lexicographically larger ``(emitted, consumed)`` supplies all three values."""
    a = _packed([3, 1], [1, 1], {0: {"tokens": [1, 9], "starts": [0]}})
    b = _packed([2, 4], [1, 1], {1: {"tokens": [7, 9], "starts": [0]}})
    merged = merge_state_dicts([a, b])
    assert merged["samples_consumed_per_split"] == [3, 4]
    assert merged["pack_buffers"] == {
        0: {"tokens": [1, 9], "starts": [0]},
        1: {"tokens": [7, 9], "starts": [0]},
    }


def test_pack_buffers_json_string_keys() -> None:
    """R7.3: JSON turns ``pack_buffers`` keys into strings; load, merge and commit accept them."""
    perm = cut_splits(range(6), 2)
    corpus = {r: (r, r) for r in range(6)}
    run = iterate_packed(perm, corpus, Faults(), (0, 1), PACKING, initial_packed_state(2))
    state = run.state_after(2)
    assert state.buffers, "the example needs a non-empty buffer"
    text = json.loads(json.dumps(snapshot_packed(PCONFIG, state)))
    assert all(isinstance(k, str) for k in text["pack_buffers"])
    assert load_packed(PCONFIG, text, 3) == state
    merged = merge_state_dicts([text, text])
    buffers = merged["pack_buffers"]
    assert isinstance(buffers, dict) and all(isinstance(k, int) for k in buffers)
    assert load_packed(PCONFIG, merged, 3) == state
    assert commit_packed(PCONFIG, initial_packed_state(2), text) == state


def test_legacy_int_checkpoint_is_uniform_everywhere() -> None:
    """D6: an int ``samples_consumed_per_split`` (no positions) means that count for every split."""
    legacy = {"shuffle_seed": 0, "num_splits": 2, "epoch": 0, "samples_consumed_per_split": 3}
    uniform = RowState((3, 3), (3, 3))
    assert load_row(CONFIG2, legacy, 5) == uniform
    assert commit_row(CONFIG2, initial_row_state(2), legacy) == uniform
    other = snapshot_row(CONFIG2, RowState((1, 4), (2, 5)))
    merged = merge_state_dicts([legacy, other])
    assert merged["samples_consumed_per_split"] == [3, 4]
    assert merged["positions_consumed_per_split"] == [3, 5]


def test_missing_positions_default_to_samples() -> None:
    """R7.3: checkpoints written before positions existed resume at their sample counts."""
    old = {"shuffle_seed": 0, "num_splits": 2, "epoch": 0, "samples_consumed_per_split": [2, 1]}
    assert load_row(CONFIG2, old, 5) == RowState((2, 1), (2, 1))


def test_snapshot_key_order_matches_the_reference() -> None:
    """R7.1: keys in the reference's order, ``perm_fingerprint`` only with a strategy."""
    plain = snapshot_row(CONFIG2, initial_row_state(2))
    assert list(plain) == [
        "shuffle_seed",
        "num_splits",
        "epoch",
        "samples_consumed_per_split",
        "positions_consumed_per_split",
    ]
    fingerprinted = RunConfig(num_splits=2, shuffle_seed=0, epoch=0, perm_fingerprint="ab", packing=PACKING)
    assert list(snapshot_packed(fingerprinted, initial_packed_state(2))) == [
        "shuffle_seed",
        "num_splits",
        "perm_fingerprint",
        "epoch",
        "pack_sequences",
        "eos_id",
        "pad_id",
        "blocks_per_epoch",
        "samples_consumed_per_split",
        "blocks_emitted_per_split",
        "pack_buffers",
    ]


def test_pack_buffers_hold_only_non_empty_buffers() -> None:
    """D9: an empty buffer is not written, and an empty buffer in a checkpoint reads as absent."""
    state = PackedState((1, 1), (1, 1), {1: PackBuffer((4,), (0,))})
    snap = snapshot_packed(PCONFIG, state)
    assert snap["pack_buffers"] == {1: {"tokens": [4], "starts": [0]}}
    with_empty = dict(snap, pack_buffers={0: {"tokens": [], "starts": []}, 1: {"tokens": [4], "starts": [0]}})
    assert load_packed(PCONFIG, with_empty, 3) == state


def test_row_checkpoint_checks_epoch() -> None:
    """D2 (B2): a row checkpoint of another epoch is rejected."""
    snap = snapshot_row(RunConfig(num_splits=2, shuffle_seed=0, epoch=1), initial_row_state(2))
    try:
        load_row(CONFIG2, snap, 5)
    except ValueError as exc:
        assert getattr(exc, "code", None) == "epoch_mismatch"
    else:
        raise AssertionError("an epoch-1 checkpoint loaded into an epoch-0 run")


def plain(checkpoint: dict[str, object]) -> dict[str, object]:
    """A checkpoint without elastic-loader's provenance key (what the reference reads)."""
    return {k: v for k, v in checkpoint.items() if k != "elastic_loader"}


def test_merge_join_agrees_with_state_join() -> None:
    """``merge_state_dicts`` on snapshots equals ``join_row``/``join_packed`` on states."""
    a, b = RowState((1, 3), (2, 3)), RowState((2, 0), (2, 1))
    merged = merge_state_dicts([snapshot_row(CONFIG2, a), snapshot_row(CONFIG2, b)])
    assert plain(merged) == snapshot_row(CONFIG2, functools.reduce(join_row, [a, b]))
    pa = PackedState((2, 1), (1, 1), {0: PackBuffer((3, 9), (0,))})
    pb = PackedState((1, 3), (1, 1), {})
    merged = merge_state_dicts([snapshot_packed(PCONFIG, pa), snapshot_packed(PCONFIG, pb)])
    assert plain(merged) == snapshot_packed(PCONFIG, join_packed(pa, pb))


# ---------------------------------------------------------------- checkpoint gate


def test_checkpoint_gate_order_and_load_clears_everything() -> None:
    """R7.2 order without the step-boundary rules (D23); D8: load clears every flag."""
    gate = CheckpointGate()
    gate_check_state_dict(gate)  # any batch, mid-step included: nothing to refuse
    codes = []
    for g in (
        gate_after_failure(gate, "boom"),
        gate_after_untracked_iteration(gate_after_failure(gate, "boom")),
    ):
        try:
            gate_check_state_dict(g)
        except SpecRuntimeError as exc:
            codes.append(exc.code)
    assert codes == ["checkpoint_invalid", "untracked_worker_iteration"]
    # Inside a worker the untracked flag does not apply.
    gate_check_state_dict(gate_after_untracked_iteration(CheckpointGate()), in_worker=True)
    assert gate_after_load(gate_after_untracked_iteration(gate_after_failure(gate, "x"))) == CheckpointGate()
    assert gate_after_failure(gate_after_failure(gate, "first"), "second").invalid_reason == "first"
