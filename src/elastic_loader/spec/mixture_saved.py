"""Mixture checkpoints: one checkpoint of the whole mixture, saved by one rank or merged (issue 16).

Rules:

* **What a checkpoint holds.** The mixture's configuration (source names, seed, epoch,
  ``on_exhausted``, ``cycles``), its regimes so far, and a :class:`~.mixture.MixtureState`: per
  split the global cycles it delivered, per ``(source, source epoch)`` the single-table progress.
  Like a single table's checkpoint (:mod:`.saved`) it says per split whether the saver *reported*
  it (its rank owned the split) or inferred it; an inferred split is exact, *unknown* or
  *projected*. The state always holds each split's last exact value (its *base*).
* **Lockstep inference** (:func:`rank_mixture_checkpoint`). A rank assumes every other rank
  delivered as many batches as it did with the same loader settings. Every virtual split can give
  one item per scheduled global cycle (the schedule never plans a cycle beyond a source epoch's
  capacity), so the other ranks' global cycle counts follow from the single-table arithmetic
  (:func:`~.inference.simulate_pass`, capacity: the schedule's length). Rows without skipping are then
  exact: the source epoch and count of a split at cycle ``g`` are read off the schedule, positions
  follow (one past the last row; the skipped-row offset of the base is kept within a source epoch,
  zero in a new one). Rows with skipping: every moved block of another rank is *unknown* (a skipped
  row may have ended a worker early). Packed: *projected* to a target global cycle count; the rank
  that owns the split when it resumes replays it from its base (:func:`resolve_mixture`).
* **Merging** (:func:`merge_mixture`) takes per split the furthest value among the states that
  report it (:func:`~.mixture.split_key`); a split no state reports raises ``merge_missing_rank``.
  Every state must have the same configuration and regimes.
* **Resume on any topology, with new weights** (:func:`load_mixture_for_rank`). The loading rank
  resolves its own splits (``progress_unknown`` / ``projection_unreachable`` as for one table). A
  weight change starts a new regime at ``u0``, the largest global cycle count any split reached
  (targets of projections included): every cycle some split already delivered keeps its source,
  because the schedule is causal (slot ``u`` depends only on regimes starting at or before ``u``),
  and the new weights apply to every later cycle, from zero counts. Planned regimes after ``u0``
  are replaced. Unchanged weights keep the regimes as they are. Every source goes on from its own
  progress, so no sample of a source repeats within its epoch.

The wire format (:func:`snapshot_mixture`) is a JSON-able dict: ``format``, ``mixture``,
``regimes``, ``cycles``, ``sources`` (name -> source epoch -> that source epoch's single-table
checkpoint dict, the reference keys of :mod:`.checkpoint`), ``reported``, ``unknown`` and
``projected``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from .checkpoint import (
    Checkpoint,
    as_int,
    as_mapping,
    check_against,
    parse_packed,
    parse_row,
    snapshot_packed,
    snapshot_row,
)
from .errors import require
from .inference import Pass, simulate_pass
from .mixture import (
    MixtureItem,
    MixtureState,
    State,
    check_mixture_state,
    iterate_mixture,
    rebuild,
    run_mixture_loader,
    split_key,
    value_in,
)
from .mixture_schedule import MixtureConfig, Regime, Schedule, SourceData, mixture_schedule
from .packing import PackedState
from .saved import SplitValue
from .topology import Topology, rank_splits

MIXTURE_FORMAT = 1


@dataclass(frozen=True)
class MixtureSaved:
    """A mixture checkpoint as the model understands it (see the module rules)."""

    config: MixtureConfig
    regimes: tuple[Regime, ...]
    state: MixtureState
    reported: frozenset[int]
    unknown: frozenset[int] = frozenset()
    projected: Mapping[int, int] = field(default_factory=dict)
    """Split -> the global cycle count it reached (its base is in ``state``)."""

    def __post_init__(self) -> None:
        n = self.config.num_splits
        ids = self.reported | self.unknown | set(self.projected)
        require(all(0 <= s < n for s in ids), "reported_out_of_range", "reported splits are ids")
        require(not self.unknown & self.reported, "unknown_reported", "a reported split is never unknown")
        require(
            not self.projected or self.config.packed, "projection_rows", "only packed progress is projected"
        )
        require(
            not set(self.projected) & (self.reported | self.unknown)
            and all(t > self.state.cycles[s] for s, t in self.projected.items()),
            "projection_below_base",
            "a projected split is neither reported nor unknown and goes beyond its base",
        )

    def cycles(self, split: int) -> int:
        """The global cycles ``split`` delivered as far as the checkpoint knows (its target when
        projected)."""
        return self.projected.get(split, self.state.cycles[split])


def exact_mixture(config: MixtureConfig, regimes: Sequence[Regime], state: MixtureState) -> MixtureSaved:
    """A checkpoint that reports every split (a merge, or a run on one rank)."""
    return MixtureSaved(config, tuple(regimes), state, frozenset(range(config.num_splits)))


# ---------------------------------------------------------------- wire format


def snapshot_mixture(saved: MixtureSaved) -> Checkpoint:
    """The JSON-able checkpoint dict of a mixture."""
    config = saved.config
    sources: dict[str, dict[str, object]] = {name: {} for name in config.names}
    for (k, e), entry in sorted(saved.state.sources.items()):
        cfg = config.source_config(k, e)
        snap = snapshot_packed(cfg, entry) if isinstance(entry, PackedState) else snapshot_row(cfg, entry)
        sources[config.names[k]][str(e)] = snap
    return {
        "format": MIXTURE_FORMAT,
        "mixture": {
            "names": list(config.names),
            "seed": config.seed,
            "epoch": config.epoch,
            "on_exhausted": config.on_exhausted,
            "cycles": config.cycles,
        },
        "regimes": [{"start": r.start, "weights": list(r.weights)} for r in saved.regimes],
        "cycles": list(saved.state.cycles),
        "sources": sources,
        "reported": sorted(saved.reported),
        "unknown": sorted(saved.unknown),
        "projected": {str(s): t for s, t in sorted(saved.projected.items())},
    }


def _int_list(raw: object, what: str) -> list[int]:
    require(isinstance(raw, list), "mixture_checkpoint_invalid", f"{what} must be a list")
    assert isinstance(raw, list)
    return [as_int(v, what) for v in raw]


def _parse_head(config: MixtureConfig, state: Mapping[str, object]) -> tuple[Regime, ...]:
    require(state.get("format") == MIXTURE_FORMAT, "mixture_checkpoint_invalid", "unknown mixture format")
    head = as_mapping(state.get("mixture"))
    want = {
        "names": list(config.names),
        "seed": config.seed,
        "epoch": config.epoch,
        "on_exhausted": config.on_exhausted,
        "cycles": config.cycles,
    }
    for key, value in want.items():
        require(
            head.get(key) == value,
            "mixture_config_mismatch",
            f"the checkpoint's mixture {key} is {head.get(key)!r}, this mixture's {value!r}",
        )
    raw = state.get("regimes")
    require(isinstance(raw, list), "mixture_checkpoint_invalid", "regimes must be a list")
    assert isinstance(raw, list)
    regimes = []
    for r in raw:
        entry = as_mapping(r)
        regimes.append(
            Regime(
                as_int(entry.get("start"), "regime start"), tuple(_int_list(entry.get("weights"), "weights"))
            )
        )
    return tuple(regimes)


def _parse_sources(config: MixtureConfig, raw: object) -> dict[tuple[int, int], State]:
    sources = as_mapping(raw)
    require(set(sources) == set(config.names), "mixture_checkpoint_invalid", "one entry per source name")
    entries: dict[tuple[int, int], State] = {}
    for k, name in enumerate(config.names):
        for key, snap in as_mapping(sources[name]).items():
            require(
                key.lstrip("-").isdigit(), "mixture_checkpoint_invalid", f"source epoch {key!r} is not an int"
            )
            e = int(key)
            st = as_mapping(snap)
            check_against(config.source_config(k, e), st)
            n = config.num_splits
            entries[(k, e)] = parse_packed(st, n) if config.packed else parse_row(st, n)
    return entries


def load_mixture(config: MixtureConfig, data: Sequence[SourceData], checkpoint: object) -> MixtureSaved:
    """Parse and check a mixture checkpoint: the same mixture, regimes that start at 0, a state
    canonical for its cycles under the schedule those regimes give (``mixture_state_invalid``)."""
    state = as_mapping(checkpoint)
    regimes = _parse_head(config, state)
    cycles = tuple(_int_list(state.get("cycles"), "cycles"))
    require(len(cycles) == config.num_splits, "list_length", "one global cycle count per split")
    mixture_state = MixtureState(cycles, _parse_sources(config, state.get("sources")))
    check_mixture_state(config, data, mixture_schedule(config, regimes, data), mixture_state)
    raw = as_mapping(state.get("projected", {}))
    require(all(k.isdigit() for k in raw), "mixture_checkpoint_invalid", "projected splits are ids")
    projected = {int(k): as_int(v, "projected target") for k, v in raw.items()}
    return MixtureSaved(
        config,
        regimes,
        mixture_state,
        frozenset(_int_list(state.get("reported"), "reported")),
        frozenset(_int_list(state.get("unknown", []), "unknown")),
        projected,
    )


# ---------------------------------------------------------------- merging


def merge_mixture(data: Sequence[SourceData], saveds: Sequence[MixtureSaved]) -> MixtureSaved:
    """Every split from the furthest state that reports it; the result reports every split."""
    require(len(saveds) > 0, "merge_empty", "merging needs at least one state")
    first = saveds[0]
    require(
        all(s.config == first.config and s.regimes == first.regimes for s in saveds),
        "mixture_merge_mismatch",
        "merged mixture states must have the same configuration and regimes",
    )
    config = first.config
    schedule = mixture_schedule(config, first.regimes, data)
    chosen: list[MixtureState] = []
    for s in range(config.num_splits):
        reporting = [x.state for x in saveds if s in x.reported]
        require(bool(reporting), "merge_missing_rank", f"no merged state reports split {s}")
        chosen.append(max(reporting, key=lambda st: split_key(schedule, st, s)))
    state = rebuild(
        config,
        data,
        schedule,
        [chosen[s].cycles[s] for s in range(config.num_splits)],
        lambda k, e, s: value_in(chosen[s], k, e, s),
    )
    return exact_mixture(config, first.regimes, state)


# ---------------------------------------------------------------- one rank's checkpoint


def _other_counts(
    start: MixtureSaved, schedule: Schedule, passes: Sequence[Pass], world_size: int, rank: int
) -> list[int]:
    """Every split's global cycle count after ``passes``, the other ranks in lockstep with
    ``rank`` (whose own counts are not used)."""
    n = start.config.num_splits
    counts = [start.cycles(s) for s in range(n)]
    limit = [len(schedule.slots)] * n
    for p in passes:
        if p.batches == 0:
            continue
        for r in range(world_size):
            if r != rank:
                got, _ = simulate_pass(counts, limit, world_size, r, p, 0)
                for s, c in got.items():
                    counts[s] = c
    return counts


def _inferred_row(
    config: MixtureConfig, schedule: Schedule, base: MixtureState, s: int, g: int, k: int, e: int
) -> SplitValue:
    """Row mode without skipping: split ``s`` at ``g`` global cycles, in source epoch ``(k, e)``."""
    count = schedule.source_at(g, k)[1]
    old = value_in(base, k, e, s)
    if old is None or schedule.source_at(base.cycles[s], k)[0] != e:
        return SplitValue(count, count)
    return SplitValue(count, old.second + count - old.first)


def rank_mixture_checkpoint(
    start: MixtureSaved,
    data: Sequence[SourceData],
    committed: MixtureState,
    passes: Sequence[Pass],
    world_size: int,
    rank: int,
    skipping: bool,
) -> MixtureSaved:
    """The checkpoint rank ``rank`` writes after the ``passes`` of its session from ``start``
    (every session starts its loader rotation at 0). ``committed`` is its parent's state, exact for
    its own splits (it resumed from :func:`load_mixture_for_rank`, which resolved them)."""
    config, n = start.config, start.config.num_splits
    schedule = mixture_schedule(config, start.regimes, data)
    own = frozenset(rank_splits(n, world_size, rank))
    counts = _other_counts(start, schedule, passes, world_size, rank)
    unknown: set[int] = set()
    for r in range(world_size):
        block = set(rank_splits(n, world_size, r))
        moved = any(counts[s] != start.cycles(s) for s in block)
        if not block & own and (block & start.unknown or (skipping and not config.packed and moved)):
            unknown |= block
    cycles, projected = [], {}
    for s in range(n):
        if s in own:
            cycles.append(committed.cycles[s])
        elif s in unknown or config.packed:
            cycles.append(start.state.cycles[s])
            if s not in unknown and counts[s] > start.state.cycles[s]:
                projected[s] = counts[s]
        else:
            cycles.append(counts[s])

    def current(k: int, e: int, s: int) -> SplitValue | None:
        if s in own:
            return value_in(committed, k, e, s)
        if cycles[s] == start.state.cycles[s]:
            return value_in(start.state, k, e, s)
        return _inferred_row(config, schedule, start.state, s, cycles[s], k, e)

    state = rebuild(config, data, schedule, cycles, current)
    return MixtureSaved(config, start.regimes, state, own, frozenset(unknown), projected)


# ---------------------------------------------------------------- resuming


def resolve_mixture(saved: MixtureSaved, data: Sequence[SourceData], splits: Sequence[int]) -> MixtureState:
    """The exact progress of ``splits``: projected splits replayed from their base to their target
    (every other split keeps its value)."""
    missing = sorted(saved.unknown & set(splits))
    require(not missing, "progress_unknown", f"the progress of splits {missing} is unknown")
    config = saved.config
    schedule = mixture_schedule(config, saved.regimes, data)
    resolved: dict[int, MixtureState] = {}
    for s in (s for s in splits if s in saved.projected):
        run = iterate_mixture(config, saved.regimes, data, (s,), saved.state, schedule)
        need = saved.projected[s] - saved.state.cycles[s]
        require(
            len(run.items) >= need,
            "projection_unreachable",
            f"split {s} cannot reach the {saved.projected[s]} global cycles its checkpoint infers",
        )
        resolved[s] = run.state_after(need)
    cycles = [resolved[s].cycles[s] if s in resolved else g for s, g in enumerate(saved.state.cycles)]

    def current(k: int, e: int, s: int) -> SplitValue | None:
        return value_in(resolved.get(s, saved.state), k, e, s)

    return rebuild(config, data, schedule, cycles, current)


def reweighted(saved: MixtureSaved, weights: Sequence[int] | None) -> tuple[Regime, ...]:
    """The regimes a resume with ``weights`` runs under (``None``: unchanged): a new regime at
    ``u0``, the largest global cycle count of any split (later planned regimes dropped), unless
    the regime in effect at ``u0`` already has these weights (then the regimes stay as they are)."""
    if weights is None:
        return saved.regimes
    u0 = max(saved.cycles(s) for s in range(saved.config.num_splits))
    kept = tuple(r for r in saved.regimes if r.start < u0)
    if kept and kept[-1].weights == tuple(weights):
        return saved.regimes
    return (*kept, Regime(u0, tuple(weights)))


def load_mixture_for_rank(
    config: MixtureConfig,
    data: Sequence[SourceData],
    checkpoint: object,
    world_size: int,
    rank: int,
    weights: Sequence[int] | None = None,
) -> tuple[tuple[Regime, ...], MixtureState]:
    """What rank ``rank`` of ``world_size`` resumes from: the regimes (with ``weights`` applied from
    ``u0`` on) and the exact state of its own splits (the others keep the checkpoint's values)."""
    saved = load_mixture(config, data, checkpoint)
    regimes = reweighted(saved, weights)
    state = resolve_mixture(saved, data, rank_splits(config.num_splits, world_size, rank))
    schedule = mixture_schedule(config, regimes, data)
    check_mixture_state(config, data, schedule, state)
    return regimes, state


# ---------------------------------------------------------------- a session of every rank


@dataclass(frozen=True)
class MixtureSession:
    """Every rank of one topology resumed from one checkpoint and delivered ``batches`` batches in
    lockstep: the items the trainers received, the merged truth (every rank's state), each rank's
    own checkpoint, the regimes the session ran under and whether every rank reached its end."""

    items: tuple[MixtureItem, ...]
    truth: MixtureSaved
    one_rank: tuple[MixtureSaved, ...]
    regimes: tuple[Regime, ...]
    finished: bool


def run_mixture_session(
    config: MixtureConfig,
    data: Sequence[SourceData],
    checkpoint: object,
    shape: tuple[int, int],
    batch_size: int,
    batches: int,
    weights: Sequence[int] | None,
    skipping: bool,
) -> MixtureSession:
    """Every rank of ``shape = (world_size, num_workers)`` resumes ``checkpoint`` (with ``weights``),
    the ranks deliver ``batches`` batches in lockstep (fewer when one runs out: all stop at the same
    count), then every rank writes its checkpoint."""
    ws, nw = shape
    n = config.num_splits
    loads = [load_mixture_for_rank(config, data, checkpoint, ws, r, weights) for r in range(ws)]
    regimes = loads[0][0]
    runs = [
        run_mixture_loader(config, regimes, data, Topology(ws, r, nw), loads[r][1], batch_size)
        for r in range(ws)
    ]
    b = min(batches, *(len(run.deliveries) for run in runs))
    items = tuple(i for run in runs for d in run.deliveries[:b] for i in d.items)
    committed = [run.state_after(b) for run in runs]
    own = [frozenset(rank_splits(n, ws, r)) for r in range(ws)]
    truth = merge_mixture(data, [MixtureSaved(config, regimes, committed[r], own[r]) for r in range(ws)])
    start = replace(load_mixture(config, data, checkpoint), regimes=regimes)
    passes = [Pass(nw, batch_size, b)]
    ones = tuple(
        rank_mixture_checkpoint(start, data, committed[r], passes, ws, r, skipping) for r in range(ws)
    )
    finished = all(b == len(run.deliveries) and run.error is None for run in runs)
    return MixtureSession(items, truth, ones, regimes, finished)


__all__ = [
    "MIXTURE_FORMAT",
    "MixtureSaved",
    "MixtureSession",
    "exact_mixture",
    "load_mixture",
    "load_mixture_for_rank",
    "merge_mixture",
    "rank_mixture_checkpoint",
    "resolve_mixture",
    "run_mixture_session",
    "reweighted",
    "snapshot_mixture",
]
