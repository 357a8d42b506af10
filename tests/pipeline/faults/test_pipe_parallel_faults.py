"""Transform errors while slices are transformed in parallel and finish out of order.

Origin: issue 13, item 7 ("paths only ... transform parallelism ... reach"): every
``on_transform_error`` test runs with the default parallelism on reads that are one slice, or
with ``transform_parallelism=1``; the timing tests shake the order of slices but never fail one.
Here units hold several slices of ``read_batch_size=3`` rows, four threads transform them with
random sleeps (a later slice often finishes, or fails, first), and row isolation re-runs failing
slices row by row while other slices of the unit are still running. Rows, the raise position,
the states and the skip count must be the executable spec's (``iterate_rows`` over LanceDB's
permutation read directly), and a resume from mid-epoch must continue it.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

from elastic_loader import StreamingDataset
from elastic_loader.spec import Faults, iterate_rows
from elastic_loader.spec.rows import Raised, initial_row_state


class Dropped(ValueError):
    """Raised for rows that a skip policy drops."""


class Shaky:
    """Row-wise transform that sleeps a random time per call; raises :class:`Dropped` for a batch
    holding a ``dropped`` id and ``KeyError`` for one holding a ``fatal`` id."""

    def __init__(self, dropped: frozenset[int], fatal: frozenset[int], seed: int) -> None:
        self.dropped, self.fatal = dropped, fatal
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.calls = 0

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        with self.lock:
            delay = self.rng.random() * 0.003
            self.calls += 1
        time.sleep(delay)
        values = batch.column("id").to_pylist()
        if self.fatal.intersection(values):
            raise KeyError(sorted(self.fatal.intersection(values))[0])
        if self.dropped.intersection(values):
            raise Dropped(values)
        return values


def policy(exc: Exception) -> bool:
    return isinstance(exc, Dropped)


def make(table: Any, transform: Shaky, mode: Any) -> StreamingDataset:
    return StreamingDataset(
        table,
        num_splits=4,
        shuffle_seed=2,
        read_batch_size=3,
        io_queue_depth=3,
        transform_parallelism=4,
        transform=transform,
        on_transform_error=mode,
    )


def spread(splits: list[list[int]], every: int, offset: int) -> frozenset[int]:
    return frozenset(split[p] for split in splits for p in range(offset, len(split), every))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_skips_with_parallel_slices_follow_the_spec(multi_table: Any, perm_of: Any, seed: int) -> None:
    splits = perm_of(multi_table, num_splits=4, shuffle_seed=2)
    dropped = spread(splits, 7, seed) | {splits[2][p] for p in range(10, 16)}  # a run of 6: two slices
    model = iterate_rows(
        tuple(map(tuple, splits)), Faults(skipped=dropped), [0, 1, 2, 3], initial_row_state(4)
    )
    ds = make(multi_table, Shaky(dropped, frozenset(), seed), "skip")
    iterator = iter(ds)
    cut = 41 + seed
    head = list(itertools.islice(iterator, cut))
    state = ds.state_dict()
    assert state["samples_consumed_per_split"] == list(model.states[cut - 1].samples)
    assert state["positions_consumed_per_split"] == list(model.states[cut - 1].positions)
    rest = list(iterator)
    assert head + rest == [row.row_id for row in model.rows]
    assert ds.rows_skipped == len(dropped)  # every row was read and transformed once
    resumed = make(multi_table, Shaky(dropped, frozenset(), seed + 10), "skip")
    resumed.load_state_dict(state)
    assert list(resumed) == rest


@pytest.mark.parametrize(("split", "position"), [(0, 4), (3, 22), (1, 47)])
def test_a_raise_among_parallel_skips_surfaces_at_its_turn(
    multi_table: Any, perm_of: Any, split: int, position: int
) -> None:
    splits = perm_of(multi_table, num_splits=4, shuffle_seed=2)
    fatal = frozenset({splits[split][position]})
    dropped = spread(splits, 5, 1) - fatal
    model = iterate_rows(
        tuple(map(tuple, splits)), Faults(skipped=dropped, raising=fatal), [0, 1, 2, 3], initial_row_state(4)
    )
    assert isinstance(model.end, Raised)
    ds = make(multi_table, Shaky(dropped, fatal, position), policy)
    got: list[int] = []
    with pytest.raises(KeyError, match=str(model.end.row_id)):
        for row in ds:
            got.append(row)
    assert got == [row.row_id for row in model.rows]
    state = ds.state_dict()
    expected = model.states[-1] if model.rows else model.start
    assert state["samples_consumed_per_split"] == list(expected.samples)
    assert state["positions_consumed_per_split"] == list(expected.positions)
