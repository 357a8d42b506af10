"""A mixture's configuration, its sources' data and its schedule (the first half of ``mixture.py``).

Rules: those of ``mixture.py`` ("Sources", "Global cycles", "The schedule", "Capacity and
exhaustion"); this module holds the configuration (:class:`MixtureConfig`, :class:`SourceData`,
integer weights) and the pure schedule of global cycles (:class:`Regime`, :func:`edf_pick`,
:func:`mixture_schedule`), which never looks at rows. ``mixture.py`` iterates, loads and
delivers over it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from itertools import pairwise

from .errors import SpecValueError, require
from .params import EPOCH_PRIME
from .rows import NO_FAULTS, Faults
from .topology import Permutation, RunConfig, check_permutation

ON_EXHAUSTED = ("stop", "cycle", "renormalize")
"""The values of ``on_exhausted``."""


# ---------------------------------------------------------------- configuration and data


@dataclass(frozen=True)
class MixtureConfig:
    """What a mixture checkpoint pins: the sources' names and run configurations (each at the
    source's first epoch in this mixture epoch), the mixture's seed and epoch, ``on_exhausted`` and
    the optional length ``cycles`` of the mixture epoch in global cycles."""

    names: tuple[str, ...]
    sources: tuple[RunConfig, ...]
    seed: int = 0
    epoch: int = 0
    on_exhausted: str = "stop"
    cycles: int | None = None

    def __post_init__(self) -> None:
        require(len(self.sources) >= 1, "mixture_no_sources", "a mixture needs at least one source")
        require(
            len(self.names) == len(self.sources)
            and len(set(self.names)) == len(self.names)
            and all(isinstance(n, str) and n for n in self.names),
            "mixture_names",
            "every source needs a distinct, non-empty name",
        )
        require(
            len({c.num_splits for c in self.sources}) == 1,
            "mixture_num_splits_mismatch",
            "every source of a mixture must have the same num_splits",
        )
        packed = {c.packing is not None for c in self.sources}
        lengths = {c.packing.pack_sequences for c in self.sources if c.packing is not None}
        require(
            len(packed) == 1 and len(lengths) <= 1,
            "mixture_mode_mismatch",
            "the sources of a mixture are all in row mode, or all pack with the same pack_sequences",
        )
        require(
            self.on_exhausted in ON_EXHAUSTED,
            "on_exhausted_invalid",
            f"on_exhausted must be one of {ON_EXHAUSTED}, got {self.on_exhausted!r}",
        )
        require(
            self.cycles is None or self.cycles >= 1,
            "mixture_cycles_not_positive",
            "cycles (the mixture epoch's length in global cycles) must be >= 1",
        )
        require(
            self.on_exhausted != "cycle" or self.cycles is not None,
            "mixture_cycles_required",
            "on_exhausted='cycle' never runs out: give the mixture epoch's length (cycles)",
        )

    @property
    def num_splits(self) -> int:
        """``S``, common to every source."""
        return self.sources[0].num_splits

    @property
    def packed(self) -> bool:
        """Whether the sources pack sequences."""
        return self.sources[0].packing is not None

    def source_config(self, source: int, epoch: int) -> RunConfig:
        """The run configuration of source ``source`` in its epoch ``epoch``."""
        return replace(self.sources[source], epoch=epoch)


@dataclass(frozen=True)
class SourceData:
    """The model's inputs for one source: its permutation of every source epoch the mixture may
    read (keyed by epoch), its transform faults (by row id, the same in every epoch) and, packing,
    its documents."""

    perms: Mapping[int, Permutation]
    faults: Faults = NO_FAULTS
    corpus: Mapping[int, Sequence[int]] | None = None

    def perm(self, epoch: int) -> Permutation:
        """The permutation of source epoch ``epoch``."""
        if epoch not in self.perms:
            raise SpecValueError("source_epoch_missing", f"no permutation for source epoch {epoch}")
        return self.perms[epoch]


def check_data(config: MixtureConfig, data: Sequence[SourceData]) -> None:
    """Every source has data, every permutation ``S`` equal splits, every packed source documents."""
    require(len(data) == len(config.sources), "mixture_data_mismatch", "one SourceData per source")
    for k, source in enumerate(data):
        require(
            config.sources[k].epoch in source.perms,
            "source_epoch_missing",
            f"source {config.names[k]!r} has no permutation for its first epoch",
        )
        for perm in source.perms.values():
            check_permutation(perm)
            require(len(perm) == config.num_splits, "mixture_data_mismatch", "a permutation has S splits")
        require(
            not config.packed or source.corpus is not None,
            "mixture_data_mismatch",
            "a packed source needs its documents",
        )


def capacity(config: MixtureConfig, data: Sequence[SourceData], source: int, epoch: int) -> int:
    """``C``: the cycles of a source epoch (split length; packing: blocks per split)."""
    packing = config.sources[source].packing
    if packing is not None:
        return packing.blocks_per_split(config.num_splits)
    return len(data[source].perm(epoch)[0])


def integer_weights(proportions: Sequence[float | int | Fraction], resolution: int = 1000) -> tuple[int, ...]:
    """Integer weights summing to ``resolution`` for non-negative ``proportions`` (any scale).

    Largest remainders (Hamilton's method) on the exact values; ties go to the earlier source.
    """
    require(resolution >= 1, "proportions_invalid", "resolution must be >= 1")
    exact = [Fraction(p) for p in proportions]
    require(
        len(exact) >= 1 and all(p >= 0 for p in exact) and sum(exact) > 0,
        "proportions_invalid",
        "proportions are non-negative and not all zero",
    )
    total = sum(exact)
    quotas = [p * resolution / total for p in exact]
    floors = [int(q) for q in quotas]
    rest = resolution - sum(floors)
    order = sorted(range(len(exact)), key=lambda k: (-(quotas[k] - floors[k]), k))
    for k in order[:rest]:
        floors[k] += 1
    return tuple(floors)


# ---------------------------------------------------------------- regimes and the schedule


@dataclass(frozen=True)
class Regime:
    """Integer weights, one per source, from global cycle ``start`` on (a curriculum step)."""

    start: int
    weights: tuple[int, ...]

    def __post_init__(self) -> None:
        require(self.start >= 0, "regimes_invalid", "a regime starts at a global cycle >= 0")
        require(
            all(isinstance(w, int) and not isinstance(w, bool) and w >= 0 for w in self.weights)
            and sum(self.weights) >= 1,
            "regime_weights_invalid",
            "weights are non-negative ints, not all zero",
        )


def check_regimes(config: MixtureConfig, regimes: Sequence[Regime]) -> None:
    """The first regime starts at cycle 0, starts increase strictly, one weight per source."""
    require(len(regimes) >= 1 and regimes[0].start == 0, "regimes_invalid", "the first regime starts at 0")
    require(
        all(a.start < b.start for a, b in pairwise(regimes)),
        "regimes_invalid",
        "regime starts must increase strictly",
    )
    require(
        all(len(r.weights) == len(config.sources) for r in regimes),
        "regime_weights_invalid",
        "a regime has one weight per source",
    )


def tie_order(config: MixtureConfig) -> tuple[int, ...]:
    """The permutation of the sources that breaks deadline ties (earlier wins)."""
    order = list(range(len(config.sources)))
    random.Random(config.seed + config.epoch * EPOCH_PRIME).shuffle(order)
    return tuple(order)


def edf_pick(weights: Sequence[int], picks: Sequence[int], slot: int, order: Sequence[int]) -> int:
    """The source of slot ``slot`` of a segment whose sources were picked ``picks`` times so far.

    Eligible: ``(slot+1)*w > W*picks`` (served less than its share of ``slot+1`` slots). Among them
    the earliest deadline ``ceil((picks+1)*W/w)``, ties to the earliest in ``order``. One is always
    eligible when ``sum(picks) == slot`` (``MixtureProportionInv``, lemma ``eligible_exists``).
    """
    require(len(weights) == len(picks) == len(order), "list_length", "one weight and count per source")
    require(sum(picks) == slot and slot >= 0, "picks_inconsistent", "a segment picked one source per slot")
    total = sum(weights)
    best: tuple[int, int] | None = None
    for k in order:
        w = weights[k]
        if w == 0 or (slot + 1) * w <= total * picks[k]:
            continue
        deadline = -(-(picks[k] + 1) * total // w)
        if best is None or deadline < best[0]:
            best = (deadline, k)
    assert best is not None, "no eligible source although sum(picks) == slot"
    return best[1]


@dataclass(frozen=True)
class Slot:
    """Global cycle ``u`` of the schedule: cycle ``index`` of source ``source`` in its epoch ``epoch``."""

    source: int
    epoch: int
    index: int


@dataclass(frozen=True)
class Segment:
    """Global cycles ``[start, end)`` scheduled with ``weights`` (0 for inactive sources) from zero
    counts."""

    start: int
    end: int
    weights: tuple[int, ...]


@dataclass(frozen=True)
class Schedule:
    """Every global cycle of a mixture epoch, its segments, and why it ends (``"cycles"``: the
    configured length; ``"stop"``: a source ran out; ``"exhausted"``: no source with weight left)."""

    slots: tuple[Slot, ...]
    segments: tuple[Segment, ...]
    end: str
    at: tuple[tuple[tuple[int, int], ...], ...] = field(repr=False, compare=False, default=())
    """``at[u][k]``: ``(epoch, cycles used in it)`` of source ``k`` after the first ``u`` slots."""

    def source_at(self, u: int, source: int) -> tuple[int, int]:
        """Source ``source``'s ``(epoch, cycles used in that epoch)`` after global cycle ``u - 1``."""
        return self.at[u][source]


def _where(config: MixtureConfig, slots: Sequence[Slot]) -> tuple[tuple[tuple[int, int], ...], ...]:
    row = tuple((c.epoch, 0) for c in config.sources)
    out = [row]
    for slot in slots:
        e, used = row[slot.source]
        now = (slot.epoch, used + 1) if slot.epoch == e else (slot.epoch, 1)
        row = (*row[: slot.source], now, *row[slot.source + 1 :])
        out.append(row)
    return tuple(out)


def mixture_schedule(
    config: MixtureConfig, regimes: Sequence[Regime], data: Sequence[SourceData]
) -> Schedule:
    """The schedule of the mixture epoch: which source epoch's cycle every global cycle is."""
    check_regimes(config, regimes)
    check_data(config, data)
    order, n = tie_order(config), len(config.sources)
    epochs = [c.epoch for c in config.sources]
    used, picks = [0] * n, [0] * n
    removed: set[int] = set()
    slots: list[Slot] = []
    segments: list[Segment] = []
    regime, seg_start, u = 0, 0, 0

    def weights() -> tuple[int, ...]:
        return tuple(0 if k in removed else w for k, w in enumerate(regimes[regime].weights))

    def close(at: int) -> None:
        if at > seg_start:
            segments.append(Segment(seg_start, at, weights()))

    while True:
        if config.cycles is not None and u >= config.cycles:
            end = "cycles"
            break
        if regime + 1 < len(regimes) and regimes[regime + 1].start == u:
            close(u)
            regime, seg_start, picks = regime + 1, u, [0] * n
        active = weights()
        if sum(active) == 0:
            end = "exhausted"
            break
        k = edf_pick(active, picks, u - seg_start, order)
        if used[k] == capacity(config, data, k, epochs[k]):
            if config.on_exhausted == "stop":
                end = "stop"
                break
            if config.on_exhausted == "cycle":
                epochs[k], used[k] = epochs[k] + 1, 0
                capacity(config, data, k, epochs[k])  # the next epoch must exist
            else:
                close(u)
                removed.add(k)
                seg_start, picks = u, [0] * n
                continue
        slots.append(Slot(k, epochs[k], used[k]))
        used[k] += 1
        picks[k] += 1
        u += 1
    close(u)
    return Schedule(tuple(slots), tuple(segments), end, _where(config, slots))
