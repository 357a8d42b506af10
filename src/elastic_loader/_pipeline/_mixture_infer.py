"""One rank's mixture checkpoint: the other ranks' progress by lockstep, and resolving it on load.

Rules (spec/MIXTURES.md, section 2, "One rank's checkpoint"):

* A rank assumes every other rank delivered as many batches as it did, with the same loader
  settings, from the same start (the checkpoint it loaded). Every virtual split can give one item
  per scheduled global cycle, so the other ranks' global cycle counts follow from the
  single-table delivery arithmetic (``_schedule``) with the schedule's length as every split's
  cap; each loader's workers start their round robin at worker 0.
* Rows without skipping: exact. The source epoch and count of a split at cycle ``g`` are read off
  the schedule; its position is one past its last row, keeping its skipped-row offset of the start
  within the same source epoch (0 in a new one).
* Rows with skipping (any source's ``on_transform_error`` is not ``"raise"``): every moved block
  of another rank is *unknown*; a rank that owns one refuses such a checkpoint (merge instead).
* Packed: *projected* to the global cycle count; the split keeps its start value, and the rank
  that owns it on resume replays it up to the target (:func:`resolve`) before its first item.
* A split unknown at the start stays unknown (its block, unless this rank owns it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ._mixture_iter import MixtureIterator
from ._mixture_schedule import Schedule
from ._mixture_source import SourceReader
from ._mixture_state import MixState, Value, canonical, lookup_in
from ._schedule import advance, capacity, deliveries
from ._stats import Counters
from ._topology import rank_block, role_splits


@dataclass
class Pass:
    """One iteration since the start: a loader's workers and batch size (a plain iteration: no
    workers, batches of one item) and the batches the trainer received."""

    num_workers: int
    batch_size: int
    batches: int = 0


@dataclass
class Start:
    """What a rank's session started from: a loaded checkpoint (or the epoch's start)."""

    state: MixState
    unknown: frozenset[int] = frozenset()
    projected: dict[int, int] = field(default_factory=dict)

    def cycles(self, s: int) -> int:
        return self.projected.get(s, self.state.cycles[s])


def _rank_counts(counts: list[int], limit: int, world_size: int, rank: int, p: Pass) -> dict[int, int]:
    n = len(counts)
    block = rank_block(rank, n // world_size)
    if p.num_workers == 0:
        have = [counts[s] for s in block]
        items = min(capacity(have, [limit] * len(have)), p.batches * p.batch_size)
        return dict(zip(block, advance(have, items)))
    roles = [role_splits(block, p.num_workers, w) for w in range(p.num_workers)]
    caps = [capacity([counts[s] for s in b], [limit] * len(b)) for b in roles]
    done = deliveries([-(-c // p.batch_size) for c in caps], p.batches)
    out: dict[int, int] = {}
    for b, cap, d in zip(roles, caps, done):
        out.update(zip(b, advance([counts[s] for s in b], min(cap, d * p.batch_size))))
    return out


def other_counts(
    start: Start, schedule: Schedule, passes: Sequence[Pass], world_size: int, rank: int
) -> list[int]:
    """Every split's global cycles after ``passes``, the other ranks in lockstep with ``rank``."""
    counts = [start.cycles(s) for s in range(len(start.state.cycles))]
    for p in passes:
        if p.batches == 0:
            continue
        for r in range(world_size):
            if r != rank:
                for s, c in _rank_counts(counts, len(schedule), world_size, r, p).items():
                    counts[s] = c
    return counts


@dataclass(frozen=True)
class RankCheckpoint:
    state: MixState
    reported: frozenset[int]
    unknown: frozenset[int]
    projected: dict[int, int]


def rank_checkpoint(
    start: Start,
    schedule: Schedule,
    readers: Sequence[SourceReader],
    committed: MixState,
    passes: Sequence[Pass],
    world_size: int,
    rank: int,
) -> RankCheckpoint:
    """What rank ``rank`` writes: its own splits as committed, every other one by lockstep."""
    n = len(committed.cycles)
    packed = readers[0].settings.packed
    skipping = not packed and any(r.settings.on_transform_error != "raise" for r in readers)
    own = frozenset(rank_block(rank, n // world_size))
    counts = other_counts(start, schedule, passes, world_size, rank)
    unknown: set[int] = set()
    for r in range(world_size):
        block = set(rank_block(r, n // world_size))
        moved = any(counts[s] != start.cycles(s) for s in block)
        if not block & own and (block & start.unknown or (skipping and moved)):
            unknown |= block
    base = start.state
    cycles, projected = [], {}
    for s in range(n):
        if s in own:
            cycles.append(committed.cycles[s])
        elif s in unknown or packed:
            cycles.append(base.cycles[s])
            if s not in unknown and counts[s] > base.cycles[s]:
                projected[s] = counts[s]
        else:
            cycles.append(counts[s])

    def current(k: int, e: int, s: int) -> Value | None:
        if s in own:
            return lookup_in(committed)(k, e, s)
        if cycles[s] == base.cycles[s]:
            return lookup_in(base)(k, e, s)
        count = schedule.where(cycles[s], k)[1]
        old = lookup_in(base)(k, e, s)
        if old is None or schedule.where(base.cycles[s], k)[0] != e:
            return count, count, None
        return count, old[1] + count - old[0], None

    state = canonical(schedule, readers, cycles, current)
    return RankCheckpoint(state, own, frozenset(unknown), projected)


def resolve(
    schedule: Schedule,
    readers: Sequence[SourceReader],
    state: MixState,
    projected: dict[int, int],
    splits: Sequence[int],
) -> MixState:
    """The exact progress of ``splits``: projected ones replayed from their value to their target
    (their items read and dropped); every other split keeps its value."""
    resolved: dict[int, MixState] = {}
    for s in (s for s in splits if s in projected):
        need = projected[s] - state.cycles[s]
        replay = MixtureIterator(schedule, readers, [s], state, Counters(), lambda k, items: None)
        items = replay.items()
        got = sum(1 for _ in zip(range(need), items))
        replay.close()
        if got < need:
            raise ValueError(
                f"split {s} cannot reach the {projected[s]} global cycles its checkpoint infers (the data "
                "changed?); load a merge of every rank's state_dict()"
            )
        resolved[s] = replay.cursor.state()
    cycles = [resolved[s].cycles[s] if s in resolved else g for s, g in enumerate(state.cycles)]

    def current(k: int, e: int, s: int) -> Value | None:
        return lookup_in(resolved.get(s, state))(k, e, s)

    return canonical(schedule, readers, cycles, current)
