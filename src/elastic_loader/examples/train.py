"""Elastic, resumable data-parallel training over a LanceDB table (``torchrun`` ready).

Run it on one node with four processes::

    torchrun --standalone --nproc-per-node 4 -m elastic_loader.examples.train \\
        --db /tmp/el/db --checkpoint-dir /tmp/el/ckpt

Kill it at any moment (even ``kill -9``) and start it again with any number of
processes that divides ``--num-splits``: it resumes from the last checkpoint and
trains on exactly the samples an uninterrupted run would have used, step by
step. Without ``torchrun`` it runs as a single process.

What it does:

* rank 0 creates the table (``id``, 8 features ``x``, a target ``y``) if it is
  missing; every rank opens it through :class:`TableOpener`, the picklable
  ``connection_factory`` its DataLoader workers also use (``s3://`` URIs take
  their credentials from the environment, never from pickles);
* a linear model (float64) trained with SGD and momentum; each rank computes the
  gradient sum of its batch, one all-reduce adds them, and the step divides by
  the global number of samples, so the update is the same for every world size;
* a global step is ``max(1, workers)`` batches per rank of
  ``num_splits / world_size / max(1, workers) * cycles`` rows each: together, the
  ranks' batches of step ``g`` are cycles ``[g*cycles, (g+1)*cycles)`` of every
  split, whatever the world size;
* after every step, the ranks' loader states are merged
  (:func:`elastic_loader.distributed.merged_state_dict`) and rank 0 writes
  ``{step, epoch, model, optimizer, loader}`` atomically to
  ``<checkpoint-dir>/checkpoint.pt``
  (:func:`elastic_loader.distributed.save_checkpoint`);
* ``StreamingDataLoader(sync_epoch_end=True)`` (on unless
  ``--no-sync-epoch-end``) makes all ranks end an epoch at the same step even
  when skipped rows (``--skip-ids``) empty one rank early.

Step log (for checking runs): rank 0 writes ``<checkpoint-dir>/steps/attempt-NNNN.jsonl``,
one file per launch: a header ``{"attempt", "world_size", "workers", "resumed_from",
"epoch"}``, then ``{"step", "epoch", "ids"}`` per global step (the sorted ``id``
values the ranks trained on), written and flushed before that step's checkpoint,
then ``{"end": step}`` when it finishes cleanly. Each rank also writes
``attempt-NNNN.rank-R.json`` with its final step when it stops cleanly.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
import torch.distributed as dist

from elastic_loader import MixtureSource, StreamingDataLoader, StreamingDataset, StreamingMixture
from elastic_loader.distributed import load_checkpoint, merged_state_dict, save_checkpoint

FEATURES = 8
SOURCE_IDS = 1_000_000
"""Mixture mode: source ``k``'s ids start at ``k * SOURCE_IDS``, so an id names its source."""
CHECKPOINT = "checkpoint.pt"

# Environment variables read by :func:`storage_options_from_env`, by storage option.
_S3_ENV = {
    "aws_endpoint": "AWS_ENDPOINT_URL",
    "aws_region": "AWS_REGION",
    "allow_http": "AWS_ALLOW_HTTP",
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "aws_session_token": "AWS_SESSION_TOKEN",
}


def storage_options_from_env(uri: str) -> dict[str, str]:
    """LanceDB storage options for ``uri`` taken from ``AWS_*`` environment variables (``s3://`` only)."""
    if not uri.startswith("s3://"):
        return {}
    return {option: os.environ[var] for option, var in _S3_ENV.items() if os.environ.get(var)}


@dataclass(frozen=True)
class TableOpener:
    """A picklable ``connection_factory``: reopens a table of the database at ``uri``.

    Only the URI is pickled; credentials come from the environment of the
    process that opens the table (see :func:`storage_options_from_env`).
    """

    uri: str

    def connect(self) -> Any:
        """A LanceDB connection to ``uri``."""
        import lancedb

        return lancedb.connect(self.uri, storage_options=storage_options_from_env(self.uri) or None)

    def __call__(self, name: str) -> Any:
        return self.connect().open_table(name)


def build_table(opener: TableOpener, name: str, rows: int, seed: int = 0, first_id: int = 0) -> Any:
    """Create table ``name`` (``rows`` rows, ids from ``first_id`` on) unless it exists; return it."""
    db = opener.connect()
    if name not in db.list_tables().tables:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
        w = np.linspace(-1.0, 1.0, FEATURES)
        y = x.astype(np.float64) @ w + 0.1 * rng.standard_normal(rows)
        features = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), FEATURES)
        ids = np.arange(first_id, first_id + rows, dtype=np.int64)
        db.create_table(name, pa.table({"id": ids, "x": features, "y": y}))
    return db.open_table(name)


class SkippedRow(ValueError):
    """Raised by :class:`Examples` for the rows it is told to skip."""


@dataclass(frozen=True)
class Examples:
    """The transform: one ``{"id", "x", "y"}`` dict per row; rows in ``skip_ids`` raise.

    With ``on_transform_error="skip"`` the loader drops the raising rows.
    """

    skip_ids: frozenset[int] = field(default_factory=frozenset)

    def __call__(self, batch: pa.RecordBatch) -> list[dict[str, Any]]:
        ids = batch.column("id").to_numpy()
        bad = self.skip_ids.intersection(ids.tolist())
        if bad:
            raise SkippedRow(f"rows {sorted(bad)} are skipped on purpose")
        x = batch.column("x").flatten().to_numpy().reshape(-1, FEATURES).copy()
        y = batch.column("y").to_numpy()
        return [{"id": int(ids[i]), "x": x[i], "y": float(y[i])} for i in range(len(ids))]


@dataclass(frozen=True)
class Config:
    """Everything one launch needs (the command-line options)."""

    db: str
    checkpoint_dir: Path
    table: str = "examples"
    rows: int = 1200
    num_splits: int = 12
    cycles: int = 2
    workers: int = 1
    epochs: int = 1
    seed: int = 7
    lr: float = 0.05
    read_batch_size: int = 16
    skip_ids: frozenset[int] = frozenset()
    sync_epoch_end: bool = True
    stop_after: int | None = None
    step_sleep: float = 0.0
    mixture: tuple[tuple[str, int], ...] = ()
    """Mixture mode: ``(source name, rows)`` of every source table (``<table>_<name>``, ids from
    ``k * SOURCE_IDS`` for source ``k``); empty: one table."""
    weights: tuple[float, ...] = ()
    """The mixture's weights (one per source); on resume they apply from the resumed step on."""
    save: str = "merged"
    """``merged``: every rank's state merged over the group (``merged_state_dict``); ``rank0``: rank 0
    saves its own ``state_dict()`` alone, as Lightning does (no collective; the other ranks' splits
    are inferred, the ranks being in lockstep)."""


@dataclass
class Summary:
    """What one process did in one launch."""

    rank: int
    world_size: int
    resumed_from: int
    last_step: int
    samples: int
    seconds: float
    epoch_end_steps: list[int]
    weights: list[float]


class _World:
    """Rank, world size and the collectives this script needs (no-ops for one process)."""

    def __init__(self) -> None:
        self.distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
        if self.distributed and not dist.is_initialized():
            dist.init_process_group("gloo")
        self.rank = dist.get_rank() if self.distributed else 0
        self.size = dist.get_world_size() if self.distributed else 1

    def broadcast(self, obj: Any) -> Any:
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def gather_ids(self, ids: list[int]) -> list[int] | None:
        if not self.distributed:
            return sorted(ids)
        out: list[list[int]] | None = [[] for _ in range(self.size)] if self.rank == 0 else None
        dist.gather_object(ids, out, dst=0)
        return None if out is None else sorted(i for part in out for i in part)

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def close(self) -> None:
        if self.distributed:
            dist.destroy_process_group()


def _steps(loader: StreamingDataLoader, per_step: int) -> Iterator[list[Any]]:
    """Group the loader's batches into global steps of ``per_step`` batches (the last may be short)."""
    iterator = iter(loader)
    try:
        while True:
            step = []
            for batch in iterator:
                step.append(batch)
                if len(step) == per_step:
                    break
            if not step:
                return
            yield step
            if len(step) < per_step:
                return
    finally:
        iterator.close()


class _StepLog:
    """Rank 0's append-only step log, one file per launch."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        number = len(list(directory.glob("attempt-*.jsonl")))
        self.name = f"attempt-{number:04d}"
        self._handle = (directory / f"{self.name}.jsonl").open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


def _mixture(config: Config, opener: TableOpener, world: _World, epoch: int) -> StreamingMixture:
    """Mixture mode: one source per table, each with its own seed; sources drained ("renormalize")."""
    sources = {
        name: MixtureSource(
            opener(f"{config.table}_{name}"),
            shuffle_seed=config.seed + k,
            columns=["id", "x", "y"],
            read_batch_size=config.read_batch_size,
            transform=Examples(config.skip_ids),
            transform_parallelism=1,
            connection_factory=opener,
        )
        for k, (name, _) in enumerate(config.mixture)
    }
    return StreamingMixture(
        sources,
        list(config.weights),
        num_splits=config.num_splits,
        rank=world.rank,
        world_size=world.size,
        seed=config.seed,
        epoch=epoch,
        on_exhausted="renormalize",
    )


def _dataset(config: Config, table: Any, opener: TableOpener, world: _World, epoch: int) -> Any:
    if config.mixture:
        return _mixture(config, opener, world, epoch)
    return StreamingDataset(
        table,
        num_splits=config.num_splits,
        shuffle_seed=config.seed,
        epoch=epoch,
        rank=world.rank,
        world_size=world.size,
        columns=["id", "x", "y"],
        read_batch_size=config.read_batch_size,
        transform=Examples(config.skip_ids),
        transform_parallelism=1,
        on_transform_error="skip" if config.skip_ids else "raise",
        connection_factory=opener,
    )


def _batch_shape(config: Config, world: _World) -> tuple[int, int]:
    """``(batches per global step, batch size)``: one global step is ``config.cycles`` cycles."""
    splits_per_rank = config.num_splits // world.size
    per_step = max(1, config.workers)
    if config.num_splits % world.size or splits_per_rank % per_step:
        raise SystemExit(
            f"num_splits={config.num_splits} must be divisible by world_size={world.size} times "
            f"workers={per_step}"
        )
    return per_step, splits_per_rank // per_step * config.cycles


def _sgd_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, world: _World, batches: list[Any]
) -> list[int]:
    """One optimizer step on a global step's batches (gradients averaged over every rank's rows)."""
    ids = [int(i) for b in batches for i in b["id"].tolist()]
    x = torch.cat([b["x"] for b in batches]).to(torch.float64)
    y = torch.cat([b["y"] for b in batches]).to(torch.float64)
    optimizer.zero_grad()
    loss = ((model(x).squeeze(-1) - y) ** 2).sum()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = world.all_sum(torch.cat([g.reshape(-1) for g in grads] + [torch.tensor([float(len(ids))])]))
    total, offset = flat[-1], 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g) / total)
        offset += g.numel()
    optimizer.step()
    return ids


def _loader_state(config: Config, dataset: Any, world: _World) -> dict[str, object] | None:
    """What this rank contributes to the checkpoint: the merged state, or rank 0's own state alone."""
    if config.save == "merged":
        return merged_state_dict(dataset)
    return dataset.state_dict() if world.rank == 0 else None


def train(config: Config) -> Summary:
    """One launch of the training job in this process (one rank under ``torchrun``)."""
    world = _World()
    if world.distributed:
        torch.set_num_threads(1)  # several ranks share the machine's cores
    opener = TableOpener(config.db)
    if world.rank == 0:
        build_table(opener, config.table, config.rows, config.seed)
        for k, (name, rows) in enumerate(config.mixture):
            build_table(opener, f"{config.table}_{name}", rows, config.seed + k, k * SOURCE_IDS)
    world.barrier()
    table = opener(config.table)
    workers = config.workers
    per_step, batch_size = _batch_shape(config, world)

    torch.manual_seed(config.seed)
    model = torch.nn.Linear(FEATURES, 1, dtype=torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=0.9)
    path = config.checkpoint_dir / CHECKPOINT
    checkpoint = load_checkpoint(path)
    step, epoch, loader_state = 0, 0, None
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        step, epoch, loader_state = int(checkpoint["step"]), int(checkpoint["epoch"]), checkpoint["loader"]
    resumed_from = step
    log = _StepLog(config.checkpoint_dir / "steps") if world.rank == 0 else None
    attempt = world.broadcast(None if log is None else log.name)
    if log is not None:
        log.write(
            {
                "attempt": attempt,
                "world_size": world.size,
                "workers": workers,
                "resumed_from": step,
                "epoch": epoch,
                "time": time.time(),
            }
        )

    samples, epoch_end_steps = 0, []
    started = time.perf_counter()
    stopped = config.stop_after is not None and step >= config.stop_after
    while epoch < config.epochs and not stopped:
        dataset = _dataset(config, table, opener, world, epoch)
        if loader_state is not None:
            dataset.load_state_dict(loader_state)
            loader_state = None
        loader = StreamingDataLoader(
            dataset,
            batch_size=batch_size,
            num_workers=workers,
            sync_epoch_end=config.sync_epoch_end and world.distributed,
        )
        for batches in _steps(loader, per_step):
            ids = _sgd_step(model, optimizer, world, batches)
            if config.step_sleep:
                time.sleep(config.step_sleep)
            step += 1
            samples += len(ids)
            union = world.gather_ids(ids)
            state = _loader_state(config, dataset, world)
            if log is not None:
                log.write({"step": step, "epoch": epoch, "ids": union, "time": time.time()})
                save_checkpoint(
                    {
                        "step": step,
                        "epoch": epoch,
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "loader": state,
                        "world_size": world.size,
                    },
                    path,
                )
            if config.stop_after is not None and step >= config.stop_after:
                stopped = True
                break
        if not stopped:
            epoch_end_steps.append(step)
            epoch += 1
    seconds = time.perf_counter() - started
    weights = [float(v) for p in model.parameters() for v in p.detach().reshape(-1).tolist()]
    summary = Summary(world.rank, world.size, resumed_from, step, samples, seconds, epoch_end_steps, weights)
    if attempt is not None:
        report = config.checkpoint_dir / "steps" / f"{attempt}.rank-{world.rank}.json"
        report.write_text(json.dumps(summary.__dict__))
    if log is not None:
        log.write({"end": step, "samples": samples, "seconds": seconds})
        log.close()
    world.barrier()
    world.close()
    return summary


def parse_args(argv: list[str] | None = None) -> Config:
    """The :class:`Config` of a command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", required=True, help="LanceDB database URI (a directory or s3://bucket/path)")
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--table", default=Config.table)
    parser.add_argument("--rows", type=int, default=Config.rows, help="rows of the table when it is created")
    parser.add_argument("--num-splits", type=int, default=Config.num_splits)
    parser.add_argument("--cycles", type=int, default=Config.cycles, help="cycles of every split per step")
    parser.add_argument("--workers", type=int, default=Config.workers, help="DataLoader workers per rank")
    parser.add_argument("--epochs", type=int, default=Config.epochs)
    parser.add_argument("--seed", type=int, default=Config.seed)
    parser.add_argument("--lr", type=float, default=Config.lr)
    parser.add_argument("--read-batch-size", type=int, default=Config.read_batch_size)
    parser.add_argument("--skip-ids", default="", help="comma-separated ids whose transform fails (skipped)")
    parser.add_argument("--no-sync-epoch-end", action="store_true", help="let ranks end epochs independently")
    parser.add_argument("--stop-after", type=int, default=None, help="stop cleanly after this global step")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds of simulated compute per step")
    parser.add_argument(
        "--mixture",
        default="",
        help="mixture mode: name:rows,... of the source tables (e.g. web:2400,code:1200)",
    )
    parser.add_argument("--weights", default="", help="mixture weights, one per source (e.g. 5,3,2)")
    parser.add_argument(
        "--save",
        choices=("merged", "rank0"),
        default="merged",
        help="merge every rank's state, or let rank 0 save its own state_dict() alone",
    )
    args = parser.parse_args(argv)
    return Config(
        db=args.db,
        checkpoint_dir=args.checkpoint_dir,
        table=args.table,
        rows=args.rows,
        num_splits=args.num_splits,
        cycles=args.cycles,
        workers=args.workers,
        epochs=args.epochs,
        seed=args.seed,
        lr=args.lr,
        read_batch_size=args.read_batch_size,
        skip_ids=frozenset(int(v) for v in args.skip_ids.split(",") if v.strip()),
        sync_epoch_end=not args.no_sync_epoch_end,
        stop_after=args.stop_after,
        step_sleep=args.step_sleep,
        save=args.save,
        mixture=tuple((n, int(r)) for n, r in (p.split(":") for p in args.mixture.split(",") if p)),
        weights=tuple(float(w) for w in args.weights.split(",") if w),
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point: train, print one summary line per rank."""
    summary = train(parse_args(argv))
    print(
        f"rank {summary.rank}/{summary.world_size}: steps {summary.resumed_from + 1}..{summary.last_step}, "
        f"{summary.samples} samples in {summary.seconds:.1f}s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
