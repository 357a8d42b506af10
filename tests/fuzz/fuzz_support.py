"""Shared pieces of the fuzz suite: the table, the budget, hostile values (see test_fuzz_*.py)."""

from __future__ import annotations

import math
import os
from typing import Any

import lancedb
import pyarrow as pa
from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
"""Examples per fuzz test: small in CI (``make test``), large with ``make fuzz``."""

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=EXAMPLES <= 50,  # the CI run is reproducible; a deep run explores
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)

ROWS = 96
HOSTILE: tuple[object, ...] = (
    None,
    -1,
    0,
    1,
    3,
    2**31,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    1.5,
    math.nan,
    math.inf,
    "",
    "0",
    "x",
    True,
    False,
    [],
    [0],
    {},
    {"0": 1},
    b"1",
    object(),
)


def build_table(directory: str) -> Any:
    """``ROWS`` rows: ``id`` and ``tokens`` (1 to 6 tokens from 10 on), in three fragments."""
    db = lancedb.connect(directory)

    def chunk(lo: int, hi: int) -> pa.Table:
        return pa.table(
            {
                "id": pa.array(range(lo, hi), pa.int64()),
                "tokens": pa.array([[10 + 7 * i + j for j in range(1 + i % 6)] for i in range(lo, hi)]),
            }
        )

    table = db.create_table("fuzz", chunk(0, 40), mode="overwrite")
    table.add(chunk(40, 70))
    table.add(chunk(70, ROWS))
    return table
