"""Predicates of the mixture invariants (``spec/INVARIANTS.md``, section "Mixtures").

Rules: as in :mod:`.invariants` (one predicate per name, ``None`` when it holds,
:class:`~.errors.InvariantViolation` otherwise). They judge a mixture's schedule (counts over
prefixes and windows, re-counted from the slots), its global steps on a topology against the
topology-free ones, the items a chain of sessions delivered against each source's own stream, and
one rank's checkpoint against the merged truth. :mod:`.invariants` re-exports every name.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from .errors import InvariantViolation, SpecValueError, check
from .mixture import MixtureItem, MixtureKey, MixtureState, item_key, iterate_mixture, source_items
from .mixture_saved import MixtureSaved, resolve_mixture
from .mixture_schedule import MixtureConfig, Schedule, SourceData
from .topology import rank_splits


def _deviation(schedule: Schedule) -> tuple[str, int, int, int, int, int] | None:
    """The first prefix or window of a segment whose count of a source is off by the bound, as
    ``(kind, source, start, end, count*W, length*w)``, or ``None``."""
    for seg in schedule.segments:
        total = sum(seg.weights)
        picks = [schedule.slots[u].source for u in range(seg.start, seg.end)]
        for k, w in enumerate(seg.weights):
            prefix = [0]
            for got in picks:
                prefix.append(prefix[-1] + (got == k))
            for b in range(1, len(prefix)):
                if abs(prefix[b] * total - b * w) >= total:
                    return "prefix", k, seg.start, seg.start + b, prefix[b] * total, b * w
                for a in range(b):
                    count = prefix[b] - prefix[a]
                    if abs(count * total - (b - a) * w) >= 2 * total:
                        return "window", k, seg.start + a, seg.start + b, count * total, (b - a) * w
    return None


def MixtureProportionInv(schedule: Schedule) -> None:
    """In every segment (one regime, one set of active sources, from zero counts) of weights
    ``w`` summing to ``W``, a source's count over the first ``t`` slots is within less than 1 of
    ``t*w_k/W``, and over every window of ``k`` slots within less than 2 of ``k*w_k/W``; segments
    tile the schedule and a source of weight 0 is never picked."""
    ends = [(s.start, s.end) for s in schedule.segments]
    tiled = all(a[1] == b[0] for a, b in pairwise(ends)) and (
        not ends or (ends[0][0] == 0 and ends[-1][1] == len(schedule.slots))
    )
    check(
        tiled and (bool(ends) or not schedule.slots),
        "MixtureProportionInv",
        lambda: f"segments {ends} do not tile {len(schedule.slots)} slots",
    )
    for seg in schedule.segments:
        bad = [u for u in range(seg.start, seg.end) if seg.weights[schedule.slots[u].source] == 0]
        if bad:
            raise InvariantViolation("MixtureProportionInv", f"cycles {bad} picked a source of weight 0")
    found = _deviation(schedule)
    check(
        found is None,
        "MixtureProportionInv",
        lambda: "{} [{}, {}) of source {}: count*W={} vs length*w={}".format(
            *(found[i] for i in (0, 2, 3, 1, 4, 5)) if found else ()
        ),
    )


def MixtureElasticDeterminismProp(
    expected: Sequence[frozenset[MixtureKey]], got: Sequence[frozenset[MixtureKey]], complete: bool
) -> None:
    """A topology's global steps (``got``) are the topology-free ones (``expected``): the same items
    of the same sources in every step; all of them when ``complete`` (no skipped or raising
    rows)."""
    n = min(len(expected), len(got))
    diff = next((g for g in range(n) if expected[g] != got[g]), None)
    check(
        diff is None and len(got) <= len(expected),
        "MixtureElasticDeterminismProp",
        lambda: f"step {diff} differs, or more steps ({len(got)}) than the model has ({len(expected)})",
    )
    check(
        not complete or len(got) == len(expected),
        "MixtureElasticDeterminismProp",
        lambda: f"{len(got)} complete steps where every split has {len(expected)}",
    )


def MixtureExactlyOnceProp(
    config: MixtureConfig,
    data: Sequence[SourceData],
    schedule: Schedule,
    delivered: Sequence[MixtureItem],
    finished: bool,
) -> None:
    """Across a chain of sessions, every split delivered global cycles ``0, 1, ..., m-1`` once each,
    cycle ``u`` being the next item of its split in the source epoch the schedule gives; so every
    source epoch's split gives its items in order, none twice, none left out; every cycle of the
    schedule when ``finished``."""
    per_split: dict[int, list[MixtureItem]] = {s: [] for s in range(config.num_splits)}
    for item in delivered:
        per_split[item.split].append(item)
    streams: dict[tuple[int, int, int], tuple[object, ...]] = {}
    for s, items in per_split.items():
        cycles = sorted(i.cycle for i in items)
        if cycles != list(range(len(cycles))):
            raise InvariantViolation("MixtureExactlyOnceProp", f"split {s} delivered global cycles {cycles}")
        taken: dict[tuple[int, int], int] = {}
        for item in sorted(items, key=lambda i: i.cycle):
            slot = schedule.slots[item.cycle]
            key = (slot.source, slot.epoch)
            index = taken.get(key, 0)
            taken[key] = index + 1
            if (*key, s) not in streams:
                streams[(*key, s)] = tuple(source_items(config, data, slot.source, slot.epoch, s))
            stream = streams[(*key, s)]
            if (item.source, item.epoch) != key or index >= len(stream) or stream[index] != item.item:
                raise InvariantViolation(
                    "MixtureExactlyOnceProp",
                    f"split {s} cycle {item.cycle}: {item} is not item {index} of source epoch {key}",
                )
        if finished and len(cycles) != len(schedule.slots):
            raise InvariantViolation(
                "MixtureExactlyOnceProp",
                f"split {s} ended after {len(cycles)} of {len(schedule.slots)} global cycles",
            )


def _future(
    saved: MixtureSaved, data: Sequence[SourceData], state: MixtureState, s: int
) -> tuple[object, ...]:
    """What a resume of split ``s`` from ``state`` goes on with: its global cycles and every item it
    still yields (two packed values that differ only by a fill not emitted yet resume alike)."""
    run = iterate_mixture(saved.config, saved.regimes, data, (s,), state)
    return state.cycles[s], tuple(item_key(i) for i in run.items)


def MixtureLockstepInv(
    data: Sequence[SourceData],
    truth: MixtureState,
    saved: MixtureSaved,
    world_size: int,
    may_refuse: bool,
) -> None:
    """One rank's checkpoint of a lockstep job resumes every rank of a ``world_size`` topology
    exactly: each resolved split goes on like the merged truth (same global cycles, same items to
    come);
    a rank may refuse (``progress_unknown``) only when ``may_refuse`` (rows may have been skipped),
    never resume wrongly."""
    n = saved.config.num_splits
    for r in range(world_size):
        mine = rank_splits(n, world_size, r)
        try:
            state = resolve_mixture(saved, data, mine)
        except SpecValueError as exc:
            if not (may_refuse and exc.code == "progress_unknown"):
                raise InvariantViolation(
                    "MixtureLockstepInv", f"rank {r} of {world_size} refused the checkpoint: {exc}"
                ) from exc
            continue
        wrong = [s for s in mine if _future(saved, data, state, s) != _future(saved, data, truth, s)]
        if wrong:
            raise InvariantViolation(
                "MixtureLockstepInv",
                f"rank {r} of {world_size} resumes splits {wrong} elsewhere than the job stood",
            )


def mixture_keys(items: Sequence[MixtureItem]) -> list[MixtureKey]:
    """The keys of ``items`` (a helper for tests)."""
    return [item_key(i) for i in items]


__all__ = [
    "InvariantViolation",
    "MixtureElasticDeterminismProp",
    "MixtureExactlyOnceProp",
    "MixtureLockstepInv",
    "MixtureProportionInv",
    "mixture_keys",
]
