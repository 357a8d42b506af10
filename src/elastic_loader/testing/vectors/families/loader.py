"""The ``loader`` family: ``StreamingDataLoader`` delivery on one rank, batch by batch.

Torch worker ``w`` plays role ``(w + rotation) % num_workers`` (a loader resumed on its own
topology starts with the role whose batch came next); a loader starts from any state, its
iterators catching up first (D23). Row-mode cases are checked against ``ConsumerCommitProp``
after every batch, and, from the start of an epoch, against ``ExactlyOnceProp``.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ....spec.loader import LoaderRun, run_loader
from ....spec.packing import PackedState, initial_packed_state, iterate_packed
from ....spec.rows import Faults, RowState, Yielded, initial_row_state, iterate_rows
from ....spec.topology import PackingConfig, Permutation, RunConfig, Topology
from ..codec import (
    CONFIG,
    CORPUS,
    FAULTS,
    INT,
    PERMUTATION,
    STATE,
    Corpus,
    corpus_map,
    enc_block,
    enc_raised,
    enc_row,
    enc_state,
    optional,
    record,
)
from ..plumbing import NO_FAULTS, faults_of, random_corpus, random_perm, rows_after
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case


@dataclass(frozen=True)
class LoaderInput:
    """One rank's loader: config, permutation, faults, corpus (packing), shape, batch size and start."""

    config: RunConfig
    permutation: Permutation
    faults: Faults
    corpus: Corpus | None
    world_size: int
    rank: int
    num_workers: int
    batch_size: int
    start: RowState | PackedState
    rotation: int = 0


_encode, _decode = record(
    LoaderInput, CONFIG, PERMUTATION, FAULTS, optional(CORPUS), INT, INT, INT, INT, STATE, INT
)


def _run(x: LoaderInput) -> JsonObject:
    corpus = None if x.corpus is None else corpus_map(x.corpus)

    def compute() -> LoaderRun:
        topology = Topology(x.world_size, x.rank, x.num_workers)
        return run_loader(
            x.config, x.permutation, x.faults, topology, x.start, x.batch_size, corpus, x.rotation
        )

    run = attempt(compute)
    if isinstance(run, SpecError):
        return error_json(run)
    if isinstance(run.start, RowState):
        for n in range(len(run.deliveries) + 1):
            inv.ConsumerCommitProp(x.permutation, x.faults, run, n)
        if run.start == initial_row_state(x.config.num_splits):
            rows = [y for d in run.deliveries for y in d.items if isinstance(y, Yielded)]
            inv.ExactlyOnceProp(x.permutation, x.faults, rows, x.world_size == 1 and run.error is None)
    return {
        "deliveries": [
            {
                "worker": d.worker,
                "index": d.index,
                "items": [enc_row(i) if isinstance(i, Yielded) else enc_block(i) for i in d.items],
                "committed": enc_state(d.committed),
                "next_role": run.next_role_after(n),
            }
            for n, d in enumerate(run.deliveries, 1)
        ],
        "raised": None if run.error is None else enc_raised(run.error),
    }


CODEC = Codec(_encode, _decode, _run)


_PERM = random_perm(random.Random(81), 4, 5)
_CFG = RunConfig(4, 5, 0)
_CORPUS = random_corpus(random.Random(82), 20, 4)
_PACKING = PackingConfig(4, 1, 0, 12)
_PCFG = RunConfig(4, 5, 0, None, _PACKING)
_PERM8 = random_perm(random.Random(83), 8, 3)
_CFG8 = RunConfig(8, 5, 0)
_MID = iterate_rows(_PERM, NO_FAULTS, (0, 1, 2, 3), initial_row_state(4)).state_after(8)
_PACKED_RUN = iterate_packed(
    _PERM, corpus_map(_CORPUS), NO_FAULTS, (0, 1, 2, 3), _PACKING, initial_packed_state(4)
)
_PACKED_MID = _PACKED_RUN.state_after(4)
_PACKED_PARTIAL = _PACKED_RUN.state_after(6)


def _case(
    name: str,
    description: str,
    config: RunConfig,
    perm: Permutation,
    world_size: int,
    rank: int,
    num_workers: int,
    batch_size: int,
    faults: Faults = NO_FAULTS,
    corpus: Corpus | None = None,
    start: RowState | PackedState | None = None,
    rotation: int = 0,
) -> CaseDef:
    """A case of this family; ``start`` defaults to the initial state of the mode."""
    if start is None:
        s = config.num_splits
        start = initial_row_state(s) if corpus is None else initial_packed_state(s)
    value = LoaderInput(
        config, perm, faults, corpus, world_size, rank, num_workers, batch_size, start, rotation
    )
    return make_case("loader", CODEC, name, description, value)


def _on_one_rank(
    name: str,
    description: str,
    config: RunConfig,
    num_workers: int,
    batch_size: int,
    faults: Faults = NO_FAULTS,
    start: RowState | PackedState | None = None,
    rotation: int = 0,
) -> CaseDef:
    """A case of the only rank of the 4-split job; packed, over ``_CORPUS``, when ``config`` packs."""
    corpus = None if config.packing is None else _CORPUS
    return _case(
        name, description, config, _PERM, 1, 0, num_workers, batch_size, faults, corpus, start, rotation
    )


def cases() -> list[CaseDef]:
    """``StreamingDataLoader`` delivery on one rank: batches in order, and the state after each."""
    return [
        *_delivery_cases(),
        *(_on_one_rank(*row) for row in _ONE_RANK),
        *_error_cases(),
    ]


def _delivery_cases() -> list[CaseDef]:
    """Batches in order from one iterator or several workers, on one rank or another."""
    return [
        _on_one_rank("in_process_one_rank", "num_workers=0: one iterator, batches of 4", _CFG, 0, 4),
        _on_one_rank("in_process_partial_last_batch", "the last batch is shorter", _CFG, 0, 3),
        _on_one_rank("two_workers_round_robin", "batches arrive in order (index, worker)", _CFG, 2, 2),
        _on_one_rank("four_workers_one_split_each", "each worker reads one split", _CFG, 4, 2),
        _case("rank_1_of_2_with_2_workers", "a rank reads only its splits", _CFG8, _PERM8, 2, 1, 2, 3),
        _on_one_rank("batch_size_one", "every row is its own batch", _CFG, 2, 1),
    ]


_MID_CYCLE = RowState((3, 2, 2, 2), (3, 2, 2, 2))

_ONE_RANK: tuple[tuple[str, str, RunConfig, int, int, Faults, RowState | PackedState | None, int], ...] = (
    # name, description, config, num_workers, batch_size, faults, start (None: the epoch's), rotation
    # a worker that runs out early, and raising rows
    ("worker_ends_early_drops_out", "a worker whose splits run out first stops delivering",
     _CFG, 2, 2, faults_of(skipped=[_PERM[0][1], _PERM[1][3], _PERM[0][4]]), None, 0),
    ("worker_raises_stops_delivery", "a raising row turns its batch into the error; nothing after it",
     _CFG, 2, 2, faults_of(raising=[_PERM[2][2]]), None, 0),
    ("in_process_raise_keeps_full_batches", "full batches before the error are delivered",
     _CFG, 0, 3, faults_of(raising=[_PERM[3][3]]), None, 0),
    # resumes at a step boundary (workers) and mid-cycle (one iterator)
    ("resume_from_step_boundary", "two workers resume from a one-rank checkpoint",
     _CFG, 2, 2, NO_FAULTS, _MID, 0),
    ("in_process_resume_mid_cycle", "one iterator may resume mid-cycle (catch-up)",
     _CFG, 0, 3, NO_FAULTS, _MID_CYCLE, 0),
    # packed blocks, in the process and from workers, and a packed resume
    ("packed_two_workers", "packed blocks, two workers", _PCFG, 2, 2, NO_FAULTS, None, 0),
    ("packed_in_process", "packed blocks in the process", _PCFG, 0, 3, NO_FAULTS, None, 0),
    ("packed_resume", "packed resume at a step boundary", _PCFG, 2, 1, NO_FAULTS, _PACKED_MID, 0),
    # starts no step boundary holds: every iterator catches up first (D23)
    ("workers_resume_mid_cycle", "two workers resume from a mid-cycle state: worker 0 catches split 1 up",
     _CFG, 2, 2, NO_FAULTS, _MID_CYCLE, 0),
    ("packed_resume_mid_step", "packed, one iterator: splits 2 and 3 catch up before the cycles",
     _PCFG, 0, 2, NO_FAULTS, _PACKED_PARTIAL, 0),
    # loaders resumed on their own topology: torch worker 0 plays the role whose batch came next
    ("two_workers_rotation_1", "torch worker 0 reads role 1's splits, so role 1's batch comes first",
     _CFG, 2, 2, NO_FAULTS, _MID, 1),
    ("four_workers_rotation_3_mid_round", "a checkpoint after 3 batches of a 4-worker round: role 3 goes on",
     _CFG, 4, 1, NO_FAULTS, rows_after(_PERM, NO_FAULTS, (0, 1, 2), 3), 3),
    ("packed_rotation_1", "packed, two workers, torch worker 0 in role 1",
     _PCFG, 2, 1, NO_FAULTS, _PACKED_MID, 1),
)  # fmt: skip
"""Cases of the only rank of the 4-split job, a row each: faults, resumes, packed, catch-up, rotations."""


def _error_cases() -> list[CaseDef]:
    """Shapes and rotations the loader rejects."""
    return [
        _on_one_rank(
            "error_workers_do_not_divide_splits", "splits per rank must divide among workers", _CFG, 3, 2
        ),
        _on_one_rank("error_batch_size_zero", "batch_size is at least 1", _CFG, 0, 0),
        _case("error_rank_out_of_range", "rank < world_size", _CFG, _PERM, 2, 2, 0, 2),
        _on_one_rank(
            "error_rotation_beyond_workers", "a rotation is a role: below num_workers", _CFG, 2, 2, rotation=2
        ),
        _on_one_rank(
            "error_rotation_without_workers", "without workers the only role is 0", _CFG, 0, 2, rotation=1
        ),
        _on_one_rank("error_negative_rotation", "a rotation is not negative", _CFG, 2, 2, rotation=-1),
    ]


FAMILY = family("loader", cases, CODEC)
