"""Packed batches (``StreamingDataLoader(packed, batch_size=B, batch_format="torch" | "numpy")``).

The reference is the same loader with the default collate, whose batches are ``torch.stack`` of
``B`` consecutive blocks of one iterator (the blocks themselves are pinned against the spec in
test_pipe_packing.py): a packed batch holds exactly those values, and the checkpoint after ``k``
packed batches is the default collate's checkpoint after ``k`` batches, so either mode resumes
the other. Worker processes cost seconds, so one worker run checks several things.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from loader_runs import loader_runs, resumed_pair

from elastic_loader import LocalShuffle, StreamingDataLoader, StreamingDataset

EOS, PAD, LENGTH = -1, -2, 5


def packed(table: Any, **kwargs: Any) -> StreamingDataset:
    options: dict[str, Any] = {"num_splits": 4, "blocks_per_epoch": 48, **kwargs}
    return StreamingDataset(
        table, columns=["tokens"], pack_sequences=LENGTH, eos_id=EOS, pad_id=PAD, **options
    )


def as_lists(batch: Any) -> tuple[list[list[int]], list[list[int]]]:
    """A batch's ``input_ids`` and ``doc_ids`` as lists (tensors or arrays of shape (B, L))."""
    assert batch["input_ids"].shape == batch["doc_ids"].shape
    assert batch["input_ids"].dtype in (torch.int64, np.int64)
    return batch["input_ids"].tolist(), batch["doc_ids"].tolist()


def run(
    loader: StreamingDataLoader, stop: int | None = None
) -> tuple[list[tuple[list[list[int]], list[list[int]]]], list[dict[str, Any]]]:
    """Batches and the loader's checkpoint after each, for at most ``stop`` batches."""
    got, states = [], []
    for batch in loader:
        got.append(as_lists(batch))
        states.append(loader.state_dict())
        if stop is not None and len(got) == stop:
            break
    return got, states


TOPOLOGIES = [
    # (dataset keywords, batch size)
    ({"num_splits": 1, "blocks_per_epoch": 30}, 7),
    ({}, 1),
    ({}, 6),
    ({"num_splits": 3, "blocks_per_epoch": 135}, 64),
    ({"num_splits": 8, "world_size": 4, "rank": 1, "blocks_per_epoch": 40}, 3),
    ({"num_splits": 6, "world_size": 2, "rank": 1, "filter": "id % 3 != 0", "blocks_per_epoch": 36}, 5),
    ({"shuffle": False}, 9),
    ({"read_batch_size": 1, "io_queue_depth": 1}, 11),
    ({"permutation": LocalShuffle(clump=4, window=7)}, 4),
    ({"blocks_per_epoch": 400}, 16),  # past the documents: every split pads
]


@pytest.mark.parametrize(("kwargs", "batch_size"), TOPOLOGIES)
@pytest.mark.parametrize("drop_last", [False, True])
def test_packed_batches_and_checkpoints_are_the_default_collates(
    multi_table: Any, kwargs: dict[str, Any], batch_size: int, drop_last: bool
) -> None:
    blocks = StreamingDataLoader(packed(multi_table, **kwargs), batch_size=batch_size, drop_last=drop_last)
    expected, expected_states = run(blocks)
    assert expected, "the topology yields batches"
    ds = packed(multi_table, **kwargs)
    batches = StreamingDataLoader(ds, batch_size=batch_size, drop_last=drop_last, batch_format="torch")
    assert len(batches) == len(blocks)
    got, states = run(batches)
    assert got == expected
    assert states == expected_states
    assert ds.statistics().rows_delivered == blocks.streaming_dataset.statistics().rows_delivered
    again, _ = run(batches)  # the epoch is finished: the next iteration is epoch 1, as with blocks
    assert again == run(blocks)[0]
    assert ds.epoch == 1


def test_numpy_batches_and_a_collate_fn(multi_table: Any) -> None:
    expected, _ = run(StreamingDataLoader(packed(multi_table), batch_size=5))
    loader = StreamingDataLoader(packed(multi_table), batch_size=5, batch_format="numpy")
    first = next(iter(loader))
    assert isinstance(first["input_ids"], np.ndarray) and first["input_ids"].shape == (5, LENGTH)
    assert run(StreamingDataLoader(packed(multi_table), batch_size=5, batch_format="numpy"))[0] == expected
    seen: list[Any] = []

    def collate(batch: Any) -> int:
        seen.append(as_lists(batch))
        return len(seen)

    collated = StreamingDataLoader(
        packed(multi_table), batch_size=5, batch_format="torch", collate_fn=collate
    )
    assert list(collated) == list(range(1, len(expected) + 1))
    assert seen == expected


@pytest.mark.parametrize("stop", [1, 3, 7])
def test_resume_between_modes(multi_table: Any, stop: int) -> None:
    """A packed-batch checkpoint resumes the default collate, and the default collate's checkpoint
    resumes packed batches."""
    kwargs: dict[str, Any] = {"shuffle_seed": 5}
    whole, _ = run(StreamingDataLoader(packed(multi_table, **kwargs), batch_size=3))
    first = StreamingDataLoader(packed(multi_table, **kwargs), batch_size=3, batch_format="torch")
    head, states = run(first, stop)
    blocks = StreamingDataLoader(packed(multi_table, **kwargs), batch_size=3)
    blocks.load_state_dict(states[-1])
    middle, block_states = run(blocks, 2)
    assert head + middle == whole[: stop + 2]
    back = StreamingDataLoader(packed(multi_table, **kwargs), batch_size=3, batch_format="numpy")
    back.load_state_dict(block_states[-1])
    rest, _ = run(back)
    assert head + middle + rest == whole


def test_arrow_is_refused(multi_table: Any) -> None:
    with pytest.raises(ValueError, match="batch_format='torch' or 'numpy'"):
        StreamingDataLoader(packed(multi_table), batch_size=2, batch_format="arrow")


def test_workers_deliver_the_default_collates_batches_and_checkpoints(multi_table: Any) -> None:
    """Two real DataLoader workers: the same batches in the same order, the same checkpoint after
    each, and a resume mid-epoch from a packed-batch checkpoint into the default collate."""
    blocks = StreamingDataLoader(packed(multi_table), batch_size=5, num_workers=2)
    expected, expected_states = run(blocks)
    batches = StreamingDataLoader(packed(multi_table), batch_size=5, num_workers=2, batch_format="torch")
    got, states = run(batches)
    assert got == expected and states == expected_states
    resumed = StreamingDataLoader(packed(multi_table), batch_size=5, num_workers=2)
    resumed.load_state_dict(states[3])
    assert run(resumed)[0] == expected[4:]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_owned_split_writes_nothing_a_trainer_can_change(multi_table: Any, num_workers: int) -> None:
    """One owned split per iterator: a batch is consecutive rows of one packed chunk (in the trainer's
    process handed out as a view of them, in a worker copied once into shared memory). A trainer
    that writes into every batch it gets changes neither the batches after it nor any checkpoint."""
    kwargs: dict[str, Any] = {"num_splits": 2 if num_workers else 1, "blocks_per_epoch": 40}
    expected, expected_states = run(
        StreamingDataLoader(packed(multi_table, **kwargs), batch_size=4, num_workers=num_workers)
    )
    loader = StreamingDataLoader(
        packed(multi_table, **kwargs), batch_size=4, num_workers=num_workers, batch_format="torch"
    )
    got, states = [], []
    for batch in loader:
        got.append(as_lists(batch))
        states.append(loader.state_dict())
        batch["input_ids"].fill_(7)
        batch["doc_ids"].fill_(7)
    assert got == expected and states == expected_states
    resumed = StreamingDataLoader(
        packed(multi_table, **kwargs), batch_size=4, num_workers=num_workers, batch_format="numpy"
    )
    resumed.load_state_dict(states[2])
    assert run(resumed)[0] == expected[3:]


@given(loader_runs(max_batch=20, max_skip=15, blocks_per_split=12))
def test_random_runs_match_the_default_collate(
    multi_table: Any, run_: tuple[dict[str, Any], int, bool, int]
) -> None:
    """Random topologies, batch sizes, ``drop_last`` and a resume after a plain iteration of
    ``skip`` blocks (any state: mid-chunk, lagging splits that catch up first): the same batches
    and checkpoints in both modes."""
    kwargs, batch_size, drop_last, skip = run_
    block_ds, batch_ds = resumed_pair(lambda: packed(multi_table, **kwargs), skip)
    blocks = StreamingDataLoader(block_ds, batch_size=batch_size, drop_last=drop_last)
    batches = StreamingDataLoader(batch_ds, batch_size=batch_size, drop_last=drop_last, batch_format="numpy")
    assert len(batches) == len(blocks)
    assert run(batches) == run(blocks)


@pytest.mark.parametrize(("batch_size", "skip"), [(4, 0), (3, 5), (7, 2), (16, 0)])
def test_one_owned_split_cuts_chunks_on_batch_boundaries(
    multi_table: Any, batch_size: int, skip: int
) -> None:
    """One owned split in the trainer's process: chunks end on batch boundaries where they can, so
    every batch lies in one chunk and is handed out as a view of it (a NumPy batch has a ``base``;
    one copied together from two chunks would not), also when the read-ahead budget allows chunks
    of only 20 cycles and after a resume mid-chunk. The batches and checkpoints are the default
    collate's."""
    kwargs: dict[str, Any] = {"num_splits": 1, "blocks_per_epoch": 60, "read_ahead_bytes": 1600}
    block_ds, batch_ds = resumed_pair(lambda: packed(multi_table, **kwargs), skip)
    expected = run(StreamingDataLoader(block_ds, batch_size=batch_size, drop_last=True))
    loader = StreamingDataLoader(batch_ds, batch_size=batch_size, drop_last=True, batch_format="numpy")
    got, states = [], []
    for batch in loader:
        assert batch["input_ids"].base is not None and batch["doc_ids"].base is not None
        got.append(as_lists(batch))
        states.append(loader.state_dict())
    assert (got, states) == expected and len(got) >= 3
