"""Paths only large tables reach (issue 13, "untested paths"): a sorted packing read whose unit
holds more than 1,024 documents maps every one back to its place, epoch 0 and 1, against the
executable spec (``iterate_packed`` over LanceDB's permutation)."""

from __future__ import annotations

from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from elastic_loader import StreamingDataset
from elastic_loader._pipeline._lance import Reader
from elastic_loader.spec import Faults, PackingConfig, iterate_packed
from elastic_loader.spec.packing import PackedState

EOS, PAD, LENGTH, DOCS = -1, -2, 16, 5000


def _document(i: int) -> list[int]:
    return [1000 * i + j for j in range(i % 5)]


@pytest.fixture(scope="module")
def many_docs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = lancedb.connect(str(tmp_path_factory.mktemp("many_docs")))
    data = pa.table(
        {
            "id": pa.array(range(DOCS), pa.int64()),
            "tokens": pa.array([_document(i) for i in range(DOCS)], pa.list_(pa.int64())),
        }
    )
    return db.create_table("many_docs", data)


@pytest.mark.parametrize(("num_splits", "epoch"), [(1, 0), (2, 1)])
def test_units_of_thousands_of_documents_follow_the_spec(
    many_docs: Any, perm_of: Any, num_splits: int, epoch: int
) -> None:
    budget = num_splits * 600  # about 6,000 of the ~10,000 tokens (EOS included): units > 1,024 docs
    perm = tuple(tuple(s) for s in perm_of(many_docs, num_splits=num_splits, epoch=epoch))
    corpus = {i: tuple(_document(i)) for i in range(DOCS)}
    start = PackedState((0,) * num_splits, (0,) * num_splits, {})
    config = PackingConfig(LENGTH, EOS, PAD, budget)
    model = iterate_packed(perm, corpus, Faults(), tuple(range(num_splits)), config, start)
    ds = StreamingDataset(
        many_docs,
        num_splits=num_splits,
        epoch=epoch,
        columns=["tokens"],
        pack_sequences=LENGTH,
        eos_id=EOS,
        pad_id=PAD,
        blocks_per_epoch=budget,
        read_batch_size=2048,
    )
    calls: list[int] = []
    inner = ds._handle.reader()

    class Counting(Reader):
        def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:
            calls.append(len(row_ids))
            return inner.take(row_ids, columns)

    ds._handle.use(Counting())
    got = [tuple(block["input_ids"].tolist()) for block in ds]
    assert len(got) == len(model.blocks) == budget
    assert got == [b.input_ids for b in model.blocks]
    assert max(calls) > 1024  # one sorted read of more than 1,024 documents


@pytest.mark.parametrize("cycles", [1, 1.5, 3.25])
def test_a_budget_of_a_few_cycles_cuts_small_chunks_with_the_same_blocks(
    many_docs: Any, cycles: float
) -> None:
    """``read_ahead_bytes`` that holds only one to three cycles of blocks (2 splits x 16 tokens x 16
    bytes a token) makes every chunk one to three cycles: the blocks are the default's, in order
    (Origin: a mutant computing the chunk cap as a float survived; no packing test used a budget
    below 1,024 cycles)."""
    kwargs: dict[str, Any] = {
        "num_splits": 2,
        "columns": ["tokens"],
        "pack_sequences": LENGTH,
        "eos_id": EOS,
        "pad_id": PAD,
        "blocks_per_epoch": 400,
    }
    expected = [b["input_ids"].tolist() for b in StreamingDataset(many_docs, **kwargs)]
    small = StreamingDataset(many_docs, **kwargs, read_ahead_bytes=int(cycles * 2 * LENGTH * 16))
    assert [b["input_ids"].tolist() for b in small] == expected
