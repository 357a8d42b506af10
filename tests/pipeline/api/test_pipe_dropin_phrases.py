"""Drop-in messages (D39): our errors and logs carry the phrases users of lancedb.streaming match on.

Each test triggers one message through the public API and looks for the reference's phrase in it
(spec/DEVIATIONS.md D39 lists them); the rest of the message is ours.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from elastic_loader import StreamingDataset

PACK = {"pack_sequences": 8, "eos_id": 1, "pad_id": 0, "columns": ["tokens"]}


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [
        ({"read_batch_size": 0}, "must be greater than 0"),
        ({"io_queue_depth": 0}, "must be greater than 0"),
        ({**PACK, "pack_sequences": 0, "blocks_per_epoch": 8}, "must be greater than 0"),
        ({**PACK, "blocks_per_epoch": 0}, "must be greater than 0"),
        ({**PACK, "blocks_per_epoch": "many"}, "positive integer or 'auto'"),
    ],
)
def test_range_errors_say_greater_than_0(multi_table: Any, kwargs: dict[str, Any], phrase: str) -> None:
    with pytest.raises((ValueError, TypeError), match=phrase):
        StreamingDataset(multi_table, num_splits=4, **kwargs)


def test_a_transform_with_the_wrong_row_count_names_one_output_row_per_input_row(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, transform=lambda batch: batch.to_pylist()[:-1])
    with pytest.raises(ValueError, match="one output row per input row"):
        next(iter(ds))


def test_the_skip_log_starts_with_Skipped(multi_table: Any, caplog: pytest.LogCaptureFixture) -> None:
    def fail_on_even(batch: Any) -> list[Any]:
        rows = batch.to_pylist()
        if any(r["id"] % 2 == 0 for r in rows):
            raise ValueError("even")
        return rows

    ds = StreamingDataset(multi_table, num_splits=4, transform=fail_on_even, on_transform_error="warn")
    with caplog.at_level(logging.WARNING, logger="elastic_loader"):
        rows = list(ds)
    assert rows and all(r["id"] % 2 for r in rows)
    assert any(r.getMessage().startswith("Skipped ") for r in caplog.records), caplog.text


def test_prefetch_batches_is_logged_as_a_warning_and_warned(
    multi_table: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="elastic_loader"), pytest.warns(DeprecationWarning):
        ds = StreamingDataset(multi_table, num_splits=4, prefetch_batches=2)
    assert ds.num_splits == 4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    warned = [m for m in warnings if "prefetch_batches" in m]
    assert warned and "deprecated" in warned[0]
