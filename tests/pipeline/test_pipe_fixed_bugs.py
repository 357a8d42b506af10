"""Regression tests of three pipeline bugs the behavioural suite found, now fixed.

prefetch_queue_depth left out the rows of the chunk being yielded; packing counted every
document of a chunk when its first block went out; len() of a StreamingDataLoader raised.
"""

from __future__ import annotations

import itertools
from typing import Any

from lancedb.streaming import StreamingDataset as Reference

from elastic_loader import StreamingDataset

# ---- prefetch_queue_depth counts the rows waiting to be yielded (belongs in test_pipe_stats.py)


def test_prefetch_queue_depth_counts_rows_waiting_to_be_yielded(multi_table: Any) -> None:
    """All 200 rows fit the first read: after one row, 199 transformed rows wait to be yielded."""
    for cls in (StreamingDataset, Reference):
        ds = cls(multi_table, num_splits=1, read_batch_size=1000)
        it = iter(ds)
        next(it)
        assert ds.prefetch_queue_depth == 199, cls
        assert ds.raw_queue_depth == 0 and ds.unscanned_rows == 0
        it.close()


# ---- packed consumed_rows counts the documents pulled so far (belongs in test_pipe_stats.py)


def test_packed_consumed_rows_counts_pulled_documents(multi_table: Any) -> None:
    kwargs = {
        "columns": ["tokens"],
        "pack_sequences": 6,
        "eos_id": 1,
        "pad_id": 0,
        "num_splits": 2,
        "blocks_per_epoch": 200,
    }
    ours, ref = StreamingDataset(multi_table, **kwargs), Reference(multi_table, **kwargs)
    our_it, ref_it = iter(ours), iter(ref)
    for step in range(1, 8):
        list(itertools.islice(our_it, 2))
        list(itertools.islice(ref_it, 2))
        pulled = sum(ours.state_dict()["samples_consumed_per_split"])
        assert ours.consumed_rows == ref.consumed_rows == pulled, step
        assert ours.statistics().rows_delivered == pulled, step
    our_it.close()
    assert ours.statistics().rows_delivered == pulled


# ---- len() of a StreamingDataLoader (belongs in test_pipe_loader.py)


def test_len_of_a_streaming_dataloader(multi_table: Any) -> None:
    from elastic_loader import StreamingDataLoader

    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    loader = StreamingDataLoader(ds, batch_size=3)
    assert len(loader) == -(-len(ds) // 3) == 67
    it = iter(loader)
    assert len(it) == 67
    it.close()
