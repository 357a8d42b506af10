"""The ``topology`` family: which splits every (rank, worker) of a job owns.

Input: ``num_splits``, ``world_size``, ``num_workers``; output: the owned splits
of every iterator, rank-major, or the error. Every case is checked against
``PartitionInv`` and against ``worker_blocks``.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ....spec.topology import Topology, owned_splits, worker_blocks
from ..codec import INT, record
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case


@dataclass(frozen=True)
class TopologyInput:
    """A job shape."""

    num_splits: int
    world_size: int
    num_workers: int


_encode, _decode = record(TopologyInput, INT, INT, INT)


def _run(x: TopologyInput) -> JsonObject:
    def compute() -> list[tuple[int, int, tuple[int, ...]]]:
        Topology(x.world_size, 0, x.num_workers, 0)
        return [
            (r, w, owned_splits(x.num_splits, Topology(x.world_size, r, x.num_workers, w)))
            for r in range(x.world_size)
            for w in range(max(1, x.num_workers))
        ]

    result = attempt(compute)
    if isinstance(result, SpecError):
        return error_json(result)
    inv.PartitionInv(x.num_splits, x.world_size, x.num_workers)
    if [owned for _, _, owned in result] != list(worker_blocks(x.num_splits, x.world_size, x.num_workers)):
        raise AssertionError("owned_splits disagrees with worker_blocks")
    return {"owners": [{"rank": r, "worker": w, "splits": list(owned)} for r, w, owned in result]}


CODEC = Codec(_encode, _decode, _run)


def cases() -> list[CaseDef]:
    """Split ownership per (rank, worker), over a small exhaustive grid plus invalid combinations."""

    def case(name: str, description: str, s: int, w: int, nw: int) -> CaseDef:
        return make_case("topology", CODEC, name, description, TopologyInput(s, w, nw))

    cases = [
        case(
            f"grid_splits{s}_world{w}_workers{nw}",
            f"{s} splits, world_size {w}, {nw} DataLoader workers per rank",
            s,
            w,
            nw,
        )
        for s in range(1, 9)
        for w in range(1, 5)
        for nw in range(0, 5)
    ]
    cases += [
        case("one_split_one_rank_in_process", "the smallest job: one split read in the process", 1, 1, 0),
        case("one_worker_owns_the_whole_rank", "num_workers=1 behaves like in-process reading", 4, 2, 1),
        case("every_worker_owns_one_split", "12 splits, 3 ranks, 4 workers each", 12, 3, 4),
        case("large_job", "64 splits over 8 ranks with 2 workers each", 64, 8, 2),
        case("zero_splits", "num_splits must be positive", 0, 1, 0),
        case("negative_splits", "num_splits must be positive", -4, 2, 0),
        case("zero_world_size", "world_size must be at least 1", 4, 0, 0),
        case("negative_num_workers", "num_workers must be >= 0", 4, 1, -1),
        case("splits_not_divisible_by_world_size", "5 splits cannot be shared by 2 ranks", 5, 2, 0),
        case("more_ranks_than_splits", "2 splits cannot be shared by 4 ranks", 2, 4, 0),
        case(
            "rank_splits_not_divisible_by_workers", "3 splits per rank cannot be shared by 2 workers", 6, 2, 2
        ),
        case("more_workers_than_rank_splits", "1 split per rank cannot be shared by 2 workers", 4, 4, 2),
    ]
    return cases


FAMILY = family("topology", cases, CODEC)
