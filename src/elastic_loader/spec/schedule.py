"""Delivery arithmetic: how far every split gets when iterators and loaders deliver items.

Rules: these are pure functions of *counts* (samples per split in row mode, blocks emitted
per split in packed mode) and of how many more items each split could give (its *cap*). They
never look at rows, because a rank does not know which rows of another rank's splits are
skipped. Everything here follows from two orders the rest of the spec defines:

* An iterator yields the pairs ``(k, i)`` -- "the ``k``-th item of owned split ``i``" -- with
  ``k >= counts[i]`` in canonical order (sample index, then split; catch-up followed by
  cycles, see :func:`~elastic_loader.spec.rows.iterate_rows`). It ends at the first pair it
  cannot yield: during catch-up (``k`` below the largest start count ``M``) that is the first
  pair whose split is at its cap; once in cycles, a whole cycle is refused as soon as one of its
  splits is at its cap.
* A loader's workers hand out batches round robin, in worker order; a worker that runs out drops
  out of the rotation (torch's in-order delivery; :func:`~elastic_loader.spec.loader.deliver_batches`).

Theory of operation
-------------------
Counts after ``t`` items (``canonical_counts``) are a water level: every split is raised to
level ``lam`` (the largest level whose pairs below it number at most ``t``), and the ``t - P(lam)``
remaining items go to the first splits, in owned order, that sit at ``lam``. The capacity of an
iterator (``canonical_capacity``) counts the pairs before its end pair. ``round_robin_turns`` is
the same water level over workers: after ``n`` batches, round ``j`` is complete for every worker
that has more than ``j`` turns.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import require


def _pairs_below(counts: Sequence[int], level: int) -> int:
    """Pairs ``(k, i)`` with ``counts[i] <= k < level``."""
    return sum(max(0, level - c) for c in counts)


def canonical_capacity(counts: Sequence[int], caps: Sequence[int]) -> int:
    """Items an iterator over splits at ``counts`` yields before it ends, when split ``i`` can
    give items up to count ``caps[i]`` (``caps[i] >= counts[i]``).

    >>> canonical_capacity([0, 0], [3, 3])
    6
    >>> canonical_capacity([2, 0], [3, 1])   # catch-up of split 1 stops at its cap of 1
    1
    >>> canonical_capacity([1, 1], [3, 1])   # cycle 1 is refused: split 1 has no item 1
    0
    """
    require(len(counts) == len(caps), "list_length", "counts and caps differ in length")
    require(
        all(0 <= c <= cap for c, cap in zip(counts, caps)), "cap_below_count", "caps[i] >= counts[i] >= 0"
    )
    if not counts:
        return 0
    top = max(counts)
    end_k, end_i = min((cap, i) for i, cap in enumerate(caps))
    if end_k < top:  # the iterator ends during catch-up, before pair (end_k, end_i)
        return sum(max(0, end_k + (1 if i < end_i else 0) - c) for i, c in enumerate(counts))
    return _pairs_below(counts, end_k)  # it ends before cycle end_k


def canonical_counts(counts: Sequence[int], items: int) -> tuple[int, ...]:
    """The counts after an iterator over splits at ``counts`` yielded ``items`` more items.

    ``items`` must not exceed the iterator's capacity (the caller checks that).

    >>> canonical_counts([2, 0, 1, 2], 3)     # catch-up: split 1, split 1, split 2
    (2, 2, 2, 2)
    >>> canonical_counts([0, 0, 0], 4)
    (2, 1, 1)
    """
    require(items >= 0, "items_negative", "items must be >= 0")
    if not counts:
        require(items == 0, "items_beyond_capacity", "an iterator without splits yields nothing")
        return ()
    low, high = min(counts), max(counts) + items + 1  # P(low) = 0 <= items < P(high)
    while high - low > 1:  # largest level with at most ``items`` pairs below it
        middle = (low + high) // 2
        if _pairs_below(counts, middle) <= items:
            low = middle
        else:
            high = middle
    rest = items - _pairs_below(counts, low)
    out = []
    for c in counts:
        value = max(c, low)
        if rest and c <= low:
            value += 1
            rest -= 1
        out.append(value)
    return tuple(out)


def round_robin_turns(turns: Sequence[int], batches: int) -> tuple[int, ...]:
    """Batches each worker delivered after a loader delivered ``batches`` in all.

    Worker ``w`` can deliver ``turns[w]`` batches; deliveries go round robin in worker order,
    and a worker with no turn left drops out. ``batches`` beyond ``sum(turns)`` are capped: the
    loader has ended.

    >>> round_robin_turns([3, 3], 3)
    (2, 1)
    >>> round_robin_turns([1, 3, 3], 5)
    (1, 2, 2)
    """
    require(batches >= 0, "batches_negative", "batches must be >= 0")
    batches = min(batches, sum(turns))
    low, high = 0, max(turns, default=0) + 1  # complete rounds: C(j) = sum(min(t, j)) <= batches
    while high - low > 1:
        middle = (low + high) // 2
        if sum(min(t, middle) for t in turns) <= batches:
            low = middle
        else:
            high = middle
    rest = batches - sum(min(t, low) for t in turns)
    out = []
    for t in turns:
        value = min(t, low)
        if rest and t > low:
            value += 1
            rest -= 1
        out.append(value)
    return tuple(out)


def next_worker(delivered: Sequence[int]) -> int:
    """The worker after the last one served, given ``round_robin_turns``' result (0 if none was).

    A worker that has run out keeps its place in the cycle; the loader skips it when its turn
    comes, so the delivery order does not depend on whether it is known to be exhausted.

    >>> next_worker((2, 1))
    1
    >>> next_worker((0, 0, 0))
    0
    """
    rounds = max(delivered, default=0)
    if rounds == 0:
        return 0
    last = max(w for w, d in enumerate(delivered) if d == rounds)
    return (last + 1) % len(delivered)
