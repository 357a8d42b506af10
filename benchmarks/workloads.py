"""Benchmark tables and workloads: elastic-loader, lancedb.streaming and the raw LanceDB limit.

Every workload returns the number of items it processed (rows or tokens); the
callers time it. Tables live under ``benchmarks/.data`` and are built once
(with a progress bar). The raw limits are what the issue defines: LanceDB
``take`` of the same rows in random order, in chunks of 1024 rows, plus
``to_pylist`` (row mode) or as Arrow (tokens).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DATA = Path(os.environ.get("ELASTIC_LOADER_BENCH_DATA", Path(__file__).parent / ".data"))
RAW_CHUNK = 1024


@dataclass(frozen=True)
class TokenTable:
    """A token table and the packing settings benchmarked on it."""

    name: str
    docs: int
    min_len: int
    max_len: int
    pack: int


ROWS = int(os.environ.get("ELASTIC_LOADER_BENCH_ROWS", 300_000))
TTFR_ROWS = 1_000_000
TOKENS = (
    TokenTable("short_docs", 200_000, 8, 128, 1024),
    TokenTable("long_docs", 40_000, 128, 2048, 2048),
)


def connect() -> Any:
    DATA.mkdir(parents=True, exist_ok=True)
    return lancedb.connect(str(DATA))


def _exists(db: Any, name: str) -> bool:
    return name in db.list_tables().tables


def rows_table(rows: int = ROWS) -> Any:
    """``rows`` rows of a typical feature table: id, a float, a short string, a 16-float vector."""
    db = connect()
    name = f"rows_{rows}"
    if not _exists(db, name):
        from tqdm import tqdm

        rng = np.random.default_rng(0)
        chunk = 100_000
        table = None
        for start in tqdm(range(0, rows, chunk), desc=f"building {name}", unit="chunk"):
            n = min(chunk, rows - start)
            ids = np.arange(start, start + n)
            vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16, dtype=np.float32)), 16)
            data = pa.table(
                {"id": ids, "x": rng.random(n), "label": [f"item-{i:09d}" for i in ids], "vec": vec}
            )
            if table is None:
                table = db.create_table(name, data)
            else:
                table.add(data)
        assert table is not None
        table.optimize()
    return db.open_table(name)


def token_table(spec: TokenTable) -> Any:
    """Documents of token ids with log-uniform lengths in ``[min_len, max_len]``."""
    db = connect()
    if not _exists(db, spec.name):
        from tqdm import tqdm

        rng = np.random.default_rng(1)
        chunk = 20_000
        table = None
        for start in tqdm(range(0, spec.docs, chunk), desc=f"building {spec.name}", unit="chunk"):
            n = min(chunk, spec.docs - start)
            lengths = np.exp(rng.uniform(np.log(spec.min_len), np.log(spec.max_len + 1), n)).astype(np.int64)
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int64)
            tokens = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
            data = pa.table({"id": np.arange(start, start + n), "tokens": tokens})
            if table is None:
                table = db.create_table(spec.name, data)
            else:
                table.add(data)
        assert table is not None
        table.optimize()
    return db.open_table(spec.name)


def total_tokens(table: Any) -> int:
    """The tokens of every document of a token table (no EOS).

    Counted once per table version by a streamed scan and kept beside the table
    (``<name>.tokens.json``), so that a benchmark process reads nothing of the table before its
    timed pass that a peer's process does not: what a process read before its first pass changes
    that pass (a streamed scan of the token column made the packed pass after it 1.14-1.30x
    faster, lance.torch's 1.49x: its heap was already grown; benchmarks/README.md, "A process's
    first pass and the passes after it")."""
    path = DATA / f"{table.name}.tokens.json"
    version = int(table.version)
    if path.exists():
        saved = json.loads(path.read_text())
        if saved["version"] == version:
            return int(saved["tokens"])
    tokens = 0
    for batch in table.to_lance().to_batches(columns=["tokens"]):
        tokens += int(pc.sum(pc.list_value_length(batch.column(0))).as_py() or 0)
    path.write_text(json.dumps({"version": version, "tokens": tokens}))
    return tokens


def blocks_per_epoch(table: Any, spec: TokenTable, num_splits: int) -> int:
    """An exact budget: every token plus one EOS per document, in blocks, rounded to the splits."""
    total = total_tokens(table) + table.count_rows()
    blocks = total // spec.pack
    return max(num_splits, blocks - blocks % num_splits)


def shuffled_row_ids(table: Any, seed: int = 0) -> np.ndarray:
    from lancedb.permutation import permutation_builder

    perm = permutation_builder(table).split_random(fixed=1, seed=seed).execute().to_arrow()
    return perm.column("row_id").to_numpy()


# ---------------------------------------------------------------- raw limits


def raw_rows(table: Any, chunk: int = RAW_CHUNK) -> Callable[[], int]:
    """LanceDB take of every row in random order, ``chunk`` (1024) rows per call, then ``to_pylist``."""
    ids = shuffled_row_ids(table)
    dataset = table.to_lance()

    def run() -> int:
        n = 0
        for start in range(0, len(ids), chunk):
            n += len(dataset._take_rows(pa.array(ids[start : start + chunk])).to_pylist())
        return n

    return run


def raw_tokens(table: Any, chunk: int = RAW_CHUNK) -> Callable[[], int]:
    """LanceDB take of every document in random order, ``chunk`` (1024) per call, as Arrow; tokens + EOS."""
    ids = shuffled_row_ids(table)
    dataset = table.to_lance()

    def run() -> int:
        n = 0
        for start in range(0, len(ids), chunk):
            batch = dataset._take_rows(pa.array(ids[start : start + chunk]), columns=["tokens"])
            n += len(batch.column(0).combine_chunks().values) + batch.num_rows
        return n

    return run


# ---------------------------------------------------------------- loaders


def _dataset_class(impl: str) -> Any:
    if impl == "elastic_loader":
        from elastic_loader import StreamingDataset

        return StreamingDataset
    from lancedb.streaming import StreamingDataset as Reference

    return Reference


def _loader_class(impl: str) -> Any:
    if impl == "elastic_loader":
        from elastic_loader import StreamingDataLoader

        return StreamingDataLoader
    from lancedb.streaming import StreamingDataLoader as Reference

    return Reference


def rows_epoch(impl: str, table: Any, num_splits: int = 8) -> Callable[[], int]:
    """One epoch of row mode at default settings, counting rows."""
    cls = _dataset_class(impl)

    def run() -> int:
        return sum(1 for _ in cls(table, num_splits=num_splits, shuffle_seed=0))

    return run


def packed_dataset(
    impl: str,
    table: Any,
    spec: TokenTable,
    num_splits: int,
    budget: int,
    shuffle_seed: int = 0,
    **options: Any,
) -> Any:
    """The packed dataset the packing benchmarks read: the token column, ``spec.pack``-token blocks,
    EOS -1, padding -2, ``budget`` blocks an epoch (``blocks_per_epoch``), ``options`` over them."""
    return _dataset_class(impl)(
        table,
        num_splits=num_splits,
        shuffle_seed=shuffle_seed,
        columns=["tokens"],
        pack_sequences=spec.pack,
        eos_id=-1,
        pad_id=-2,
        blocks_per_epoch=budget,
        **options,
    )


def packed_epoch(
    impl: str,
    table: Any,
    spec: TokenTable,
    num_splits: int = 8,
    batch_size: int | None = None,
    batch_format: str | None = None,
    num_workers: int = 0,
    **options: Any,
) -> Callable[[], int]:
    """One packed epoch at default settings (``options`` over them), counting tokens (padding
    included); with ``batch_size``, through the implementation's ``StreamingDataLoader`` (no workers),
    with ``batch_format`` its packed batches (one ``(batch_size, L)`` tensor pair per step), with
    ``num_workers`` its worker processes (the loader's default start method)."""
    budget = blocks_per_epoch(table, spec, num_splits)
    _dataset_class(impl)  # imports the package (and torch) before any clock starts, as for every peer
    loader_cls = _loader_class(impl)

    def run() -> int:
        ds = packed_dataset(impl, table, spec, num_splits, budget, **options)
        extra: dict[str, Any] = {} if batch_format is None else {"batch_format": batch_format}
        if num_workers:
            extra["num_workers"] = num_workers
        items = ds if batch_size is None else loader_cls(ds, batch_size=batch_size, **extra)
        return sum(int(block["input_ids"].numel()) for block in items)

    return run


def loader_epoch(impl: str, table: Any, workers: int = 2, batch_size: int = 64) -> Callable[[], int]:
    """One epoch through a StreamingDataLoader with worker processes (spawn for both), counting rows."""
    import multiprocessing

    dataset_cls, loader_cls = _dataset_class(impl), _loader_class(impl)

    def run() -> int:
        ds = dataset_cls(table, num_splits=8, shuffle_seed=0)
        loader = loader_cls(
            ds,
            batch_size=batch_size,
            num_workers=workers,
            multiprocessing_context=multiprocessing.get_context("spawn"),
            collate_fn=_count_collate,
        )
        return sum(loader)

    return run


def _count_collate(samples: list[Any]) -> int:
    return len(samples)


def time_to_first_row(impl: str, table: Any) -> float:
    """Seconds from construction to the first row, at default settings."""
    cls = _dataset_class(impl)
    t0 = time.perf_counter()
    ds = cls(table, num_splits=8, shuffle_seed=0)
    next(iter(ds))
    return time.perf_counter() - t0


def quiet() -> None:
    """Silence the expected warnings of benchmark runs."""
    warnings.filterwarnings("ignore", category=UserWarning)
