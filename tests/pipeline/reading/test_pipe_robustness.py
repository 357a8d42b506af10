"""Robustness: thread timing does not change what is yielded; reads are pinned to one table version."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest
from lancedb.streaming import StreamingDataset as Reference

from elastic_loader import StreamingDataset


def ids_of(batch: pa.RecordBatch) -> list[int]:
    return batch.column("id").to_pylist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_stage_delays_do_not_change_rows_or_states(multi_table: Any, seed: int) -> None:
    """Reads and transforms finish out of order (random delays per stage); the output does not change."""
    kwargs: dict[str, Any] = {"num_splits": 4, "read_batch_size": 3, "transform": ids_of}
    expected_ds = Reference(multi_table, **kwargs)
    expected = list(expected_ds)
    rng = random.Random(seed)
    ds = StreamingDataset(multi_table, io_queue_depth=4, transform_parallelism=4, **kwargs)
    ds._timing_hook = lambda stage, unit: time.sleep(rng.random() * 0.002)
    it = iter(ds)
    got = [next(it) for _ in range(37)]
    state = ds.state_dict()
    got += list(it)
    assert got == expected
    resumed = StreamingDataset(multi_table, **kwargs)
    resumed.load_state_dict(state)
    assert list(resumed) == expected[37:]


def test_packed_random_stage_delays(multi_table: Any) -> None:
    kwargs = {
        "num_splits": 4,
        "columns": ["tokens"],
        "pack_sequences": 3,
        "eos_id": 1,
        "pad_id": 0,
        "blocks_per_epoch": 160,
        "read_batch_size": 2,
    }
    expected = [b["input_ids"].tolist() for b in Reference(multi_table, **kwargs)]
    rng = random.Random(5)
    ds = StreamingDataset(multi_table, io_queue_depth=3, transform_parallelism=3, **kwargs)
    ds._timing_hook = lambda stage, unit: time.sleep(rng.random() * 0.002)
    assert [b["input_ids"].tolist() for b in ds] == expected


def test_reads_are_pinned_to_the_version_the_permutation_was_built_from(tmp_path: Path) -> None:
    table = lancedb.connect(str(tmp_path)).create_table(
        "pin", pa.table({"id": pa.array(range(60), pa.int64())})
    )
    table.add(pa.table({"id": pa.array(range(60, 90), pa.int64())}))
    expected = [row["id"] for row in Reference(table, num_splits=3)]
    ds = StreamingDataset(table, num_splits=3)
    it = iter(ds)
    head = [next(it)["id"] for _ in range(10)]
    # the table changes under the running iterator and before the next one
    table.add(pa.table({"id": pa.array(range(90, 120), pa.int64())}))
    table.delete("id < 30")
    rest = [row["id"] for row in it]
    assert head + rest == expected
    fresh = StreamingDataset(table, num_splits=3)
    assert sorted(row["id"] for row in fresh) == list(range(30, 120))
