"""The row feed's byte accounting (``_rows.RowFeed``, ``value_bytes``, ``sampled_bytes``): what
the byte budget ``read_ahead_bytes`` counts for the ready rows of each split (deviation D40,
docs/PIPELINE.md "Memory and threads"; the budget end to end is tests/pipeline/reading/test_pipe_budget.py).

Each ready row weighs the larger of its unit's Arrow bytes per row and its measured value size;
taking rows releases exactly their weight, oldest runs first.
"""

from __future__ import annotations

import numpy as np
import torch

from elastic_loader._pipeline import _fetch
from elastic_loader._pipeline._fetch import Segment, Unit
from elastic_loader._pipeline._rows import RowCursor, RowFeed, RowPayload, iterate, sampled_bytes, value_bytes
from elastic_loader._pipeline._stats import Counters


def _unit(rows: int, nbytes: int, counts: list[int]) -> Unit:
    segments, offset = [], 0
    for split, count in enumerate(counts):
        segments.append(Segment(split, 0, count, offset))
        offset += count
    return Unit(0, segments, rows, future=_fetch.Future(), nbytes=nbytes)


def test_row_feed_counts_ready_and_taken_rows() -> None:
    feed, counters = RowFeed(2), Counters()
    feed.distribute(_unit(6, 600, [4, 2]), RowPayload(list(range(6)), None, None), counters)
    assert feed.held_bytes() == 600
    vals, pos, weight = feed.take(0, 3)
    assert (vals, pos, weight) == ([0, 1, 2], [0, 1, 2], 300.0)
    assert feed.held_bytes() == 300  # taken rows leave the ready count (the loop adds them as out_bytes)
    assert feed.values[0][:3] == [None, None, None]  # taken slots do not keep the rows alive
    feed.distribute(_unit(2, 1000, [2, 0]), RowPayload([10, 11], None, None), counters)
    assert feed.held_bytes() == 1300
    _, pos, weight = feed.take(0, 2)  # one row at 100 bytes, one at 500
    assert pos == [3, 0] and weight == 600.0
    assert feed.held_bytes() == 700


def test_row_feed_weighs_skipped_rows_nothing_and_large_values_by_their_size() -> None:
    feed, counters = RowFeed(1), Counters()
    payload = RowPayload([b"x" * 4000, None, b"y" * 4000], {1}, None)
    feed.distribute(_unit(3, 30, [3]), payload, counters)
    assert feed.ready(0) == 2
    assert feed.held_bytes() == 8000  # the values outweigh their Arrow rows


def test_value_bytes_measures_buffers_arrays_and_tensors() -> None:
    assert value_bytes(b"abc") == 3
    assert value_bytes("abcd") == 4
    assert value_bytes(memoryview(b"12345")) == 5
    assert value_bytes(np.zeros(10, dtype=np.int64)) == 80
    assert value_bytes(torch.zeros(3, dtype=torch.float32)) == 12
    nested = {"a": np.zeros(4, dtype=np.int8), "b": [b"xy", (b"z",)]}
    assert value_bytes(nested) == 6  # the tuple is a third level: not measured
    assert value_bytes([[[b"deep"]]]) == 0  # beyond two levels: not measured
    assert value_bytes(3) == 0
    assert sampled_bytes([]) == 0.0
    assert sampled_bytes([b"a", b"bbb", b"ccccc"]) == 3.0
    assert sampled_bytes([b"aa"]) == 2.0
    assert sampled_bytes([b"aaaa", None, b"bb"]) == 3.0  # a skipped row's place is not a value


class _Units:
    """Stands in for the read pipeline: hands out prepared units, then the end (``None``)."""

    def __init__(self, *units: tuple[Unit, RowPayload]) -> None:
        self._units = list(units)

    def next_unit(self) -> tuple[Unit, RowPayload] | None:
        return self._units.pop(0) if self._units else None


def test_the_chunk_being_handed_out_is_held_until_it_ends() -> None:
    """While the consumer takes a chunk's rows, their bytes still count as held (the rows are alive in
    the chunk); when the chunk ends they are released, so the next chunk holds its own bytes only
    (Origin: mutants of the out-bytes accounting in ``_rows.iterate`` survived)."""
    feed, counters = RowFeed(2), Counters()
    cursor = RowCursor([0, 0], [0, 0])
    units = _Units(
        (_unit(6, 600, [3, 3]), RowPayload(list(range(6)), None, None)),
        (_unit(4, 2000, [2, 2]), RowPayload(list(range(10, 14)), None, None)),
    )
    rows = iterate(units, feed, cursor, [0, 1], counters)  # type: ignore[arg-type]
    assert next(rows) == 0
    assert (feed.ready_bytes, feed.held_bytes()) == (0.0, 600)  # all six rows are in the first chunk
    assert [next(rows) for _ in range(5)] == [3, 1, 4, 2, 5]
    assert feed.held_bytes() == 600  # the last row of the chunk is with the consumer: not yet released
    assert next(rows) == 10
    assert feed.held_bytes() == 2000  # the first chunk's 600 bytes were released when it ended
    assert list(rows) == [12, 11, 13]
    assert feed.held_bytes() == 0


def test_value_bytes_measures_two_levels_of_lists_and_sampled_bytes_the_middle_value() -> None:
    """A list inside a list is the second level (measured); ``sampled_bytes`` samples the first,
    middle (``len // 2``) and last values (Origin: mutants of both survived)."""
    assert value_bytes([[b"abc"], b"de"]) == 5
    assert value_bytes({"a": [b"abcd"]}) == 4
    assert sampled_bytes([b"a", b"bb", b"ccc", b"dddd", b"eeeee"]) == 3.0  # (1 + 3 + 5) / 3


def test_a_row_weighs_its_units_bytes_per_row_and_nothing_when_both_measures_are_zero() -> None:
    """Origin: mutants of the per-row weight in ``RowFeed.distribute`` survived."""
    feed, counters = RowFeed(1), Counters()
    feed.distribute(_unit(1, 500, [1]), RowPayload([7], None, None), counters)
    assert feed.held_bytes() == 500  # one row of a 500-byte unit: all 500 bytes
    empty = RowFeed(1)
    empty.distribute(_unit(3, 0, [3]), RowPayload([1, 2, 3], None, None), counters)
    assert empty.held_bytes() == 0  # no Arrow bytes, ints measure 0: nothing is counted
