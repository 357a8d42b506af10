"""The shuffle quality of the packing loaders' document order, read off the blocks each delivers.

Usage::

    .venv/bin/python benchmarks/token_order_quality.py [--docs 200000]
        [--only NAME,...] [--seeds 1] [--json PATH]

Rules:

* Each loader (``--only``, named as in ``peer_workloads.TOKEN_LOADERS``: elastic-loader's default
  and ``LocalShuffle`` orders, lance.torch's ``ShardedBatchSampler`` with the numpy packer, litdata's
  ``TokensLoader``; default :data:`DEFAULT`) runs one epoch over ``peer_workloads.token_spec(docs)``
  per seed (``--seeds N``: ``shuffle_seed``, or litdata's ``seed``, 0 .. N-1; lance.torch's sampler
  has its own fixed seed); a block is the ``L``-token row a trainer steps on.
* Which document each block holds is read from its tokens, the same way for every loader: a
  document starts after an EOS, and its first ``NGRAM`` tokens name it (the table's token ids are
  random, so ``NGRAM`` of them name one document; the names of every document are collected from
  the table first). A document start in a block's last ``NGRAM - 1`` tokens, and the stream's first
  document, are not named and count as ``unnamed``.
* The named documents in delivery order are scored by ``quality.summary`` (a document's id is its
  storage position), as the row loaders' ids are: the columns of ``peers.py``.
* Results go to the JSON path given, with ``meta.provenance()``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import meta
import peer_workloads as pw
import quality
import workloads as w

NGRAM = 4
"""Tokens that name a document (50,000 ids: 6e18 names for 2e5 documents)."""


def names(table: Any) -> dict[tuple[int, ...], int]:
    """Every document's first ``NGRAM`` tokens -> its id (documents are at least 128 tokens)."""
    out: dict[tuple[int, ...], int] = {}
    for batch in table.to_lance().to_batches(columns=["id", "tokens"]):
        ids, column = batch.column("id").to_numpy(), batch.column("tokens")
        offsets, values = column.offsets.to_numpy(), column.values.to_numpy()
        for i, doc in enumerate(ids.tolist()):
            out[tuple(values[offsets[i] : offsets[i] + NGRAM].tolist())] = doc
    if len(out) != table.count_rows():
        raise RuntimeError("two documents start with the same tokens: raise NGRAM")
    return out


def ours(table: Any, spec: w.TokenTable, options: dict[str, Any], seed: int) -> Iterator[np.ndarray]:
    from elastic_loader import StreamingDataLoader

    splits = options.pop("num_splits", pw.NUM_SPLITS)
    budget = w.blocks_per_epoch(table, spec, splits)
    ds = w.packed_dataset("elastic_loader", table, spec, splits, budget, shuffle_seed=seed, **options)
    for batch in StreamingDataLoader(ds, batch_size=pw.PACKED_BATCH, batch_format="torch"):
        yield from batch["input_ids"].numpy()


def lance_torch(table: Any) -> Iterator[np.ndarray]:
    for blocks in pw._lance_torch_packed(table.to_lance()):
        yield from blocks


def litdata(table: Any, seed: int) -> Iterator[np.ndarray]:
    from litdata import StreamingDataset, TokensLoader

    path = pw.litdata_tokens(table)
    for block in StreamingDataset(
        str(path), item_loader=TokensLoader(block_size=pw.PACK), shuffle=True, seed=seed
    ):
        yield block.numpy()


def order(blocks: Iterator[np.ndarray], named: dict[tuple[int, ...], int]) -> tuple[np.ndarray, int]:
    """The documents the blocks start, in delivery order, and how many starts were not named."""
    got: list[int] = []
    unnamed = 0
    for block in blocks:
        for start in (np.flatnonzero(block == pw.EOS) + 1).tolist():
            doc = named.get(tuple(block[start : start + NGRAM].tolist()))
            if doc is None:
                unnamed += start < len(block)  # a start past the block's end is the next block's
            else:
                got.append(doc)
    return np.asarray(got, dtype=np.int64), unnamed


def elastic(table: Any, spec: w.TokenTable, name: str, seed: int) -> Iterator[np.ndarray]:
    """elastic-loader's packed batches for a name of ``peer_workloads``'s scheme: ``elastic_loader``
    (the default permutation, 8 splits) or ``elastic_local_C_W`` (``LocalShuffle(C, W)``, 8 splits),
    with ``_split1`` for one split (and an ignored ``_b64``)."""
    from elastic_loader import LocalShuffle

    options: dict[str, Any] = {"num_splits": 1 if "_split1" in name else pw.NUM_SPLITS}
    if name.startswith("elastic_local_"):
        clump, window = (int(v) for v in name.removeprefix("elastic_local_").split("_")[:2])
        options["permutation"] = LocalShuffle(clump, window)
    elif name != "elastic_loader" and not name.startswith("elastic_loader_"):
        raise ValueError(f"unknown elastic-loader case {name!r}")
    return ours(table, spec, options, seed)


DEFAULT = (
    "elastic_loader",
    "elastic_local_8_64",
    "elastic_local_8_256",
    "elastic_local_256_1_split1_b64",
    "elastic_local_1024_4096_split1_b64",
    "lance_torch_b64",
    "litdata_tokens",
)


def blocks_of(name: str, table: Any, spec: w.TokenTable, seed: int) -> Iterator[np.ndarray]:
    if name.startswith("elastic_"):
        return elastic(table, spec, name, seed)
    if name.startswith("lance_torch"):
        return lance_torch(table)
    if name.startswith("litdata"):
        return litdata(table, seed)
    raise ValueError(f"unknown loader {name!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument(
        "--seeds", type=int, default=1, help="shuffle seeds 0 .. N-1, each an epoch of its own"
    )
    parser.add_argument("--only", default="", help="loaders to run (comma-separated)")
    parser.add_argument("--json", type=Path, help="where to write the results")
    args = parser.parse_args()
    w.quiet()
    pw.preload()
    spec = pw.token_spec(args.docs)
    table = w.token_table(spec)
    named = names(table)
    results: dict[str, Any] = {}
    for name in args.only.split(",") if args.only else DEFAULT:
        for seed in range(args.seeds):
            got, unnamed = order(blocks_of(name, table, spec, seed), named)
            key = name if args.seeds == 1 else f"{name}/seed{seed}"
            results[key] = {"named": int(got.size), "distinct": int(np.unique(got).size), "unnamed": unnamed}
            results[key]["quality"] = quality.summary(got, args.docs)
            q = results[key]["quality"]
            print(
                f"{key:42s} named {got.size:>7,d} unnamed {unnamed:>4d}  |corr| {q['abs_corr']:.3f}"
                f"  adjacent {q['adjacent']:.3f}  head deciles {q['head_decile_spread']:.3f}"
                f"  headKS {q['head_ks']:.3f}  bar {'yes' if quality.passes(q) else 'no'}",
                flush=True,
            )
    out = {**meta.provenance(), "docs": args.docs, "ngram": NGRAM, "loaders": results}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
