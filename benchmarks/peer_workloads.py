"""Workloads of the peer comparison: elastic-loader, raw LanceDB reads and other loaders, on the same rows.

Rules:

* Every loader reads the same data: the LanceDB row table of ``workloads.rows_table(rows)``
  (id, x, label, vec) or the token table of ``token_table(docs)``. litdata and
  mosaicml-streaming need their own formats; ``litdata_rows``/``litdata_tokens``/``mds_rows``
  convert those tables once into ``benchmarks/.data/peers/`` (written to a temporary
  directory, renamed when complete, reused after that).
* A row-mode run returns the row ids in the order the loader delivered them (the
  caller times it and computes ``quality.summary`` from the ids). Each loader delivers
  its own natural item: elastic-loader, raw take + ``to_pylist`` and litdata/mosaic one
  dict per row; lance.torch a dict of tensors per 256-row batch (strings as a list);
  the sequential Arrow scan record batches. Collecting the ids is the only extra work.
* A packing run returns the tokens it delivered in ``pack``-token blocks (padding
  included for elastic-loader; the numpy packer and litdata's TokensLoader drop the
  last partial block). Documents end with EOS in every loader.
* Shuffles use fixed seeds, so every round of a loader delivers the same order.
* Nothing here imports a peer at module level: a missing peer is skipped by the caller
  (``LOADERS[name].requires``), never an import error.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import shutil
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))

import workloads as w
from elastic_loader import LocalShuffle

PEERS = w.DATA / "peers"
TAKE_CHUNK = 16_384
LANCE_BATCH = 256
LOADER_BATCH = 64
COLUMNAR_BATCH = 1024
WORKERS = 2
NUM_SPLITS = 8
PACK = 2048
PACKED_BATCH = 64
EOS = -1
PAD = -2
LITDATA_CHUNK_BYTES = "64MB"
BUILD_WORKERS = int(os.environ.get("PEERS_BUILD_WORKERS", "1"))
"""Processes of litdata's ``optimize`` (``PEERS_BUILD_WORKERS``; the copy holds the same rows either way)."""
LITDATA_TOKENS_PER_CHUNK = PACK * 8192


def token_spec(docs: int) -> w.TokenTable:
    """``docs`` documents of 128-2048 tokens (log-uniform), packed into 2048-token blocks."""
    return w.TokenTable(f"docs_{docs}_128_2048", docs, 128, 2048, PACK)


def preload() -> None:
    """Import what loaders import on their first pass (Lance, which LanceDB imports at the first
    ``to_lance()``; lance.torch's dataset; elastic-loader's lazily exported loader), so that the
    first timed pass in a new process includes no import, whichever loader it is."""
    from elastic_loader import StreamingDataLoader  # noqa: F401 (a lazy export: this imports its module)

    for module in ("lance", "lance.torch.data"):
        if installed(module.split(".")[0]):
            importlib.import_module(module)


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# ---------------------------------------------------------------- elastic-loader


def _id_list(samples: list[Any]) -> list[int]:
    return [sample["id"] for sample in samples]


PREFIX_ROWS: dict[str, int] = {}
"""Row loaders stopped after this many rows of their epoch (``peers.py --mosaic-rows`` for
``mosaic``, ``--builder-rows`` for ``elastic_loader``): at 8.0k and 17.5k rows/s (100M rows,
2026-12-06) a full pass takes hours. A loader not named: its whole epoch."""


def elastic_rows(table: Any, name: str = "", **options: Any) -> Callable[[], np.ndarray]:
    """elastic-loader in the consumer's process: 8 splits, seed 0, ``options`` over the defaults
    (the first ``PREFIX_ROWS[name]`` rows of its epoch when that is set)."""
    from elastic_loader import StreamingDataset

    def run() -> np.ndarray:
        ds = StreamingDataset(table, num_splits=NUM_SPLITS, shuffle_seed=0, **options)
        it = iter(ds)
        ids = np.fromiter((row["id"] for row in it), dtype=np.int64, count=PREFIX_ROWS.get(name, -1))
        it.close()  # a prefix: stop the read-ahead now
        return ids

    return run


def elastic_columnar(
    table: Any, batch_format: str = "arrow", batch_size: int = COLUMNAR_BATCH, **options: Any
) -> Callable[[], np.ndarray]:
    """elastic-loader's columnar batches in the consumer's process: ``StreamingDataLoader(batch_size,
    batch_format)`` over 8 splits, seed 0, ``read_batch_size=1024`` and ``options``; ids per batch."""
    from elastic_loader import StreamingDataLoader, StreamingDataset

    options = {"read_batch_size": 1024, **options}

    def run() -> np.ndarray:
        ds = StreamingDataset(table, num_splits=NUM_SPLITS, shuffle_seed=0, **options)
        loader = StreamingDataLoader(ds, batch_size=batch_size, batch_format=batch_format)
        parts = [_batch_ids(batch) for batch in loader]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    return run


def _batch_ids(batch: Any) -> np.ndarray:
    if isinstance(batch, pa.RecordBatch):
        return batch.column("id").to_numpy()
    return np.asarray(batch["id"])


def elastic_workers(table: Any) -> Callable[[], np.ndarray]:
    """StreamingDataLoader with 2 workers (its default fork-server start), 64 rows per batch."""
    from elastic_loader import StreamingDataLoader, StreamingDataset

    def run() -> np.ndarray:
        ds = StreamingDataset(table, num_splits=NUM_SPLITS, shuffle_seed=0)
        loader = StreamingDataLoader(ds, batch_size=LOADER_BATCH, num_workers=WORKERS, collate_fn=_id_list)
        return np.fromiter((i for batch in loader for i in batch), dtype=np.int64)

    return run


def stateful_workers(table: Any) -> Callable[[], np.ndarray]:
    """torchdata's StatefulDataLoader over elastic-loader's dataset, 2 fork-server workers."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from elastic_loader import StreamingDataset

    def run() -> np.ndarray:
        ds = StreamingDataset(table, num_splits=NUM_SPLITS, shuffle_seed=0)
        loader = StatefulDataLoader(
            ds,
            batch_size=LOADER_BATCH,
            num_workers=WORKERS,
            collate_fn=_id_list,
            multiprocessing_context=multiprocessing.get_context("forkserver"),
        )
        return np.fromiter((i for batch in loader for i in batch), dtype=np.int64)

    return run


# ---------------------------------------------------------------- raw LanceDB reads


def raw_take(table: Any, chunk: int = TAKE_CHUNK) -> Callable[[], np.ndarray]:
    """``take`` of every row in a seeded random order, ``chunk`` ids per call, then ``to_pylist``."""
    order = w.shuffled_row_ids(table)
    dataset = table.to_lance()

    def run() -> np.ndarray:
        ids: list[int] = []
        for start in range(0, len(order), chunk):
            rows = dataset._take_rows(pa.array(order[start : start + chunk])).to_pylist()
            ids.extend(row["id"] for row in rows)
        return np.asarray(ids, dtype=np.int64)

    return run


def scan_arrow(table: Any) -> Callable[[], np.ndarray]:
    """A sequential scan of every column as Arrow record batches (the table order)."""
    dataset = table.to_lance()

    def run() -> np.ndarray:
        parts = [batch.column("id").to_numpy() for batch in dataset.to_batches()]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    return run


def scan_pylist(table: Any) -> Callable[[], np.ndarray]:
    """The sequential scan, each batch turned into Python dicts (``to_pylist``)."""
    dataset = table.to_lance()

    def run() -> np.ndarray:
        ids: list[int] = []
        for batch in dataset.to_batches():
            ids.extend(row["id"] for row in batch.to_pylist())
        return np.asarray(ids, dtype=np.int64)

    return run


# ---------------------------------------------------------------- lance.torch


def _tensors(batch: pa.RecordBatch, **_: Any) -> dict[str, Any]:
    """A record batch as torch tensors: numbers as 1-D, fixed-size lists as 2-D, strings as a list."""
    import torch

    out: dict[str, Any] = {}
    for name, column in zip(batch.column_names, batch.columns):
        if pa.types.is_fixed_size_list(column.type):
            size = column.type.list_size
            values = column.values.slice(column.offset * size, len(column) * size)
            out[name] = torch.from_numpy(values.to_numpy().reshape(len(column), -1))
        elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            out[name] = column.to_pylist()
        else:
            out[name] = torch.from_numpy(column.to_numpy())
    return out


def _sampler(kind: str) -> Any:
    from lance.sampler import ShardedBatchSampler, ShardedFragmentSampler

    cls = {"batch": ShardedBatchSampler, "fragment": ShardedFragmentSampler}[kind]
    return cls(rank=0, world_size=1, randomize=True, seed=0)


def lance_torch_rows(table: Any, sampler: str) -> Callable[[], np.ndarray]:
    """lance.torch ``LanceDataset``, 256-row batches, ``Sharded{Batch,Fragment}Sampler(randomize=True)``."""
    from lance.torch.data import LanceDataset

    dataset = table.to_lance()

    def run() -> np.ndarray:
        ds = LanceDataset(dataset, batch_size=LANCE_BATCH, sampler=_sampler(sampler), to_tensor_fn=_tensors)
        parts = [batch["id"].numpy() for batch in ds]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    return run


# ---------------------------------------------------------------- litdata


def _build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """``build`` into a temporary sibling of ``target``, then rename it: a half-built copy is never reused."""
    if target.exists():
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    build(partial)
    partial.rename(target)
    return target


def _check_litdata(out: Path, expected: int, tokens: int | None = None) -> None:
    """Raise unless ``optimize`` wrote ``expected`` items (from the copy's ``index.json``): it can
    return normally when a worker died. A ``TokensLoader`` copy's chunks also give their tokens
    (``dim``), which must add up to ``tokens``."""
    import json

    index = json.loads((out / "index.json").read_text())
    got = sum(int(chunk["chunk_size"]) for chunk in index["chunks"])
    if got != expected:
        raise RuntimeError(f"litdata's optimize wrote {got:,} items to {out}, expected {expected:,}")
    if tokens is not None:
        written = sum(int(chunk["dim"]) for chunk in index["chunks"])
        if written != tokens:
            raise RuntimeError(f"litdata's optimize wrote {written:,} tokens to {out}, expected {tokens:,}")


def _litdata_row_items(bounds: tuple[str, str, int, int]) -> Iterator[dict[str, Any]]:
    """litdata ``optimize`` callback (runs in its worker processes): the rows ``[start, stop)`` as dicts."""
    uri, name, start, stop = bounds
    import lancedb

    part = lancedb.connect(uri).open_table(name).to_lance().to_table(offset=start, limit=stop - start)
    ids, xs = part.column("id").to_numpy(), part.column("x").to_numpy()
    labels = part.column("label").to_pylist()
    vec = part.column("vec").combine_chunks().values.to_numpy().reshape(-1, 16)
    for i in range(len(ids)):
        yield {"id": int(ids[i]), "x": float(xs[i]), "label": labels[i], "vec": vec[i]}


def _ranges(total: int, step: int) -> list[tuple[int, int]]:
    return [(start, min(start + step, total)) for start in range(0, total, step)]


def litdata_rows(table: Any) -> Path:
    """The row table in litdata's format (``optimize``, 64 MB chunks), built once."""
    from litdata import optimize

    name = table.name

    def build(out: Path) -> None:
        rows = table.count_rows()
        inputs = [(str(w.DATA), name, a, b) for a, b in _ranges(rows, 100_000)]
        optimize(
            fn=_litdata_row_items,
            inputs=inputs,
            output_dir=str(out),
            chunk_bytes=LITDATA_CHUNK_BYTES,
            num_workers=BUILD_WORKERS,
        )
        _check_litdata(out, rows)

    return _build_once(PEERS / f"litdata_{name}", build)


def litdata_rows_run(path: Path) -> Callable[[], np.ndarray]:
    """litdata ``StreamingDataset(shuffle=True)`` iterated in the consumer's process."""
    from litdata import StreamingDataset

    def run() -> np.ndarray:
        ds = StreamingDataset(str(path), shuffle=True, seed=0)
        return np.fromiter((sample["id"] for sample in ds), dtype=np.int64)

    return run


def _litdata_token_items(bounds: tuple[str, str, int, int]) -> Iterator[Any]:
    """litdata ``optimize`` callback: each document of ``[start, stop)`` as a tensor, EOS appended."""
    import lancedb
    import torch

    uri, name, start, stop = bounds
    part = (
        lancedb.connect(uri)
        .open_table(name)
        .to_lance()
        .to_table(columns=["tokens"], offset=start, limit=stop - start)
    )
    column = part.column("tokens").combine_chunks()
    offsets, values = column.offsets.to_numpy(), column.values.to_numpy()
    for i in range(len(column)):
        doc = np.append(values[offsets[i] : offsets[i + 1]], EOS)
        yield torch.from_numpy(doc)


def litdata_tokens(table: Any) -> Path:
    """The token table for litdata's ``TokensLoader`` (``optimize`` with ``item_loader=TokensLoader()``)."""
    from litdata import TokensLoader, optimize

    name = table.name

    def build(out: Path) -> None:
        docs = table.count_rows()
        inputs = [(str(w.DATA), name, a, b) for a, b in _ranges(docs, 20_000)]
        optimize(
            fn=_litdata_token_items,
            inputs=inputs,
            output_dir=str(out),
            num_workers=BUILD_WORKERS,
            chunk_size=LITDATA_TOKENS_PER_CHUNK,
            item_loader=TokensLoader(),
        )
        _check_litdata(out, docs, tokens=w.total_tokens(table) + docs)  # every document and its EOS

    return _build_once(PEERS / f"litdata_tokens_{name}", build)


def litdata_tokens_run(path: Path) -> Callable[[], int]:
    """litdata ``StreamingDataset(item_loader=TokensLoader(block_size=2048), shuffle=True)``: tokens."""
    from litdata import StreamingDataset, TokensLoader

    def run() -> int:
        ds = StreamingDataset(str(path), item_loader=TokensLoader(block_size=PACK), shuffle=True, seed=0)
        return sum(int(block.numel()) for block in ds)

    return run


# ---------------------------------------------------------------- mosaicml-streaming


def mosaic() -> types.SimpleNamespace:
    """mosaicml-streaming's ``StreamingDataset``, ``MDSWriter`` and ``clean_stale_shared_memory``.

    ``import streaming`` also imports its vision, text and multimodal packages, which need
    torchvision and transformers. torchvision's PyPI build needs CUDA torch, so the
    ``bench`` extra installs neither; the dataset and the MDS format live in
    ``streaming.base`` and need neither. The two packages are registered without running
    their ``__init__`` and the modules are imported directly.
    """
    if "streaming.base.dataset" not in sys.modules:
        spec = importlib.util.find_spec("streaming")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("mosaicml-streaming is not installed")
        root = next(iter(spec.submodule_search_locations))
        for name, path in (("streaming", root), ("streaming.base", os.path.join(root, "base"))):
            if name not in sys.modules:
                package = types.ModuleType(name)
                package.__path__ = [path]
                sys.modules[name] = package
    from streaming.base.dataset import StreamingDataset
    from streaming.base.format.mds.writer import MDSWriter
    from streaming.base.util import clean_stale_shared_memory

    return types.SimpleNamespace(
        StreamingDataset=StreamingDataset, MDSWriter=MDSWriter, clean=clean_stale_shared_memory
    )


MDS_COLUMNS = {"id": "int64", "x": "float64", "label": "str", "vec": "ndarray:float32:16"}


def mds_rows(table: Any) -> Path:
    """The row table as MDS shards (mosaicml-streaming's default 64 MiB shard limit), built once."""
    mds = mosaic()

    def build(out: Path) -> None:
        from tqdm import tqdm

        step = 65_536
        batches = table.to_lance().to_batches(batch_size=step)
        total = -(-table.count_rows() // step)
        with mds.MDSWriter(out=str(out), columns=MDS_COLUMNS) as writer:
            for batch in tqdm(batches, desc="building the MDS copy", total=total, unit="batch"):
                ids, xs = batch.column("id").to_numpy(), batch.column("x").to_numpy()
                labels = batch.column("label").to_pylist()
                vec = batch.column("vec").values.to_numpy().reshape(-1, 16)
                for i in range(len(ids)):
                    writer.write({"id": int(ids[i]), "x": float(xs[i]), "label": labels[i], "vec": vec[i]})

    return _build_once(PEERS / f"mds_{table.name}", build)


def mds_rows_run(path: Path) -> Callable[[], np.ndarray]:
    """mosaicml-streaming ``StreamingDataset(local=..., shuffle=True)`` in the consumer's process
    (the first ``PREFIX_ROWS["mosaic"]`` rows of its epoch when that is set)."""
    mds = mosaic()
    limit = PREFIX_ROWS.get("mosaic", -1)

    def run() -> np.ndarray:
        mds.clean()
        ds = mds.StreamingDataset(local=str(path), shuffle=True, shuffle_seed=0, batch_size=LOADER_BATCH)
        ids = np.fromiter((int(sample["id"]) for sample in ds), dtype=np.int64, count=limit)
        del ds
        return ids

    return run


# ---------------------------------------------------------------- packing


def packed_elastic(
    table: Any, spec: w.TokenTable, num_splits: int = NUM_SPLITS, **options: Any
) -> Callable[[], int]:
    return w.packed_epoch("elastic_loader", table, spec, num_splits=num_splits, **options)


def packed_batches_one_split(table: Any, spec: w.TokenTable, permutation: Any) -> Callable[[], int]:
    """``packed_elastic`` over one split in ``permutation``'s order, through ``StreamingDataLoader``'s
    packed batches: a ``(PACKED_BATCH, L)`` pair of ``input_ids`` and ``doc_ids`` tensors a step."""
    return packed_elastic(
        table, spec, num_splits=1, batch_size=PACKED_BATCH, batch_format="torch", permutation=permutation
    )


def raw_take_tokens(table: Any) -> Callable[[], int]:
    return w.raw_tokens(table, chunk=TAKE_CHUNK)


def tokens_with_eos(batch: Any) -> int:
    """Tokens of a record batch whose first column is the token lists, plus one EOS a document."""
    column = batch.column(0)
    return int(column.offsets[-1].as_py() - column.offsets[0].as_py()) + batch.num_rows


def scan_tokens(table: Any) -> Callable[[], int]:
    """A sequential scan of the token column as Arrow; counts tokens plus one EOS per document."""
    dataset = table.to_lance()

    def run() -> int:
        n = 0
        for batch in dataset.to_batches(columns=["tokens"]):
            n += tokens_with_eos(batch)
        return n

    return run


def pack_numpy(batches: Any, length: int, eos: int) -> Iterator[np.ndarray]:
    """A simple packer: documents + EOS concatenated in arrival order, cut into ``length`` blocks.

    Yields ``(k, length)`` arrays; the last partial block is dropped.
    """
    carry = np.empty(0, dtype=np.int64)
    for batch in batches:
        column = batch.column(0)
        offsets = column.offsets.to_numpy()
        values = column.values.to_numpy()[offsets[0] : offsets[-1]]
        stream = np.concatenate([carry, np.insert(values, offsets[1:] - offsets[0], eos)])
        blocks = len(stream) // length
        yield stream[: blocks * length].reshape(blocks, length)
        carry = stream[blocks * length :].copy()


def _lance_torch_packed(dataset: Any) -> Iterator[np.ndarray]:
    """lance.torch ``LanceDataset`` over ``dataset`` (256 documents a batch,
    ShardedBatchSampler(randomize=True)), packed by ``pack_numpy``: ``(k, PACK)`` arrays."""
    from lance.torch.data import LanceDataset

    ds = LanceDataset(
        dataset, batch_size=LANCE_BATCH, columns=["tokens"], sampler=_sampler("batch"), to_tensor_fn=None
    )
    return pack_numpy(ds, PACK, EOS)


def lance_torch_tokens(table: Any) -> Callable[[], int]:
    """lance.torch ``LanceDataset`` (256 documents a batch, ShardedBatchSampler(randomize=True)), packed."""
    import torch

    dataset = table.to_lance()

    def run() -> int:
        return sum(int(torch.from_numpy(blocks).numel()) for blocks in _lance_torch_packed(dataset))

    return run


def _doc_ids_of(blocks: np.ndarray) -> np.ndarray:
    """``doc_ids`` of packed ``(k, L)`` blocks as elastic-loader gives them: ``doc_ids[:, j]``
    counts the document starts at offsets 1..j (after an EOS) of the block."""
    doc_ids = np.zeros_like(blocks)
    np.cumsum(blocks[:, :-1] == EOS, axis=1, out=doc_ids[:, 1:])
    return doc_ids


def lance_torch_items(table: Any) -> Callable[[], int]:
    """``lance_torch_tokens``'s reads and packer, delivering what elastic-loader's packed dataset
    yields: one item a block, ``{"input_ids", "doc_ids"}`` tensors, ``doc_ids[j]`` counting the
    document starts at offsets 1..j (after an EOS) of the block."""
    import torch

    dataset = table.to_lance()

    def run() -> int:
        tokens = 0
        for blocks in _lance_torch_packed(dataset):
            for ids, docs in zip(blocks, _doc_ids_of(blocks)):
                item = {"input_ids": torch.from_numpy(ids), "doc_ids": torch.from_numpy(docs)}
                tokens += int(item["input_ids"].numel())
        return tokens

    return run


def lance_torch_batches(table: Any, batch: int = PACKED_BATCH) -> Callable[[], int]:
    """``lance_torch_tokens``'s reads and packer, delivering what elastic-loader's packed batches
    give (``StreamingDataLoader(batch_size=batch, batch_format="torch")``): ``(batch, L)``
    ``input_ids`` and ``doc_ids`` tensors a step (the packer's arrays regrouped into fixed batches;
    a short last batch is delivered)."""
    import torch

    dataset = table.to_lance()

    def deliver(ids: np.ndarray) -> int:
        item = {"input_ids": torch.from_numpy(ids), "doc_ids": torch.from_numpy(_doc_ids_of(ids))}
        return int(item["input_ids"].numel())

    def run() -> int:
        tokens, carry = 0, np.empty((0, PACK), dtype=np.int64)
        for blocks in _lance_torch_packed(dataset):
            joined = np.concatenate([carry, blocks]) if len(carry) else blocks
            whole = len(joined) // batch * batch
            for a in range(0, whole, batch):
                tokens += deliver(joined[a : a + batch])
            carry = joined[whole:]
        return tokens + (deliver(carry) if len(carry) else 0)

    return run


# ---------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Loader:
    """One compared loader: what it is, the module it needs, and how to make its run.

    ``make(table)`` for row loaders, ``make(table, spec)`` for packing loaders; the run it
    returns delivers row ids (row mode) or counts tokens (packing).
    """

    name: str
    description: str
    requires: str | None
    make: Callable[..., Callable[[], Any]]


ELASTIC_MODES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("", "", {}),
    ("_noshuffle", ", shuffle=False (storage order: cheap reads)", {"shuffle": False}),
    (
        "_local_32_256",
        ", LocalShuffle(clump=32, window=256) (passes the quality bar at 2M rows)",
        {"permutation": LocalShuffle(clump=32, window=256)},
    ),
    (
        "_local_256_1024",
        ", LocalShuffle(clump=256, window=1024) (lance.torch's run length, shuffled inside a window)",
        {"permutation": LocalShuffle(clump=256, window=1024)},
    ),
)
"""Read orders every elastic-loader mode below runs in: (name suffix, description suffix, options).
The default order (suffix "") is the baseline of every ratio."""


def _elastic_loaders() -> tuple[Loader, ...]:
    """elastic-loader's row and columnar modes, once per read order of :data:`ELASTIC_MODES`."""
    out: list[Loader] = []
    for suffix, said, options in ELASTIC_MODES:
        o = dict(options)
        out += [
            Loader(
                f"elastic_loader{suffix}",
                f"elastic-loader, defaults (8 splits){said}",
                None,
                lambda t, o=o, name=f"elastic_loader{suffix}": elastic_rows(t, name, **o),
            ),
            Loader(
                f"elastic_rbs1024{suffix}",
                f"elastic-loader, read_batch_size=1024{said}",
                None,
                lambda t, o=o: elastic_rows(t, read_batch_size=1024, **o),
            ),
            Loader(
                f"elastic_columnar{suffix}",
                f"elastic-loader columnar batches (arrow, 1024 rows), read_batch_size=1024{said}",
                None,
                lambda t, o=o: elastic_columnar(t, **o),
            ),
        ]
    return tuple(out)


ROW_LOADERS = (
    *_elastic_loaders(),
    Loader(
        "elastic_2_workers",
        "elastic-loader StreamingDataLoader, 2 workers, batch 64, start-up incl.",
        None,
        elastic_workers,
    ),
    Loader(
        "stateful_2_workers",
        "torchdata StatefulDataLoader over elastic-loader, 2 workers, batch 64",
        "torchdata",
        stateful_workers,
    ),
    Loader("raw_take_16k", "raw random take, 16384 ids per call, to_pylist", None, raw_take),
    Loader("scan_arrow", "raw sequential scan, Arrow batches", None, scan_arrow),
    Loader("scan_pylist", "raw sequential scan, to_pylist", None, scan_pylist),
    Loader(
        "lance_torch_batch",
        "lance.torch LanceDataset + ShardedBatchSampler(randomize=True), 256 rows",
        "lance.torch",
        lambda t: lance_torch_rows(t, "batch"),
    ),
    Loader(
        "lance_torch_fragment",
        "lance.torch LanceDataset + ShardedFragmentSampler(randomize=True)",
        "lance.torch",
        lambda t: lance_torch_rows(t, "fragment"),
    ),
    Loader(
        "litdata",
        "litdata StreamingDataset(shuffle=True), optimize()d copy",
        "litdata",
        lambda t: litdata_rows_run(litdata_rows(t)),
    ),
    Loader(
        "mosaic",
        "mosaicml-streaming StreamingDataset(shuffle=True), MDS copy",
        "streaming",
        lambda t: mds_rows_run(mds_rows(t)),
    ),
)

TOKEN_LOADERS = (
    Loader("elastic_loader", "elastic-loader pack_sequences=2048, defaults (8 splits)", None, packed_elastic),
    Loader(
        "elastic_local_8_64",
        "elastic-loader pack_sequences=2048, LocalShuffle(clump=8, window=64) (its splits' documents read "
        "round robin pass the bar at 200k docs; as packed blocks deliver them, 1.8% are adjacent: "
        "token_order_quality.py)",
        None,
        lambda t, spec: packed_elastic(t, spec, permutation=LocalShuffle(clump=8, window=64)),
    ),
    Loader(
        "elastic_local_8_256",
        "elastic-loader pack_sequences=2048, LocalShuffle(clump=8, window=256) (the documents its packed "
        "blocks deliver pass the bar at 200k docs for 8 of 10 seeds: token_order_quality.py)",
        None,
        lambda t, spec: packed_elastic(t, spec, permutation=LocalShuffle(clump=8, window=256)),
    ),
    Loader(
        "elastic_local_32_256",
        "elastic-loader pack_sequences=2048, LocalShuffle(clump=32, window=256)",
        None,
        lambda t, spec: packed_elastic(t, spec, permutation=LocalShuffle(clump=32, window=256)),
    ),
    Loader(
        "elastic_local_256_1024",
        "elastic-loader pack_sequences=2048, LocalShuffle(clump=256, window=1024) (lance.torch's run length, "
        "shuffled inside a window)",
        None,
        lambda t, spec: packed_elastic(t, spec, permutation=LocalShuffle(clump=256, window=1024)),
    ),
    Loader(
        "elastic_local_256_1",
        "elastic-loader pack_sequences=2048, LocalShuffle(clump=256, window=1) (lance.torch's order: runs of "
        "256 consecutive documents, in shuffled order)",
        None,
        lambda t, spec: packed_elastic(t, spec, permutation=LocalShuffle(clump=256, window=1)),
    ),
    Loader(
        "elastic_local_256_1_split1",
        "elastic-loader pack_sequences=2048, LocalShuffle(clump=256, window=1), num_splits=1 (the default in "
        "one process: one stream, no interleaving of splits)",
        None,
        lambda t, spec: packed_elastic(t, spec, num_splits=1, permutation=LocalShuffle(clump=256, window=1)),
    ),
    Loader(
        "elastic_local_256_1_split1_b64",
        "elastic-loader pack_sequences=2048, LocalShuffle(clump=256, window=1), num_splits=1, "
        "StreamingDataLoader(batch_size=64, batch_format='torch'): (64, 2048) input_ids and doc_ids "
        "tensors a step, every step's checkpoint committed",
        None,
        lambda t, spec: packed_batches_one_split(t, spec, LocalShuffle(clump=256, window=1)),
    ),
    Loader(
        "elastic_local_1024_4096_split1_b64",
        "elastic-loader pack_sequences=2048, LocalShuffle(clump=1024, window=4096), num_splits=1, (64, 2048) "
        "packed batches: a document order no worse than litdata's TokensLoader's on every quality measure "
        "(token_order_quality.py)",
        None,
        lambda t, spec: packed_batches_one_split(t, spec, LocalShuffle(clump=1024, window=4096)),
    ),
    Loader(
        "raw_take_16k",
        "raw random take, 16384 documents per call, Arrow",
        None,
        lambda t, _: raw_take_tokens(t),
    ),
    Loader("scan_arrow", "raw sequential scan of the token column, Arrow", None, lambda t, _: scan_tokens(t)),
    Loader(
        "lance_torch_numpy",
        "lance.torch ShardedBatchSampler(randomize=True) + a numpy packer",
        "lance.torch",
        lambda t, _: lance_torch_tokens(t),
    ),
    Loader(
        "lance_torch_items",
        "lance.torch ShardedBatchSampler(randomize=True) + the numpy packer, one item a block with doc_ids "
        "(what elastic-loader yields)",
        "lance.torch",
        lambda t, _: lance_torch_items(t),
    ),
    Loader(
        "lance_torch_b64",
        "lance.torch ShardedBatchSampler(randomize=True) + the numpy packer, (64, 2048) input_ids and "
        "doc_ids tensors a step (what elastic_local_256_1_split1_b64 yields)",
        "lance.torch",
        lambda t, _: lance_torch_batches(t),
    ),
    Loader(
        "litdata_tokens",
        "litdata TokensLoader(block_size=2048), shuffle=True",
        "litdata",
        lambda t, _: litdata_tokens_run(litdata_tokens(t)),
    ),
)
