"""``StreamingDataLoader``: worker batches, their delivery order, consumer commits; global steps.

Rules: each DataLoader worker runs its own iterator over the sub-block of its
*role* from the parent's state and cuts its items into batches of
``batch_size``. Torch worker ``w`` plays role ``(w + rotation) % nw``: a loader
resumed on the same topology starts with the role whose batch came next when
the checkpoint was taken, so the batch sequence goes on exactly as it would
have (the rotation is ``0`` at the start of an epoch and on a new topology).
Batches reach the trainer in order ``(batch index, worker id)`` (torch's
in-order round robin; an exhausted worker drops out). A worker whose iterator
raises turns its unfinished batch into the error, and nothing after it is
delivered. When a batch reaches the trainer, the snapshot it carries (the
worker's checkpoint right after the batch's last item) is committed into the
parent. A loader starts from any state: an iterator whose owned splits are at
different counts catches up first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from .checkpoint import commit_packed, commit_row, snapshot_packed, snapshot_row
from .errors import require
from .packing import Block, PackedRun, PackedState, initial_packed_state, iterate_packed
from .rows import End, Faults, Raised, RowRun, RowState, Yielded, initial_row_state, iterate_rows
from .topology import Permutation, RunConfig, Topology, owned_splits, rank_splits

Item = Yielded | Block
State = RowState | PackedState
Run = RowRun | PackedRun
ItemT = TypeVar("ItemT")
StateT = TypeVar("StateT")
ItemT_co = TypeVar("ItemT_co", covariant=True)
StateT_co = TypeVar("StateT_co", covariant=True)
Batch = tuple[int, int, tuple[ItemT, ...], StateT]
"""``(worker, batch index, items, the worker's snapshot after them)``."""


@dataclass(frozen=True)
class Delivery(Generic[ItemT_co, StateT_co]):
    """One batch as the trainer receives it, with the parent's state after committing it (items of
    one table: rows or blocks; of a mixture: :class:`~.mixture.MixtureItem`)."""

    worker: int
    index: int
    items: tuple[ItemT_co, ...]
    committed: StateT_co


@dataclass(frozen=True)
class BatchRun(Generic[ItemT_co, StateT_co]):
    """Every batch one rank's loader delivers, and how it ends: the loader of one table
    (:class:`LoaderRun`) or of a mixture (:class:`~.mixture.MixtureLoaderRun`).

    ``rotation`` is the role torch worker 0 played; ``num_workers`` the loader's worker count.
    """

    start: StateT_co
    deliveries: tuple[Delivery[ItemT_co, StateT_co], ...]
    error: Raised | None
    rotation: int = 0
    num_workers: int = 0

    def next_role_after(self, n: int) -> int:
        """The role whose batch comes next once the trainer received ``n`` batches."""
        require(
            0 <= n <= len(self.deliveries),
            "prefix_out_of_range",
            "cannot receive more batches than delivered",
        )
        if self.num_workers <= 1:
            return 0
        if n == 0:
            return self.rotation
        return (self.deliveries[n - 1].worker + 1 + self.rotation) % self.num_workers

    def state_after(self, n: int) -> StateT_co:
        """The parent's state after the trainer received ``n`` batches."""
        require(
            0 <= n <= len(self.deliveries),
            "prefix_out_of_range",
            "cannot receive more batches than delivered",
        )
        return self.start if n == 0 else self.deliveries[n - 1].committed


@dataclass(frozen=True)
class LoaderRun(BatchRun[Item, State]):
    """Every batch one rank's ``StreamingDataLoader`` over one table delivers, and how it ends."""


def full_steps(
    deliveries: Sequence[Delivery[ItemT, object]], batch: int, num_workers: int
) -> list[tuple[ItemT, ...]]:
    """One rank's global-step contributions: step ``g`` is its ``max(1, num_workers)`` batches of
    index ``g``, each of ``batch`` items, in delivery order; the first step without them ends the
    list."""
    nw = max(1, num_workers)
    full = [d for d in deliveries if len(d.items) == batch]
    steps: list[tuple[ItemT, ...]] = []
    for g in range(len(full) // nw):
        group = full[g * nw : (g + 1) * nw]
        if [d.index for d in group] != [g] * nw:
            break
        steps.append(tuple(item for d in group for item in d.items))
    return steps


class WorkerRun(Protocol[StateT_co]):
    """What delivery reads of one worker's iterator run, besides its items."""

    @property
    def end(self) -> End: ...

    def state_after(self, n: int) -> StateT_co: ...


def _items(run: Run) -> tuple[Item, ...]:
    return run.rows if isinstance(run, RowRun) else run.blocks


def order_batches(
    runs: Sequence[WorkerRun[StateT]], items: Sequence[tuple[ItemT, ...]], batch_size: int
) -> tuple[list[Batch[ItemT, StateT]], Raised | None]:
    """Cut worker ``w``'s ``items[w]`` into batches and order them ``(batch index, worker)``.

    A batch carries ``runs[w]``'s state after its last item. A worker whose run raised turns its
    unfinished batch into the error: nothing from that ``(batch index, worker)`` on is delivered.
    Returns the delivered batches and the error that stops delivery, if any.
    """
    require(batch_size >= 1, "batch_size_not_positive", "batch_size must be >= 1")
    per_worker: list[list[Batch[ItemT, StateT]]] = []
    errors: list[tuple[int, int, Raised]] = []
    for w, (run, mine) in enumerate(zip(runs, items)):
        full, rest = divmod(len(mine), batch_size)
        batches = [
            (w, j, mine[j * batch_size : (j + 1) * batch_size], run.state_after((j + 1) * batch_size))
            for j in range(full)
        ]
        if isinstance(run.end, Raised):
            errors.append((full, w, run.end))
        elif rest:
            batches.append((w, full, mine[full * batch_size :], run.state_after(len(mine))))
        per_worker.append(batches)
    ordered = sorted((b for batches in per_worker for b in batches), key=lambda b: (b[1], b[0]))
    if not errors:
        return ordered, None
    j, w, error = min(errors, key=lambda e: (e[0], e[1]))
    return [b for b in ordered if (b[1], b[0]) < (j, w)], error


def deliver_batches(runs: Sequence[Run], batch_size: int) -> tuple[list[Batch[Item, State]], Raised | None]:
    """Cut every worker run (rows or blocks) into batches and order them ``(batch index, worker)``
    (:func:`order_batches`).

    Returns the delivered ``(worker, index, items, worker snapshot)`` list and
    the error that stops delivery, if any.
    """
    return order_batches(runs, [_items(run) for run in runs], batch_size)


def run_loader(
    config: RunConfig,
    perm: Permutation,
    faults: Faults,
    topology: Topology,
    parent: State,
    batch_size: int,
    corpus: Mapping[int, Sequence[int]] | None = None,
    rotation: int = 0,
) -> LoaderRun:
    """One rank's ``StreamingDataLoader`` over ``topology.num_workers`` workers, from ``parent``.

    Torch worker ``w`` reads the sub-block of role ``(w + rotation) % num_workers``.
    """
    nw = topology.num_workers
    require(0 <= rotation < max(1, nw), "rotation_out_of_range", "rotation must be in [0, num_workers)")
    rank_splits(config.num_splits, topology.world_size, topology.rank)  # validates the topology
    runs: list[Run] = []
    for w in range(max(1, nw)):
        role = (w + rotation) % max(1, nw)
        owned = owned_splits(config.num_splits, Topology(topology.world_size, topology.rank, nw, role))
        if isinstance(parent, PackedState):
            assert config.packing is not None and corpus is not None
            runs.append(iterate_packed(perm, corpus, faults, owned, config.packing, parent))
        else:
            runs.append(iterate_rows(perm, faults, owned, parent))
    ordered, error = deliver_batches(runs, batch_size)
    deliveries: list[Delivery[Item, State]] = []
    current: State = parent
    for w, j, items, snapshot in ordered:
        if isinstance(current, PackedState):
            assert isinstance(snapshot, PackedState)
            current = commit_packed(config, current, snapshot_packed(config, snapshot))
        else:
            assert isinstance(snapshot, RowState)
            current = commit_row(config, current, snapshot_row(config, snapshot))
        deliveries.append(Delivery(w, j, items, current))
    return LoaderRun(parent, tuple(deliveries), error, rotation, nw)


# ---------------------------------------------------------------- global steps

StepKey = Callable[[Item], object]


def _row_key(item: Item) -> object:
    return (item.split, item.position) if isinstance(item, Yielded) else item


def global_steps(perm: Permutation, faults: Faults, cycles_per_step: int) -> tuple[frozenset[object], ...]:
    """Topology-free global steps: step ``g`` holds cycles ``[g*c, (g+1)*c)`` of every split.

    Cycle ``k`` of split ``s`` is its ``k``-th yieldable row (skipped rows do
    not count; a raising row ends the split). Only complete steps are listed.
    """
    require(cycles_per_step >= 1, "cycles_per_step_not_positive", "cycles_per_step must be >= 1")
    usable: list[list[int]] = []
    for split in perm:
        positions: list[int] = []
        for p, row in enumerate(split):
            if row in faults.raising:
                break
            if row not in faults.skipped:
                positions.append(p)
        usable.append(positions)
    steps = min(len(u) for u in usable) // cycles_per_step
    c = cycles_per_step
    return tuple(
        frozenset((s, p) for s, u in enumerate(usable) for p in u[g * c : (g + 1) * c]) for g in range(steps)
    )


def rank_steps(
    config: RunConfig,
    perm: Permutation,
    faults: Faults,
    world_size: int,
    rank: int,
    num_workers: int,
    cycles_per_step: int,
    corpus: Mapping[int, Sequence[int]] | None = None,
) -> list[tuple[Item, ...]]:
    """One rank's global-step contributions: ``max(1, nw)`` consecutive full batches each.

    Every worker batch holds ``cycles_per_step`` cycles of the worker's splits.
    """
    k = config.num_splits // world_size
    nw = max(1, num_workers)
    batch = (k // nw) * cycles_per_step
    start: State = (
        initial_row_state(config.num_splits) if corpus is None else initial_packed_state(config.num_splits)
    )
    run = run_loader(config, perm, faults, Topology(world_size, rank, num_workers), start, batch, corpus)
    return full_steps(run.deliveries, batch, num_workers)


def topology_steps(
    config: RunConfig,
    perm: Permutation,
    faults: Faults,
    world_size: int,
    num_workers: int,
    cycles_per_step: int,
) -> tuple[frozenset[object], ...]:
    """Global steps as a ``world_size`` x ``num_workers`` job sees them (row mode)."""
    per_rank = [
        rank_steps(config, perm, faults, world_size, r, num_workers, cycles_per_step)
        for r in range(world_size)
    ]
    count = min(len(steps) for steps in per_rank)
    return tuple(frozenset(_row_key(item) for steps in per_rank for item in steps[g]) for g in range(count))
