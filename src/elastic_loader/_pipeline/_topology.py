"""Which splits an iterator owns: the rank's block, then the worker's sub-block.

Rules:
* Rank ``r`` of a run with ``K = num_splits / world_size`` splits per rank owns
  the contiguous block ``[r*K, (r+1)*K)``.
* DataLoader worker ``w`` of ``nw`` owns the ``w``-th contiguous ``K/nw`` of
  the rank's block, so ``nw`` must divide ``K``: :func:`check_workers` is the
  one place that says so (for the dataset and for StreamingDataLoader alike).
* ``worker_info_override`` (simulated workers) wins over torch's worker info;
  an iterator with neither owns the whole rank block.
* A real torch worker ``w`` of a StreamingDataLoader plays *role* ``(w + rotation)
  % nw`` and owns that role's sub-block: a loader resumed on the same topology
  starts its round robin with the role whose batch came next (the rotation;
  0 on a new topology).
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("elastic_loader")


def rank_block(rank: int, splits_per_rank: int) -> list[int]:
    """The splits rank ``rank`` owns."""
    return list(range(rank * splits_per_rank, (rank + 1) * splits_per_rank))


def check_workers(splits_per_rank: int, num_workers: int) -> None:
    """Raise ``ValueError`` when ``num_workers`` workers cannot share a rank's splits evenly."""
    if num_workers > 1 and splits_per_rank % num_workers:
        raise ValueError(
            f"the {splits_per_rank} splits of this rank cannot be shared by {num_workers} workers; "
            "num_splits / world_size must be divisible by num_workers"
        )


def role_splits(rank_splits: list[int], num_workers: int, role: int) -> list[int]:
    """The sub-block of ``rank_splits`` that worker role ``role`` of ``num_workers`` owns."""
    if num_workers <= 1:
        return list(rank_splits)
    per = len(rank_splits) // num_workers
    return rank_splits[role * per : (role + 1) * per]


def owned_splits(
    rank_splits: list[int], override: Any, torch_info: Any, rotation: int = 0
) -> tuple[list[int], int | None]:
    """The splits one iterator reads, and the torch worker id when it runs inside a real worker.

    Args:
        rank_splits: the rank's block.
        override: ``worker_info_override`` (``None``: not set).
        torch_info: ``torch.utils.data.get_worker_info()`` of the calling process.
        rotation: the role torch worker 0 plays (StreamingDataLoader; real workers only).

    Raises:
        ValueError: the worker info is invalid, or the workers cannot share the block.
    """
    info = override if override is not None else torch_info
    if override is not None and torch_info is not None:
        logger.warning(
            "worker_info_override is set while running inside a DataLoader worker; the override wins"
        )
    real_worker = torch_info.id if torch_info is not None else None
    if info is None:
        return list(rank_splits), real_worker
    nw, w = int(info.num_workers), int(info.id)
    if nw <= 0 or not 0 <= w < nw:
        raise ValueError(f"invalid worker info: id={w}, num_workers={nw}")
    check_workers(len(rank_splits), nw)
    role = w if override is not None else (w + rotation) % nw
    return role_splits(rank_splits, nw, role), real_worker
