"""A Lightning training run over a StreamingDataLoader, written as a user would (no glue).

``fit`` trains a one-weight model for ``max_epochs`` epochs with ``ModelCheckpoint(every_n_train_steps)``
and returns the ids of every batch each step trained on, in order (``(epoch, ids)``), optionally
crashing before step ``crash_at`` or resuming from a checkpoint. Run as a script (under ``torchrun``
for DDP) it writes that history to ``<out>/rank<r>.json``.

The dataset is built in ``train_dataloader`` from the trainer's rank and world size; the loader is a
plain ``StreamingDataLoader``: Lightning finds its ``state_dict``/``load_state_dict`` by itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint

from elastic_loader import StreamingDataLoader, StreamingDataset


class Crash(Exception):
    """The simulated failure of an interrupted run."""


def make_table(uri: str, rows: int) -> None:
    """The table ``t`` of ``rows`` rows with an ``id`` column (``0..rows-1``)."""
    data = pa.table({"id": pa.array(range(rows), pa.int64())})
    lancedb.connect(uri).create_table("t", data, mode="overwrite")


class Model(pl.LightningModule):
    def __init__(self, uri: str, num_workers: int, batch_size: int, num_splits: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.uri, self.num_workers = uri, num_workers
        self.batch_size, self.num_splits = batch_size, num_splits
        self.seen: list[tuple[int, list[int]]] = []

    def train_dataloader(self) -> StreamingDataLoader:
        table = lancedb.connect(self.uri).open_table("t")
        trainer = self.trainer
        dataset = StreamingDataset(
            table,
            num_splits=self.num_splits,
            columns=["id"],
            world_size=trainer.world_size,
            rank=trainer.global_rank,
        )
        return StreamingDataLoader(dataset, batch_size=self.batch_size, num_workers=self.num_workers)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen.append((self.current_epoch, [int(v) for v in batch["id"].tolist()]))
        return (self.weight * batch["id"].float()).mean() ** 2

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-4)


class CrashBefore(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise Crash(f"stopped before step {self.step + 1}")


def fit(
    uri: str,
    ckpt_dir: str,
    *,
    num_workers: int = 0,
    batch_size: int = 4,
    num_splits: int = 2,
    max_epochs: int = 3,
    every: int = 13,
    crash_at: int | None = None,
    resume: str | None = None,
    **trainer_options: Any,
) -> list[tuple[int, list[int]]]:
    """The batches trained on by this process, in order."""
    model = Model(uri, num_workers, batch_size, num_splits)
    callbacks: list[Callback] = [
        ModelCheckpoint(dirpath=ckpt_dir, filename="{step}", every_n_train_steps=every, save_top_k=-1)
    ]
    if crash_at is not None:
        callbacks.append(CrashBefore(crash_at))
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=max_epochs,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **trainer_options,
    )
    with contextlib.suppress(Crash):
        trainer.fit(model, ckpt_path=resume)
    return model.seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("ckpt_dir")
    parser.add_argument("out")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--crash-at", type=int)
    parser.add_argument("--resume")
    args = parser.parse_args()
    seen = fit(
        args.uri,
        args.ckpt_dir,
        num_workers=args.num_workers,
        crash_at=args.crash_at,
        resume=args.resume,
        devices=int(os.environ.get("WORLD_SIZE", "1")),
        strategy="ddp",
    )
    rank = int(os.environ.get("RANK", "0"))
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
