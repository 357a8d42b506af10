"""Checkpoint helpers for multi-process training with ``torch.distributed``.

Protocol (see ``docs/DISTRIBUTED.md``): at the end of a global step, when every
rank has taken its batch(es), each rank's ``dataset.state_dict()`` is exact for
the splits it owns. :func:`merged_state_dict` exchanges those states over the
process group and merges them into one topology-free state; one process writes
it (with the model) through :func:`save_checkpoint`, which never leaves a torn
file behind. On restart, with any world size that divides ``num_splits``,
:func:`load_checkpoint` reads the file on one rank and hands it to all of them;
every rank loads the same merged state into its new dataset.

Without an initialised process group the helpers work for a single process.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from . import StreamingDataset, StreamingMixture

__all__ = ["merged_state_dict", "save_checkpoint", "load_checkpoint"]


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def merged_state_dict(dataset: StreamingDataset | StreamingMixture, group: Any = None) -> dict[str, object]:
    """Every rank's ``dataset.state_dict()``, exchanged over ``group`` and merged.

    A collective: every rank of ``group`` must call it at the same global step.
    Every rank receives the same merged state. When a rank cannot checkpoint
    (its ``state_dict()`` raises), all ranks raise, so none waits forever.

    Args:
        dataset: this rank's dataset (the one its ``StreamingDataLoader`` commits into).
        group: the process group; ``None`` is the default group.

    Returns:
        The merged checkpoint, loadable on any topology.

    Raises:
        RuntimeError: some rank's ``state_dict()`` failed (the message names the ranks).
    """
    try:
        mine: dict[str, object] | str = dataset.state_dict()
    except RuntimeError as exc:
        mine = f"{type(exc).__name__}: {exc}"
    if not _distributed():
        gathered: list[dict[str, object] | str] = [mine]
    else:
        gathered = [""] * dist.get_world_size(group)
        dist.all_gather_object(gathered, mine, group=group)
    failed = {rank: item for rank, item in enumerate(gathered) if isinstance(item, str)}
    if failed:
        detail = "; ".join(f"rank {rank}: {message}" for rank, message in sorted(failed.items()))
        raise RuntimeError(f"cannot checkpoint this step: {detail}")
    states = [item for item in gathered if isinstance(item, dict)]
    return dataset.merge_state_dicts(states)  # a StreamingMixture merges its own checkpoints


def save_checkpoint(obj: object, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` with ``torch.save`` so that ``path`` is always complete.

    The data goes to a temporary file in the same directory, which is flushed
    and fsynced, then renamed over ``path`` (atomic on POSIX), and the
    directory is fsynced so the rename survives a power loss. A crash at any
    moment leaves either the previous checkpoint or the new one, never a torn
    file (at worst a stray ``.<name>.*.tmp`` file, removed by the next save).

    Before the rename, the temporary file is read back as :func:`load_checkpoint`
    reads it (``weights_only=True``, memory-mapped, so tensors are not copied):
    an object it could not load (a NumPy scalar, an arbitrary class) is refused
    and ``path`` is left as it was.

    Args:
        obj: what to save (tensors, numbers, strings, lists and dicts load with
            ``weights_only=True``).
        path: the checkpoint file.

    Raises:
        TypeError: ``load_checkpoint`` could not read ``obj`` back.
    """
    target = Path(path)
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(f".{target.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        _check_loadable(temp)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    if os.name == "posix":
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _check_loadable(path: str) -> None:
    """Raise TypeError when ``torch.load(path, weights_only=True)`` refuses the file."""
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        raise TypeError(
            "save_checkpoint refuses an object that load_checkpoint could not read back with "
            f"weights_only=True (nothing was written): {exc}"
        ) from exc


def _read(path: str | os.PathLike[str]) -> Any:
    if not Path(path).exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def load_checkpoint(path: str | os.PathLike[str], *, src: int | None = 0, group: Any = None) -> Any:
    """Read a :func:`save_checkpoint` file, or ``None`` when there is none yet.

    In a process group, only rank ``src`` reads the file and broadcasts it, so
    the other nodes need no access to it; every rank of ``group`` must call.
    ``src=None`` makes every rank read the file itself (a shared file system).

    Args:
        path: the checkpoint file.
        src: the global rank that reads the file, or ``None``.
        group: the process group; ``None`` is the default group.

    Returns:
        The saved object (loaded with ``weights_only=True``), or ``None``.

    Raises:
        Exception: the reading rank's own error (a corrupt file, an object
            ``weights_only`` refuses) on that rank; ``RuntimeError`` naming it on
            every other rank of ``group``, so no rank waits in the broadcast.
    """
    if not _distributed():
        return _read(path)
    if src is None:
        return _everyone_reads(path, group)
    mine = dist.get_rank() == src
    value, error = None, None
    if mine:
        try:
            value = _read(path)
        except Exception as exc:
            error = exc
    status = [None if error is None else f"{type(error).__name__}: {error}"]
    dist.broadcast_object_list(status, src=src, group=group)  # small: ok, or the error's text
    if status[0] is not None:
        if error is not None:
            raise error
        raise RuntimeError(f"load_checkpoint: rank {src} could not read {os.fspath(path)!r}: {status[0]}")
    box = [value]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


def _everyone_reads(path: str | os.PathLike[str], group: Any) -> Any:
    """``src=None``: every rank reads; if any fails, every rank raises (after one small gather)."""
    value, error = None, None
    try:
        value = _read(path)
    except Exception as exc:
        error = exc
    statuses: list[str | None] = [None] * dist.get_world_size(group)
    mine = None if error is None else f"{type(error).__name__}: {error}"
    dist.all_gather_object(statuses, mine, group=group)
    if error is not None:
        raise error
    failed = [f"rank {rank}: {text}" for rank, text in enumerate(statuses) if text is not None]
    if failed:
        raise RuntimeError(f"load_checkpoint: {os.fspath(path)!r} could not be read on " + "; ".join(failed))
    return value
