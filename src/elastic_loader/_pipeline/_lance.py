"""The one module that talks to LanceDB.

Rules: everything LanceDB-specific lives here: building the permutation with
LanceDB's permutation builder (same seed rule as lancedb.streaming), reading
rows by row id in a given order, describing a table so a worker process can
reopen it, and schema lookups. Readers are pinned to the table version the
permutation was built from. No credentials leave the process unless the user
asks for it.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa

EPOCH_PRIME = 100003
"""The permutation seed of epoch ``e`` is ``shuffle_seed + e * EPOCH_PRIME`` (lancedb.streaming's rule)."""
_PERM_MEMORY_ENV = "LANCEDB_PERM_BUILDER_MEMORY_LIMIT"
_PERM_BYTES_PER_ROW = 96  # generous per-row sort budget of the permutation builder
_SECRET_MARKERS = ("secret", "token", "password", "credential", "key", "sas")


@dataclass(frozen=True)
class SplitRows:
    """The built permutation: row ids of every split, ``rows[s, p]`` = row id at position ``p`` of
    split ``s`` (the spec calls the tuple of splits a ``Permutation``)."""

    rows: np.ndarray
    fingerprint: str | None
    base_version: int | None

    @property
    def num_splits(self) -> int:
        return int(self.rows.shape[0])

    @property
    def split_len(self) -> int:
        return int(self.rows.shape[1])


def column_kind(table: Any, name: str) -> str | None:
    """``None`` when the table has no such column, else ``int_list``, ``other_list`` or ``scalar``."""
    schema: pa.Schema = table.schema
    index = schema.get_field_index(name)
    if index < 0:
        return None
    kind = schema.field(index).type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        return "scalar"
    return "int_list" if pa.types.is_integer(kind.value_type) else "other_list"


def _fixed_width(kind: pa.DataType) -> int | None:
    """Bytes per value of a fixed-width Arrow type (``None``: variable width)."""
    if pa.types.is_fixed_size_list(kind):
        inner = _fixed_width(kind.value_type)
        return None if inner is None else inner * int(kind.list_size)
    if pa.types.is_boolean(kind):
        return 1
    try:
        width = kind.bit_width
    except ValueError:  # variable width (binary, strings, lists, structs, ...)
        return None
    return max(1, int(width) // 8)


def fixed_row_bytes(table: Any, columns: list[str] | None) -> int | None:
    """Arrow bytes of one row of ``columns`` (``None``: all) when every one has a fixed width, else
    ``None`` (the pipeline then probes the row size before sizing its units)."""
    schema: pa.Schema = table.schema
    names = schema.names if columns is None else columns
    total = 0
    for name in names:
        index = schema.get_field_index(name)
        width = None if index < 0 else _fixed_width(schema.field(index).type)
        if width is None:
            return None
        total += width
    return max(1, total)


def count_rows(table: Any, filter: str | None) -> int:
    """Rows of ``table`` passing ``filter``."""
    return int(table.count_rows(filter) if filter is not None else table.count_rows())


@contextmanager
def _builder_memory(rows: int) -> Any:
    """Raise the permutation builder's sort-memory cap for large tables, unless the user set it."""
    if _PERM_MEMORY_ENV in os.environ:
        yield
        return
    os.environ[_PERM_MEMORY_ENV] = str(max(100 * 2**20, rows * _PERM_BYTES_PER_ROW))
    try:
        yield
    finally:
        os.environ.pop(_PERM_MEMORY_ENV, None)


@dataclass(frozen=True)
class BuilderArgs:
    """What the builder's permutation of a table depends on: its arguments, and the permutation
    cache's key (``_permcache.cache_key``)."""

    num_splits: int
    shuffle: bool
    shuffle_seed: int
    epoch: int
    clump_size: int | None
    filter: str | None

    @property
    def seed(self) -> int:
        """The builder's seed of the epoch, ``shuffle_seed + epoch * EPOCH_PRIME``."""
        return self.shuffle_seed + self.epoch * EPOCH_PRIME


def build_permutation(
    table: Any, args: BuilderArgs, *, split_strategy: Callable[[Any], Any] | None, rows_hint: int
) -> SplitRows:
    """Build the split permutation exactly as ``lancedb.streaming`` does and group it by split.

    Raises:
        TypeError: ``split_strategy`` returned something other than a builder.
        ValueError: ``split_strategy`` returned None, or its result does not have
            exactly the split ids ``0..num_splits-1`` with equal sizes.
    """
    from lancedb.permutation import permutation_builder

    num_splits = args.num_splits
    builder = permutation_builder(table)
    if args.filter is not None:
        builder = builder.filter(args.filter)
    with _builder_memory(rows_hint):
        if split_strategy is not None:
            configured = split_strategy(builder)
            if configured is None:
                raise ValueError("split_strategy must return the configured permutation builder, got None")
            if not callable(getattr(configured, "execute", None)):
                raise TypeError(
                    "split_strategy must return the configured permutation builder, got "
                    f"{type(configured).__name__}"
                )
            perm_table = configured.execute()
        elif args.shuffle:
            split = builder.split_random(fixed=num_splits, seed=args.seed, clump_size=args.clump_size)
            perm_table = split.execute()
        else:
            perm_table = builder.split_sequential(fixed=num_splits).execute()
    arrow = perm_table.to_arrow()
    row_ids = arrow.column("row_id").to_numpy().astype(np.uint64, copy=False)
    split_ids = arrow.column("split_id").to_numpy().astype(np.int64, copy=False)
    metadata = arrow.schema.metadata or {}
    raw_version = metadata.get(b"base_version")
    base_version = int(raw_version) if raw_version is not None else None
    rows = _group(row_ids, split_ids, num_splits, strategy=split_strategy is not None)
    fingerprint = _fingerprint(row_ids, split_ids) if split_strategy is not None else None
    return SplitRows(rows, fingerprint, base_version)


def _group(row_ids: np.ndarray, split_ids: np.ndarray, num_splits: int, *, strategy: bool) -> np.ndarray:
    counts = np.bincount(split_ids[(split_ids >= 0) & (split_ids < num_splits)], minlength=num_splits)
    outside = int(np.count_nonzero((split_ids < 0) | (split_ids >= num_splits)))
    if outside or np.any(counts == 0):
        found = sorted(set(np.unique(split_ids).tolist()))
        raise ValueError(
            f"split_strategy produced split ids {found[:20]}, but num_splits={num_splits} needs exactly "
            f"0..{num_splits - 1}; pass num_splits matching the strategy"
        )
    if np.any(counts != counts[0]):
        raise ValueError(
            f"{'split_strategy produced' if strategy else 'the permutation has'} splits of unequal sizes "
            f"{sorted(set(counts.tolist()))}; every split must hold the same number of rows"
        )
    if np.all(split_ids[1:] >= split_ids[:-1]):
        ordered = row_ids
    else:
        ordered = row_ids[np.argsort(split_ids, kind="stable")]
    return np.ascontiguousarray(ordered.reshape(num_splits, int(counts[0])))


def _fingerprint(row_ids: np.ndarray, split_ids: np.ndarray) -> str:
    """SHA-256 over the row count and both columns as little-endian uint64 (the reference's hash)."""
    digest = hashlib.sha256()
    digest.update(str(len(row_ids)).encode())
    digest.update(np.ascontiguousarray(row_ids, dtype="<u8").tobytes())
    digest.update(np.ascontiguousarray(split_ids, dtype="<u8").tobytes())
    return digest.hexdigest()


# ------------------------------------------------------------------ reading


class Reader:
    """Reads rows by row id, in the order asked for; safe to share between threads.

    ``where`` names the table in error messages (its URI where it has one)."""

    where = "the table"
    row_bytes_seen: int | None = None
    """Mean Arrow bytes per row the last pipeline over this reader measured (``_fetch``)."""

    def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:  # pragma: no cover
        raise NotImplementedError


class _LanceReader(Reader):
    def __init__(self, dataset: Any) -> None:
        self._dataset = dataset
        self.where = str(getattr(dataset, "uri", "the table"))

    def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:
        return self._dataset._take_rows(pa.array(row_ids, type=pa.uint64()), columns=columns)


class _ArrowReader(Reader):
    """An in-memory table: row ids are mapped to indices with one sorted search."""

    def __init__(self, data: pa.Table, row_ids: np.ndarray) -> None:
        order = np.argsort(row_ids, kind="stable")
        self.where = "an in-memory table"
        self._sorted_ids = row_ids[order]
        self._index = order
        self._data = data

    def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:
        where = np.searchsorted(self._sorted_ids, row_ids)
        data = self._data if columns is None else self._data.select(columns)
        return data.take(pa.array(self._index[where]))


class _QueryReader(Reader):
    """Any LanceDB table with ``take_row_ids`` (for example a remote table); it returns rows
    sorted by row id, so they are put back in the order asked for."""

    def __init__(self, table: Any) -> None:
        self._table = table
        self._lock = threading.Lock()
        uri = getattr(getattr(table, "_conn", None), "uri", None)
        self.where = f"{uri}/{getattr(table, 'name', '?')}" if uri else repr(getattr(table, "name", table))

    def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:
        query = self._table.take_row_ids([int(r) for r in row_ids])
        if columns is not None:
            query = query.select(list(columns))
        got = query.with_row_id().to_arrow()
        got_ids = got.column("_rowid").to_numpy()
        order = np.argsort(got_ids, kind="stable")
        where = order[np.searchsorted(got_ids[order], row_ids)]
        return got.drop_columns(["_rowid"]).take(pa.array(where))


RANGE_MIN_RUN_ROWS = 32
RANGE_MIN_RUN_BYTES = 256 * 1024
RANGE_READAHEAD = 8
RANGE_SCANS_ENV = "ELASTIC_LOADER_RANGE_SCANS"
"""``ELASTIC_LOADER_RANGE_SCANS=0`` in the environment turns range scans off (every read is a ``take``).

Positions in runs of at least ``RANGE_MIN_RUN_ROWS`` rows and ``RANGE_MIN_RUN_BYTES`` bytes on
average are read as range scans (Lance's ``take_scan``, ``RANGE_READAHEAD`` batches ahead) instead of
``take``. Measured (benchmarks/read_ceiling.py, benchmarks/README.md "Range reads"): a range scan of
runs of 8192 rows of 72 bytes (590 KB) reads 2.3x as fast as ``take``, of 128 or 512 documents (0.7
or 2.8 MB) 1.1x and 1.5x; of 1024 such rows (74 KB) or 32 documents (180 KB) ``take`` is as fast or
faster, and far faster for shorter runs."""


def range_runs(positions: np.ndarray, row_bytes: int | None) -> list[tuple[int, int]] | None:
    """The runs of ascending ``positions`` as ``[start, end)`` ranges, when they are long enough on
    average to read as range scans; ``None`` (read them with ``take``) when they are not, when the row
    size is unknown, or when a position repeats."""
    if row_bytes is None or positions.size < RANGE_MIN_RUN_ROWS:
        return None
    steps = np.diff(positions)
    if int(steps.min()) < 1:
        return None
    breaks = np.flatnonzero(steps != 1) + 1
    mean_run = positions.size / (breaks.size + 1)
    if mean_run < RANGE_MIN_RUN_ROWS or mean_run * row_bytes < RANGE_MIN_RUN_BYTES:
        return None
    starts = positions[np.concatenate(([0], breaks))]
    ends = positions[np.concatenate((breaks - 1, [positions.size - 1]))] + 1
    return list(zip(starts.tolist(), ends.tolist()))


class _PositionReader(Reader):
    """Reads rows by storage position of a pinned Lance dataset (the computed and local
    permutations): a position counts the version's live rows in fragment order. Positions are
    read in ascending order, long runs of contiguous positions as range scans (``range_runs``), and
    put back in the order asked for."""

    def __init__(self, dataset: Any) -> None:
        self._dataset = dataset
        self.where = str(getattr(dataset, "uri", "the table"))
        scans = os.environ.get(RANGE_SCANS_ENV, "1") != "0"
        self._take_scan = getattr(getattr(dataset, "_ds", None), "take_scan", None) if scans else None

    def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:
        wanted = np.asarray(row_ids, dtype=np.int64)
        if wanted.size < 2 or bool(np.all(wanted[1:] >= wanted[:-1])):
            return self._read_ascending(wanted, columns)
        order = np.argsort(wanted, kind="stable")
        got = self._read_ascending(wanted[order], columns)
        back = np.empty_like(order)
        back[order] = np.arange(order.size)
        return got.take(pa.array(back))

    def _read_ascending(self, positions: np.ndarray, columns: list[str] | None) -> pa.Table:
        ranges = None if self._take_scan is None else range_runs(positions, self.row_bytes_seen)
        if ranges is None:
            return self._dataset.take(positions, columns=columns)
        return self.scan_ranges(ranges, columns, positions.size)

    def scan_ranges(self, ranges: list[tuple[int, int]], columns: list[str] | None, rows: int) -> pa.Table:
        """The rows of ``ranges`` (``[start, end)`` positions, in the order given) by range scans."""
        assert self._take_scan is not None
        batches = list(self._take_scan(ranges, columns=columns, batch_readahead=RANGE_READAHEAD))
        got = pa.Table.from_batches(batches)
        if got.num_rows != rows:
            raise OSError(f"a range scan of {self.where} returned {got.num_rows} rows for {rows} positions")
        return got


POSITION_TABLES = (
    "reads by storage position and needs a table stored as a Lance dataset (table.to_lance()); "
    "memory:// and remote tables work with permutation='builder'"
)


def position_reader(table: Any, version: int | None) -> tuple[Reader, int, int]:
    """A reader by storage position over ``table`` at ``version`` (``None``: as it is), the rows
    of that version and the version.

    Raises:
        ValueError: the table is not stored as a Lance dataset.
    """
    try:
        dataset = table.to_lance()
    except Exception as exc:
        raise ValueError(f"this permutation {POSITION_TABLES}") from exc
    if version is not None and dataset.version != version:
        dataset = dataset.checkout_version(version)
    return _PositionReader(dataset), int(dataset.count_rows()), int(dataset.version)


def _is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


@dataclass(frozen=True)
class TableSource:
    """How to (re)open the table for reading, in this process or a worker process.

    ``kind`` is ``lance`` (a dataset URI at a pinned version), ``memory`` (the
    Arrow data itself), ``factory`` (``connection_factory(name)``) or
    ``table`` (the table object, pickled as itself).
    """

    kind: Literal["lance", "memory", "factory", "table"]
    name: str
    uri: str | None = None
    version: int | None = None
    storage_options: dict[str, str] = field(default_factory=dict)
    data: pa.Table | None = None
    table: Any = None
    factory: Callable[[str], Any] | None = None

    def open(self, by_position: bool = False) -> Reader:
        """A reader for this source (``by_position``: by storage position, not row id).

        Raises:
            ValueError: ``by_position`` and the source is not a Lance dataset.
        """
        if self.kind == "lance":
            import lance

            assert self.uri is not None
            dataset = lance.dataset(
                self.uri, version=self.version, storage_options=self.storage_options or None
            )
            return _PositionReader(dataset) if by_position else _LanceReader(dataset)
        if self.kind == "memory":
            if by_position:
                raise ValueError(f"this permutation {POSITION_TABLES}")
            assert self.data is not None
            ids = self.data.column("_rowid").to_numpy()
            return _ArrowReader(self.data.drop_columns(["_rowid"]), ids)
        table = self.table
        if self.kind == "factory":
            assert self.factory is not None
            table = self.factory(self.name)
        if by_position:
            return position_reader(table, self.version)[0]
        return reader_for(table, self.version)


def table_at(table: Any, version: int) -> Any:
    """A second handle on ``table`` checked out at ``version`` (the caller's handle is left as it is).

    Raises:
        ValueError: the version no longer exists (old versions were cleaned up), or the table
            cannot be reopened at a version.
    """
    conn = getattr(table, "_conn", None)  # LanceDB tables expose their connection only as _conn
    if conn is None or not hasattr(table, "checkout"):
        raise ValueError(f"cannot reopen table {getattr(table, 'name', table)!r} at version {version}")
    other = conn.open_table(table.name)
    try:
        other.checkout(version)
    except Exception as exc:
        raise ValueError(
            f"table {table.name!r} has no version {version} any more (old versions were cleaned up), but "
            "the checkpoint was written for it; resume from a newer checkpoint or start the epoch again"
        ) from exc
    return other


def reader_for(table: Any, version: int | None) -> Reader:
    """A reader over a live table object, pinned to ``version`` where the table supports it."""
    try:
        dataset = table.to_lance()
    except Exception:  # memory:// and remote tables have no local Lance dataset
        return _QueryReader(table)
    if version is not None and dataset.version != version:
        dataset = dataset.checkout_version(version)
    return _LanceReader(dataset)


def describe(
    table: Any,
    version: int | None,
    *,
    connection_factory: Callable[[str], Any] | None,
    keep_credentials: bool,
) -> TableSource:
    """A picklable recipe to reopen ``table`` at ``version`` in another process.

    Secret-looking storage options (keys, tokens, passwords) are dropped unless
    ``keep_credentials``; workers then take credentials from their environment.
    """
    name = str(table.name)
    if connection_factory is not None:
        return TableSource("factory", name, version=version, factory=connection_factory)
    uri = str(getattr(getattr(table, "_conn", None), "uri", ""))
    if uri.startswith("memory://"):
        data = table.search().with_row_id(True).limit(None).to_arrow()
        return TableSource("memory", name, data=data)
    try:
        dataset = table.to_lance()
    except Exception:
        return TableSource("table", name, version=version, table=table)
    options = dict(getattr(table._conn, "storage_options", None) or {})
    if not keep_credentials:
        options = {k: v for k, v in options.items() if not _is_secret(k)}
    return TableSource("lance", name, uri=str(dataset.uri), version=version, storage_options=options)
