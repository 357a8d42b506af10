"""The ``resolve`` family: the exact progress a rank resumes its splits from.

The model is :func:`~elastic_loader.spec.saved.resolve`: a projected packed split is replayed
from its plain value (the base) through the split's own documents until it emitted the projected
block count; row splits are exact already, unknown ones cannot be resumed. Every checkpoint here
was written by a session of the model, and each resolved split is checked to resume as the
checkpoint of the rank that owned it resolves (``LockstepInferenceInv``'s comparison).

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ....spec.packing import PackedState, iterate_packed
from ....spec.protocols import RankResult, Shape
from ....spec.rows import Faults, RowState
from ....spec.saved import Saved, resolve
from ....spec.topology import Permutation, RunConfig, rank_splits
from ..codec import (
    CONFIG,
    CORPUS,
    FAULTS,
    INT,
    INTS,
    PERMUTATION,
    SAVED,
    Corpus,
    corpus_map,
    enc_state,
    optional,
    record,
)
from ..plumbing import faults_of
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, make_case
from .sessions import PACKED_JOB, ROW_JOB, SKIP_JOB, Job, session


@dataclass(frozen=True)
class ResolveInput:
    """A checkpoint as loaded, the data its splits replay, and the splits to resolve."""

    config: RunConfig
    split_len: int
    checkpoint: Saved
    permutation: Permutation
    faults: Faults
    corpus: Corpus | None
    splits: tuple[int, ...]


_encode, _decode = record(ResolveInput, CONFIG, INT, SAVED, PERMUTATION, FAULTS, optional(CORPUS), INTS)


def _run(x: ResolveInput) -> JsonObject:
    docs = None if x.corpus is None else corpus_map(x.corpus)
    state = attempt(lambda: resolve(x.checkpoint, x.permutation, x.faults, x.splits, docs))
    if isinstance(state, SpecError):
        return error_json(state)
    return {"state": enc_state(state)}


CODEC = Codec(_encode, _decode, _run)


def _owner_check(job: Job, results: Sequence[RankResult], x: ResolveInput) -> Callable[[], None]:
    """Every resolved split resumes as its owner's checkpoint, resolved, resumes."""

    def check() -> None:
        state = attempt(lambda: resolve(x.checkpoint, job.perm, job.faults, x.splits, job.docs))
        if isinstance(state, SpecError):
            return  # the output is the error
        world_size = len(results)
        for owner in results:
            block = rank_splits(job.config.num_splits, world_size, owner.rank)
            truth = resolve(owner.checkpoint, job.perm, job.faults, block, job.docs)
            for s in set(block) & set(x.splits):
                if _future(job, state, s) != _future(job, truth, s):
                    raise AssertionError(f"resolve: split {s} does not resume as rank {owner.rank}'s own")

    return check


def _future(job: Job, state: RowState | PackedState, s: int) -> object:
    if isinstance(state, RowState):
        return state.samples[s], state.positions[s]
    assert job.config.packing is not None and job.docs is not None
    return state.emitted[s], iterate_packed(
        job.perm, job.docs, job.faults, (s,), job.config.packing, state
    ).blocks


def _case(
    name: str,
    description: str,
    job: Job,
    results: Sequence[RankResult],
    saver: int,
    splits: Sequence[int],
    faults: Faults | None = None,
) -> CaseDef:
    """Rank ``saver``'s checkpoint of ``results`` resolved at ``splits`` (over ``faults``, default
    the job's). Lockstep sessions over the session's faults are checked against the owners."""
    value = ResolveInput(
        job.config,
        job.split_len,
        results[saver].checkpoint,
        job.perm,
        job.faults if faults is None else faults,
        job.corpus,
        tuple(splits),
    )
    lockstep = len({r.taken for r in results}) == 1
    check = _owner_check(job, results, value) if faults is None and lockstep else None
    return make_case("resolve", CODEC, name, description, value, check)


def cases() -> list[CaseDef]:
    """The progress a rank resumes from: projected packed splits replayed to their target."""
    packed = session(PACKED_JOB, Shape(2, 2, 1), 3)
    uneven = session(PACKED_JOB, Shape(2, 0, 1), (5, 2))
    row = session(ROW_JOB, Shape(2, 0, 2), 2)
    skip = session(SKIP_JOB, Shape(2, 0, 2), 2)
    return [
        _case(
            "packed_projections_of_the_other_rank",
            "rank 0's checkpoint resolved at rank 1's splits: replayed to the projected counts",
            PACKED_JOB,
            packed,
            0,
            (2, 3),
        ),
        _case(
            "packed_every_split",
            "the same checkpoint resolved at every split",
            PACKED_JOB,
            packed,
            1,
            (0, 1, 2, 3),
        ),
        _case("packed_own_splits", "a rank's own splits are exact already", PACKED_JOB, packed, 0, (0, 1)),
        _case("packed_no_splits", "nothing to resolve", PACKED_JOB, packed, 1, ()),
        _case(
            "packed_out_of_lockstep_behind",
            "rank 1 took 2 batches, rank 0 five: rank 1's projection of split 0 is behind its owner",
            PACKED_JOB,
            uneven,
            1,
            (0, 1),
        ),
        _case(
            "row_inferred_rows_are_exact", "row progress is never projected", ROW_JOB, row, 0, (0, 1, 2, 3)
        ),
        _case(
            "row_known_splits_of_a_skipping_job", "rank 0 resolves its own splits", SKIP_JOB, skip, 0, (0, 1)
        ),
        _case(
            "error_row_unknown_splits",
            "rank 0 does not know rank 1's splits",
            SKIP_JOB,
            skip,
            0,
            (1, 2),
        ),
        _case(
            "error_projection_unreachable",
            "split 2 raises at its second document: it cannot reach the 2 blocks rank 0 projects",
            PACKED_JOB,
            packed,
            0,
            (2, 3),
            faults_of(raising=[PACKED_JOB.perm[2][1]]),
        ),
    ]


FAMILY = family("resolve", cases, CODEC)
