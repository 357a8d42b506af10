"""The pipeline's delivery arithmetic (``_pipeline/_schedule.py``) against the spec's
(``spec/schedule.py``), and both against a plain simulation of an iterator and a loader."""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st

from elastic_loader._pipeline import _schedule
from elastic_loader.spec import schedule


def simulate(counts: list[int], caps: list[int]) -> list[list[int]]:
    """Counts after each item of an iterator: catch-up by (count, split), then whole cycles."""
    counts = list(counts)
    out: list[list[int]] = []
    if not counts:
        return out
    top = max(counts)
    lagging = [(c, i) for i, c in enumerate(counts) if c < top]
    heapq.heapify(lagging)
    while lagging:
        c, i = heapq.heappop(lagging)
        if counts[i] >= caps[i]:
            return out
        counts[i] += 1
        out.append(list(counts))
        if c + 1 < top:
            heapq.heappush(lagging, (c + 1, i))
    while all(c < cap for c, cap in zip(counts, caps)):
        for i in range(len(counts)):
            counts[i] += 1
            out.append(list(counts))
    return out


@st.composite
def iterators(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    counts = draw(st.lists(st.integers(0, 6), max_size=5))
    caps = [c + draw(st.integers(0, 6)) for c in counts]
    return counts, caps


@given(iterators())
def test_capacity_and_advance_follow_the_iterator(case: tuple[list[int], list[int]]) -> None:
    counts, caps = case
    steps = simulate(counts, caps)
    assert _schedule.capacity(counts, caps) == len(steps) == schedule.canonical_capacity(counts, caps)
    for t, expected in enumerate(steps, 1):
        assert _schedule.advance(counts, t) == expected == list(schedule.canonical_counts(counts, t))


def round_robin(turns: list[int], batches: int) -> list[int]:
    done = [0] * len(turns)
    given_out = 0
    while given_out < batches and any(d < t for d, t in zip(done, turns)):
        for w in range(len(turns)):
            if given_out < batches and done[w] < turns[w]:
                done[w] += 1
                given_out += 1
    return done


@given(st.lists(st.integers(0, 6), min_size=1, max_size=5), st.integers(0, 40))
def test_deliveries_follow_the_round_robin(turns: list[int], batches: int) -> None:
    expected = round_robin(turns, batches)
    assert (
        _schedule.deliveries(turns, batches) == expected == list(schedule.round_robin_turns(turns, batches))
    )
    assert _schedule.worker_after(expected) == schedule.next_worker(expected)
