"""Bounded checks of the topology invariants: PartitionInv, SplitSizeInv, ElasticDeterminismProp."""

from __future__ import annotations

import random

from elastic_loader.spec import (
    Faults,
    RunConfig,
    SpecValueError,
    Topology,
    cut_splits,
    global_steps,
    owned_splits,
)
from elastic_loader.spec.invariants import ElasticDeterminismProp, PartitionInv, SplitSizeInv

from . import encodings as enc
from .framework import BoundedCheck, Bounds, Recorder
from .universes import fault_sets, permutation, topologies


def _rejects(rec: Recorder, code: str, call: object, *args: object) -> None:
    """Require that the model rejects a configuration with ``SpecValueError(code)``."""
    assert callable(call)
    try:
        call(*args)
    except SpecValueError as exc:
        rec.require(exc.code == code, f"rejected with {exc.code}, expected {code}")
        return
    rec.require(False, f"accepted an invalid configuration (expected {code})")


def check_partition(rec: Recorder, b: Bounds) -> None:
    """Every ``S <= num_splits``, every ``world_size`` 1..S, every ``num_workers`` 0..K+1.

    Valid configurations: ``PartitionInv`` holds and every ``owned_splits``
    equals the block formula of the SMT lemma. Invalid ones (``W`` not dividing
    ``S``, ``num_workers`` not dividing ``K``) must be rejected.
    """
    for num_splits in rec.progress(range(1, b["num_splits"] + 1), "num_splits"):
        for world in range(1, num_splits + 1):
            rec.at(num_splits=num_splits, world_size=world)
            if num_splits % world:
                _rejects(
                    rec,
                    "num_splits_not_divisible_by_world_size",
                    owned_splits,
                    num_splits,
                    Topology(world, 0),
                )
                continue
            per_rank = num_splits // world
            for workers in range(per_rank + 2):
                rec.at(num_workers=workers)
                if workers and per_rank % workers:
                    topology = Topology(world, 0, workers, 0)
                    _rejects(
                        rec, "rank_splits_not_divisible_by_num_workers", owned_splits, num_splits, topology
                    )
                    continue
                rec.apply(PartitionInv, num_splits, world, workers)
                per_worker = per_rank // max(1, workers)
                for r in range(world):
                    for w in range(max(1, workers)):
                        lo, hi = enc.worker_block(r, w, per_rank, per_worker)
                        assert isinstance(lo, int) and isinstance(hi, int)
                        got = owned_splits(num_splits, Topology(world, r, workers, w))
                        rec.require(
                            got == tuple(range(lo, hi)),
                            f"rank {r} worker {w} owns {got}, formula [{lo}, {hi})",
                        )


PARTITION = BoundedCheck(
    "PartitionInv",
    "num_splits<={num_splits}, every world_size 1..S, every num_workers 0..K+1 "
    "(invalid ones must be rejected)",
    quick={"num_splits": 16},
    full={"num_splits": 64},
    run=check_partition,
)


def check_split_size(rec: Recorder, b: Bounds) -> None:
    """Every row count ``N <= rows`` and split count ``S <= N + 1``, on a shuffled and a reversed order."""
    for rows in rec.progress(range(1, b["rows"] + 1), "rows"):
        shuffled = list(range(100, 100 + rows))
        random.Random(rows).shuffle(shuffled)
        for name, order in (("shuffled", shuffled), ("reversed", list(range(100 + rows - 1, 99, -1)))):
            for num_splits in range(1, rows + 2):
                rec.at(rows=rows, order=name, num_splits=num_splits)
                if num_splits > rows:
                    _rejects(rec, "fewer_rows_than_splits", cut_splits, order, num_splits)
                    continue
                perm = cut_splits(order, num_splits)
                rec.apply(SplitSizeInv, order, num_splits, perm)
                m = rows // num_splits
                for k in range(num_splits):
                    lo, hi = enc.split_range(k, m)
                    assert isinstance(lo, int) and isinstance(hi, int)
                    rec.require(perm[k] == tuple(order[lo:hi]), f"split {k} is not order[{lo}:{hi}]")


SPLIT_SIZE = BoundedCheck(
    "SplitSizeInv",
    "rows<={rows}, every num_splits 1..rows+1 (too many must be rejected), shuffled and reversed orders",
    quick={"rows": 24},
    full={"rows": 80},
    run=check_split_size,
)


def _formula_steps(num_splits: int, split_len: int, c: int) -> tuple[frozenset[object], ...]:
    """Fault-free global steps by the lemma's formula: ``[0, S) x [g*c, (g+1)*c)``."""
    return tuple(
        frozenset((s, k) for s in range(num_splits) for k in range(g * c, (g + 1) * c))
        for g in range(split_len // c)
    )


def check_elastic(rec: Recorder, b: Bounds) -> None:
    """Every topology of every small job, fault-free up to ``clean_splits`` and with every fault set up to
    ``fault_rows`` rows; every ``cycles_per_step`` up to the split length."""
    clean = [(s, m) for s in range(1, b["clean_splits"] + 1) for m in range(1, b["clean_len"] + 1)]
    for num_splits, split_len in rec.progress(clean, "fault-free"):
        perm = permutation(num_splits, split_len)
        config = RunConfig(num_splits, 0, 0)
        for c in range(1, split_len + 1):
            rec.at(num_splits=num_splits, split_len=split_len, faults="none", cycles_per_step=c)
            rec.require(
                global_steps(perm, Faults(), c) == _formula_steps(num_splits, split_len, c),
                "global_steps differs from the step formula of the SMT lemma",
            )
            for world, workers in topologies(num_splits):
                rec.at(world_size=world, num_workers=workers)
                rec.apply(ElasticDeterminismProp, config, perm, Faults(), world, workers, c)
    faulty = [(s, m) for s in range(1, b["fault_rows"] + 1) for m in range(1, b["fault_rows"] // s + 1)]
    for num_splits, split_len in rec.progress(faulty, "faults"):
        perm = permutation(num_splits, split_len)
        config = RunConfig(num_splits, 0, 0)
        rows = [r for split in perm for r in split]
        for faults in fault_sets(rows, "osr"):
            for c in range(1, split_len + 1):
                rec.at(num_splits=num_splits, split_len=split_len, faults=faults, cycles_per_step=c)
                for world, workers in topologies(num_splits):
                    rec.at(world_size=world, num_workers=workers)
                    rec.apply(ElasticDeterminismProp, config, perm, faults, world, workers, c)


ELASTIC = BoundedCheck(
    "ElasticDeterminismProp",
    "fault-free: num_splits<={clean_splits}, split_len<={clean_len}; every ok/skip/raise fault set over "
    "<={fault_rows} rows; every (world_size, num_workers), every cycles_per_step<=split_len",
    quick={"clean_splits": 6, "clean_len": 3, "fault_rows": 4},
    full={"clean_splits": 12, "clean_len": 4, "fault_rows": 6},
    run=check_elastic,
)
