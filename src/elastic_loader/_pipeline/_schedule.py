"""How far splits get when a rank's loader delivers batches: counts only, no rows.

Rules: an iterator hands out the pairs (k, i) -- the k-th item of its i-th owned split, k at
least the split's count -- in (k, i) order; a loader's workers deliver batches round robin, a
worker that ran out dropping out. A rank that did not own a split uses these rules to say where
the split's owner stands, assuming the owner delivered the same batches (lockstep). This module
is the pipeline's own implementation of the rules the executable spec states in
``elastic_loader.spec.schedule`` (the pipeline never imports the spec; the differential tests
compare the two).
"""

from __future__ import annotations

from collections.abc import Sequence


def _below(counts: Sequence[int], level: int) -> int:
    """Items an iterator hands out to lift every split below ``level`` up to it."""
    total = 0
    for c in counts:
        if c < level:
            total += level - c
    return total


def capacity(counts: Sequence[int], caps: Sequence[int]) -> int:
    """Items an iterator over splits at ``counts`` hands out before it stops, split ``i`` having
    items up to count ``caps[i]``.

    While splits lag behind the largest count (catch-up) the iterator stops at the first lagging
    split that has no item left; in cycles it refuses a whole cycle as soon as one split has none.
    """
    if not counts:
        return 0
    stop = min(range(len(caps)), key=lambda i: (caps[i], i))
    level = caps[stop]
    if level >= max(counts):
        return _below(counts, level)
    return sum(max(0, level + (i < stop) - c) for i, c in enumerate(counts))


def advance(counts: Sequence[int], items: int) -> list[int]:
    """The counts after ``items`` more items in (k, i) order (``items`` within the capacity)."""
    if not counts:
        return []
    lo, hi = min(counts), max(counts) + items + 1
    while lo + 1 < hi:  # the highest level reachable with at most ``items`` items
        mid = (lo + hi) // 2
        if _below(counts, mid) <= items:
            lo = mid
        else:
            hi = mid
    spare = items - _below(counts, lo)
    out = []
    for c in counts:
        bump = 1 if spare and c <= lo else 0
        spare -= bump
        out.append(max(c, lo) + bump)
    return out


def deliveries(turns: Sequence[int], batches: int) -> list[int]:
    """Batches each worker delivered once the loader delivered ``batches``, worker ``w`` having
    ``turns[w]`` of them (round robin in worker order; beyond every turn the loader has ended)."""
    batches = min(batches, sum(turns))
    lo, hi = 0, max(turns, default=0) + 1
    while lo + 1 < hi:  # complete rounds
        mid = (lo + hi) // 2
        if sum(min(t, mid) for t in turns) <= batches:
            lo = mid
        else:
            hi = mid
    spare = batches - sum(min(t, lo) for t in turns)
    out = []
    for t in turns:
        bump = 1 if spare and t > lo else 0
        spare -= bump
        out.append(min(t, lo) + bump)
    return out


def worker_after(delivered: Sequence[int]) -> int:
    """The worker after the last one served (0 when none was)."""
    top = max(delivered, default=0)
    if top == 0:
        return 0
    last = max(w for w, d in enumerate(delivered) if d == top)
    return (last + 1) % len(delivered)
