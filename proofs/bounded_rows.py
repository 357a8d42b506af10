"""Bounded checks of row mode: progress, skips, catch-up, order, raising rows, resume, exactly-once.

The row universe: splits of ``m <= split_len`` rows and every non-empty
owned subset; with ``S <= splits`` and at most ``fault_rows`` owned rows,
every ok / skip / raise assignment of the owned rows (unowned rows are never
read); with ``S <= clean_splits`` and at most ``clean_rows`` owned rows,
fault-free. Every start state of the owned splits (``0 <= samples <=
positions <= m``; for SkipAccountingInv only the accounted ones). Unowned
splits start at progress ``(1, 1)`` so that touching them is visible.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

from elastic_loader.spec import (
    Exhausted,
    Faults,
    RowRun,
    RowState,
    RunConfig,
    Topology,
    Yielded,
    initial_row_state,
    iterate_rows,
    join_row,
    load_row,
    merge_state_dicts,
    run_loader,
    snapshot_row,
)
from elastic_loader.spec.invariants import (
    CanonicalOrderProp,
    CatchUpInv,
    ExactlyOnceProp,
    HonestProgressInv,
    ProgressBoundsInv,
    RaisePositionProp,
    ResumeEquivalenceProp,
    SkipAccountingInv,
    yieldable,
)
from elastic_loader.spec.topology import Permutation

from .framework import BoundedCheck, Bounds, Recorder
from .universes import (
    accounted_states,
    divisors,
    fault_sets,
    iterators,
    owned_subsets,
    permutation,
    progress_pairs,
    topologies,
)

RowCase = tuple[Permutation, Faults, tuple[int, ...], RowState, RowRun]


def row_runs(rec: Recorder, b: Bounds, accounted: bool = False) -> Iterator[RowCase]:
    """Every run of the row universe (see the module docstring)."""
    shapes = [
        (s, m)
        for s in range(1, max(b["splits"], b["clean_splits"]) + 1)
        for m in range(1, b["split_len"] + 1)
    ]
    for num_splits, split_len in rec.progress(shapes, "shapes"):
        perm = permutation(num_splits, split_len)
        base = RowState((1,) * num_splits, (1,) * num_splits)
        for owned in owned_subsets(num_splits):
            owned_rows = len(owned) * split_len
            rows = [row for s in owned for row in perm[s]]
            if num_splits <= b["splits"] and owned_rows <= b["fault_rows"]:
                fault_choices: Iterator[Faults] = fault_sets(rows, "osr")
            elif num_splits <= b["clean_splits"] and owned_rows <= b["clean_rows"]:
                fault_choices = iter([Faults()])
            else:
                continue
            for faults in fault_choices:
                rec.at(num_splits=num_splits, split_len=split_len, owned=owned, faults=faults)
                for start in _starts(perm, faults, owned, base, accounted):
                    rec.at(start=start)
                    yield perm, faults, owned, start, iterate_rows(perm, faults, owned, start)


def _starts(
    perm: Permutation, faults: Faults, owned: tuple[int, ...], base: RowState, accounted: bool
) -> Iterator[RowState]:
    if accounted:
        yield from accounted_states(perm, faults, owned, base)
        return
    for pairs in itertools.product(progress_pairs(len(perm[0])), repeat=len(owned)):
        samples, positions = list(base.samples), list(base.positions)
        for s, (c, p) in zip(owned, pairs):
            samples[s], positions[s] = c, p
        yield RowState(tuple(samples), tuple(positions))


def merged_states(perm: Permutation, faults: Faults) -> Iterator[tuple[str, RowState]]:
    """States a merge can produce: every rank count, every combination of per-rank cuts, merged."""
    num_splits = len(perm)
    config = RunConfig(num_splits, 0, 0)
    for world in divisors(num_splits):
        runs = [
            iterate_rows(perm, faults, slot.owned, initial_row_state(num_splits))
            for slot in iterators(num_splits, world, 0)
        ]
        for cuts in itertools.product(*(range(len(run.rows) + 1) for run in runs)):
            snaps = [snapshot_row(config, run.state_after(n)) for run, n in zip(runs, cuts)]
            merged = merge_state_dicts(snaps)
            yield f"world_size={world} cuts={cuts}", load_row(config, merged, len(perm[0]))


def _small_faulted(b: Bounds, prefix: str = "merge") -> Iterator[tuple[Permutation, Faults]]:
    rows_bound = b[f"{prefix}_rows"]
    for num_splits in range(1, rows_bound + 1):
        for split_len in range(1, rows_bound // num_splits + 1):
            perm = permutation(num_splits, split_len)
            for faults in fault_sets([r for split in perm for r in split], "osr"):
                yield perm, faults


# ---------------------------------------------------------------- ProgressBoundsInv


def check_progress_bounds(rec: Recorder, b: Bounds) -> None:
    """Every state of every run of the row universe, and every merged state of small jobs."""
    for perm, _, _, start, run in row_runs(rec, b):
        size = len(perm[0])
        rec.apply(ProgressBoundsInv, start, size)
        for state in run.states:
            rec.apply(ProgressBoundsInv, state, size)
    for perm, faults in rec.progress(list(_small_faulted(b)), "merged"):
        for where, state in merged_states(perm, faults):
            rec.at(num_splits=len(perm), split_len=len(perm[0]), faults=faults, merged=where)
            rec.apply(ProgressBoundsInv, state, len(perm[0]))


ROW_UNIVERSE = (
    "split_len<={split_len}, every owned subset: every ok/skip/raise fault set of <={fault_rows} owned rows "
    "(num_splits<={splits}), fault-free up to {clean_rows} owned rows (num_splits<={clean_splits}); "
)

QUICK_ROWS = {"splits": 2, "split_len": 2, "fault_rows": 4, "clean_splits": 3, "clean_rows": 6}
FULL_ROWS = {"splits": 3, "split_len": 3, "fault_rows": 6, "clean_splits": 4, "clean_rows": 9}

PROGRESS_BOUNDS = BoundedCheck(
    "ProgressBoundsInv",
    ROW_UNIVERSE + "every start state; merged states of every rank cut over <={merge_rows} rows",
    quick={**QUICK_ROWS, "merge_rows": 4},
    full={**FULL_ROWS, "merge_rows": 6},
    run=check_progress_bounds,
)


# ---------------------------------------------------------------- SkipAccountingInv


def check_skip_accounting(rec: Recorder, b: Bounds) -> None:
    """Runs from every accounted start; merged states; joins of every pair of accounted states."""
    for perm, faults, _, _, run in row_runs(rec, b, accounted=True):
        for state in run.states:
            rec.apply(SkipAccountingInv, perm, faults, state)
    for perm, faults in rec.progress(list(_small_faulted(b)), "merged"):
        for where, state in merged_states(perm, faults):
            rec.at(num_splits=len(perm), split_len=len(perm[0]), faults=faults, merged=where)
            rec.apply(SkipAccountingInv, perm, faults, state)
    for perm, faults in _small_faulted(b, "join"):
        everything = tuple(range(len(perm)))
        states = list(accounted_states(perm, faults, everything, initial_row_state(len(perm))))
        for a, c in itertools.combinations_with_replacement(states, 2):
            rec.at(num_splits=len(perm), split_len=len(perm[0]), faults=faults, join=(a, c))
            rec.apply(SkipAccountingInv, perm, faults, join_row(a, c))


SKIP_ACCOUNTING = BoundedCheck(
    "SkipAccountingInv",
    ROW_UNIVERSE + "every accounted start; merged states over <={merge_rows} rows; "
    "joins of every pair of accounted states over <={join_rows} rows",
    quick={**QUICK_ROWS, "merge_rows": 4, "join_rows": 4},
    full={**FULL_ROWS, "merge_rows": 6, "join_rows": 5},
    run=check_skip_accounting,
)


# ---------------------------------------------------------------- run predicates


def _run_check(predicate_name: str) -> BoundedCheck:
    def run(rec: Recorder, b: Bounds) -> None:
        for perm, faults, owned, start, result in row_runs(rec, b):
            if predicate_name == "HonestProgressInv":
                rec.apply(HonestProgressInv, start, result, owned)
            elif predicate_name == "CatchUpInv":
                rec.apply(CatchUpInv, start, result, owned)
            elif predicate_name == "CanonicalOrderProp":
                rec.apply(CanonicalOrderProp, perm, faults, owned, result)
            else:
                rec.apply(RaisePositionProp, perm, faults, owned, result)

    return BoundedCheck(
        predicate_name,
        ROW_UNIVERSE + "every start state (samples <= positions <= split_len)",
        quick=QUICK_ROWS,
        full=FULL_ROWS,
        run=run,
    )


HONEST_PROGRESS = _run_check("HonestProgressInv")
CATCH_UP = _run_check("CatchUpInv")
CANONICAL_ORDER = _run_check("CanonicalOrderProp")
RAISE_POSITION = _run_check("RaisePositionProp")


# ---------------------------------------------------------------- ResumeEquivalenceProp (rows)


def jobs(b: Bounds) -> Iterator[tuple[Permutation, Faults]]:
    """Small jobs with every fault set, then larger fault-free jobs."""
    yield from _small_faulted(b, "fault")
    for num_splits in range(1, b["clean_splits"] + 1):
        for split_len in range(1, b["clean_len"] + 1):
            yield permutation(num_splits, split_len), Faults()


def catch_up_deficit(state: RowState) -> int:
    """Rows an iterator over every split yields in its catch-up from ``state`` (R4.1)."""
    return sum(max(state.samples) - c for c in state.samples)


def check_resume_rows(rec: Recorder, b: Bounds) -> None:
    """Resume an uninterrupted single-iterator run on every iterator of every topology.

    The uninterrupted run starts from the initial state or (jobs over at most
    ``merge_rows`` rows) from every merged state of out-of-step ranks. The
    checkpoint is taken after every ``n`` once that run's catch-up is over;
    without faults after every ``n`` (the predicate's domain).
    """
    for perm, faults in rec.progress(list(jobs(b)), "jobs"):
        num_splits = len(perm)
        starts: dict[RowState, str] = {initial_row_state(num_splits): "initial"}
        if num_splits * len(perm[0]) <= b["merge_rows"]:
            for where, state in merged_states(perm, faults):
                starts.setdefault(state, where)
        for start, where in starts.items():
            whole = iterate_rows(perm, faults, tuple(range(num_splits)), start)
            first = 0 if not (faults.skipped or faults.raising) else catch_up_deficit(start)
            for n in range(first, len(whole.rows) + 1):
                for world, workers in topologies(num_splits):
                    for r, w in itertools.product(range(world), range(max(1, workers))):
                        topology = Topology(world, r, workers, w)
                        rec.at(
                            num_splits=num_splits,
                            split_len=len(perm[0]),
                            faults=faults,
                            start=where,
                            n=n,
                            topology=topology,
                        )
                        rec.apply(ResumeEquivalenceProp, perm, faults, whole, n, topology)


JOBS = (
    "every ok/skip/raise fault set over <={fault_rows} rows, "
    "fault-free num_splits<={clean_splits} x split_len<={clean_len}"
)

RESUME_ROWS = BoundedCheck(
    "ResumeEquivalenceProp",
    "rows: "
    + JOBS
    + "; uninterrupted run from the start and from every merged state over <={merge_rows} rows; "
    "every n after its catch-up (every n without faults), every iterator of every (world_size, num_workers)",
    quick={"fault_rows": 4, "clean_splits": 6, "clean_len": 2, "merge_rows": 4},
    full={"fault_rows": 6, "clean_splits": 8, "clean_len": 3, "merge_rows": 5},
    run=check_resume_rows,
)


# ---------------------------------------------------------------- ExactlyOnceProp


def _session_one(
    config: RunConfig, perm: Permutation, faults: Faults, world: int, workers: int, batch: int
) -> Iterator[tuple[tuple[int, ...], list[Yielded], RowState]]:
    """Every combination of per-rank cuts of a first session: delivered rows and the merged checkpoint."""
    num_splits = len(perm)
    start = initial_row_state(num_splits)
    runs = [run_loader(config, perm, faults, Topology(world, r, workers), start, batch) for r in range(world)]
    for cuts in itertools.product(*(range(len(run.deliveries) + 1) for run in runs)):
        delivered = [
            item
            for run, n in zip(runs, cuts)
            for d in run.deliveries[:n]
            for item in d.items
            if isinstance(item, Yielded)
        ]
        states = [run.state_after(n) for run, n in zip(runs, cuts)]
        row_states = [state for state in states if isinstance(state, RowState)]
        assert len(row_states) == len(states), "a row-mode loader reported a packed state"
        snaps = [snapshot_row(config, state) for state in row_states]
        merged = json.loads(json.dumps(merge_state_dicts(snaps)))
        yield cuts, delivered, load_row(config, merged, len(perm[0]))


def check_exactly_once(rec: Recorder, b: Bounds) -> None:
    """Session 1 on topology A (loaders with workers, every batch size, every per-rank cut), a merged
    checkpoint through JSON, then session 2 on topology B to the end; also session 1 alone."""
    for perm, faults in rec.progress(list(jobs(b)), "jobs"):
        num_splits = len(perm)
        config = RunConfig(num_splits, 0, 0)
        for (world_a, workers_a), batch in itertools.product(
            topologies(num_splits), range(1, b["batch"] + 1)
        ):
            for cuts, first, state in _session_one(config, perm, faults, world_a, workers_a, batch):
                rec.at(
                    num_splits=num_splits,
                    split_len=len(perm[0]),
                    faults=faults,
                    session_1=(world_a, workers_a),
                    batch_size=batch,
                    cuts=cuts,
                )
                rec.apply(ExactlyOnceProp, perm, faults, first, False)
                for split in range(num_splits):
                    mine = sorted(y.position for y in first if y.split == split)
                    usable = yieldable(perm[split], faults)
                    rec.require(
                        mine == [p for p in usable if p < state.positions[split]],
                        f"split {split}: delivered {mine}, checkpoint at position {state.positions[split]}",
                    )
                for world_b, workers_b in topologies(num_splits):
                    rec.at(session_2=(world_b, workers_b))
                    runs = [
                        iterate_rows(perm, faults, slot.owned, state)
                        for slot in iterators(num_splits, world_b, workers_b)
                    ]
                    second = [y for run in runs for y in run.rows]
                    finished = all(isinstance(run.end, Exhausted) for run in runs)
                    rec.apply(ExactlyOnceProp, perm, faults, first + second, finished)


EXACTLY_ONCE = BoundedCheck(
    "ExactlyOnceProp",
    JOBS + "; session 1: every (world_size, num_workers), batch_size<={batch}, every per-rank cut; "
    "session 2: every (world_size, num_workers)",
    quick={"fault_rows": 3, "clean_splits": 4, "clean_len": 2, "batch": 2},
    full={"fault_rows": 4, "clean_splits": 4, "clean_len": 3, "batch": 2},
    run=check_exactly_once,
)
