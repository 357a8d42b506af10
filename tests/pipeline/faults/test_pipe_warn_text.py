"""The text of the one warning ``on_transform_error="warn"`` logs per batch that dropped rows.

Origin: surviving mutants of ``_faults.isolate`` (``x_isolate__mutmut_43``, ``50``, ``51``:
the rows' description changed or ``None``) showed that no test read the whole message, and it
said "rows whose transform failed whose transform failed" (and "documents whose tokens were
invalid whose transform failed" in packing): the description was named twice since the drop-in
"Skipped" phrase. The message is ``Skipped <dropped> of <batch rows> <what> (first error: <repr>)``.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pyarrow as pa
import pytest

from elastic_loader import StreamingDataset


class FailsOn:
    """Row-wise transform: the ``id`` of every row; ``ValueError(id)`` for a batch holding a bad id."""

    def __init__(self, bad: set[int]) -> None:
        self.bad = bad

    def __call__(self, batch: pa.RecordBatch) -> list[int]:
        ids = batch.column("id").to_pylist()
        hit = sorted(self.bad.intersection(ids))
        if hit:
            raise ValueError(hit[0])
        return ids


ROW_WARNING = re.compile(
    r"Skipped (\d+) of (\d+) rows whose transform failed \(first error: ValueError\((\d+)\)\)"
)
DOC_WARNING = re.compile(
    r"Skipped (\d+) of (\d+) documents whose tokens were invalid \(first error: ValueError\('.*'\)\)"
)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "elastic_loader" and r.levelno == logging.WARNING
    ]


def test_the_row_warning_names_the_rows_once(multi_table: Any, caplog: pytest.LogCaptureFixture) -> None:
    ds = StreamingDataset(
        multi_table,
        num_splits=1,
        shuffle=False,
        read_batch_size=10,
        transform=FailsOn({3, 7, 15}),
        on_transform_error="warn",
    )
    with caplog.at_level(logging.WARNING, logger="elastic_loader"):
        rows = list(ds)
    assert len(rows) == 197
    messages = warnings_of(caplog)
    found = [ROW_WARNING.fullmatch(m) for m in messages]
    assert all(found), messages  # how units cut the rows into batches is not the question here
    assert sum(int(m[1]) for m in found if m) == 3
    firsts = {int(m[3]) for m in found if m}  # each batch names its own first error
    assert 3 in firsts and firsts <= {3, 7, 15}


def test_the_packing_warning_names_the_documents_once(
    null_table: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ds = StreamingDataset(
        null_table,
        num_splits=1,
        shuffle=False,
        columns=["tokens"],
        pack_sequences=4,
        eos_id=-1,
        pad_id=-2,
        blocks_per_epoch=10,
        read_batch_size=256,
        on_transform_error="warn",
    )
    with caplog.at_level(logging.WARNING, logger="elastic_loader"):
        list(ds)
    messages = warnings_of(caplog)
    found = [DOC_WARNING.fullmatch(m) for m in messages]
    assert all(found), messages
    assert sum(int(m[1]) for m in found if m) == 4  # 3 null lists and a list holding a null
