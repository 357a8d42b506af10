"""A mixture's schedule of global cycles: integer weights, regimes, earliest-deadline-first picks.

Rules (spec/MIXTURES.md, section 1; written again here, the pipeline never imports the spec):

* Proportions become integer weights summing to a resolution by largest remainders on the exact
  values, ties to the earlier source (:func:`integer_weights`).
* A :class:`Regime` gives weights from a global cycle on; the first starts at 0, starts increase.
* The schedule (:func:`build_schedule`) is a pure function of the mixture's seed and epoch, its
  regimes, ``on_exhausted``, ``cycles`` and each source's capacity (cycles per source epoch); it
  never looks at rows. Inside a segment (one regime, one set of active sources, zero counts at its
  start) slot ``t`` goes to the eligible source (``(t+1)*w > W*picks``) with the earliest deadline
  ``ceil((picks+1)*W/w)``, ties to the earliest in the tie order (``list(range(n))`` shuffled by
  ``random.Random(seed + epoch * EPOCH_PRIME)``).
* A source picked with all ``C`` cycles of its epoch used: ``"stop"`` ends the schedule,
  ``"cycle"`` moves it to its next epoch, ``"renormalize"`` drops it for the rest of the mixture
  epoch and opens a new segment. No weight left ends it; so does ``cycles`` when given.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from ._lance import EPOCH_PRIME

ON_EXHAUSTED = ("stop", "cycle", "renormalize")


def integer_weights(proportions: Sequence[float | int | Fraction], resolution: int = 1000) -> tuple[int, ...]:
    """Integer weights summing to ``resolution`` for non-negative ``proportions`` (any scale)."""
    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 1:
        raise ValueError(f"resolution must be an int >= 1, got {resolution!r}")
    exact = []
    for p in proportions:
        if isinstance(p, bool) or not isinstance(p, (int, float, Fraction)):
            raise TypeError(f"a weight must be a number, got {type(p).__name__}")
        exact.append(Fraction(p))
    if not exact or any(p < 0 for p in exact) or sum(exact) <= 0:
        raise ValueError("weights must be non-negative and not all zero")
    total = sum(exact)
    quotas = [p * resolution / total for p in exact]
    floors = [int(q) for q in quotas]
    order = sorted(range(len(exact)), key=lambda k: (-(quotas[k] - floors[k]), k))
    for k in order[: resolution - sum(floors)]:
        floors[k] += 1
    return tuple(floors)


@dataclass(frozen=True)
class Regime:
    """Integer weights, one per source, from global cycle ``start`` on."""

    start: int
    weights: tuple[int, ...]


def check_regimes(regimes: Sequence[Regime], sources: int) -> None:
    """``ValueError`` unless the regimes start at 0, increase strictly, and have one weight per source."""
    if not regimes or regimes[0].start != 0:
        raise ValueError("the first regime of a mixture starts at global cycle 0")
    for a, b in itertools.pairwise(regimes):
        if not a.start < b.start:
            raise ValueError("regime starts must increase strictly")
    for r in regimes:
        if len(r.weights) != sources or any(w < 0 for w in r.weights) or sum(r.weights) < 1:
            raise ValueError(f"a regime has {sources} non-negative int weights, not all zero: {r.weights}")


def tie_order(sources: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The permutation of the sources that breaks deadline ties (earlier wins)."""
    order = list(range(sources))
    random.Random(seed + epoch * EPOCH_PRIME).shuffle(order)
    return tuple(order)


def edf_pick(weights: Sequence[int], picks: Sequence[int], slot: int, order: Sequence[int]) -> int:
    """The source of slot ``slot`` of a segment whose sources were picked ``picks`` times so far."""
    total = sum(weights)
    best, chosen = -1, -1
    for k in order:
        w = weights[k]
        if w == 0 or (slot + 1) * w <= total * picks[k]:
            continue
        deadline = -(-(picks[k] + 1) * total // w)
        if chosen < 0 or deadline < best:
            best, chosen = deadline, k
    assert chosen >= 0, "no eligible source although every slot was picked once"
    return chosen


@dataclass(frozen=True)
class Schedule:
    """Every global cycle of a mixture epoch: ``source[u]``, ``epoch[u]`` (the source's epoch) and
    ``index[u]`` (the cycle's index in that source epoch); ``end`` says why it ends."""

    source: tuple[int, ...]
    epoch: tuple[int, ...]
    index: tuple[int, ...]
    end: str
    first: tuple[int, ...]
    """Each source's first epoch."""
    _at: tuple[tuple[int, ...], ...] = field(repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        at: list[list[int]] = [[] for _ in self.first]
        for u, k in enumerate(self.source):
            at[k].append(u)
        object.__setattr__(self, "_at", tuple(tuple(a) for a in at))

    def __len__(self) -> int:
        return len(self.source)

    def where(self, cycles: int, source: int) -> tuple[int, int]:
        """Source ``source``'s ``(epoch, cycles used in it)`` after the first ``cycles`` global cycles."""
        mine = self._at[source]
        i = bisect.bisect_left(mine, cycles)
        if i == 0:
            return self.first[source], 0
        u = mine[i - 1]
        return self.epoch[u], self.index[u] + 1

    def epochs(self, source: int) -> range:
        """The epochs of ``source`` the schedule reads (its first one at least)."""
        mine = self._at[source]
        last = self.epoch[mine[-1]] if mine else self.first[source]
        return range(self.first[source], last + 1)


def build_schedule(
    regimes: Sequence[Regime],
    capacities: Sequence[int],
    first: Sequence[int],
    *,
    seed: int,
    epoch: int,
    on_exhausted: str,
    cycles: int | None,
) -> Schedule:
    """The schedule of one mixture epoch (see the module rules); ``capacities[k]``: cycles per epoch
    of source ``k``, ``first[k]``: its first epoch."""
    n = len(capacities)
    check_regimes(regimes, n)
    order = tie_order(n, seed, epoch)
    epochs, used, picks = list(first), [0] * n, [0] * n
    removed: set[int] = set()
    src: list[int] = []
    eps: list[int] = []
    idx: list[int] = []
    regime, seg_start, u, end = 0, 0, 0, "cycles"
    while cycles is None or u < cycles:
        if regime + 1 < len(regimes) and regimes[regime + 1].start == u:
            regime, seg_start, picks = regime + 1, u, [0] * n
        active = [0 if k in removed else w for k, w in enumerate(regimes[regime].weights)]
        if sum(active) == 0:
            end = "exhausted"
            break
        k = edf_pick(active, picks, u - seg_start, order)
        if used[k] == capacities[k]:
            if on_exhausted == "stop":
                end = "stop"
                break
            if on_exhausted == "cycle":
                epochs[k], used[k] = epochs[k] + 1, 0
            else:
                removed.add(k)
                seg_start, picks = u, [0] * n
                continue
        src.append(k)
        eps.append(epochs[k])
        idx.append(used[k])
        used[k] += 1
        picks[k] += 1
        u += 1
    return Schedule(tuple(src), tuple(eps), tuple(idx), end, tuple(first))
