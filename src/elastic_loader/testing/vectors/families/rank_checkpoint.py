"""The ``rank_checkpoint`` family: the checkpoint dict one rank writes at the end of its session.

The model is :func:`~elastic_loader.spec.saved.rank_checkpoint`: the rank's own splits from its
committed state, every other rank's splits inferred under lockstep (row splits exact, or unknown
with skipping transforms; packed splits projected), the cursor of the session's loaders, the
start's table pin; a simulated worker reports its own splits only. Cases come from sessions of the
model (the input is what the rank saw: its start checkpoint, its committed state, the splits its
iterators delivered from and its loader passes), and each is checked to be the checkpoint the
session wrote, against ``LockstepInferenceInv`` for lockstep sessions, and against loaders of the
other ranks run through the same passes.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ....spec.inference import Pass, rank_checkpoint
from ....spec.loader import run_loader
from ....spec.packing import PackedState, iterate_packed
from ....spec.protocols import Protocol, Shape
from ....spec.rows import RowState, iterate_rows
from ....spec.saved import Saved, resolve, snapshot_saved
from ....spec.topology import RunConfig, Topology, owned_splits, rank_splits
from ..codec import (
    BOOL,
    CONFIG,
    INT,
    INTS,
    SAVED,
    STATE,
    Json,
    array,
    as_int,
    as_object,
    enc_checkpoint,
    optional,
    plain,
    record,
)
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case
from .sessions import PACKED_JOB, ROW_JOB, SKIP_JOB, Job, resumed, session, touched

RawPass = tuple[int, int, int, int, int]
"""``(num_workers, batch_size, batches, rotation, next_role)``, validated by the run."""


@dataclass(frozen=True)
class RankCheckpointInput:
    """What one rank saw in its session: its start, its committed state, and its loader passes."""

    config: RunConfig
    split_len: int
    start: Saved
    committed: RowState | PackedState
    touched: tuple[int, ...]
    passes: tuple[RawPass, ...]
    world_size: int
    rank: int
    skipping: bool
    partial: tuple[int, ...] | None = None


_PASS_FIELDS = ("num_workers", "batch_size", "batches", "rotation", "next_role")


def _dec_pass(value: Json) -> RawPass:
    obj = as_object(value)
    workers, batch_size, batches, rotation, next_role = (as_int(obj[f]) for f in _PASS_FIELDS)
    return workers, batch_size, batches, rotation, next_role


_PASS = plain(lambda p: dict(zip(_PASS_FIELDS, p)), _dec_pass)
_encode, _decode = record(
    RankCheckpointInput, CONFIG, INT, SAVED, STATE, INTS, array(_PASS), INT, INT, BOOL, optional(INTS)
)


def _saved(x: RankCheckpointInput) -> Saved:
    return rank_checkpoint(
        x.start,
        x.committed,
        frozenset(x.touched),
        [Pass(*p) for p in x.passes],
        x.world_size,
        x.rank,
        x.split_len,
        x.skipping,
        x.partial,
    )


def _run(x: RankCheckpointInput) -> JsonObject:
    saved = attempt(lambda: _saved(x))
    if isinstance(saved, SpecError):
        return error_json(saved)
    inv.ReachableLoadInv(saved, x.split_len)
    return enc_checkpoint(snapshot_saved(saved))


CODEC = Codec(_encode, _decode, _run)


def _raw(p: Pass) -> RawPass:
    return (p.num_workers, p.batch_size, p.batches, p.rotation, p.next_role)


def _case(
    name: str, description: str, value: RankCheckpointInput, check: Callable[[], None] | None = None
) -> CaseDef:
    return make_case("rank_checkpoint", CODEC, name, description, value, check)


def _of_session(
    name: str,
    description: str,
    job: Job,
    shape: Shape,
    batches: int,
    rank: int,
    starts: Sequence[Saved] | None = None,
) -> CaseDef:
    """Rank ``rank``'s view of a lockstep session; checked to be what the session wrote and
    against ``LockstepInferenceInv``."""
    results = session(job, shape, batches, starts)
    mine = results[rank]
    start = job.start() if starts is None else starts[rank]
    p = Pass(
        shape.num_workers,
        shape.batch_size,
        mine.taken,
        mine.run.rotation,
        mine.run.next_role_after(mine.taken),
    )
    value = RankCheckpointInput(
        job.config,
        job.split_len,
        start,
        mine.run.state_after(mine.taken),
        tuple(sorted(touched(job, shape, rank, mine.run, mine.taken))),
        (_raw(p),),
        shape.world_size,
        rank,
        job.skipping,
    )

    def check() -> None:
        if _saved(value) != mine.checkpoint:
            raise AssertionError(f"rank_checkpoint/{name}: not the checkpoint the session wrote")
        inv.LockstepInferenceInv(job.perm, job.faults, job.docs, results, job.skipping)

    return _case(name, description, value, check)


def cases() -> list[CaseDef]:
    """The checkpoint dict one rank writes after its session: reported, inferred, unknown, projected."""
    return [*_first_sessions(), *_resumed_sessions(), *_pass_cases(), *_partial_cases(), *_error_cases()]


_FIRST: tuple[tuple[str, str, Job, Shape, int, int], ...] = (
    # name, description, job, shape, batches, rank
    ("row_two_workers", "rank 0 of 2, 2 workers, 3 batches of 1: rank 1's splits exact",
     ROW_JOB, Shape(2, 2, 1), 3, 0),
    ("row_in_process", "rank 1 of 2 without workers, 2 batches of 2", ROW_JOB, Shape(2, 0, 2), 2, 1),
    ("row_four_ranks", "rank 2 of 4, one split each, 3 batches", ROW_JOB, Shape(4, 0, 1), 3, 2),
    ("row_skipping_unknown", "skipping transforms: rank 0 cannot know rank 1's splits once they moved",
     SKIP_JOB, Shape(2, 0, 2), 2, 0),
    ("row_skipping_nothing_moved", "skipping transforms but no batch taken: nothing is unknown",
     SKIP_JOB, Shape(2, 0, 2), 0, 0),
    ("packed_two_workers", "packed, rank 1 of 2 with 2 workers: rank 0's splits projected",
     PACKED_JOB, Shape(2, 2, 1), 3, 1),
    ("packed_in_process", "packed, rank 0 of 2, 5 batches of 1", PACKED_JOB, Shape(2, 0, 1), 5, 0),
)  # fmt: skip
"""Sessions from the start of the epoch, a row each."""


def _first_sessions() -> list[CaseDef]:
    """Sessions from the start of the epoch."""
    return [_of_session(*row) for row in _FIRST]


def _resumed_sessions() -> list[CaseDef]:
    """Sessions that resumed from one rank's checkpoint (inferred, projected, stale and cursor starts)."""
    row = session(ROW_JOB, Shape(2, 2, 1), 3)
    packed = session(PACKED_JOB, Shape(2, 0, 1), 3)
    skip = session(SKIP_JOB, Shape(2, 0, 2), 2)
    on_four, same, skipping = Shape(4, 0, 1), Shape(2, 2, 1), Shape(2, 0, 2)
    rows = (
        # name, description, job, shape, batches, rank, start
        ("row_resumed_on_four_ranks",
         "rank 0's checkpoint of 2 ranks resumed on 4; rank 3's checkpoint after 2 batches",
         ROW_JOB, on_four, 2, 3, resumed(ROW_JOB, row, Protocol.ONE_RANK, on_four)),
        ("row_resumed_on_the_same_shape", "resumed on the same 2 ranks of 2 workers: the cursor goes on",
         ROW_JOB, same, 3, 1, resumed(ROW_JOB, row, Protocol.ONE_RANK, same, saver=1)),
        ("packed_resumed_from_projections",
         "packed: rank 1's checkpoint of 2 ranks, resumed on 4 (projections replayed)",
         PACKED_JOB, on_four, 2, 0, resumed(PACKED_JOB, packed, Protocol.ONE_RANK, on_four, saver=1)),
        ("row_stale_unknown_start",
         "each rank reloaded its own checkpoint with unknown splits: they stay unknown",
         SKIP_JOB, skipping, 1, 0, resumed(SKIP_JOB, skip, Protocol.OWN, skipping)),
    )  # fmt: skip
    return [_of_session(*r) for r in rows]


def _passes(
    job: Job, start: Saved, world_size: int, rank: int, plan: Sequence[tuple[int, int, int]]
) -> tuple[RowState | PackedState, list[Pass], frozenset[int]]:
    """Rank ``rank`` runs one loader per ``(num_workers, batch_size, batches)`` of ``plan`` in turn
    (a loader with the previous one's worker count goes on at its next role): its committed state,
    its passes and the splits its iterators delivered from."""
    shape_of = functools.partial(Shape, world_size)
    state = resolve(
        start, job.perm, job.faults, rank_splits(job.config.num_splits, world_size, rank), job.docs
    )
    passes: list[Pass] = []
    delivered: set[int] = set()
    for nw, batch_size, batches in plan:
        rotation = passes[-1].next_role if passes and passes[-1].num_workers == nw >= 2 else 0
        topology = Topology(world_size, rank, nw)
        run = run_loader(job.config, job.perm, job.faults, topology, state, batch_size, job.docs, rotation)
        taken = min(batches, len(run.deliveries))
        passes.append(Pass(nw, batch_size, taken, rotation, run.next_role_after(taken)))
        delivered |= touched(job, shape_of(nw, batch_size), rank, run, taken)
        state = run.state_after(taken)
    return state, passes, frozenset(delivered)


def _resumes_alike(job: Job, a: RowState | PackedState, b: RowState | PackedState, s: int) -> bool:
    """Split ``s`` resumes from ``a`` as from ``b``: the same rows, or the same blocks to come."""
    if isinstance(a, RowState) and isinstance(b, RowState):
        return (a.samples[s], a.positions[s]) == (b.samples[s], b.positions[s])
    assert isinstance(a, PackedState) and isinstance(b, PackedState)
    assert job.config.packing is not None and job.docs is not None
    rest = [
        iterate_packed(job.perm, job.docs, job.faults, (s,), job.config.packing, x).blocks for x in (a, b)
    ]
    return a.emitted[s] == b.emitted[s] and rest[0] == rest[1]


def _multi_pass(
    name: str, description: str, job: Job, world_size: int, rank: int, plan: Sequence[tuple[int, int, int]]
) -> CaseDef:
    """A rank that iterated several loaders in one session; checked against every other rank
    running the same loaders (lockstep over several passes)."""
    start = job.start()
    runs = {r: _passes(job, start, world_size, r, plan) for r in range(world_size)}
    committed, passes, mine = runs[rank]
    value = RankCheckpointInput(
        job.config,
        job.split_len,
        start,
        committed,
        tuple(sorted(mine)),
        tuple(_raw(p) for p in passes),
        world_size,
        rank,
        job.skipping,
    )

    def check() -> None:
        saved = _saved(value)
        every = range(job.config.num_splits)
        state = resolve(saved, job.perm, job.faults, every, job.docs)
        for r, (truth, _, _) in runs.items():
            for s in rank_splits(job.config.num_splits, world_size, r):
                if not _resumes_alike(job, state, truth, s):
                    raise AssertionError(
                        f"rank_checkpoint/{name}: split {s} does not resume where rank {r} is"
                    )

    return _case(name, description, value, check)


def _pass_cases() -> list[CaseDef]:
    """Several loaders in one session: the inference replays every pass."""
    rows = (
        # name, description, job, world_size, rank, passes ((num_workers, batch_size, batches) each)
        ("row_two_passes_same_workers",
         "3 batches of a 2-worker loader, then 2 of a new one that goes on at the next role",
         ROW_JOB, 2, 0, ((2, 1, 3), (2, 1, 2))),
        ("row_workers_then_in_process", "a 2-worker loader, then plain iteration: the cursor is gone",
         ROW_JOB, 2, 1, ((2, 1, 3), (0, 1, 2))),
        ("packed_two_passes", "packed: plain iteration, then a 2-worker loader that starts mid-cycle",
         PACKED_JOB, 2, 1, ((0, 1, 3), (2, 1, 3))),
        ("row_empty_pass_changes_nothing",
         "a loader the trainer took nothing from leaves the cursor of the one before",
         ROW_JOB, 2, 0, ((2, 1, 1), (2, 1, 0))),
    )  # fmt: skip
    return [_multi_pass(*row) for row in rows]


def _partial_cases() -> list[CaseDef]:
    """A simulated worker (``worker_info_override``) reports its own splits; all others are unknown."""
    job, world_size, rank = ROW_JOB, 2, 1
    mine = owned_splits(job.config.num_splits, Topology(world_size, rank, 2, 1))
    start = job.start()
    assert isinstance(start.state, RowState)
    committed = iterate_rows(job.perm, job.faults, mine, start.state).state_after(2)
    value = RankCheckpointInput(
        job.config,
        job.split_len,
        start,
        committed,
        tuple(mine),
        (_raw(Pass(0, 1, 2)),),
        world_size,
        rank,
        False,
        tuple(mine),
    )
    idle = replace(value, committed=start.state, touched=(), passes=())
    return [
        _case("simulated_worker", "worker 1 of 2 of rank 1 read split 3 twice; only split 3 is known", value),
        _case("simulated_worker_before_any_row", "the same worker before any row", idle),
    ]


def _error_cases() -> list[CaseDef]:
    """Passes and topologies no rank has."""
    base = RankCheckpointInput(
        ROW_JOB.config,
        ROW_JOB.split_len,
        ROW_JOB.start(),
        ROW_JOB.start().state,
        (),
        ((0, 1, 0, 0, 0),),
        2,
        0,
        False,
    )
    return [
        _case(
            "error_negative_batches",
            "a pass took a number of batches",
            replace(base, passes=((0, 1, -1, 0, 0),)),
        ),
        _case("error_batch_size_zero", "a batch holds an item", replace(base, passes=((0, 0, 1, 0, 0),))),
        _case(
            "error_next_role_beyond_workers",
            "a next role is a role below num_workers",
            replace(base, passes=((2, 1, 1, 0, 2),)),
        ),
        _case(
            "error_negative_workers", "num_workers is not negative", replace(base, passes=((-1, 1, 1, 0, 0),))
        ),
        _case("error_rank_beyond_world_size", "rank < world_size", replace(base, rank=2)),
    ]


FAMILY = family("rank_checkpoint", cases, CODEC)
