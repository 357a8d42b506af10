"""Save protocols against the model: lockstep inference, merges, chains, same-topology resumes,
refused partial states, table versions and reachable loads (spec/INVARIANTS.md, "Save protocols")."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given, strategies as st

from elastic_loader.spec import (
    Faults,
    PackedState,
    PackingConfig,
    Permutation,
    RowState,
    RunConfig,
    cut_splits,
    initial_packed_state,
    initial_row_state,
)
from elastic_loader.spec.errors import InvariantViolation, SpecValueError
from elastic_loader.spec.invariants import (
    LockstepInferenceInv,
    MergeReportedInv,
    PartialStateRefusedInv,
    ProtocolChainProp,
    ReachableLoadInv,
    SameTopologyResumeProp,
    TableVersionPinInv,
)
from elastic_loader.spec.loader import Item
from elastic_loader.spec.protocols import (
    Protocol,
    RankResult,
    Shape,
    lockstep_batches,
    next_starts,
    run_session,
)
from elastic_loader.spec.saved import (
    Saved,
    TablePin,
    exact,
    load_for_rank,
    merge_state_dicts,
    pinned_permutation,
    snapshot_saved,
)
from elastic_loader.testing.strategies import corpora, fault_sets, job_shapes, packing_configs, permutations

Corpus = dict[int, tuple[int, ...]] | None


@dataclass(frozen=True)
class Job:
    """One epoch of a job: its permutation, faults, documents and whether its transform may skip."""

    config: RunConfig
    perm: Permutation
    faults: Faults
    corpus: Corpus
    skipping: bool

    @property
    def split_len(self) -> int:
        return len(self.perm[0])

    def start(self, world_size: int) -> list[Saved]:
        n = self.config.num_splits
        state = initial_row_state(n) if self.config.packing is None else initial_packed_state(n)
        return [exact(self.config, state)] * world_size


@st.composite
def jobs(draw: st.DrawFn, packed: bool | None = None) -> Job:
    perm = draw(permutations(max_splits=6, max_split_len=5))
    faults = draw(fault_sets(perm))
    is_packed = draw(st.booleans()) if packed is None else packed
    corpus = packing = None
    if is_packed:
        corpus = draw(corpora(perm, max_tokens=3))
        packing = draw(packing_configs(len(perm), max_pack_len=4, max_blocks_per_split=4))
    skipping = bool(faults.skipped) or draw(st.booleans())
    config = RunConfig(len(perm), 0, 0, None, packing)
    return Job(config, perm, faults, corpus, skipping)


@st.composite
def shapes(draw: st.DrawFn, num_splits: int) -> Shape:
    world_size, num_workers = draw(job_shapes(num_splits))
    return Shape(world_size, num_workers, draw(st.integers(1, 4)))


def session(job: Job, starts: list[Saved], shape: Shape, wanted: int) -> tuple[RankResult, ...]:
    """A lockstep session: every rank takes the same number of batches."""
    n = lockstep_batches(job.config, job.perm, job.faults, job.corpus, starts, shape, wanted)
    return run_session(
        job.config,
        job.perm,
        job.faults,
        job.corpus,
        starts,
        shape,
        [n] * shape.world_size,
        job.split_len,
        job.skipping,
    )


@dataclass
class Chain:
    delivered: list[Item]
    results: tuple[RankResult, ...] | None
    refused: bool = False


def run_chain(data: st.DataObject, job: Job, sessions: int) -> Chain:
    """Sessions on drawn topologies, each resumed from the last through a drawn protocol."""
    shape = data.draw(shapes(job.config.num_splits), label="shape 0")
    starts = job.start(shape.world_size)
    chain = Chain([], None)
    for i in range(sessions):
        results = session(job, starts, shape, data.draw(st.integers(0, 5), label=f"batches {i}"))
        chain.delivered.extend(item for r in results for item in r.items)
        chain.results = results
        nxt = data.draw(shapes(job.config.num_splits), label=f"shape {i + 1}")
        options = [Protocol.ONE_RANK, Protocol.MERGE_ALL]
        if nxt.world_size == shape.world_size:
            options.append(Protocol.OWN)
        protocol = data.draw(st.sampled_from(options), label=f"protocol {i}")
        saver = data.draw(st.integers(0, shape.world_size - 1), label=f"saver {i}")
        try:
            starts = list(next_starts(job.config, results, protocol, nxt, job.split_len, saver))
        except SpecValueError as exc:
            assert exc.code == "progress_unknown" and job.skipping and job.config.packing is None
            chain.refused = True
            return chain
        shape = nxt
    return chain


def finish(job: Job, chain: Chain, data: st.DataObject) -> bool:
    """Run one last session to the end of the epoch; False when its checkpoint cannot be resumed."""
    if chain.refused or chain.results is None:
        return False
    last = Shape(1, 0, 1)
    wire = [snapshot_saved(r.checkpoint) for r in chain.results]
    try:
        start = load_for_rank(job.config, merge_state_dicts(wire), job.split_len, 1, 0)
    except SpecValueError:
        raise
    results = run_session(
        job.config, job.perm, job.faults, job.corpus, [start], last, [10**9], job.split_len, job.skipping
    )
    chain.delivered.extend(results[0].items)
    return True


# ---------------------------------------------------------------- LockstepInferenceInv


@given(st.data())
def test_LockstepInferenceInv(data: st.DataObject) -> None:
    job = data.draw(jobs(), label="job")
    chain = run_chain(data, job, data.draw(st.integers(1, 3), label="sessions"))
    if chain.results is not None:
        LockstepInferenceInv(job.perm, job.faults, job.corpus, chain.results, job.skipping)


def test_LockstepInferenceInv_one_rank_knows_the_other() -> None:
    """Two ranks of two splits take one batch of one row each; rank 0's checkpoint has rank 1's row."""
    config = RunConfig(2, 0, 0)
    job = Job(config, cut_splits(range(6), 2), Faults(), None, False)
    results = session(job, job.start(2), Shape(2, 0, 1), 1)
    LockstepInferenceInv(job.perm, job.faults, None, results, False)
    state = results[0].checkpoint.state
    assert isinstance(state, RowState) and state.samples == (1, 1) and state.positions == (1, 1)
    assert results[0].checkpoint.reported == frozenset({0})


def test_LockstepInferenceInv_rows_are_unknown_when_rows_may_be_skipped() -> None:
    config = RunConfig(2, 0, 0)
    job = Job(config, cut_splits(range(6), 2), Faults(frozenset({3})), None, True)
    results = session(job, job.start(2), Shape(2, 0, 1), 2)
    LockstepInferenceInv(job.perm, job.faults, None, results, True)
    assert results[0].checkpoint.unknown == frozenset({1})


def test_LockstepInferenceInv_rejects_a_wrong_inference() -> None:
    config = RunConfig(2, 0, 0)
    job = Job(config, cut_splits(range(6), 2), Faults(), None, False)
    results = session(job, job.start(2), Shape(2, 0, 1), 1)
    wrong = replace(results[0].checkpoint, state=RowState((1, 2), (1, 2)))
    with pytest.raises(InvariantViolation, match="LockstepInferenceInv"):
        LockstepInferenceInv(
            job.perm, job.faults, None, (replace(results[0], checkpoint=wrong), results[1]), False
        )


# ---------------------------------------------------------------- MergeReportedInv


@given(st.data())
def test_MergeReportedInv(data: st.DataObject) -> None:
    """Ranks take different numbers of batches (not lockstep): merging all of them is still exact."""
    job = data.draw(jobs(), label="job")
    shape = data.draw(shapes(job.config.num_splits), label="shape")
    batches = data.draw(st.lists(st.integers(0, 5), min_size=shape.world_size, max_size=shape.world_size))
    results = run_session(
        job.config,
        job.perm,
        job.faults,
        job.corpus,
        job.start(shape.world_size),
        shape,
        batches,
        job.split_len,
        job.skipping,
    )
    MergeReportedInv(job.perm, job.faults, job.corpus, results)


def test_MergeReportedInv_rejects_a_merge_that_forgets_a_rank() -> None:
    config = RunConfig(2, 0, 0)
    job = Job(config, cut_splits(range(6), 2), Faults(), None, False)
    results = session(job, job.start(2), Shape(2, 0, 1), 2)
    lying = replace(results[1].checkpoint, reported=frozenset({0, 1}), state=RowState((0, 2), (0, 2)))
    with pytest.raises(InvariantViolation, match="MergeReportedInv"):
        MergeReportedInv(job.perm, job.faults, None, (results[0], replace(results[1], checkpoint=lying)))


# ---------------------------------------------------------------- ProtocolChainProp


@given(st.data())
def test_ProtocolChainProp(data: st.DataObject) -> None:
    job = data.draw(jobs(), label="job")
    chain = run_chain(data, job, data.draw(st.integers(1, 4), label="sessions"))
    finished = finish(job, chain, data)
    ProtocolChainProp(job.perm, job.faults, job.corpus, job.config.packing, chain.delivered, finished)


@given(st.data())
def test_ProtocolChainProp_packed(data: st.DataObject) -> None:
    job = data.draw(jobs(packed=True), label="job")
    chain = run_chain(data, job, data.draw(st.integers(1, 4), label="sessions"))
    finished = finish(job, chain, data)
    ProtocolChainProp(job.perm, job.faults, job.corpus, job.config.packing, chain.delivered, finished)


def test_ProtocolChainProp_rejects_a_repeated_row() -> None:
    config = RunConfig(2, 0, 0)
    job = Job(config, cut_splits(range(4), 2), Faults(), None, False)
    results = session(job, job.start(1), Shape(1, 0, 1), 10)
    items = list(results[0].items)
    with pytest.raises(InvariantViolation, match="ProtocolChainProp"):
        ProtocolChainProp(job.perm, job.faults, None, None, [*items, items[0]], True)


# ---------------------------------------------------------------- SameTopologyResumeProp


@given(st.data())
def test_SameTopologyResumeProp(data: st.DataObject) -> None:
    job = data.draw(jobs(), label="job")
    shape = data.draw(shapes(job.config.num_splits), label="shape")
    protocols = [Protocol.ONE_RANK, Protocol.MERGE_ALL, Protocol.OWN]
    protocol = data.draw(st.sampled_from(protocols), label="protocol")
    taken = data.draw(st.integers(0, 6), label="taken")
    saver = data.draw(st.integers(0, shape.world_size - 1), label="saver")
    SameTopologyResumeProp(
        job.config,
        job.perm,
        job.faults,
        job.corpus,
        None,
        shape,
        taken,
        protocol,
        job.split_len,
        job.skipping,
        saver,
    )


def test_SameTopologyResumeProp_two_workers_mid_round() -> None:
    """nw=2, one batch taken: the resumed loader starts with worker 1's role, as the uninterrupted one."""
    config = RunConfig(4, 0, 0)
    job = Job(config, cut_splits(range(12), 4), Faults(), None, False)
    SameTopologyResumeProp(
        config, job.perm, job.faults, None, None, Shape(1, 2, 2), 1, Protocol.ONE_RANK, 3, False
    )
    results = session(job, job.start(1), Shape(1, 2, 2), 1)
    cursor = results[0].checkpoint.cursor
    assert cursor is not None and cursor.next_roles == (1,)


def test_SameTopologyResumeProp_rejects_a_lost_rotation() -> None:
    """Without the cursor the resumed loader starts with worker 0 again, which the property catches."""
    import elastic_loader.spec.protocols as protocols

    config = RunConfig(4, 0, 0)
    job = Job(config, cut_splits(range(12), 4), Faults(), None, False)
    original = protocols.next_starts

    def forgetful(*args: object, **kwargs: object) -> tuple[Saved, ...]:
        return tuple(replace(s, cursor=None) for s in original(*args, **kwargs))  # type: ignore[arg-type]

    import elastic_loader.spec.invariants_saved as module

    module.next_starts = forgetful  # type: ignore[assignment]
    try:
        with pytest.raises(InvariantViolation, match="SameTopologyResumeProp"):
            SameTopologyResumeProp(
                config, job.perm, job.faults, None, None, Shape(1, 2, 2), 1, Protocol.ONE_RANK, 3, False
            )
    finally:
        module.next_starts = original


# ---------------------------------------------------------------- PartialStateRefusedInv


@given(st.data())
def test_PartialStateRefusedInv(data: st.DataObject) -> None:
    job = data.draw(jobs(), label="job")
    shape = data.draw(shapes(job.config.num_splits), label="shape")
    results = session(job, job.start(shape.world_size), shape, data.draw(st.integers(0, 5)))
    PartialStateRefusedInv(results, job.split_len)


def test_PartialStateRefusedInv_legacy_packed_rank_state() -> None:
    """A packed state of one rank in the reference's format (no provenance) is refused, not resumed."""
    packing = PackingConfig(2, 9, 0, 4)
    config = RunConfig(2, 0, 0, None, packing)
    corpus = {r: (r,) for r in range(4)}
    job = Job(config, cut_splits(range(4), 2), Faults(), corpus, False)
    results = session(job, job.start(2), Shape(2, 0, 1), 1)
    PartialStateRefusedInv(results, 2)
    state = results[0].checkpoint.state
    assert isinstance(state, PackedState) and state.emitted == (1, 0)


def test_PartialStateRefusedInv_rejects_a_silent_load() -> None:
    """A load that ignores the unknown splits (resuming them from a guess) is caught."""
    import elastic_loader.spec.invariants_saved as module
    from elastic_loader.spec.saved import load_saved

    config = RunConfig(2, 0, 0)
    job = Job(config, cut_splits(range(6), 2), Faults(frozenset({3})), None, True)
    results = session(job, job.start(2), Shape(2, 0, 1), 2)
    assert results[0].checkpoint.unknown == frozenset({1})
    original = module.load_for_rank
    module.load_for_rank = lambda config, wire, split_len, w, r: load_saved(config, wire, split_len)  # type: ignore[assignment]
    try:
        with pytest.raises(InvariantViolation, match="PartialStateRefusedInv"):
            PartialStateRefusedInv(results, 3)
    finally:
        module.load_for_rank = original


# ---------------------------------------------------------------- TableVersionPinInv


@given(st.data())
def test_TableVersionPinInv(data: st.DataObject) -> None:
    """Versions come and go (appends, deletes, updates give new permutations, old ones are cleaned up)."""
    versions = data.draw(st.lists(permutations(max_splits=3, max_split_len=4), min_size=1, max_size=4))
    history = {v: p for v, p in enumerate(versions) if data.draw(st.booleans(), label=f"kept {v}")}
    pinned = data.draw(st.integers(0, len(versions) - 1), label="pinned")
    pin = TablePin(pinned, sum(len(s) for s in versions[pinned]))
    latest = len(versions) - 1
    history.setdefault(latest, versions[latest])
    resumed = history.get(pinned, versions[pinned])
    TableVersionPinInv(history, pin, latest, resumed)
    if pinned in history:
        assert pinned_permutation(history, pin, latest) == versions[pinned]


def test_TableVersionPinInv_rejects_reading_the_latest_version() -> None:
    old, new = cut_splits(range(4), 2), cut_splits(range(6), 2)
    with pytest.raises(InvariantViolation, match="TableVersionPinInv"):
        TableVersionPinInv({0: old, 1: new}, TablePin(0, 4), 1, new)


# ---------------------------------------------------------------- ReachableLoadInv


@given(st.data())
def test_ReachableLoadInv(data: st.DataObject) -> None:
    job = data.draw(jobs(), label="job")
    chain = run_chain(data, job, data.draw(st.integers(1, 3), label="sessions"))
    for result in chain.results or ():
        ReachableLoadInv(result.checkpoint, job.split_len)


def test_ReachableLoadInv_rejects_a_checkpoint_without_digest_check() -> None:
    import elastic_loader.spec.saved as saved

    config = RunConfig(2, 0, 0)
    original = saved._check_digest
    saved._check_digest = lambda state, extra: None  # type: ignore[assignment]
    try:
        with pytest.raises(InvariantViolation, match="ReachableLoadInv"):
            ReachableLoadInv(exact(config, RowState((1, 1), (1, 1))), 3)
    finally:
        saved._check_digest = original
