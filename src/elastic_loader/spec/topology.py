"""Splits, ranks and workers (item 1 of the spec).

Rules: a permutation is an abstract input (split id -> row ids in read order);
ownership is contiguous blocks, first by rank, then by DataLoader worker.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import SpecValueError, require

Permutation = tuple[tuple[int, ...], ...]
"""Row ids of each split in read order; ``perm[s][p]`` is the row at position ``p``."""


@dataclass(frozen=True)
class PackingConfig:
    """The packing parameters a packed checkpoint pins."""

    pack_sequences: int
    eos_id: int
    pad_id: int
    blocks_per_epoch: int

    def __post_init__(self) -> None:
        require(self.pack_sequences > 0, "pack_sequences_not_positive", "pack_sequences must be > 0")
        require(self.blocks_per_epoch > 0, "blocks_per_epoch_not_positive", "blocks_per_epoch must be > 0")

    def blocks_per_split(self, num_splits: int) -> int:
        """The per-split block budget ``b = blocks_per_epoch / num_splits``."""
        require(
            self.blocks_per_epoch % num_splits == 0,
            "blocks_per_epoch_not_divisible",
            "blocks_per_epoch must be divisible by num_splits",
        )
        return self.blocks_per_epoch // num_splits


@dataclass(frozen=True)
class RunConfig:
    """What a checkpoint pins: everything that fixes the permutation and the mode."""

    num_splits: int
    shuffle_seed: int
    epoch: int
    perm_fingerprint: str | None = None
    packing: PackingConfig | None = None

    def __post_init__(self) -> None:
        require(self.num_splits > 0, "num_splits_not_positive", "num_splits must be > 0")
        if self.packing is not None:
            self.packing.blocks_per_split(self.num_splits)


@dataclass(frozen=True)
class Topology:
    """Where one iterator runs: rank of ``world_size``, worker of ``num_workers``.

    ``num_workers == 0`` means the dataset is iterated in the process itself
    (no DataLoader workers); then ``worker_id`` must be 0.
    """

    world_size: int = 1
    rank: int = 0
    num_workers: int = 0
    worker_id: int = 0

    def __post_init__(self) -> None:
        require(self.world_size >= 1, "world_size_not_positive", "world_size must be >= 1")
        require(0 <= self.rank < self.world_size, "rank_out_of_range", "rank must be in [0, world_size)")
        require(self.num_workers >= 0, "num_workers_negative", "num_workers must be >= 0")
        require(
            0 <= self.worker_id < max(1, self.num_workers),
            "worker_id_out_of_range",
            "worker_id must be in [0, num_workers)",
        )


def rank_splits(num_splits: int, world_size: int, rank: int) -> tuple[int, ...]:
    """The contiguous block of splits rank ``rank`` owns: ``[r*K, (r+1)*K)``."""
    require(num_splits > 0, "num_splits_not_positive", "num_splits must be > 0")
    require(world_size >= 1, "world_size_not_positive", "world_size must be >= 1")
    require(
        num_splits % world_size == 0,
        "num_splits_not_divisible_by_world_size",
        f"num_splits ({num_splits}) must be divisible by world_size ({world_size})",
    )
    require(0 <= rank < world_size, "rank_out_of_range", "rank must be in [0, world_size)")
    k = num_splits // world_size
    return tuple(range(rank * k, (rank + 1) * k))


def owned_splits(num_splits: int, topology: Topology) -> tuple[int, ...]:
    """The splits one iterator reads, in read order (ascending global id)."""
    mine = rank_splits(num_splits, topology.world_size, topology.rank)
    nw = topology.num_workers
    if nw == 0:
        return mine
    require(
        len(mine) % nw == 0,
        "rank_splits_not_divisible_by_num_workers",
        f"splits per rank ({len(mine)}) must be divisible by num_workers ({nw})",
    )
    per_worker = len(mine) // nw
    start = topology.worker_id * per_worker
    return mine[start : start + per_worker]


def worker_blocks(num_splits: int, world_size: int, num_workers: int) -> tuple[tuple[int, ...], ...]:
    """Every iterator's owned splits, rank-major then worker, for the whole job."""
    return tuple(
        owned_splits(num_splits, Topology(world_size, r, num_workers, w))
        for r in range(world_size)
        for w in range(max(1, num_workers))
    )


def cut_splits(order: Sequence[int], num_splits: int) -> Permutation:
    """Cut a shuffled row order into ``num_splits`` equal contiguous splits.

    This is what the backend's ``split_random(fixed=S)`` and
    ``split_sequential(fixed=S)`` do: split ``k`` is ``order[k*m:(k+1)*m]`` with
    ``m = len(order) // S``; the last ``len(order) mod S`` rows are dropped.
    """
    require(num_splits > 0, "num_splits_not_positive", "num_splits must be > 0")
    m = len(order) // num_splits
    require(m >= 1, "fewer_rows_than_splits", f"{len(order)} rows cannot fill {num_splits} splits")
    return tuple(tuple(order[k * m : (k + 1) * m]) for k in range(num_splits))


def group_permutation(row_ids: Sequence[int], split_ids: Sequence[int], num_splits: int) -> Permutation:
    """Group a permutation table (``row_id``, ``split_id`` in read order) by split.

    Raises ``SpecValueError`` when the split ids are not exactly
    ``{0, ..., num_splits-1}`` or the splits do not all have the same length
    (a ``split_strategy`` result must satisfy both).
    """
    require(
        len(row_ids) == len(split_ids), "permutation_columns_unequal", "row_id and split_id differ in length"
    )
    groups: list[list[int]] = [[] for _ in range(num_splits)]
    for row, split in zip(row_ids, split_ids):
        if not 0 <= split < num_splits:
            raise SpecValueError("strategy_split_ids", f"split id {split} outside [0, {num_splits})")
        groups[split].append(row)
    sizes = {len(g) for g in groups}
    require(0 not in sizes, "strategy_split_ids", "every split id in [0, num_splits) must occur")
    require(len(sizes) == 1, "strategy_unequal_splits", f"splits have unequal sizes {sorted(sizes)}")
    return tuple(tuple(g) for g in groups)


def perm_fingerprint(row_ids: Sequence[int], split_ids: Sequence[int]) -> str:
    """SHA-256 identifying a permutation table (row count, then both columns as uint64 LE)."""
    h = hashlib.sha256()
    h.update(str(len(row_ids)).encode())
    h.update(struct.pack(f"<{len(row_ids)}Q", *row_ids))
    h.update(struct.pack(f"<{len(split_ids)}Q", *split_ids))
    return h.hexdigest()


def check_permutation(perm: Permutation) -> int:
    """Return the common split length, checking every split has it (``SplitSizeInv``)."""
    require(len(perm) > 0, "num_splits_not_positive", "a permutation has at least one split")
    sizes = {len(split) for split in perm}
    require(len(sizes) == 1, "strategy_unequal_splits", "splits must have equal length")
    return sizes.pop()
