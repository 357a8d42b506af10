"""Splits, ranks and workers: ``PartitionInv`` and ``SplitSizeInv`` against the model."""

from __future__ import annotations

from hypothesis import given, strategies as st

from elastic_loader.spec import cut_splits, group_permutation, owned_splits, rank_splits
from elastic_loader.spec.invariants import PartitionInv, SplitSizeInv
from elastic_loader.testing.strategies import (
    PermutationCase,
    divisors,
    job_iterators,
    job_shapes,
    permutation_cases,
    split_counts,
    topologies,
)


@given(st.data())
def test_PartitionInv(data: st.DataObject) -> None:
    num_splits = data.draw(split_counts(48), label="num_splits")
    world_size, num_workers = data.draw(job_shapes(num_splits), label="shape")
    PartitionInv(num_splits, world_size, num_workers)


def test_PartitionInv_exhaustive() -> None:
    """Every valid (S, W, nw) with S <= 36: small enough to enumerate completely."""
    checked = 0
    for num_splits in range(1, 37):
        for world_size in divisors(num_splits):
            for num_workers in [0, *divisors(num_splits // world_size)]:
                PartitionInv(num_splits, world_size, num_workers)
                checked += 1
    assert checked > 300


@given(st.data())
def test_PartitionInv_rank_then_worker(data: st.DataObject) -> None:
    """A worker's splits are a contiguous piece of its rank's block (R3.1, R3.4)."""
    num_splits = data.draw(split_counts(), label="num_splits")
    topology = data.draw(topologies(num_splits), label="topology")
    mine = owned_splits(num_splits, topology)
    block = rank_splits(num_splits, topology.world_size, topology.rank)
    k = num_splits // topology.world_size
    assert block == tuple(range(topology.rank * k, (topology.rank + 1) * k))
    per_worker = k // max(1, topology.num_workers)
    start = topology.worker_id * per_worker
    assert mine == block[start : start + per_worker]
    assert mine in job_iterators(num_splits, topology.world_size, topology.num_workers)


@given(permutation_cases())
def test_SplitSizeInv(case: PermutationCase) -> None:
    SplitSizeInv(case.order, case.num_splits, case.perm)


@given(permutation_cases(duplicates=True))
def test_SplitSizeInv_with_repeated_rows(case: PermutationCase) -> None:
    """A sampling-with-replacement strategy repeats row ids; the cut is unchanged."""
    SplitSizeInv(case.order, case.num_splits, case.perm)


@given(permutation_cases())
def test_SplitSizeInv_permutation_table(case: PermutationCase) -> None:
    """Grouping a sequential permutation table (split id ``i // m``) gives the same cut."""
    m = case.split_len
    kept = case.order[: case.num_splits * m]
    perm = group_permutation(kept, [i // m for i in range(len(kept))], case.num_splits)
    assert perm == cut_splits(case.order, case.num_splits)
    SplitSizeInv(case.order, case.num_splits, perm)


@given(st.data())
def test_SplitSizeInv_strategy_table_keeps_read_order(data: st.DataObject) -> None:
    """A ``split_strategy`` table with interleaved split ids keeps each split's read order."""
    case = data.draw(permutation_cases(), label="case")
    kept = list(case.order[: case.num_splits * case.split_len])
    split_ids = data.draw(st.permutations([s for s in range(case.num_splits) for _ in range(case.split_len)]))
    perm = group_permutation(kept, split_ids, case.num_splits)
    for s in range(case.num_splits):
        assert perm[s] == tuple(row for row, sid in zip(kept, split_ids) if sid == s)
    SplitSizeInv([row for split in perm for row in split], case.num_splits, perm)
