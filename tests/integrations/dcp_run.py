"""One rank of a job that saves its StreamingDataLoader with torch.distributed.checkpoint, or loads it.

Run under ``torchrun`` (gloo); rows first, then packing, each in its own folder ``<out>/rows``,
``<out>/packed``. ``save``: take ``--batches`` batches, write the delivered items to
``save<rank>.json`` and ``dcp.save({"dataloader": loader})``. ``load``: ``dcp.load`` the same key
into a fresh loader on this world size, iterate the rest of the epoch, write ``load<rank>.json``.
Items are row ids (rows) or the blocks' token lists (packing).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import lancedb
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from elastic_loader import StreamingDataLoader, StreamingDataset

PACKED: dict[str, Any] = {
    "columns": ["tokens"],
    "pack_sequences": 6,
    "eos_id": 1,
    "pad_id": 0,
    "blocks_per_epoch": 36,
}


def loader(uri: str, packed: bool, world_size: int, rank: int) -> StreamingDataLoader:
    table = lancedb.connect(uri).open_table("t")
    options = PACKED if packed else {"columns": ["id"]}
    dataset = StreamingDataset(table, num_splits=6, world_size=world_size, rank=rank, **options)
    return StreamingDataLoader(dataset, batch_size=3)


def items(batch: Any, packed: bool) -> list[Any]:
    return batch["input_ids"].tolist() if packed else batch["id"].tolist()


def run(mode: str, uri: str, ckpt: str, out: Path, packed: bool, batches: int) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ours = loader(uri, packed, world_size, rank)
    got: list[Any] = []
    if mode == "save":
        it = iter(ours)
        for _ in range(batches):
            got += items(next(it), packed)
        dcp.save({"dataloader": ours}, checkpoint_id=ckpt)
    else:
        dcp.load({"dataloader": ours}, checkpoint_id=ckpt)
        for batch in ours:
            got += items(batch, packed)
    (out / f"{mode}{rank}.json").write_text(json.dumps(got))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["save", "load"])
    parser.add_argument("uri")
    parser.add_argument("out", help="a directory: rows/ and packed/ hold each mode's checkpoint and items")
    parser.add_argument("--batches", type=int, default=4)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    for name, packed in (("rows", False), ("packed", True)):
        where = Path(args.out, name)
        where.mkdir(parents=True, exist_ok=True)
        run(args.mode, args.uri, str(where / "ckpt"), where, packed, args.batches)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("LANCEDB_LOG", "error")
    main()
