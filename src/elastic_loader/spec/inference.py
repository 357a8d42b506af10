"""The checkpoint one rank writes: its own splits reported, every other split inferred (lockstep).

Rules:

* A rank's checkpoint starts from the session's start checkpoint and the *passes* of the
  session (:class:`Pass`: loader settings and batches the trainer received). The rank's own
  splits are what it delivered; another rank is assumed to have delivered the same passes
  (*lockstep*), with the worker rotation its cursor gives, and :func:`simulate_pass` replays how
  those batches spread over that rank's splits (canonical order, round-robin workers).
* Inferred row splits are exact when no row may be skipped (``on_transform_error="raise"``); with
  skipping, every split of a rank block that moved is *unknown*, and so is every split of a block
  that held an unknown split at the start (its simulation began from a stale count).
* Inferred packed splits are *projected*: the split's last exact value plus a target block count
  (``saved.resolve`` replays it when the split's next owner loads the checkpoint).
* A simulated worker (``worker_info_override``) reports only the splits its one iterator reads;
  every other split is unknown.

``saved.py`` holds the checkpoint's values and wire format; this module only decides them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .errors import require
from .rows import RowState
from .saved import (
    Cursor,
    Projection,
    Saved,
    SplitValue,
    State,
    assemble_state,
    plain_count,
    split_value,
)
from .schedule import canonical_capacity, canonical_counts, next_worker, round_robin_turns
from .topology import Topology, owned_splits, rank_splits


@dataclass(frozen=True)
class Pass:
    """One iteration of a rank within a session, as far as the trainer received it.

    ``batches`` batches of ``batch_size`` items (plain iteration: items, ``batch_size=1``, no
    workers) from a loader with ``num_workers`` workers; torch worker 0 played role ``rotation``
    and ``next_role`` is the role whose batch would have come next (both 0 without workers).
    """

    num_workers: int
    batch_size: int
    batches: int
    rotation: int = 0
    next_role: int = 0

    def __post_init__(self) -> None:
        require(self.num_workers >= 0, "num_workers_negative", "num_workers must be >= 0")
        require(self.batch_size >= 1, "batch_size_not_positive", "batch_size must be >= 1")
        require(self.batches >= 0, "batches_negative", "batches must be >= 0")
        roles = max(1, self.num_workers)
        require(
            0 <= self.rotation < roles and 0 <= self.next_role < roles,
            "rotation_out_of_range",
            "rotation and next_role must be in [0, num_workers)",
        )


def caps(saved: Saved, split_len: int) -> tuple[int, ...]:
    """How far each split's count can go, if every row not read yet is yieldable (packed: the budget)."""
    n = saved.config.num_splits
    if saved.config.packing is not None:
        return (saved.config.packing.blocks_per_split(n),) * n
    state = saved.state
    assert isinstance(state, RowState)
    return tuple(state.samples[s] + split_len - state.positions[s] for s in range(n))


def simulate_pass(
    counts: Sequence[int],
    limit: Sequence[int],
    world_size: int,
    rank: int,
    p: Pass,
    rotation: int,
) -> tuple[dict[int, int], int]:
    """Rank ``rank``'s split counts after it delivered ``p.batches`` batches of pass ``p`` from
    ``counts`` (caps ``limit``) with torch worker 0 in role ``rotation``, and its next role."""
    n, nw = len(counts), p.num_workers
    if nw == 0:
        block = rank_splits(n, world_size, rank)
        have = [counts[s] for s in block]
        items = min(canonical_capacity(have, [limit[s] for s in block]), p.batches * p.batch_size)
        return dict(zip(block, canonical_counts(have, items))), 0
    blocks = [owned_splits(n, Topology(world_size, rank, nw, (w + rotation) % nw)) for w in range(nw)]
    capacity = [canonical_capacity([counts[s] for s in b], [limit[s] for s in b]) for b in blocks]
    delivered = round_robin_turns([-(-c // p.batch_size) for c in capacity], p.batches)
    out: dict[int, int] = {}
    for b, cap, d in zip(blocks, capacity, delivered):
        out.update(zip(b, canonical_counts([counts[s] for s in b], min(cap, d * p.batch_size))))
    return out, (next_worker(delivered) + rotation) % nw


def rank_checkpoint(
    start: Saved,
    committed: State,
    touched: frozenset[int],
    passes: Sequence[Pass],
    world_size: int,
    rank: int,
    split_len: int,
    skipping: bool,
    partial: Sequence[int] | None = None,
) -> Saved:
    """The checkpoint rank ``rank`` writes after the ``passes`` of its session from ``start``.

    ``partial`` (a simulated worker, ``worker_info_override``): the checkpoint reports only these
    splits, those its one iterator reads, and every other split is unknown.

    Its own splits come from ``committed`` (the parent's state) where ``touched`` (an iterator that
    owned the split delivered something this session, so the value is exact), else from
    ``start``. Every other rank is assumed to have delivered the same passes (lockstep), with the
    rotation its own cursor gives; its row splits are then exact when ``skipping`` is false and
    unknown when it is true (the saver's transform errors may skip rows), its packed splits
    projected.
    """
    n = start.config.num_splits
    if partial is not None:
        return _partial_checkpoint(start, committed, touched, frozenset(partial))
    own = frozenset(rank_splits(n, world_size, rank))
    counts = [start.count(s) for s in range(n)]
    limit = caps(start, split_len)
    cursor = start.cursor
    for p in passes:
        if p.batches == 0:
            continue  # a pass that delivered nothing changes nothing, not even the cursor
        roles = [0] * world_size
        for r in range(world_size):
            if r == rank:
                roles[r] = p.next_role
                continue
            rotation = 0 if cursor is None else cursor.rotation(world_size, r, p.num_workers)
            got, roles[r] = simulate_pass(counts, limit, world_size, r, p, rotation)
            for s, c in got.items():
                counts[s] = c
        cursor = Cursor(world_size, p.num_workers, tuple(roles)) if p.num_workers >= 2 else None
    values: list[SplitValue] = []
    unknown = _unknown_blocks(start, counts, own, world_size, skipping and isinstance(committed, RowState))
    projections: dict[int, Projection] = {}
    for s in range(n):
        if s in own and s in touched:
            values.append(split_value(committed, s))
            continue
        plain = split_value(start.state, s)
        values.append(plain)
        moved = counts[s] - start.count(s)
        if s in unknown:
            continue
        elif moved and isinstance(committed, RowState):
            values[-1] = SplitValue(counts[s], plain.second + moved)
        elif counts[s] > plain_count(start.state, s):
            projections[s] = Projection(counts[s])
    state = assemble_state(committed, values)
    return Saved(start.config, state, own, frozenset(unknown), projections, cursor, start.table)


def _unknown_blocks(
    start: Saved, counts: Sequence[int], own: frozenset[int], world_size: int, skipping: bool
) -> set[int]:
    """The other ranks' splits this checkpoint cannot know: every split of a rank block that held an
    unknown split at the start (its simulation started from a stale count), and, when rows may be
    skipped, every split of a rank block that moved (a skipped row can end a worker early and hand
    its turns to the others, so even a split that did not move in the simulation may have)."""
    n = start.config.num_splits
    out: set[int] = set()
    for r in range(world_size):
        block = set(rank_splits(n, world_size, r))
        if block & own:
            continue
        moved = any(counts[s] != start.count(s) for s in block)
        if block & start.unknown or (skipping and moved):
            out |= block
    return out


def _partial_checkpoint(
    start: Saved, committed: State, touched: frozenset[int], mine: frozenset[int]
) -> Saved:
    """A simulated worker's checkpoint: its own splits, every other split unknown."""
    n = start.config.num_splits
    values = [split_value(committed if s in mine and s in touched else start.state, s) for s in range(n)]
    projections = {s: p for s, p in start.projections.items() if s in mine and s not in touched}
    unknown = frozenset(range(n)) - mine
    return Saved(
        start.config, assemble_state(committed, values), mine, unknown, projections, None, start.table
    )
