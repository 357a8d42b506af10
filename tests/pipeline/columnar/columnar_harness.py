"""What the columnar tests share: the ids of a batch in any format, and a loader's batches with the
checkpoint after each."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from elastic_loader import StreamingDataLoader


def ids_of(batch: Any) -> list[int]:
    """The ``id`` values of a batch in any format (a row-mode batch is a list of rows)."""
    if isinstance(batch, list):
        return [row["id"] for row in batch]
    if isinstance(batch, pa.RecordBatch):
        return batch.column("id").to_pylist()
    return [int(v) for v in batch["id"]]


def run(loader: StreamingDataLoader, stop: int | None = None) -> tuple[list[list[int]], list[dict[str, Any]]]:
    """Batches (ids) and the loader's checkpoint after each, for at most ``stop`` batches."""
    got, states = [], []
    for batch in loader:
        got.append(ids_of(batch))
        states.append(loader.state_dict())
        if stop is not None and len(got) == stop:
            break
    return got, states
