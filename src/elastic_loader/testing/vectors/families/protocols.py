"""The ``protocols`` family: a job run as a chain of sessions joined by save protocols.

The model is :mod:`~elastic_loader.spec.protocols`: every rank of a session resumes from its start
checkpoint (the epoch start for the first session), its ``StreamingDataLoader`` delivers batches,
the trainer takes a given number of them, and the rank writes its checkpoint; the next session's
starts are the checkpoint dicts of the last one through a protocol (``one_rank``, ``merge_all``,
``own``), read by every rank of the next topology. Lockstep sessions are checked against
``LockstepInferenceInv``, every session against ``MergeReportedInv`` and
``PartialStateRefusedInv``, and chains whose every reload of one rank's state follows a lockstep
session against ``ProtocolChainProp``.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ....spec.loader import Item
from ....spec.protocols import Protocol, RankResult, Shape, lockstep_batches, next_starts, run_session
from ....spec.rows import Faults
from ....spec.saved import Saved, snapshot_saved
from ....spec.topology import Permutation, RunConfig
from ..codec import (
    BOOL,
    CONFIG,
    CORPUS,
    FAULTS,
    INT,
    INTS,
    PERMUTATION,
    Corpus,
    Json,
    VectorFormatError,
    array,
    as_str,
    corpus_map,
    enc_checkpoint,
    enc_item,
    nested,
    optional,
    plain,
    record,
)
from ..plumbing import faults_of
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case
from .sessions import PACKED_JOB, ROW_JOB, SKIP_JOB, Job


@dataclass(frozen=True)
class Step:
    """One session: its shape, the batches each rank takes (capped at what its loader delivers),
    and how it resumes from the session before (``protocol`` ``None``: the epoch start)."""

    world_size: int
    num_workers: int
    batch_size: int
    batches: tuple[int, ...]
    protocol: Protocol | None = None
    saver: int = 0


@dataclass(frozen=True)
class ProtocolsInput:
    """A job and the chain of sessions it runs."""

    config: RunConfig
    permutation: Permutation
    faults: Faults
    corpus: Corpus | None
    skipping: bool
    sessions: tuple[Step, ...]

    @property
    def split_len(self) -> int:
        """Rows per split."""
        return len(self.permutation[0])


def _dec_protocol(value: Json) -> Protocol:
    try:
        return Protocol(as_str(value))
    except ValueError as error:
        raise VectorFormatError(f"unknown protocol {value!r}") from error


_STEP = nested(Step, INT, INT, INT, INTS, optional(plain(lambda p: p.value, _dec_protocol)), INT)
_encode, _decode = record(ProtocolsInput, CONFIG, PERMUTATION, FAULTS, optional(CORPUS), BOOL, array(_STEP))


@dataclass(frozen=True)
class _Chain:
    """What the model did: every session's results, and the error of the step that was refused."""

    results: tuple[tuple[RankResult, ...], ...]
    refused: SpecError | None


def _chain(x: ProtocolsInput) -> _Chain:
    docs = None if x.corpus is None else corpus_map(x.corpus)
    out: list[tuple[RankResult, ...]] = []
    for step in x.sessions:
        shape = Shape(step.world_size, step.num_workers, step.batch_size)
        starts = _starts(x, out[-1] if out else None, step.protocol, step.saver, shape)
        if isinstance(starts, SpecError):
            return _Chain(tuple(out), starts)
        results = run_session(
            x.config, x.permutation, x.faults, docs, starts, shape, step.batches, x.split_len, x.skipping
        )
        out.append(results)
    return _Chain(tuple(out), None)


def _starts(
    x: ProtocolsInput,
    previous: Sequence[RankResult] | None,
    protocol: Protocol | None,
    saver: int,
    shape: Shape,
) -> Sequence[Saved] | SpecError:
    """A session's starts: the epoch start, or the previous session's checkpoints through
    ``protocol`` (or the error of a rank that refuses them)."""
    if previous is None:
        return [_epoch_start(x)] * shape.world_size
    assert protocol is not None
    return attempt(lambda: next_starts(x.config, previous, protocol, shape, x.split_len, saver))


def _epoch_start(x: ProtocolsInput) -> Saved:
    return Job(x.config, x.permutation, x.faults, x.corpus, x.skipping).start()


def _run(x: ProtocolsInput) -> JsonObject:
    def compute() -> _Chain:
        _check_shape(x)
        return _chain(x)

    chain = attempt(compute)
    if isinstance(chain, SpecError):
        return error_json(chain)
    _check(x, chain)
    return {
        "sessions": [{"ranks": [_enc_rank(r) for r in results]} for results in chain.results],
        "refused": None
        if chain.refused is None
        else {"session": len(chain.results), **error_json(chain.refused)},
    }


def _check_shape(x: ProtocolsInput) -> None:
    """Every session's shape is valid, and the first session has no protocol."""
    for i, step in enumerate(x.sessions):
        Shape(step.world_size, step.num_workers, step.batch_size)
        if (step.protocol is None) != (i == 0):
            raise VectorFormatError("the first session, and only it, starts without a protocol")


def _enc_rank(result: RankResult) -> Json:
    return {
        "rank": result.rank,
        "taken": result.taken,
        "batches": [[enc_item(i) for i in d.items] for d in result.deliveries],
        "checkpoint": enc_checkpoint(snapshot_saved(result.checkpoint))["checkpoint"],
    }


def _check(x: ProtocolsInput, chain: _Chain) -> None:
    """The save-protocol invariants that apply to the chain."""
    docs = None if x.corpus is None else corpus_map(x.corpus)
    for results in chain.results:
        if len({r.taken for r in results}) == 1:
            inv.LockstepInferenceInv(x.permutation, x.faults, docs, results, x.skipping)
        inv.MergeReportedInv(x.permutation, x.faults, docs, results)
        inv.PartialStateRefusedInv(results, x.split_len)
    reloads_follow_lockstep = all(
        len({r.taken for r in chain.results[i]}) == 1
        for i, step in enumerate(x.sessions[1 : len(chain.results)])
        if step.protocol is not Protocol.MERGE_ALL
    )
    if chain.refused is None and reloads_follow_lockstep:
        delivered: list[Item] = [item for results in chain.results for r in results for item in r.items]
        last = chain.results[-1]
        finished = all(r.taken == len(r.run.deliveries) and r.run.error is None for r in last)
        inv.ProtocolChainProp(x.permutation, x.faults, docs, x.config.packing, delivered, finished)


CODEC = Codec(_encode, _decode, _run)

END = 99
"""Batches to take in a session that runs to the end of the epoch (more than any loader delivers)."""

Plan = tuple[tuple[int, int, int], int | Sequence[int], Protocol | None, int]
"""``((world_size, num_workers, batch_size), batches, protocol, saver)``; an int of batches is a
lockstep session (every rank takes that many, at most what the rank that delivers the fewest can)."""


def _steps(job: Job, plan: Sequence[Plan]) -> tuple[Step, ...]:
    """The chain's steps with explicit per-rank batches (lockstep counts computed on the way)."""
    x = ProtocolsInput(job.config, job.perm, job.faults, job.corpus, job.skipping, ())
    steps: list[Step] = []
    for (world_size, nw, batch_size), batches, protocol, saver in plan:
        shape = Shape(world_size, nw, batch_size)
        if isinstance(batches, int):
            chain = _chain(ProtocolsInput(x.config, x.permutation, x.faults, x.corpus, x.skipping, (*steps,)))
            previous = chain.results[-1] if chain.results else None
            starts = None if chain.refused else _starts(x, previous, protocol, saver, shape)
            n = (
                batches
                if starts is None or isinstance(starts, SpecError)
                else lockstep_batches(job.config, job.perm, job.faults, job.docs, starts, shape, batches)
            )
            counts: tuple[int, ...] = (n,) * world_size
        else:
            counts = tuple(batches)
        steps.append(Step(world_size, nw, batch_size, counts, protocol, saver))
    return tuple(steps)


def _case(name: str, description: str, job: Job, plan: Sequence[Plan]) -> CaseDef:
    value = ProtocolsInput(job.config, job.perm, job.faults, job.corpus, job.skipping, _steps(job, plan))
    return make_case("protocols", CODEC, name, description, value)


ONE, ALL, OWN = Protocol.ONE_RANK, Protocol.MERGE_ALL, Protocol.OWN


def cases() -> list[CaseDef]:
    """Chains of sessions joined by save protocols: every rank's batches and checkpoint, per session."""
    return [_case(*row) for row in _CHAINS]


_RAISING_JOB = Job(ROW_JOB.config, ROW_JOB.perm, faults_of(raising=[ROW_JOB.perm[3][2]]))

_CHAINS: tuple[tuple[str, str, Job, list[Plan]], ...] = (
    # name, description, job, plan (a session each)
    # row mode
    ("one_rank_2_2_2",
     "rank 0's checkpoint resumes 2 ranks of 2 workers twice, mid-round; the last session finishes",
     ROW_JOB, [((2, 2, 1), 3, None, 0), ((2, 2, 1), 3, ONE, 0), ((2, 2, 1), END, ONE, 1)]),
    ("one_rank_2_4_1", "2 ranks, then 4 from rank 1's checkpoint, then 1 from rank 3's, to the end",
     ROW_JOB, [((2, 0, 2), 2, None, 0), ((4, 0, 1), 2, ONE, 1), ((1, 2, 2), END, ONE, 3)]),
    ("merge_all_out_of_lockstep", "ranks took 4 and 1 batches; the merge of both resumes 1 rank exactly",
     ROW_JOB, [((2, 0, 2), (4, 1), None, 0), ((1, 0, 3), END, ALL, 0)]),
    ("own_reload_same_topology", "each rank reloads its own checkpoint: the loaders go on at the cursor",
     ROW_JOB, [((2, 2, 1), 3, None, 0), ((2, 2, 1), END, OWN, 0)]),
    ("skipping_merge_all", "skipping transforms: one rank's checkpoint would not do, the merge does",
     SKIP_JOB, [((2, 0, 2), 2, None, 0), ((4, 0, 1), 1, ALL, 0), ((1, 0, 4), END, ALL, 0)]),
    ("raising_row_ends_the_chain", "a raising row stops rank 1's loader; lockstep stops every rank there",
     _RAISING_JOB, [((2, 0, 1), END, None, 0), ((1, 0, 2), END, ONE, 0)]),
    # packed mode
    ("packed_one_rank_2_4_1", "packed: projections replayed by their new owners at every step",
     PACKED_JOB, [((2, 2, 1), 3, None, 0), ((4, 0, 1), 2, ONE, 1), ((1, 2, 2), END, ONE, 2)]),
    ("packed_merge_all_mid_step", "packed, ranks out of lockstep, merged, resumed on 2 ranks of 2 workers",
     PACKED_JOB, [((2, 0, 1), (5, 2), None, 0), ((2, 2, 1), END, ALL, 0)]),
    ("packed_own_reload", "packed, each rank reloads its own checkpoint",
     PACKED_JOB, [((2, 2, 2), 1, None, 0), ((2, 2, 2), END, OWN, 0)]),
    # chains a rank refuses
    ("refused_unknown_progress", "skipping transforms: rank 1 refuses rank 0's checkpoint (progress_unknown)",
     SKIP_JOB, [((2, 0, 2), 2, None, 0), ((2, 0, 2), END, ONE, 0)]),
    ("refused_own_on_another_world_size", "per-rank files cannot resume another world size",
     ROW_JOB, [((2, 0, 1), 1, None, 0), ((4, 0, 1), END, OWN, 0)]),
)  # fmt: skip
"""The chains, a row each: row mode, packed mode, then chains a rank refuses."""


FAMILY = family("protocols", cases, CODEC)
