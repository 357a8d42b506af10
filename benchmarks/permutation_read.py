"""Rows per second of a full StreamingDataset pass with each permutation kind, with its shuffle quality.

Usage::

    .venv/bin/python benchmarks/permutation_read.py [--rows 2000000] [--repeats 3] [--docs 200000]
        [--kinds builder,computed,local,...] [--items rows,ids,columnar,packing] [--name NAME]
        [--fresh] [--save]

Builds once (under ``benchmarks/.data``) a Lance table of ``--rows`` rows: ``id`` int64 and
``payload`` (64 random bytes), in fragments of 1M rows. Each round iterates one whole epoch of
``StreamingDataset(table, num_splits=8, columns=..., permutation=P)`` in this process, for every
kind P of ``KINDS``: ``builder`` (the default, the baseline of every ratio), ``computed``,
``local`` (``LocalShuffle()``: ``C = 64``, ``W = 256``) and ``local_C_W``
(``LocalShuffle(clump=C, window=W)``), ``storage`` (``shuffle=False``: each split a contiguous
range of the table; packing runs it by default), and ``scan``, a sequential scan of the same
columns, as the ceiling. Items:

* ``rows``: the default ``to_pylist`` rows (dicts), counted;
* ``ids``: ``transform=ids`` (the ``id`` column as a Python list), collected; the shuffle-quality
  columns (``quality.py``) come from these ids of the first round;
* ``columnar``: ``StreamingDataLoader(ds, batch_size=1024, batch_format="arrow")`` (one
  ``RecordBatch`` per step, no Python object per row), rows counted; the scan's ``columnar`` is
  the Arrow scan (``to_batches``), the issue's reference for columnar batches;
* ``packing``: ``pack_sequences=2048`` over a table of ``--docs`` documents of 128-2048 tokens
  (the peers' token table), tokens/s; two sets of quality columns, both from the permutation
  itself (packing delivers no document ids): the documents' read order (every split's positions
  round robin) and the order packed blocks deliver them (``packed_order``: a split's documents
  stay together inside a block, blocks go round robin; ``token_order_quality.py`` reads the same
  order off the delivered blocks). Only the second is what a trainer sees: a split's neighbours
  inside a block count as adjacent there. ``builder`` is the global shuffle (quality of a random
  order of the documents);
  ``storage`` is ``shuffle=False`` (each split a contiguous range of the table: the cheapest reads,
  so its rate is what the packer itself sustains, the ceiling of every read order).

Kinds and items are interleaved (every item, then every kind, ``--repeats`` times) and the
median and range are reported, with the ratio of medians to the builder's (the scan's columnar
figure is also the reference of the ``vs_scan`` ratios). Results go to ``benchmarks/NAME.json``
(``--save``; default name ``permutation_read``) or ``NAME.local.json``. Wall time on a shared
machine: compare the ratios. The results file is rewritten after every round
(``rounds_done``), so an interrupted run keeps the rounds it finished.

``--fresh`` runs every pass in a new Python process (this script with ``--one KIND/ITEM``; the
clock starts in the child, at the dataset's construction as in-process), so no pass inherits the
heap, threads or caches of the ones before it: in one long process the ratios moved from round to
round (``local_32_256`` rows 5.1x, 4.4x, 3.7x on a quiet machine), and a fresh process per pass is
how ``scale.py`` measures too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
DATA = Path(os.environ.get("ELASTIC_LOADER_BENCH_DATA", HERE / ".data"))
SPLITS = 8
BATCH = 1024
KINDS = ("builder", "computed", "local", "local_32_256", "local_32_1024", "local_256_1024", "scan")
ITEMS = ("rows", "ids", "columnar", "packing")
PACK_KINDS = (
    "builder",
    "local_4_64",
    "local_8_64",
    "local_8_256",
    "local_32_256",
    "local",
    "storage",
    "scan",
)


def ids(batch: Any) -> list[int]:
    """A cheap transform: the ``id`` column as Python ints."""
    out: list[int] = batch.column(0).to_pylist()
    return out


def build(rows: int) -> Any:
    import lance
    import lancedb
    import pyarrow as pa

    where = DATA / f"permread_{rows}"
    if not (where / "built").exists():
        rng = np.random.default_rng(0)
        schema = pa.schema([("id", pa.int64()), ("payload", pa.binary(64))])

        def batches() -> Any:
            for lo in range(0, rows, 1_000_000):
                hi = min(rows, lo + 1_000_000)
                raw = pa.py_buffer(rng.bytes(64 * (hi - lo)))
                payload = pa.FixedSizeBinaryArray.from_buffers(pa.binary(64), hi - lo, [None, raw])
                yield pa.record_batch([pa.array(np.arange(lo, hi, dtype=np.int64)), payload], schema=schema)

        reader = pa.RecordBatchReader.from_batches(schema, batches())
        lance.write_dataset(reader, str(where / "t.lance"), max_rows_per_file=1_000_000, mode="overwrite")
        (where / "built").write_text("ok")
    return lancedb.connect(str(where)).open_table("t")


def permutation(kind: str) -> Any:
    """The ``permutation=`` argument of a kind name (``local_C_W``: ``LocalShuffle(clump=C, window=W)``)."""
    from elastic_loader import LocalShuffle

    if kind.startswith("local_"):
        clump, window = (int(v) for v in kind.split("_")[1:])
        return LocalShuffle(clump=clump, window=window)
    return kind


def options(kind: str) -> dict[str, Any]:
    """The dataset options of a kind: ``storage`` is ``shuffle=False``, every other kind a permutation."""
    return {"shuffle": False} if kind == "storage" else {"permutation": permutation(kind)}


def _scan(table: Any, item: str) -> tuple[int, list[int] | None]:
    columns = ["id"] if item == "ids" else ["id", "payload"]
    n, got = 0, []
    for batch in table.to_lance().to_batches(columns=columns):
        if item == "rows":
            n += len(batch.to_pylist())
        elif item == "ids":
            got.extend(ids(batch))
        else:
            n += batch.num_rows
    return (len(got), got) if item == "ids" else (n, None)


def run(table: Any, kind: str, item: str) -> tuple[float, list[int] | None]:
    """Rows per second of one pass, and the delivered ids (``ids`` item only)."""
    from elastic_loader import StreamingDataLoader, StreamingDataset

    t0 = time.perf_counter()
    if kind == "scan":
        n, got = _scan(table, item)
        return n / (time.perf_counter() - t0), got
    columns = ["id"] if item == "ids" else ["id", "payload"]
    ds = StreamingDataset(
        table,
        num_splits=SPLITS,
        columns=columns,
        transform=ids if item == "ids" else None,
        **options(kind),
    )
    if item == "columnar":
        loader = StreamingDataLoader(ds, batch_size=BATCH, batch_format="arrow")
        n = sum(batch.num_rows for batch in loader)
        return n / (time.perf_counter() - t0), None
    if item == "ids":
        got = list(ds)
        return len(got) / (time.perf_counter() - t0), got
    n = sum(1 for _ in ds)
    return n / (time.perf_counter() - t0), None


def _packing_runs(docs: int, kinds: tuple[str, ...] = PACK_KINDS) -> tuple[dict[str, Callable[[], int]], Any]:
    import peer_workloads as pw
    import workloads as w

    spec = pw.token_spec(docs)
    table = w.token_table(spec)

    runs = {
        kind: w.packed_epoch("elastic_loader", table, spec, num_splits=SPLITS, **options(kind))
        for kind in kinds
        if kind != "scan"
    }
    runs["scan"] = pw.scan_tokens(table)
    return runs, table


def order_quality(kind: str, num_rows: int) -> dict[str, float]:
    """The quality of a permutation's read order (every split round robin), from the order itself."""
    import quality

    if kind == "builder":  # LanceDB's global shuffle: a seeded random order stands for it
        return quality.summary(np.random.default_rng(0).permutation(num_rows), num_rows)
    return quality.summary(np.stack(split_orders(kind, num_rows)).T.reshape(-1), num_rows)


def split_orders(kind: str, num_rows: int, seed: int = 0) -> list[np.ndarray]:
    """Every split's documents in the order it reads them at ``shuffle_seed=seed``, epoch 0
    (``builder``: a random order seeded by ``seed`` cut into ``SPLITS`` contiguous parts stands for
    LanceDB's shuffle; ``storage``: contiguous ranges)."""
    from elastic_loader._pipeline._computed import ComputedPermutation
    from elastic_loader._pipeline._local import LocalPermutation

    m = num_rows // SPLITS
    if kind in ("builder", "storage"):
        rows = np.random.default_rng(seed).permutation(num_rows) if kind == "builder" else np.arange(num_rows)
        return [rows[s * m : (s + 1) * m] for s in range(SPLITS)]
    perm: Any
    if kind == "computed":
        perm = ComputedPermutation(num_rows, SPLITS, seed, 0)
    else:
        from elastic_loader import LocalShuffle

        shape = LocalShuffle() if kind == "local" else permutation(kind)
        perm = LocalPermutation(num_rows, SPLITS, seed, 0, shape.clump, shape.window)
    return [perm.positions(s, 0, perm.split_len).astype(np.int64) for s in range(SPLITS)]


def packed_order(orders: list[np.ndarray], lengths: np.ndarray, length: int) -> np.ndarray:
    """The documents in the order packed blocks deliver their starts: each split's documents (and
    an EOS each) in its read order, cut into blocks of ``length`` tokens; cycle ``r`` delivers block
    ``r`` of split 0, then of split 1, ... A document belongs to the block it starts in."""
    keys = []
    for s, docs in enumerate(orders):
        starts = np.cumsum(lengths[docs] + 1) - (lengths[docs] + 1)
        keys.append(starts // length * len(orders) + s)
    return np.concatenate(orders)[np.argsort(np.concatenate(keys), kind="stable")]


def delivered_summary(kind: str, lengths: np.ndarray, seed: int = 0) -> dict[str, float]:
    """``quality.summary`` of the order the packed blocks of ``kind`` (at ``seed``) deliver the
    documents whose token counts are ``lengths`` (by id), without reading them."""
    import peer_workloads as pw
    import quality

    docs = len(lengths)
    return quality.summary(packed_order(split_orders(kind, docs, seed), lengths, pw.PACK), docs)


def document_lengths(table: Any) -> np.ndarray:
    """Tokens of every document of a token table, by id (the ids are the storage positions)."""
    import pyarrow.compute as pc

    lengths = np.zeros(table.count_rows(), dtype=np.int64)
    for batch in table.to_lance().to_batches(columns=["id", "tokens"]):
        lengths[batch.column("id").to_numpy()] = pc.list_value_length(batch.column("tokens")).to_numpy()
    return lengths


def timed(go: Callable[[], int]) -> float:
    t0 = time.perf_counter()
    n = go()
    return n / (time.perf_counter() - t0)


def summarise(rates: dict[str, list[float]], kinds: list[str], item: str) -> dict[str, Any]:
    base = statistics.median(rates[f"builder/{item}"]) if f"builder/{item}" in rates else None
    scan = statistics.median(rates[f"scan/{item}"]) if f"scan/{item}" in rates else None
    out: dict[str, Any] = {}
    for kind in kinds:
        values = rates.get(f"{kind}/{item}")
        if not values:
            continue
        median = statistics.median(values)
        out[f"{kind}/{item}"] = {
            "per_s": round(median),
            "min": round(min(values)),
            "max": round(max(values)),
            "vs_builder": None if base is None else round(median / base, 2),
            "vs_scan": None if scan is None else round(median / scan, 3),
            "round_ratios_vs_builder": None
            if base is None
            else [round(v / b, 2) for v, b in zip(values, rates[f"builder/{item}"])],
        }
    return out


def one(table: Any, rows: int, docs: int, what: str) -> dict[str, Any]:
    """One pass ``KIND/ITEM`` (the body of ``--one``): its rate and, for ``ids``, its quality."""
    import quality

    kind, item = what.split("/")
    if item == "packing":
        packing, _ = _packing_runs(docs, (kind,))
        return {"rate": timed(packing[kind]), "quality": None}
    rate, got = run(table, kind, item)
    return {"rate": rate, "quality": None if got is None else quality.summary(got, rows)}


def fresh(args: argparse.Namespace, what: str) -> dict[str, Any]:
    """``one(what)`` in a new Python process."""
    command = [sys.executable, __file__, "--one", what, "--rows", str(args.rows), "--docs", str(args.docs)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--items", default=",".join(ITEMS))
    parser.add_argument("--name", default="permutation_read", help="results file name (without .json)")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="every pass in a new process")
    parser.add_argument("--one", metavar="KIND/ITEM", help=argparse.SUPPRESS)  # a --fresh child
    args = parser.parse_args()
    import meta
    import quality

    kinds, items = args.kinds.split(","), args.items.split(",")
    table = build(args.rows)
    if args.one:
        print(json.dumps(one(table, args.rows, args.docs, args.one)))
        return
    packing: dict[str, Callable[[], int]] = {}
    docs = 0
    if "packing" in items:
        packing, tokens = _packing_runs(args.docs)
        docs = int(tokens.count_rows())
    rates: dict[str, list[float]] = {}
    qualities: dict[str, dict[str, float]] = {}
    pack_quality = {k: order_quality(k, docs) for k in PACK_KINDS if k != "scan"} if packing else {}
    delivered_quality: dict[str, dict[str, float]] = {}
    if packing:
        lengths = document_lengths(tokens)
        delivered_quality = {k: delivered_summary(k, lengths) for k in PACK_KINDS if k != "scan"}
    path = meta.results_path(args.name, args.save)
    for round_ in range(args.repeats):
        for item in items:
            for kind in PACK_KINDS if item == "packing" else kinds:
                if args.fresh:
                    got_one = fresh(args, f"{kind}/{item}")
                    rate = got_one["rate"]
                    if got_one["quality"] is not None and round_ == 0:
                        qualities[kind] = got_one["quality"]
                elif item == "packing":
                    rate = timed(packing[kind])
                else:
                    rate, got = run(table, kind, item)
                    if got is not None and round_ == 0:
                        qualities[kind] = quality.summary(got, args.rows)
                rates.setdefault(f"{kind}/{item}", []).append(rate)
                print(f"round {round_} {kind}/{item}: {rate:,.0f}/s", flush=True)
        summary: dict[str, Any] = {}
        for item in items:
            summary.update(summarise(rates, list(PACK_KINDS) if item == "packing" else kinds, item))
        results = {
            **meta.provenance(),
            "rows": args.rows,
            "docs": args.docs,
            "repeats": args.repeats,
            "rounds_done": round_ + 1,
            "results": summary,
            "quality": {
                "rows (delivered ids)": qualities,
                "packing (document read order)": pack_quality,
                "packing (documents as packed blocks deliver them)": delivered_quality,
            },
            "quality_definitions": quality.DEFINITIONS,
            "quality_bar": quality.BAR,
            "passes_bar": {
                section: {kind: quality.passes(q) for kind, q in measures.items()}
                for section, measures in (
                    ("rows", qualities),
                    ("packing read order", pack_quality),
                    ("packing delivered", delivered_quality),
                )
            },
            "raw": rates,
        }
        meta.write(path, results)  # after every round: an interrupted run keeps its finished rounds
    print(json.dumps({"results": summary, "quality": results["quality"]}, indent=2))


if __name__ == "__main__":
    main()
