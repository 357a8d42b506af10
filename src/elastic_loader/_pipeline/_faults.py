"""``on_transform_error``: which failing rows are dropped, row isolation, and the one warning.

Rules:
* ``"raise"`` drops nothing; ``"skip"`` and ``"warn"`` drop every failing row;
  a callable ``handler(exception) -> bool`` is asked once per failing row and
  drops it when the answer is true.
* A row-mode batch whose transform raised is re-run one row at a time
  (:func:`isolate`), so every row gets its own outcome: a value, dropped, or an
  error the consumer re-raises when that row's turn comes. Errors wrapped in
  ``StageError`` are never forgiven: they pass through as they are.
* Dropped rows (packing: documents) are counted in ``rows_skipped``, and
  ``"warn"`` logs one warning per transformed batch that dropped any, naming
  the first error. No other module logs dropped rows.

The mode itself is validated at construction (``_validate``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ._fetch import StageError
from ._stats import Counters

logger = logging.getLogger("elastic_loader")

OnError = str | Callable[[Exception], object]
"""An ``on_transform_error`` value: ``"raise"``, ``"skip"``, ``"warn"`` or a callable."""


def forgiving(on_error: OnError) -> Callable[[Exception], bool]:
    """Whether ``on_transform_error`` drops a row whose transform raised ``exc``."""

    def forgive(exc: Exception) -> bool:
        if on_error == "raise":
            return False
        if callable(on_error):
            return bool(on_error(exc))
        return True

    return forgive


def report_dropped(
    on_error: OnError, dropped: list[Exception], total: int, what: str, counters: Counters
) -> None:
    """Count the rows of one batch that ``on_error`` dropped and, in ``"warn"`` mode, log them once.

    ``total`` is the batch's row count; ``what`` names the rows in the message
    (for example ``"rows whose transform failed"``).
    """
    if not dropped:
        return
    counters.add(rows_skipped=len(dropped))
    if on_error == "warn":
        logger.warning(
            "Skipped %d of %d %s (first error: %r)",
            len(dropped),
            total,
            what,
            dropped[0],
        )


def isolate(
    part: pa.RecordBatch,
    start: int,
    batch_error: Exception,
    values: list[Any],
    skipped: set[int],
    errors: dict[int, BaseException],
    rows_of: Callable[[pa.RecordBatch, int], list[Any]],
    forgive: Callable[[Exception], bool],
    on_error: OnError,
    counters: Counters,
) -> None:
    """Re-run a failed batch one row at a time; record each row's outcome."""
    dropped: list[Exception] = []
    for j in range(part.num_rows):
        try:
            values.append(rows_of(part.slice(j, 1), 1)[0])
            continue
        except StageError:
            raise
        except Exception as exc:
            row_error = exc
        values.append(None)
        if on_error == "raise" or not forgive(row_error):
            errors[start + j] = row_error
        else:
            skipped.add(start + j)
            dropped.append(row_error)
    if not dropped and not any(start <= k < start + part.num_rows for k in errors) and on_error == "raise":
        # The batch failed but every row passes alone: the failure is not row-wise.
        errors[start] = batch_error
    report_dropped(on_error, dropped, part.num_rows, "rows whose transform failed", counters)
