"""Row mode's dicts (``_rows.pylist``) are ``RecordBatch.to_pylist``'s: keys, key order, values, types.

Row mode builds its rows column by column (a fixed-size binary column is sliced from its buffer),
so every column type a table can hold is compared with Arrow's own ``to_pylist`` here, on whole
batches and on slices at odd offsets (a unit's rows are a slice of its read batch), with and
without nulls, for one, two and more columns, and with duplicate names (the fallback). Values are
compared with their types, so ``b"..."`` against ``bytearray`` or ``1`` against ``True`` fails.
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from elastic_loader._pipeline._rows import pylist

N = 23
RNG = np.random.default_rng(7)


def _fsb(width: int, nulls: bool) -> pa.Array:
    values = [bytes(RNG.integers(0, 256, width, dtype=np.uint8)) for _ in range(N)]
    values[3] = b"\x00" * width  # trailing zero bytes are data, not padding
    values[5] = b"\x01" + b"\x00" * (width - 1)
    return pa.array([None if nulls and i % 4 == 1 else v for i, v in enumerate(values)], pa.binary(width))


COLUMNS: dict[str, pa.Array] = {
    "int64": pa.array(np.arange(N, dtype=np.int64) - 5),
    "int8_nulls": pa.array([None if i % 3 == 0 else i for i in range(N)], pa.int8()),
    "uint64": pa.array(np.arange(N, dtype=np.uint64) + np.uint64(2**63)),
    "float32": pa.array(RNG.random(N, dtype=np.float32)),
    "float64_nan": pa.array([float("nan") if i == 2 else i / 3 for i in range(N)]),
    "bool": pa.array([i % 2 == 0 for i in range(N)]),
    "string": pa.array([f"s{i}" * (i % 3) for i in range(N)]),
    "large_string_nulls": pa.array([None if i % 5 == 0 else "é" * i for i in range(N)], pa.large_string()),
    "binary": pa.array([bytes([i]) * i for i in range(N)]),
    "fsb16": _fsb(16, False),
    "fsb64": _fsb(64, False),
    "fsb8_nulls": _fsb(8, True),
    "fsb1": _fsb(1, False),
    "fsb0": pa.array([b""] * N, pa.binary(0)),  # zero-width values: empty bytes, no buffer to slice
    "list_int": pa.array([list(range(i % 4)) for i in range(N)]),
    "fixed_list_float": pa.array([[float(i), 0.5] for i in range(N)], pa.list_(pa.float32(), 2)),
    "struct": pa.array([{"a": i, "b": str(i)} for i in range(N)]),
    "timestamp": pa.array([datetime.datetime(2026, 1, 1) + datetime.timedelta(seconds=i) for i in range(N)]),
    "date": pa.array([datetime.date(2026, 1, 1 + i % 28) for i in range(N)]),
    "decimal": pa.array([decimal.Decimal(i) / 4 for i in range(N)], pa.decimal128(10, 2)),
    "dictionary": pa.array([f"k{i % 3}" for i in range(N)]).dictionary_encode(),
    "null": pa.nulls(N),
}


def typed(rows: list[dict[str, Any]]) -> list[list[tuple[str, type, str]]]:
    """Each row as (key, value type, repr of the value) in key order: NaN compares by its repr."""
    return [[(k, type(v), repr(v)) for k, v in row.items()] for row in rows]


def check(batch: pa.RecordBatch) -> None:
    got, expected = pylist(batch), batch.to_pylist()
    assert typed(got) == typed(expected)


@pytest.mark.parametrize("name", sorted(COLUMNS))
@pytest.mark.parametrize(("start", "stop"), [(0, N), (3, 17), (7, 8), (5, 5)])
def test_each_column_type_alone_and_sliced(name: str, start: int, stop: int) -> None:
    batch = pa.record_batch({name: COLUMNS[name]}).slice(start, stop - start)
    check(batch)


@pytest.mark.parametrize("width", [1, 2, 3, len(COLUMNS)])
@pytest.mark.parametrize(("start", "stop"), [(0, N), (1, 22), (9, 10)])
def test_several_columns_keep_their_order(width: int, start: int, stop: int) -> None:
    names = sorted(COLUMNS, key=lambda n: (len(n), n), reverse=True)[:width]  # not alphabetical
    check(pa.record_batch({n: COLUMNS[n] for n in names}).slice(start, stop - start))


def test_fixed_size_binary_rows_are_their_bytes() -> None:
    """From first principles, not from Arrow: row ``i`` holds the ``i``-th 64 bytes of the buffer."""
    raw = bytes(RNG.integers(0, 256, 64 * N, dtype=np.uint8))
    column = pa.FixedSizeBinaryArray.from_buffers(pa.binary(64), N, [None, pa.py_buffer(raw)])
    rows = pylist(pa.record_batch({"id": pa.array(range(N)), "payload": column}).slice(2, 9))
    assert rows == [{"id": i, "payload": raw[64 * i : 64 * i + 64]} for i in range(2, 11)]
    assert all(type(r["payload"]) is bytes for r in rows)


def test_duplicate_names_and_no_columns_are_arrows() -> None:
    dup = pa.RecordBatch.from_arrays([COLUMNS["int64"], COLUMNS["fsb16"]], names=["x", "x"])
    check(dup)
    empty = pa.RecordBatch.from_pydict({}).slice(0, 0)
    assert pylist(empty) == empty.to_pylist()
    no_columns = pa.RecordBatch.from_struct_array(pa.array([{}] * 3, pa.struct([])))  # rows, no columns
    assert pylist(no_columns) == no_columns.to_pylist() == [{}, {}, {}]
