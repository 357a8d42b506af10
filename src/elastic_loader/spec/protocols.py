"""Save protocols: how users checkpoint and resume a job, as sessions of the model.

Rules: a *session* is every rank of one topology resuming from its start checkpoint, delivering
batches through its loader, then writing its checkpoint (:func:`~.saved.rank_checkpoint`). A
*lockstep* session delivers the same number of batches on every rank (the smallest number any
rank can deliver, when ranks would end at different points: ``sync_epoch_end``). A *protocol*
turns a session's checkpoints into the next session's start checkpoints, always through the
checkpoint dicts (the wire), as users do:

* ``ONE_RANK``: one rank's checkpoint alone, loaded on every rank of the next topology (what
  Lightning and ``torch.distributed.checkpoint`` keep of a rank-local state);
* ``MERGE_ALL``: every rank's checkpoint merged with ``merge_state_dicts`` (``merged_state_dict``);
* ``OWN``: each rank reloads the checkpoint it wrote itself (per-rank files; same world size).

Theory of operation
-------------------
Every rank of a session resolves the projections of the splits it owns, runs
:func:`~.loader.run_loader` from there with the rotation its start checkpoint's cursor gives, and
the trainer takes ``n`` batches of it. Its checkpoint infers the other ranks' splits under the
lockstep assumption. The invariants of ``spec/INVARIANTS.md`` (``LockstepInferenceInv``,
``ProtocolChainProp``, ``SameTopologyResumeProp``, ...) are statements about chains of such
sessions.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import require
from .inference import Pass, rank_checkpoint
from .loader import Delivery, Item, LoaderRun, State, run_loader
from .rows import Faults
from .saved import Saved, load_for_rank, merge_state_dicts, resolve, snapshot_saved
from .topology import Permutation, RunConfig, Topology, owned_splits, rank_splits


class Protocol(enum.Enum):
    """How a session's checkpoints become the next session's starts."""

    ONE_RANK = "one_rank"
    MERGE_ALL = "merge_all"
    OWN = "own"


@dataclass(frozen=True)
class Shape:
    """A session's topology and loader settings."""

    world_size: int
    num_workers: int
    batch_size: int

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, "batch_size_not_positive", "batch_size must be >= 1")
        Topology(self.world_size, 0, self.num_workers)


@dataclass(frozen=True)
class RankResult:
    """What one rank of a session did: its loader run, the batches the trainer took, its checkpoint."""

    rank: int
    run: LoaderRun
    taken: int
    checkpoint: Saved

    @property
    def deliveries(self) -> tuple[Delivery[Item, State], ...]:
        """The batches the trainer received."""
        return self.run.deliveries[: self.taken]

    @property
    def items(self) -> tuple[Item, ...]:
        """The rows or blocks the trainer received, in order."""
        return tuple(item for d in self.deliveries for item in d.items)


def _loader(
    config: RunConfig,
    perm: Permutation,
    faults: Faults,
    corpus: Mapping[int, Sequence[int]] | None,
    start: Saved,
    shape: Shape,
    rank: int,
) -> LoaderRun:
    state = resolve(start, perm, faults, rank_splits(config.num_splits, shape.world_size, rank), corpus)
    cursor = start.cursor
    rotation = 0 if cursor is None else cursor.rotation(shape.world_size, rank, shape.num_workers)
    topology = Topology(shape.world_size, rank, shape.num_workers)
    return run_loader(config, perm, faults, topology, state, shape.batch_size, corpus, rotation)


def _touched(config: RunConfig, shape: Shape, rank: int, run: LoaderRun, taken: int) -> frozenset[int]:
    """Splits of the iterators that delivered at least one of the first ``taken`` batches."""
    nw = shape.num_workers
    out: set[int] = set()
    for d in run.deliveries[:taken]:
        role = (d.worker + run.rotation) % max(1, nw)
        out.update(owned_splits(config.num_splits, Topology(shape.world_size, rank, nw, role)))
    return frozenset(out)


def run_session(
    config: RunConfig,
    perm: Permutation,
    faults: Faults,
    corpus: Mapping[int, Sequence[int]] | None,
    starts: Sequence[Saved],
    shape: Shape,
    batches: Sequence[int],
    split_len: int,
    skipping: bool,
) -> tuple[RankResult, ...]:
    """Every rank of ``shape`` resumes from ``starts[rank]`` and takes ``batches[rank]`` batches
    (capped at what its loader delivers); then each writes its checkpoint.

    ``skipping``: the transform errors of the job may skip rows (``on_transform_error`` other than
    ``"raise"``).
    """
    require(len(starts) == shape.world_size, "list_length", "one start checkpoint per rank")
    require(len(batches) == shape.world_size, "list_length", "one batch count per rank")
    out = []
    for r in range(shape.world_size):
        run = _loader(config, perm, faults, corpus, starts[r], shape, r)
        taken = min(batches[r], len(run.deliveries))
        done = Pass(shape.num_workers, shape.batch_size, taken, run.rotation, run.next_role_after(taken))
        checkpoint = rank_checkpoint(
            starts[r],
            run.state_after(taken),
            _touched(config, shape, r, run, taken),
            (done,),
            shape.world_size,
            r,
            split_len,
            skipping,
        )
        out.append(RankResult(r, run, taken, checkpoint))
    return tuple(out)


def lockstep_batches(
    config: RunConfig,
    perm: Permutation,
    faults: Faults,
    corpus: Mapping[int, Sequence[int]] | None,
    starts: Sequence[Saved],
    shape: Shape,
    wanted: int,
) -> int:
    """The batches every rank takes in a lockstep session that wants ``wanted``: no rank takes more
    than the rank that can deliver the fewest."""
    available = [
        len(_loader(config, perm, faults, corpus, starts[r], shape, r).deliveries)
        for r in range(shape.world_size)
    ]
    return min(wanted, *available)


def next_starts(
    config: RunConfig,
    results: Sequence[RankResult],
    protocol: Protocol,
    next_shape: Shape,
    split_len: int,
    saver: int = 0,
) -> tuple[Saved, ...]:
    """The next session's start checkpoints under ``protocol``, read back from the checkpoint dicts
    by every rank of ``next_shape`` (``saver`` is the rank whose checkpoint ``ONE_RANK`` keeps).

    Raises:
        SpecValueError: ``OWN`` on another world size (``own_needs_same_world_size``); what
            ``load_for_rank`` and ``merge_state_dicts`` raise.
    """
    wire = [snapshot_saved(r.checkpoint) for r in results]
    w = next_shape.world_size
    if protocol is Protocol.OWN:
        require(len(wire) == w, "own_needs_same_world_size", "each rank reloads its own: same world size")
        return tuple(load_for_rank(config, wire[r], split_len, w, r) for r in range(w))
    chosen = merge_state_dicts(wire) if protocol is Protocol.MERGE_ALL else wire[saver]
    return tuple(load_for_rank(config, chosen, split_len, w, r) for r in range(w))
