"""Bounded checks of packing mode and of packed checkpoints.

The packing universe has two tiers: every document length ``0..doc_len``
for every row of ``S*m <= rows`` (fault-free), and every ok / skip / raise
assignment with a fixed length pattern ``row % (doc_len + 1)`` over
``S*m <= fault_rows``; each with every block length ``L <= block_len`` and
per-split budget ``b <= budget``. For each instance the checks use the
uninterrupted single-iterator run, every step-boundary state of it, and
every iterator of every topology started from those states.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from elastic_loader.spec import (
    Exhausted,
    PackedRun,
    PackedState,
    RunConfig,
    SpecValueError,
    Topology,
    estimate_blocks_per_epoch,
    initial_packed_state,
    iterate_packed,
)
from elastic_loader.spec.invariants import (
    AutoBudgetInv,
    CheckpointRoundTripInv,
    DocIdsInv,
    MergeExactProp,
    MergeLatticeInv,
    PackingBudgetProp,
    PackingConservationInv,
    ResumeEquivalenceProp,
)

from .bounded_checkpoint import FINGERPRINT
from .framework import BoundedCheck, Bounds, Recorder
from .universes import PackingInstance, iterators, packed_key, packing_instances, topologies

UNIVERSE = (
    "packing: doc lengths 0..{doc_len} over <={rows} rows (fault-free) and every ok/skip/raise fault set "
    "over "
    "<={fault_rows} rows; L<={block_len}, blocks per split<={budget}"
)


def instances(rec: Recorder, b: Bounds, kinds: str = "osr") -> Iterator[PackingInstance]:
    """Both tiers of the packing universe (``kinds`` restricts the fault tier)."""
    clean = packing_instances(b["splits"], b["rows"], b["doc_len"], "o", b["block_len"], b["budget"])
    faulty = packing_instances(
        b["splits"], b["fault_rows"], b["doc_len"], kinds, b["block_len"], b["budget"], fixed_lengths=True
    )
    for instance in rec.progress(list(itertools.chain(clean, faulty)), "instances"):
        rec.at(instance=instance.describe())
        yield instance


def _single(instance: PackingInstance) -> PackedRun:
    num_splits = len(instance.perm)
    return iterate_packed(
        instance.perm,
        instance.corpus,
        instance.faults,
        tuple(range(num_splits)),
        instance.config,
        initial_packed_state(num_splits),
    )


def _step_states(single: PackedRun, num_splits: int) -> list[PackedState]:
    """The start and every step boundary of the single-iterator run."""
    return [single.state_after(t * num_splits) for t in range(len(single.blocks) // num_splits + 1)]


def _slot_runs(
    instance: PackingInstance, start: PackedState
) -> Iterator[tuple[tuple[int, int], list[PackedRun]]]:
    """For every topology, the runs of all its iterators from ``start``."""
    num_splits = len(instance.perm)
    for world, workers in topologies(num_splits):
        runs = [
            iterate_packed(
                instance.perm, instance.corpus, instance.faults, slot.owned, instance.config, start
            )
            for slot in iterators(num_splits, world, workers)
        ]
        yield (world, workers), runs


# ---------------------------------------------------------------- conservation, doc ids


def _stream_check(name: str) -> BoundedCheck:
    predicate = PackingConservationInv if name == "PackingConservationInv" else DocIdsInv

    def run(rec: Recorder, b: Bounds) -> None:
        for instance in instances(rec, b):
            single = _single(instance)
            rec.at(start="initial", topology="single")
            rec.apply(predicate, instance.perm, instance.corpus, instance.faults, instance.config, single)
            for t, start in enumerate(_step_states(single, len(instance.perm))):
                for topology, runs in _slot_runs(instance, start):
                    for i, result in enumerate(runs):
                        rec.at(start=f"step {t}", topology=topology, iterator=i)
                        rec.apply(
                            predicate,
                            instance.perm,
                            instance.corpus,
                            instance.faults,
                            instance.config,
                            result,
                        )

    return BoundedCheck(
        name,
        UNIVERSE + "; every iterator of every topology from every step boundary",
        quick={"splits": 2, "rows": 3, "doc_len": 2, "fault_rows": 3, "block_len": 3, "budget": 3},
        full={"splits": 3, "rows": 4, "doc_len": 3, "fault_rows": 4, "block_len": 4, "budget": 4},
        run=run,
    )


CONSERVATION = _stream_check("PackingConservationInv")
DOC_IDS = _stream_check("DocIdsInv")


# ---------------------------------------------------------------- budget


def check_budget(rec: Recorder, b: Bounds) -> None:
    """All iterators of every topology run to the end from every step boundary (faults: ok / skip)."""
    for instance in instances(rec, b, kinds="os"):
        num_splits = len(instance.perm)
        single = _single(instance)
        rec.require(isinstance(single.end, Exhausted), f"a skip-only run ended with {single.end}")
        for t, start in enumerate(_step_states(single, num_splits)):
            for topology, runs in _slot_runs(instance, start):
                rec.at(start=f"step {t}", topology=topology)
                rec.apply(PackingBudgetProp, instance.config, num_splits, runs)


BUDGET = BoundedCheck(
    "PackingBudgetProp",
    UNIVERSE.replace("ok/skip/raise", "ok/skip")
    + "; every topology from every step boundary, run to the end",
    quick={"splits": 2, "rows": 3, "doc_len": 2, "fault_rows": 3, "block_len": 3, "budget": 3},
    full={"splits": 3, "rows": 4, "doc_len": 3, "fault_rows": 4, "block_len": 4, "budget": 4},
    run=check_budget,
)


# ---------------------------------------------------------------- resume, merge, lattice, round trip (packed)


def check_resume_packed(rec: Recorder, b: Bounds) -> None:
    """Resume the single-iterator run at every step boundary on every iterator of every topology."""
    for instance in instances(rec, b):
        num_splits = len(instance.perm)
        single = _single(instance)
        for n in range(0, len(single.blocks) + 1, num_splits):
            for world, workers in topologies(num_splits):
                for r, w in itertools.product(range(world), range(max(1, workers))):
                    topology = Topology(world, r, workers, w)
                    rec.at(n=n, topology=topology)
                    rec.apply(
                        ResumeEquivalenceProp,
                        instance.perm,
                        instance.faults,
                        single,
                        n,
                        topology,
                        instance.corpus,
                        instance.config,
                    )


RESUME_PACKED = BoundedCheck(
    "ResumeEquivalenceProp",
    UNIVERSE + "; every step boundary, every iterator of every topology",
    quick={"splits": 2, "rows": 3, "doc_len": 2, "fault_rows": 3, "block_len": 3, "budget": 3},
    full={"splits": 3, "rows": 4, "doc_len": 3, "fault_rows": 4, "block_len": 4, "budget": 4},
    run=check_resume_packed,
)


def check_merge_exact_packed(rec: Recorder, b: Bounds) -> None:
    """At every global step of every topology, the iterators' packed states merge to the single run's."""
    for instance in instances(rec, b):
        num_splits = len(instance.perm)
        config = RunConfig(num_splits, 0, 0, None, instance.config)
        single = _single(instance)
        for topology, runs in _slot_runs(instance, initial_packed_state(num_splits)):
            per_slot = num_splits // len(runs)
            t = 0
            while t * num_splits <= len(single.blocks) and all(
                t * per_slot <= len(run.blocks) for run in runs
            ):
                rec.at(topology=topology, step=t)
                states = [run.state_after(t * per_slot) for run in runs]
                rec.apply(MergeExactProp, config, states, single.state_after(t * num_splits))
                t += 1


MERGE_EXACT_PACKED = BoundedCheck(
    "MergeExactProp",
    UNIVERSE + "; every topology, every global step",
    quick={"splits": 2, "rows": 3, "doc_len": 2, "fault_rows": 3, "block_len": 3, "budget": 3},
    full={"splits": 3, "rows": 4, "doc_len": 3, "fault_rows": 4, "block_len": 4, "budget": 4},
    run=check_merge_exact_packed,
)


def _reached(instance: PackingInstance) -> list[PackedState]:
    """Every distinct state any iterator of any topology reaches from the start (one run's states)."""
    num_splits = len(instance.perm)
    seen: dict[tuple[object, ...], PackedState] = {}
    single = _single(instance)
    for state in (single.start, *single.states):
        seen.setdefault(packed_key(state), state)
    for _, runs in _slot_runs(instance, initial_packed_state(num_splits)):
        for result in runs:
            for state in result.states:
                seen.setdefault(packed_key(state), state)
    return list(seen.values())


def check_lattice_packed(rec: Recorder, b: Bounds) -> None:
    """Every triple of states reached by the iterators of one instance."""
    for instance in instances(rec, b):
        states = _reached(instance)
        for x, y, z in itertools.product(states, repeat=3):
            rec.at(a=x, b=y, c=z)
            rec.apply(MergeLatticeInv, x, y, z)


LATTICE_PACKED = BoundedCheck(
    "MergeLatticeInv",
    UNIVERSE + "; every triple of states reached by any iterator of any topology",
    quick={"splits": 2, "rows": 2, "doc_len": 2, "fault_rows": 2, "block_len": 2, "budget": 2},
    full={"splits": 2, "rows": 3, "doc_len": 2, "fault_rows": 3, "block_len": 3, "budget": 3},
    run=check_lattice_packed,
)


def check_round_trip_packed(rec: Recorder, b: Bounds) -> None:
    """Every reached packed state, with and without a fingerprint."""
    for instance in instances(rec, b):
        num_splits = len(instance.perm)
        configs = [
            RunConfig(num_splits, 0, 0, None, instance.config),
            RunConfig(num_splits, 7, 3, FINGERPRINT, instance.config),
        ]
        for state, config in itertools.product(_reached(instance), configs):
            rec.at(config=config, state=state)
            rec.apply(CheckpointRoundTripInv, config, state, len(instance.perm[0]))


ROUND_TRIP_PACKED = BoundedCheck(
    "CheckpointRoundTripInv",
    UNIVERSE + "; every state reached by any iterator of any topology, two configs",
    quick={"splits": 2, "rows": 3, "doc_len": 2, "fault_rows": 3, "block_len": 3, "budget": 3},
    full={"splits": 3, "rows": 4, "doc_len": 3, "fault_rows": 4, "block_len": 4, "budget": 4},
    run=check_round_trip_packed,
)


# ---------------------------------------------------------------- auto budget


def check_auto_budget(rec: Recorder, b: Bounds) -> None:
    """The ``"auto"`` estimate on every small table and on a few large splits (sample size above one)."""
    for num_splits in rec.progress(range(1, b["splits"] + 1), "num_splits"):
        for docs in range(1, b["rows"] // num_splits + 1):
            for lengths in itertools.product(range(b["doc_len"] + 1), repeat=num_splits * docs):
                table = [list(lengths[s * docs : (s + 1) * docs]) for s in range(num_splits)]
                for block_len, seed in itertools.product(range(1, b["block_len"] + 1), (0, 1)):
                    rec.at(doc_lengths=table, pack_sequences=block_len, shuffle_seed=seed)
                    estimate = estimate_blocks_per_epoch(table, seed, block_len)
                    rec.apply(AutoBudgetInv, estimate, num_splits)
    for num_splits in range(1, b["large_splits"] + 1):
        for docs in (99, 100, 101, 250, 1001):
            table = [[(s + i) % 7 for i in range(docs)] for s in range(num_splits)]
            for block_len in (1, 3, 8, 64, 10_000):
                rec.at(large_splits=num_splits, docs=docs, pack_sequences=block_len)
                rec.apply(AutoBudgetInv, estimate_blocks_per_epoch(table, 0, block_len), num_splits)
    try:
        estimate_blocks_per_epoch([[1, None]], 0, 4)
    except SpecValueError as exc:
        rec.require(exc.code == "null_tokens", f"a null token list is rejected with {exc.code}")
    else:
        rec.require(False, "a null token list must be rejected")


AUTO_BUDGET = BoundedCheck(
    "AutoBudgetInv",
    "num_splits<={splits}, every doc length 0..{doc_len} over <={rows} documents, "
    "pack_sequences<={block_len}, "
    "seeds 0 and 1; num_splits<={large_splits} with 99..1001 documents per split",
    quick={"splits": 3, "rows": 4, "doc_len": 3, "block_len": 4, "large_splits": 2},
    full={"splits": 4, "rows": 6, "doc_len": 3, "block_len": 6, "large_splits": 6},
    run=check_auto_budget,
)
