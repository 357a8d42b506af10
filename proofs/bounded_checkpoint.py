"""Bounded checks of row-mode checkpoints: lattice, round trip, exact merge, consumer commit."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from elastic_loader.spec import (
    RunConfig,
    Topology,
    initial_row_state,
    iterate_rows,
    rank_splits,
    run_loader,
)
from elastic_loader.spec.invariants import (
    CheckpointRoundTripInv,
    ConsumerCommitProp,
    MergeExactProp,
    MergeLatticeInv,
)

from .bounded_rows import JOBS, jobs
from .framework import BoundedCheck, Bounds, Recorder
from .universes import all_row_states, iterators, progress_pairs, topologies

FINGERPRINT = "ab" * 32


def _state_spaces(cap: int) -> Iterator[tuple[int, int]]:
    """``(num_splits, split_len)`` pairs whose full row-state space has at most ``cap`` states."""
    for num_splits in range(1, 4):
        for split_len in range(1, 8):
            if len(progress_pairs(split_len)) ** num_splits <= cap:
                yield num_splits, split_len


def check_lattice_rows(rec: Recorder, b: Bounds) -> None:
    """Every triple of row states of every small state space."""
    for num_splits, split_len in rec.progress(list(_state_spaces(b["states"])), "spaces"):
        states = list(all_row_states(num_splits, split_len))
        for a, c, d in itertools.product(states, repeat=3):
            rec.at(num_splits=num_splits, split_len=split_len, a=a, b=c, c=d)
            rec.apply(MergeLatticeInv, a, c, d)


LATTICE_ROWS = BoundedCheck(
    "MergeLatticeInv",
    "rows: every triple of row states, every (num_splits, split_len) whose state space has <={states} states",
    quick={"states": 10},
    full={"states": 40},
    run=check_lattice_rows,
)


def configs(num_splits: int) -> list[RunConfig]:
    """Checkpoint configurations that differ in every head key: seed, epoch, fingerprint or not."""
    return [RunConfig(num_splits, 0, 0), RunConfig(num_splits, 7, 3, FINGERPRINT)]


def check_round_trip_rows(rec: Recorder, b: Bounds) -> None:
    """Every row state of every small state space, with and without a fingerprint."""
    for num_splits in rec.progress(range(1, b["splits"] + 1), "num_splits"):
        for split_len in range(1, b["split_len"] + 1):
            for config in configs(num_splits):
                for state in all_row_states(num_splits, split_len):
                    rec.at(num_splits=num_splits, split_len=split_len, config=config, state=state)
                    rec.apply(CheckpointRoundTripInv, config, state, split_len)


ROUND_TRIP_ROWS = BoundedCheck(
    "CheckpointRoundTripInv",
    "rows: every row state of num_splits<={splits}, split_len<={split_len}; "
    "two configs (with/without fingerprint)",
    quick={"splits": 2, "split_len": 2},
    full={"splits": 3, "split_len": 3},
    run=check_round_trip_rows,
)


def check_merge_exact_rows(rec: Recorder, b: Bounds) -> None:
    """At every global step of every topology: per-rank iterators, per-worker iterators, and every rank's
    ``StreamingDataLoader`` parent state, merged, against the single-iterator run."""
    for perm, faults in rec.progress(list(jobs(b)), "jobs"):
        num_splits = len(perm)
        config = RunConfig(num_splits, 0, 0)
        start = initial_row_state(num_splits)
        single = iterate_rows(perm, faults, tuple(range(num_splits)), start)
        for world, workers in topologies(num_splits):
            slots = iterators(num_splits, world, workers)
            runs = [iterate_rows(perm, faults, slot.owned, start) for slot in slots]
            per_worker = len(slots[0].owned)
            per_rank = num_splits // world
            batch = per_worker  # one cycle of the worker's splits per batch
            loaders = [
                run_loader(config, perm, faults, Topology(world, r, workers), start, batch)
                for r in range(world)
            ]
            nw = max(1, workers)
            t = 0
            while t * num_splits <= len(single.rows) and all(t * per_worker <= len(run.rows) for run in runs):
                rec.at(
                    num_splits=num_splits,
                    split_len=len(perm[0]),
                    faults=faults,
                    topology=(world, workers),
                    step=t,
                )
                expected = single.state_after(t * num_splits)
                rec.apply(MergeExactProp, config, [run.state_after(t * per_worker) for run in runs], expected)
                if workers == 0:
                    rank_runs = runs
                else:
                    rank_runs = [
                        iterate_rows(perm, faults, rank_splits(num_splits, world, r), start)
                        for r in range(world)
                    ]
                rec.apply(
                    MergeExactProp, config, [run.state_after(t * per_rank) for run in rank_runs], expected
                )
                if all(len(loader.deliveries) >= t * nw for loader in loaders):
                    rec.apply(
                        MergeExactProp, config, [loader.state_after(t * nw) for loader in loaders], expected
                    )
                t += 1


MERGE_EXACT_ROWS = BoundedCheck(
    "MergeExactProp",
    "rows: "
    + JOBS
    + "; every (world_size, num_workers), every global step; iterator, rank and loader states",
    quick={"fault_rows": 4, "clean_splits": 6, "clean_len": 2},
    full={"fault_rows": 6, "clean_splits": 12, "clean_len": 3},
    run=check_merge_exact_rows,
)


def check_consumer_commit(rec: Recorder, b: Bounds) -> None:
    """Every rank's loader of every topology, every batch size, from the start and from every step
    boundary of the rank; after every number of delivered batches."""
    for perm, faults in rec.progress(list(jobs(b)), "jobs"):
        num_splits = len(perm)
        config = RunConfig(num_splits, 0, 0)
        for world, workers in topologies(num_splits):
            for r in range(world):
                mine = rank_splits(num_splits, world, r)
                rank_run = iterate_rows(perm, faults, mine, initial_row_state(num_splits))
                parents = [
                    rank_run.state_after(t * len(mine)) for t in range(len(rank_run.rows) // len(mine) + 1)
                ]
                for parent, batch in itertools.product(parents, range(1, b["batch"] + 1)):
                    loader = run_loader(config, perm, faults, Topology(world, r, workers), parent, batch)
                    for n in range(len(loader.deliveries) + 1):
                        rec.at(
                            num_splits=num_splits,
                            split_len=len(perm[0]),
                            faults=faults,
                            world_size=world,
                            rank=r,
                            num_workers=workers,
                            parent=parent,
                            batch_size=batch,
                            n=n,
                        )
                        rec.apply(ConsumerCommitProp, perm, faults, loader, n)


CONSUMER_COMMIT = BoundedCheck(
    "ConsumerCommitProp",
    JOBS
    + "; every rank of every (world_size, num_workers), batch_size<={batch}, every step-boundary parent, "
    "every number of delivered batches",
    quick={"fault_rows": 4, "clean_splits": 4, "clean_len": 2, "batch": 3},
    full={"fault_rows": 6, "clean_splits": 8, "clean_len": 3, "batch": 4},
    run=check_consumer_commit,
)
