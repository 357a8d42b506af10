"""The ``merge`` family: ``merge_state_dicts`` over every rank's checkpoint, or the error.

The model is :func:`~elastic_loader.spec.saved.merge_state_dicts`: every split takes the furthest
value among the checkpoints that *report* it, so a merge that leaves out a rank raises; the
merged checkpoint reports every split and carries the ``elastic_loader`` key with its digest.
Every merged checkpoint is checked to be idempotent and, in row mode, independent of the order
of the states (``MergeLatticeInv``); the cases of ranks at one global step are checked against
``MergeExactProp``, the merges of a session's checkpoints against ``MergeReportedInv``.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ....spec.checkpoint import join_row, snapshot_packed, snapshot_row
from ....spec.packing import PackedState, initial_packed_state, iterate_packed
from ....spec.protocols import Shape
from ....spec.rows import RowState
from ....spec.saved import merge_state_dicts, snapshot_saved
from ....spec.topology import PackingConfig, Permutation, RunConfig, rank_splits
from ..codec import OPAQUE, Corpus, array, corpus_map, enc_checkpoint, record
from ..plumbing import NO_FAULTS, random_corpus, random_perm, rows_after
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case
from .fixtures import (
    PACKED_CHECKPOINT,
    PACKED_CONFIG,
    PACKED_STATE,
    ROW_CHECKPOINT,
    ROW_CONFIG,
    ROW_STATE,
    STRATEGY_CHECKPOINT,
    STRATEGY_CONFIG,
    changed,
    checkpoint_fault_cases,
    is_packed,
    json_form,
    legacy_row,
    provenance_fault_cases,
    with_buffers,
    with_extra,
    without,
)
from .sessions import PACKED_JOB, ROW_JOB, SKIP_JOB, Job, session


@dataclass(frozen=True)
class MergeInput:
    """The checkpoints to merge, in order (possibly malformed)."""

    checkpoints: tuple[object, ...]


_encode, _decode = record(MergeInput, array(OPAQUE))


def _run(x: MergeInput) -> JsonObject:
    merged = attempt(lambda: merge_state_dicts(list(x.checkpoints)))
    if isinstance(merged, SpecError):
        return error_json(merged)
    if merge_state_dicts([merged]) != merged:
        raise AssertionError("merging a merged checkpoint alone must change nothing (MergeLatticeInv)")
    if "pack_buffers" not in merged and merge_state_dicts(list(reversed(x.checkpoints))) != merged:
        raise AssertionError("row-mode merge must not depend on the order of the states (MergeLatticeInv)")
    return enc_checkpoint(merged)


CODEC = Codec(_encode, _decode, _run)


def _ranks_at_step(
    config: RunConfig, perm: Permutation, world_size: int, steps: int, corpus: Corpus | None = None
) -> tuple[list[RowState | PackedState], RowState | PackedState]:
    """Every rank's state after ``steps`` global steps of one cycle each, and the one-rank state there."""
    s = config.num_splits
    k = s // world_size
    if corpus is None:
        per_rank: list[RowState | PackedState] = [
            rows_after(perm, NO_FAULTS, rank_splits(s, world_size, r), steps * k) for r in range(world_size)
        ]
        return per_rank, rows_after(perm, NO_FAULTS, tuple(range(s)), steps * s)
    packing = config.packing
    assert packing is not None
    docs = corpus_map(corpus)

    def packed_after(owned: Sequence[int], n: int) -> PackedState:
        return iterate_packed(perm, docs, NO_FAULTS, owned, packing, initial_packed_state(s)).state_after(n)

    ranks: list[RowState | PackedState] = [
        packed_after(rank_splits(s, world_size, r), steps * k) for r in range(world_size)
    ]
    return ranks, packed_after(tuple(range(s)), steps * s)


_ROW, _STRATEGY, _PACKED = ROW_CHECKPOINT, STRATEGY_CHECKPOINT, PACKED_CHECKPOINT
_OTHER = RowState((1, 3, 0, 2), (1, 4, 2, 2))


def _case(
    name: str, description: str, checkpoints: Sequence[object], check: Callable[[], None] | None = None
) -> CaseDef:
    """A case of this family; ``check`` runs after the model."""
    return make_case("merge", CODEC, name, description, MergeInput(tuple(checkpoints)), check)


def _with_other(name: str, description: str, bad: object) -> CaseDef:
    """A merge of a good checkpoint of ``bad``'s mode, then ``bad``."""
    good = _PACKED if is_packed(bad) else _ROW
    return _case(name, description, [good, bad])


def cases() -> list[CaseDef]:
    """Merging every rank's checkpoint: the merged checkpoint, or the error class and code."""
    return [
        *_step_cases(),
        *_row_cases(),
        *_packed_cases(),
        *_shape_cases(),
        *_disagreement_cases(),
        *_invalid_config_cases(),
        *checkpoint_fault_cases(_with_other),
        *provenance_fault_cases(_with_other),
        *_session_cases(),
        *_missing_rank_cases(),
        *_table_cases(),
    ]


def _step_cases() -> list[CaseDef]:
    """Every rank's checkpoint at one global step: the merge is the one-rank state there."""
    perm = random_perm(random.Random(51), 4, 6)
    corpus = random_corpus(random.Random(52), 24, 5)
    cfg = RunConfig(4, 3, 0)
    pcfg = RunConfig(4, 3, 0, None, PackingConfig(4, 1, 0, 16))
    cases: list[CaseDef] = []
    for world, steps in ((2, 3), (4, 1), (4, 5)):
        ranks, single = _ranks_at_step(cfg, perm, world, steps)
        snaps = [snapshot_row(cfg, s) for s in ranks if isinstance(s, RowState)]
        cases.append(
            _case(
                f"row_{world}_ranks_after_{steps}_steps",
                f"row mode, world_size {world}, each rank at step {steps}",
                snaps,
                functools.partial(inv.MergeExactProp, cfg, ranks, single),
            )
        )
    for world, steps in ((2, 1), (4, 3)):
        ranks, single = _ranks_at_step(pcfg, perm, world, steps, corpus)
        snaps = [snapshot_packed(pcfg, s) for s in ranks if isinstance(s, PackedState)]
        cases.append(
            _case(
                f"packed_{world}_ranks_after_{steps}_steps",
                f"packed mode, world_size {world}, each rank at step {steps}",
                snaps,
                functools.partial(inv.MergeExactProp, pcfg, ranks, single),
            )
        )
    return cases


def _row_cases() -> list[CaseDef]:
    """Row merges: normalising, element-wise maximum, legacy forms, extra keys, fingerprints."""
    return [
        _case("row_single_state", "merging one state normalises it", [_ROW]),
        _case(
            "row_elementwise_maximum",
            "samples and positions are joined by element-wise maximum",
            [_ROW, snapshot_row(ROW_CONFIG, _OTHER)],
            lambda: inv.MergeLatticeInv(ROW_STATE, _OTHER, join_row(ROW_STATE, _OTHER)),
        ),
        _case(
            "row_legacy_int_and_list",
            "a legacy int is a uniform list",
            [legacy_row(_ROW, 2), _ROW],
        ),
        _case(
            "row_positions_missing",
            "a state without positions contributes its samples",
            [without(_ROW, "positions_consumed_per_split"), snapshot_row(ROW_CONFIG, _OTHER)],
        ),
        _case(
            "row_unknown_keys_dropped",
            "the merged checkpoint has exactly the format's keys",
            [changed(_ROW, note="x"), _ROW],
        ),
        _case(
            "row_with_fingerprint",
            "the fingerprint is kept",
            [_STRATEGY, snapshot_row(STRATEGY_CONFIG, _OTHER)],
        ),
    ]


def _packed_cases() -> list[CaseDef]:
    """Packed merges: per split the larger progress wins, ties keep the first state."""
    return [
        _case(
            "packed_tie_keeps_first_state",
            "equal (emitted, consumed): the buffer of the earlier state wins",
            [
                _PACKED,
                with_buffers(
                    _PACKED, {0: {"tokens": [1, 11, 1], "starts": [1]}, 3: {"tokens": [1], "starts": []}}
                ),
            ],
        ),
        _case(
            "packed_larger_progress_wins",
            "per split, the larger (emitted, consumed) wins",
            [
                _PACKED,
                changed(
                    _PACKED,
                    samples_consumed_per_split=[3, 3, 2, 4],
                    pack_buffers={
                        "1": {"tokens": [1, 12, 1], "starts": [1]},
                        "3": {"tokens": [1], "starts": []},
                    },
                ),
            ],
        ),
        _case(
            "packed_string_keys",
            "string buffer keys are read as split ids; the merge writes int keys",
            [with_buffers(_PACKED, {"0": {"tokens": [1, 10, 1], "starts": [1]}})],
        ),
    ]


def _shape_cases() -> list[CaseDef]:
    """No state, a state that is not a dict, mixed modes, a missing key."""
    return [
        _case("error_empty", "at least one state", []),
        _case("error_not_a_dict", "every state is a dict", [_ROW, [1, 2]]),
        _case("error_first_not_a_dict", "every state is a dict", ["row", _ROW]),
        _case("error_mixed_modes", "packed and row states do not merge", [_PACKED, _ROW]),
        _case("error_mixed_modes_row_first", "packed and row states do not merge", [_ROW, _PACKED]),
        _case("error_missing_epoch", "every config key in every state", [_ROW, without(_ROW, "epoch")]),
        _case(
            "error_first_missing_shuffle_seed",
            "every config key in every state",
            [without(_ROW, "shuffle_seed"), _ROW],
        ),
        _case(
            "error_missing_eos_id",
            "packing keys in every packed state",
            [_PACKED, without(_PACKED, "eos_id")],
        ),
    ]


def _disagreement_cases() -> list[CaseDef]:
    """States whose config, packing parameters or fingerprints disagree."""
    config, packing, fingerprint = (
        "config keys must agree",
        "packing keys must agree",
        "the fingerprint is compared across all states",
    )
    rows = (
        ("error_shuffle_seed_differs", config, _ROW, changed(_ROW, shuffle_seed=1)),
        ("error_num_splits_differs", config, _ROW, changed(_ROW, num_splits=8)),
        ("error_epoch_differs", config, _ROW, changed(_ROW, epoch=0)),
        ("error_pack_sequences_differs", packing, _PACKED, changed(_PACKED, pack_sequences=2)),
        ("error_eos_id_differs", packing, _PACKED, changed(_PACKED, eos_id=3)),
        ("error_pad_id_differs", packing, _PACKED, changed(_PACKED, pad_id=3)),
        ("error_blocks_per_epoch_differs", packing, _PACKED, changed(_PACKED, blocks_per_epoch=4)),
        ("error_fingerprint_only_in_second", fingerprint, _ROW, _STRATEGY),
        ("error_fingerprint_only_in_first", fingerprint, _STRATEGY, _ROW),
        ("error_fingerprints_differ", fingerprint, _STRATEGY, changed(_ROW, perm_fingerprint="f" * 64)),
    )  # fmt: skip
    return [_case(name, description, [first, second]) for name, description, first, second in rows]


def _invalid_config_cases() -> list[CaseDef]:
    """A config no dataset can have, and packed states not taken at one global step."""
    return [
        _case("error_num_splits_not_int", "config values are ints", [changed(_ROW, num_splits="4")] * 2),
        _case("error_epoch_is_bool", "config values are ints", [changed(_ROW, epoch=True)]),
        _case(
            "error_fingerprint_not_a_string",
            "perm_fingerprint is a string",
            [changed(_ROW, perm_fingerprint=7)],
        ),
        _case(
            "error_num_splits_zero",
            "num_splits is positive",
            [changed(_ROW, num_splits=0, samples_consumed_per_split=[], positions_consumed_per_split=[])],
        ),
        _case(
            "error_pack_sequences_zero", "pack_sequences is positive", [changed(_PACKED, pack_sequences=0)]
        ),
        _case(
            "error_blocks_per_epoch_zero",
            "blocks_per_epoch is positive",
            [changed(_PACKED, blocks_per_epoch=0)],
        ),
        _case(
            "error_blocks_per_epoch_not_divisible",
            "blocks_per_epoch is a multiple of num_splits",
            [changed(_PACKED, blocks_per_epoch=6)],
        ),
        _case(
            "error_packed_not_every_rank",
            "packed states must cover every rank at one step",
            [snapshot_packed(PACKED_CONFIG, replace(PACKED_STATE, emitted=(1, 1, 0, 0), buffers={}))],
        ),
        _case(
            "error_packed_ranks_at_different_steps",
            "packed states must be taken at the same global step",
            [
                snapshot_packed(PACKED_CONFIG, replace(PACKED_STATE, emitted=(2, 2, 0, 0), buffers={})),
                snapshot_packed(PACKED_CONFIG, replace(PACKED_STATE, emitted=(0, 0, 1, 1), buffers={})),
            ],
        ),
    ]


def _of_session(
    name: str,
    description: str,
    job: Job,
    shape: Shape,
    batches: int | Sequence[int],
    ranks: Sequence[int] = (),
) -> CaseDef:
    """The merge of the checkpoints ``ranks`` (default: every rank) of a session from the epoch start;
    a merge of every rank is checked against ``MergeReportedInv``."""
    results = session(job, shape, batches)
    chosen = list(ranks) or list(range(shape.world_size))
    wire = [snapshot_saved(results[r].checkpoint) for r in chosen]

    def check() -> None:
        if not ranks:
            inv.MergeReportedInv(job.perm, job.faults, job.docs, results)

    return _case(name, description, wire, check)


_EVERY_RANK: tuple[tuple[str, str, Job, Shape, int | tuple[int, ...]], ...] = (
    # name, description, job, shape, batches (one for every rank, or per rank)
    ("ours_row_lockstep", "2 ranks of 2 workers, 3 batches each: the cursor of every rank is kept",
     ROW_JOB, Shape(2, 2, 1), 3),
    ("ours_row_out_of_lockstep",
     "rank 0 took 4 batches, rank 1 one: rank 1's own value wins over rank 0's inference",
     ROW_JOB, Shape(2, 0, 2), (4, 1)),
    ("ours_row_skipping_transforms", "splits one rank could not know are reported by their owner",
     SKIP_JOB, Shape(2, 0, 2), 2),
    ("ours_row_four_ranks", "4 ranks of one split each, out of lockstep",
     ROW_JOB, Shape(4, 0, 1), (1, 3, 0, 2)),
    ("ours_packed_lockstep", "packed, 2 ranks of 2 workers: the owners' buffers, no projection left",
     PACKED_JOB, Shape(2, 2, 1), 3),
    ("ours_packed_out_of_lockstep",
     "packed, rank 0 took 5 batches, rank 1 two: rank 1's value wins over rank 0's projection",
     PACKED_JOB, Shape(2, 0, 1), (5, 2)),
)  # fmt: skip
"""The merges of every rank's checkpoint of a session, a row each."""

_SOME_RANKS: tuple[tuple[str, str, Job, Shape, int | tuple[int, ...], tuple[int, ...]], ...] = (
    # name, description, job, shape, batches, the ranks whose checkpoints are merged
    ("error_ours_one_of_two_ranks", "one rank's checkpoint alone is loaded directly, never merged",
     ROW_JOB, Shape(2, 2, 1), 3, (0,)),
    ("error_ours_three_of_four_ranks", "rank 2 is left out",
     ROW_JOB, Shape(4, 0, 1), 2, (0, 1, 3)),
    ("error_ours_packed_rank_left_out", "packed: rank 0 is left out",
     PACKED_JOB, Shape(2, 0, 1), 2, (1,)),
    ("ours_same_rank_twice", "a rank's checkpoint twice with the other's: nothing is missing",
     ROW_JOB, Shape(2, 0, 1), (2, 3), (0, 1, 0)),
)  # fmt: skip
"""The merges that leave out a rank, a row each (and one that names a rank twice)."""


def _session_cases() -> list[CaseDef]:
    """The checkpoints every rank of a session wrote: each split gets its owner's value."""
    alone = session(PACKED_JOB, Shape(1, 0, 4), 2)[0].checkpoint.state
    assert isinstance(alone, PackedState)
    return [
        *(_of_session(*row) for row in _EVERY_RANK),
        _case(
            "ours_through_json_and_legacy",
            "our checkpoint after a JSON round trip merged with one written without our key",
            [
                json_form(snapshot_saved(session(PACKED_JOB, Shape(2, 0, 1), 2)[1].checkpoint)),
                snapshot_packed(PACKED_JOB.config, alone),
            ],
        ),
    ]


def _missing_rank_cases() -> list[CaseDef]:
    """A merge that leaves out a rank: a split no checkpoint reports."""
    return [_of_session(*row) for row in _SOME_RANKS]


def _table_cases() -> list[CaseDef]:
    """Table pins: kept by the merge; states of different table versions do not merge."""
    pinned = [snapshot_saved(r.checkpoint) for r in session(ROW_JOB, Shape(2, 0, 1), 2, pinned=True)]
    return [
        _case("ours_with_table_pin", "every rank pinned the same table version", pinned),
        _case(
            "ours_pinned_and_unpinned",
            "a state without a pin merges with pinned ones",
            [pinned[0], with_extra(pinned[1], sign=True, table=None)],
        ),
        _case(
            "error_table_versions_differ",
            "the states were written for different table versions",
            [pinned[0], with_extra(pinned[1], sign=True, table={"version": 4, "rows": 20})],
        ),
    ]


FAMILY = family("merge", cases, CODEC)
