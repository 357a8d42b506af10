"""Mixtures: several sources (tables) with weights, scheduled by global cycle (issue 16).

Rules:

* **Sources.** A mixture has ``n >= 1`` sources, each a table of its own with its own permutation,
  seed, filter, columns and transform (in the model: its own :class:`~.topology.RunConfig`,
  permutations, faults and documents, :class:`SourceData`), and every source has the same
  ``num_splits`` ``S``. All sources are in row mode, or all pack with the same ``pack_sequences``.
* **Global cycles.** The mixture schedules *global cycles* ``u = 0, 1, 2, ...``: global cycle ``u``
  is one cycle of one source ``k = src(u)``: one item of each of its ``S`` splits (row mode: one
  row per split; packing: one block per split, so a block never mixes sources). Split ``s`` of the
  mixture is a *virtual split*: its item ``u`` is the next item of split ``s`` of source ``src(u)``.
  Everything the single-table model says about splits (catch-up, cycles, canonical order, worker
  sub-blocks, round-robin delivery) holds for virtual splits, so a global step ``g`` (cycles
  ``[g*c, (g+1)*c)`` of every virtual split) holds the same items whatever ``world_size`` and
  ``num_workers`` are.
* **The schedule** (:func:`mixture_schedule`) is a pure function of the mixture's seed and epoch,
  its regimes, its ``on_exhausted`` rule and the sources' capacities; it never looks at rows. A
  *regime* (:class:`Regime`) gives integer weights from a global cycle on. Inside a *segment* (a
  stretch with one regime and one set of active sources; it starts with zero counts) the source of
  slot ``t`` is chosen by :func:`edf_pick`: among the sources with ``(t+1)*w_k > W*n_k`` (eligible:
  served less than their share of ``t+1`` slots), the one whose next deadline
  ``ceil((n_k+1)*W/w_k)`` is earliest, ties broken by a permutation of the sources drawn from
  ``random.Random(seed + epoch * EPOCH_PRIME)``. Its counts stay within ``1`` of ``t*w_k/W`` for
  every prefix and within ``2`` over every window (``MixtureProportionInv``).
* **Capacity and exhaustion.** A source epoch has ``C`` cycles: the split length in row mode, the
  per-split block budget when packing. A source *runs out* when it is picked and has used all
  ``C`` cycles of its current epoch; then ``on_exhausted`` decides: ``"stop"`` ends the mixture's
  schedule there, ``"cycle"`` starts that source's next epoch (its next permutation, its progress
  from zero), ``"renormalize"`` starts a new segment at that cycle without the source (it stays out
  for the rest of the mixture epoch). ``cycles``, when given, ends the schedule after that many
  global cycles (required with ``"cycle"``, which never ends on its own).
* **Skipped rows.** The schedule assumes every row is yieldable. When a split of the scheduled
  source cannot give its row (skipped rows shortened it), the iterator ends there (the canonical
  order is blocked), as a single table ends early with skipping transforms (R4.3);
  ``on_exhausted`` applies only to the planned end of a source epoch, which every rank knows.
* **Progress.** A :class:`MixtureState` holds, per split, the global cycles it delivered
  (``cycles``), and per source and source epoch the single-table progress of that source epoch
  (``sources``). For split ``s`` and source ``k`` only the epoch ``k`` is in at ``cycles[s]``
  carries real values; earlier epochs of ``k`` hold the canonical *finished* value (rows:
  ``(m, m)``; packed: ``consumed = m``, ``emitted = C``, no buffer: tokens left at the end of a
  source epoch are dropped, as R6.6 drops them at the end of an epoch) and later ones the initial
  value. Source epochs every split has left are dropped.

Theory of operation
-------------------
:func:`iterate_mixture` is the single-table iterator on virtual splits: lagging splits catch up one
item at a time in ``(cycles, split)`` order, then each global cycle takes one item of every owned
split from the scheduled source. Each step calls the single-table model itself
(:func:`~.rows.iterate_rows` / :func:`~.packing.iterate_packed`) on the scheduled source epoch's
state, over the split being caught up or over all owned splits (a packed cycle fills every owned
split, then emits), and keeps the first items. A one-source mixture is therefore exactly its table.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .errors import require
from .loader import BatchRun, Delivery, full_steps, order_batches
from .mixture_schedule import (
    MixtureConfig,
    Regime,
    Schedule,
    SourceData,
    capacity,
    mixture_schedule,
)
from .packing import Block, PackedRun, PackedState, initial_packed_state, iterate_packed
from .rows import (
    End,
    Exhausted,
    Raised,
    RowRun,
    RowState,
    Yielded,
    initial_row_state,
    iterate_rows,
)
from .saved import SplitValue, assemble_state, split_value
from .topology import Topology, owned_splits, rank_splits

State = RowState | PackedState
Entries = Mapping[tuple[int, int], State]
"""``(source, source epoch)`` -> that source epoch's single-table progress."""


# ---------------------------------------------------------------- progress


@dataclass(frozen=True)
class MixtureState:
    """Per split the global cycles it delivered; per ``(source, epoch)`` that source epoch's
    progress (see the module rules for which values are real)."""

    cycles: tuple[int, ...]
    sources: Entries

    def __post_init__(self) -> None:
        require(all(g >= 0 for g in self.cycles), "mixture_state_invalid", "cycles are >= 0")
        require(
            all(len(_counts(st)) == len(self.cycles) for st in self.sources.values()),
            "list_length",
            "every source epoch's progress has one entry per split",
        )


def _counts(state: State) -> tuple[int, ...]:
    return state.samples if isinstance(state, RowState) else state.emitted


def _empty(config: MixtureConfig) -> State:
    n = config.num_splits
    return initial_packed_state(n) if config.packed else initial_row_state(n)


def initial_mixture_state(config: MixtureConfig) -> MixtureState:
    """The state of a mixture epoch before anything is read."""
    entries = {(k, c.epoch): _empty(config) for k, c in enumerate(config.sources)}
    return MixtureState((0,) * config.num_splits, entries)


def finished_value(config: MixtureConfig, data: Sequence[SourceData], source: int, epoch: int) -> SplitValue:
    """The canonical value of a split that has left source epoch ``epoch`` of ``source``."""
    m = len(data[source].perm(epoch)[0])
    if config.packed:
        return SplitValue(m, capacity(config, data, source, epoch))
    return SplitValue(m, m)


def expected_count(schedule: Schedule, source: int, epoch: int, cycles: int, cap: int) -> int:
    """The count a split that delivered ``cycles`` global cycles has in ``(source, epoch)``."""
    current, used = schedule.source_at(cycles, source)
    if epoch < current:
        return cap
    return used if epoch == current else 0


def rebuild(
    config: MixtureConfig,
    data: Sequence[SourceData],
    schedule: Schedule,
    cycles: Sequence[int],
    current: Callable[[int, int, int], SplitValue | None],
) -> MixtureState:
    """The canonical state for ``cycles``: for split ``s`` and source ``k``, ``current(k, e, s)``
    (``None``: initial) in the epoch ``e`` it is in, finished before, initial after; only the epochs
    some split is in, or between two such."""
    entries: dict[tuple[int, int], State] = {}
    zero = split_value(_empty(config), 0)
    for k in range(len(config.sources)):
        where = [schedule.source_at(g, k)[0] for g in cycles]
        for e in range(min(where), max(where) + 1):
            values = []
            for s, at in enumerate(where):
                if e < at:
                    values.append(finished_value(config, data, k, e))
                elif e > at:
                    values.append(zero)
                else:
                    values.append(current(k, e, s) or zero)
            entries[(k, e)] = assemble_state(_empty(config), values)
    return MixtureState(tuple(cycles), entries)


def value_in(state: MixtureState, source: int, epoch: int, split: int) -> SplitValue | None:
    """Split ``split``'s stored value in ``(source, epoch)`` (``None`` when the entry is absent)."""
    entry = state.sources.get((source, epoch))
    return None if entry is None else split_value(entry, split)


def check_mixture_state(
    config: MixtureConfig, data: Sequence[SourceData], schedule: Schedule, state: MixtureState
) -> None:
    """A state is canonical for its cycles: it equals :func:`rebuild` of itself, and every count
    is the one the schedule gives (``mixture_state_invalid`` otherwise)."""
    require(len(state.cycles) == config.num_splits, "list_length", "one global cycle count per split")
    require(
        all(g <= len(schedule.slots) for g in state.cycles),
        "mixture_state_invalid",
        "a split delivered more global cycles than the schedule has",
    )
    again = rebuild(config, data, schedule, state.cycles, lambda k, e, s: value_in(state, k, e, s))
    require(again == state, "mixture_state_invalid", "the source progress does not match the schedule")
    for (k, e), entry in state.sources.items():
        cap = capacity(config, data, k, e)
        want = tuple(expected_count(schedule, k, e, g, cap) for g in state.cycles)
        require(
            _counts(entry) == want,
            "mixture_state_invalid",
            f"source {config.names[k]!r} epoch {e}: counts {_counts(entry)} where the schedule gives {want}",
        )


# ---------------------------------------------------------------- iteration


@dataclass(frozen=True)
class MixtureItem:
    """One item of a mixture: global cycle ``cycle``, from ``source``'s epoch ``epoch``."""

    cycle: int
    source: int
    epoch: int
    item: Yielded | Block

    @property
    def split(self) -> int:
        """The (virtual) split it belongs to."""
        return self.item.split


@dataclass(frozen=True)
class MixtureRun:
    """Everything one mixture iterator yields; ``states[i]`` is the state right after ``items[i]``.

    ``reason``: ``"schedule"`` (the schedule ended), ``"source"`` (a split of the scheduled source
    had no row left: skipped rows) or ``"raised"``.
    """

    start: MixtureState
    items: tuple[MixtureItem, ...]
    states: tuple[MixtureState, ...]
    end: End
    reason: str

    def state_after(self, n: int) -> MixtureState:
        """The state after the consumer received ``n`` items."""
        require(0 <= n <= len(self.items), "prefix_out_of_range", "cannot consume more items than yielded")
        return self.start if n == 0 else self.states[n - 1]


def _source_items(
    config: MixtureConfig,
    data: Sequence[SourceData],
    source: int,
    epoch: int,
    splits: tuple[int, ...],
    state: State,
    limit: int | None = None,
) -> tuple[list[Yielded | Block], list[State], End]:
    """The single-table model's items over ``splits`` of one source epoch from ``state`` (the first
    ``limit`` of them), the state after each, and how that run ends."""
    src = data[source]
    perm = src.perm(epoch)
    run: RowRun | PackedRun
    if isinstance(state, PackedState):
        packing = config.sources[source].packing
        assert packing is not None and src.corpus is not None
        run = iterate_packed(perm, src.corpus, src.faults, splits, packing, state)
        got: list[Yielded | Block] = list(run.blocks[:limit])
    else:
        run = iterate_rows(perm, src.faults, splits, state)
        got = list(run.rows[:limit])
    return got, [run.state_after(i + 1) for i in range(len(got))], run.end


def iterate_mixture(
    config: MixtureConfig,
    regimes: Sequence[Regime],
    data: Sequence[SourceData],
    owned: Sequence[int],
    state: MixtureState,
    schedule: Schedule | None = None,
) -> MixtureRun:
    """Run one mixture iterator over ``owned`` splits from ``state`` to its end (catch-up, then
    global cycles)."""
    schedule = schedule or mixture_schedule(config, regimes, data)
    require(len(state.cycles) == config.num_splits, "list_length", "one global cycle count per split")
    require(
        list(owned) == sorted(set(owned)), "owned_not_sorted", "owned splits must be ascending and unique"
    )
    cycles, entries = list(state.cycles), dict(state.sources)
    items: list[MixtureItem] = []
    states: list[MixtureState] = []

    def step(splits: tuple[int, ...], u: int) -> MixtureRun | None:
        if u >= len(schedule.slots):
            return MixtureRun(state, tuple(items), tuple(states), Exhausted(), "schedule")
        slot = schedule.slots[u]
        key = (slot.source, slot.epoch)
        entry = entries[key] if key in entries else _empty(config)
        got, after, end = _source_items(config, data, *key, splits, entry, len(splits))
        if len(got) < len(splits):
            reason = "raised" if isinstance(end, Raised) else "source"
            return MixtureRun(state, tuple(items), tuple(states), end, reason)
        for s, item, moved in zip(splits, got, after):
            cycles[s] += 1
            entries[key] = moved
            snapshot = rebuild(config, data, schedule, cycles, lambda k, e, x: _stored(entries, k, e, x))
            entries.clear()
            entries.update(snapshot.sources)
            items.append(MixtureItem(u, slot.source, slot.epoch, item))
            states.append(snapshot)
        return None

    if not owned:
        return MixtureRun(state, (), (), Exhausted(), "schedule")
    top = max(cycles[s] for s in owned)
    lagging = [(cycles[s], s) for s in owned if cycles[s] < top]
    heapq.heapify(lagging)
    while lagging:
        count, s = heapq.heappop(lagging)
        done = step((s,), count)
        if done is not None:
            return done
        if count + 1 < top:
            heapq.heappush(lagging, (count + 1, s))
    while True:
        done = step(tuple(owned), cycles[owned[0]])
        if done is not None:
            return done


# ---------------------------------------------------------------- the loader and global steps


@dataclass(frozen=True)
class MixtureLoaderRun(BatchRun[MixtureItem, MixtureState]):
    """Every batch one rank's loader over a mixture delivers, and how it ends."""


def _stored(entries: Entries, source: int, epoch: int, split: int) -> SplitValue | None:
    entry = entries.get((source, epoch))
    return None if entry is None else split_value(entry, split)


def split_key(schedule: Schedule, state: MixtureState, split: int) -> tuple[int, int, int]:
    """How far ``split`` is: its global cycles, then its count and second value (row positions;
    packed: consumed documents, a fill) in the source epoch of its next global cycle."""
    g = state.cycles[split]
    if g >= len(schedule.slots):
        return g, 0, 0
    slot = schedule.slots[g]
    entry = state.sources.get((slot.source, slot.epoch))
    if entry is None:
        return g, 0, 0
    if isinstance(entry, PackedState):
        return g, entry.emitted[split], entry.consumed[split]
    return g, entry.samples[split], entry.positions[split]


def join_mixture(
    config: MixtureConfig,
    data: Sequence[SourceData],
    schedule: Schedule,
    states: Sequence[MixtureState],
) -> MixtureState:
    """Per split, every value from the state where the split is furthest (:func:`split_key`; the
    first of equals)."""
    require(len(states) > 0, "merge_empty", "joining needs at least one state")
    chosen: list[MixtureState] = []
    for s in range(config.num_splits):
        chosen.append(max(states, key=lambda st: split_key(schedule, st, s)))
    return rebuild(
        config,
        data,
        schedule,
        [chosen[s].cycles[s] for s in range(config.num_splits)],
        lambda k, e, s: value_in(chosen[s], k, e, s),
    )


def run_mixture_loader(
    config: MixtureConfig,
    regimes: Sequence[Regime],
    data: Sequence[SourceData],
    topology: Topology,
    parent: MixtureState,
    batch_size: int,
    rotation: int = 0,
) -> MixtureLoaderRun:
    """One rank's loader over ``topology.num_workers`` workers from ``parent`` (torch worker ``w``
    plays role ``(w + rotation) % num_workers``); every delivered batch is committed (joined)."""
    nw = topology.num_workers
    require(0 <= rotation < max(1, nw), "rotation_out_of_range", "rotation must be in [0, num_workers)")
    rank_splits(config.num_splits, topology.world_size, topology.rank)
    schedule = mixture_schedule(config, regimes, data)
    runs = []
    for w in range(max(1, nw)):
        role = (w + rotation) % max(1, nw)
        owned = owned_splits(config.num_splits, Topology(topology.world_size, topology.rank, nw, role))
        runs.append(iterate_mixture(config, regimes, data, owned, parent, schedule))
    ordered, error = order_batches(runs, [run.items for run in runs], batch_size)
    deliveries: list[Delivery[MixtureItem, MixtureState]] = []
    current = parent
    for w, j, items, snapshot in ordered:
        current = join_mixture(config, data, schedule, [current, snapshot])
        deliveries.append(Delivery(w, j, items, current))
    return MixtureLoaderRun(parent, tuple(deliveries), error, rotation, nw)


MixtureKey = tuple[object, ...]


def item_key(item: MixtureItem) -> MixtureKey:
    """What identifies an item: global cycle, source, source epoch, split, then its position (rows)
    or its tokens and document ids (packed)."""
    inner = item.item
    if isinstance(inner, Yielded):
        return (item.cycle, item.source, item.epoch, inner.split, inner.position)
    return (item.cycle, item.source, item.epoch, inner.split, inner.input_ids, inner.doc_ids)


def source_items(
    config: MixtureConfig, data: Sequence[SourceData], source: int, epoch: int, split: int
) -> tuple[Yielded | Block, ...]:
    """Split ``split``'s items in source epoch ``(source, epoch)`` from its start, in order: its
    yieldable rows (before its first raising row) or its blocks."""
    got, _, _ = _source_items(config, data, source, epoch, (split,), _empty(config))
    return tuple(got)


def mixture_global_steps(
    config: MixtureConfig, regimes: Sequence[Regime], data: Sequence[SourceData], cycles_per_step: int
) -> tuple[frozenset[MixtureKey], ...]:
    """Topology-free global steps: step ``g`` holds global cycles ``[g*c, (g+1)*c)`` of every split,
    cycle ``u`` of split ``s`` being item ``index`` of split ``s`` of the scheduled source epoch.
    Only complete steps (every split has every item) are listed."""
    require(cycles_per_step >= 1, "cycles_per_step_not_positive", "cycles_per_step must be >= 1")
    schedule = mixture_schedule(config, regimes, data)
    cache: dict[tuple[int, int, int], tuple[Yielded | Block, ...]] = {}
    per_split: list[list[MixtureItem]] = []
    for s in range(config.num_splits):
        mine: list[MixtureItem] = []
        for u, slot in enumerate(schedule.slots):
            key = (slot.source, slot.epoch, s)
            if key not in cache:
                cache[key] = source_items(config, data, slot.source, slot.epoch, s)
            if slot.index >= len(cache[key]):
                break
            mine.append(MixtureItem(u, slot.source, slot.epoch, cache[key][slot.index]))
        per_split.append(mine)
    c = cycles_per_step
    steps = min(len(m) for m in per_split) // c
    return tuple(
        frozenset(item_key(i) for mine in per_split for i in mine[g * c : (g + 1) * c]) for g in range(steps)
    )


def mixture_topology_steps(
    config: MixtureConfig,
    regimes: Sequence[Regime],
    data: Sequence[SourceData],
    world_size: int,
    num_workers: int,
    cycles_per_step: int,
) -> tuple[frozenset[MixtureKey], ...]:
    """Global steps as a ``world_size`` x ``num_workers`` job sees them from the epoch start: each
    rank's step ``g`` is its ``max(1, nw)`` worker batches of index ``g`` (``(K/nw)*c`` items each)."""
    k = config.num_splits // world_size
    nw = max(1, num_workers)
    batch = (k // nw) * cycles_per_step
    per_rank: list[list[tuple[MixtureItem, ...]]] = []
    for r in range(world_size):
        run = run_mixture_loader(
            config, regimes, data, Topology(world_size, r, num_workers), initial_mixture_state(config), batch
        )
        per_rank.append(full_steps(run.deliveries, batch, num_workers))
    count = min(len(steps) for steps in per_rank)
    return tuple(frozenset(item_key(i) for steps in per_rank for i in steps[g]) for g in range(count))
