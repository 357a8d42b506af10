"""The ``load`` family: ``load_state_dict`` on one rank, the checkpoint as read, or the error.

The model is :func:`~elastic_loader.spec.saved.load_for_rank`: the reference's checks of
``checkpoint.py``, the structure and digest of the ``elastic_loader`` key, reachable packed
buffers, and the loading rank's splits must be known. The checkpoints come from :mod:`.fixtures`
(hand-made; each error case changes one thing, the malformed variants are shared with ``merge``)
and from sessions of the model (:mod:`.sessions`). Every accepted checkpoint is checked against
``CheckpointRoundTripInv`` and ``ReachableLoadInv``, and every checkpoint a session wrote against
``PartialStateRefusedInv``.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ....spec.checkpoint import snapshot_packed, snapshot_row
from ....spec.packing import initial_packed_state
from ....spec.protocols import Shape
from ....spec.rows import RowState, initial_row_state
from ....spec.saved import Saved, load_for_rank, snapshot_saved
from ....spec.topology import RunConfig
from ..codec import CONFIG, INT, OPAQUE, enc_saved, record
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
class LoadInput:
    """A dataset config, its split length and topology, and the checkpoint to load."""

    config: RunConfig
    split_len: int
    world_size: int
    rank: int
    checkpoint: object


_encode, _decode = record(LoadInput, CONFIG, INT, INT, INT, OPAQUE)


def _run(x: LoadInput) -> JsonObject:
    saved = attempt(lambda: load_for_rank(x.config, x.checkpoint, x.split_len, x.world_size, x.rank))
    if isinstance(saved, SpecError):
        return error_json(saved)
    inv.CheckpointRoundTripInv(x.config, saved.state, x.split_len)
    inv.ReachableLoadInv(saved, x.split_len)
    return enc_saved(saved)


CODEC = Codec(_encode, _decode, _run)


_ROW, _STRATEGY, _PACKED = ROW_CHECKPOINT, STRATEGY_CHECKPOINT, PACKED_CHECKPOINT


def _case(
    name: str,
    description: str,
    config: RunConfig,
    checkpoint: object,
    split_len: int = 5,
    world_size: int = 1,
    rank: int = 0,
) -> CaseDef:
    """A case of this family (split length 5 and one rank unless given)."""
    value = LoadInput(config, split_len, world_size, rank, checkpoint)
    return make_case("load", CODEC, name, description, value)


def _auto(name: str, description: str, checkpoint: object) -> CaseDef:
    """A case whose config is the packed one when the checkpoint has ``pack_buffers``, else the row one."""
    config = PACKED_CONFIG if is_packed(checkpoint) else ROW_CONFIG
    return _case(name, description, config, checkpoint)


def cases() -> list[CaseDef]:
    """Checkpoint validation on load: the parsed progress, or the error class and code."""
    return [
        *(_case(*row) for row in _HAND_MADE),
        *checkpoint_fault_cases(_auto),
        *_session_cases(),
        *_more_session_cases(),
        *_edited_cases(),
        *_legacy_packed_cases(),
        *provenance_fault_cases(_auto),
        *_topology_cases(),
    ]


_BIG = RunConfig(4, 2**64 - 2, 0)
_ROW_ONLY = replace(PACKED_CONFIG, packing=None)
_BUFFERS = {"0": {"tokens": [1, 10, 1], "starts": [1]}, "3": {"tokens": [1], "starts": []}}
_DICT, _CONFIG_KEYS, _PACKING_KEYS = (
    "a checkpoint is a dict",
    "config keys are required",
    "packing keys are required",
)
_MATCH = "packing keys must match"

_HAND_MADE: tuple[tuple[str, str, RunConfig, object], ...] = (
    # name, description, config of the dataset, checkpoint (split length 5, one rank)
    # row checkpoints the model accepts: as written, legacy forms, extra keys, other key orders
    ("row_snapshot", "a row checkpoint as written (in-memory form)", ROW_CONFIG, _ROW),
    ("row_fresh", "a row checkpoint before any row", ROW_CONFIG,
     snapshot_row(ROW_CONFIG, initial_row_state(4))),
    ("row_at_split_end", "progress may reach the split end", ROW_CONFIG,
     changed(_ROW, positions_consumed_per_split=[5, 5, 5, 5], samples_consumed_per_split=[5, 4, 5, 3])),
    ("row_legacy_int_samples", "a legacy int count is a uniform list; positions default to it",
     ROW_CONFIG, legacy_row(_ROW, 3)),
    ("row_legacy_int_with_positions", "a legacy int count with a positions list", ROW_CONFIG,
     changed(_ROW, samples_consumed_per_split=1)),
    ("row_positions_missing", "without positions, positions equal samples", ROW_CONFIG,
     without(_ROW, "positions_consumed_per_split")),
    ("row_positions_null", "a null positions entry counts as missing", ROW_CONFIG,
     changed(_ROW, positions_consumed_per_split=None)),
    ("row_unknown_key_ignored", "keys the format does not define are ignored", ROW_CONFIG,
     changed(_ROW, note="written by another tool")),
    ("row_keys_in_other_order", "key order does not matter on load", ROW_CONFIG,
     dict(reversed(list(_ROW.items())))),
    ("row_with_fingerprint", "a split_strategy dataset loads its own fingerprint",
     STRATEGY_CONFIG, _STRATEGY),
    ("row_big_seed", "a shuffle_seed near 2**64 compares exactly", _BIG, snapshot_row(_BIG, ROW_STATE)),
    # packed checkpoints the model accepts: int or string buffer keys, empty buffers, at the budget
    ("packed_snapshot", "a packed checkpoint as written (int buffer keys)", PACKED_CONFIG, _PACKED),
    ("packed_string_buffer_keys", "JSON turns buffer keys into strings; they are accepted",
     PACKED_CONFIG, with_buffers(_PACKED, _BUFFERS)),
    ("packed_empty_buffer_dropped", "an empty buffer is the same as a missing one",
     PACKED_CONFIG, with_buffers(_PACKED, {"0": {"tokens": [1, 10, 1], "starts": [1]},
                                           "1": {"tokens": [], "starts": []},
                                           "3": {"tokens": [1], "starts": []}})),
    ("packed_fresh", "a packed checkpoint before any block",
     PACKED_CONFIG, snapshot_packed(PACKED_CONFIG, initial_packed_state(4))),
    ("packed_at_budget", "every split emitted its budget",
     PACKED_CONFIG, changed(_PACKED, blocks_emitted_per_split=[2, 2, 2, 2])),
    # not a checkpoint dict, or a required key missing
    ("error_not_a_dict", _DICT, ROW_CONFIG, [_ROW]),
    ("error_null", _DICT, ROW_CONFIG, None),
    ("error_string", _DICT, PACKED_CONFIG, "checkpoint"),
    ("error_missing_shuffle_seed", _CONFIG_KEYS, ROW_CONFIG, without(_ROW, "shuffle_seed")),
    ("error_missing_num_splits", _CONFIG_KEYS, ROW_CONFIG, without(_ROW, "num_splits")),
    ("error_missing_epoch", _CONFIG_KEYS, ROW_CONFIG, without(_ROW, "epoch")),
    ("error_missing_pack_sequences", _PACKING_KEYS, PACKED_CONFIG, without(_PACKED, "pack_sequences")),
    # a checkpoint of another configuration or permutation
    ("error_num_splits_differs", "num_splits must match", ROW_CONFIG, changed(_ROW, num_splits=8)),
    ("error_shuffle_seed_differs", "shuffle_seed must match", ROW_CONFIG, changed(_ROW, shuffle_seed=41)),
    ("error_epoch_differs_row_mode", "row mode checks the epoch too", ROW_CONFIG, changed(_ROW, epoch=2)),
    ("error_epoch_differs_packed_mode", "packed mode checks the epoch",
     PACKED_CONFIG, changed(_PACKED, epoch=1)),
    ("error_num_splits_is_string", "a string is not the configured number",
     ROW_CONFIG, changed(_ROW, num_splits="4")),
    ("error_fingerprint_differs", "a checkpoint of another permutation",
     STRATEGY_CONFIG, changed(_STRATEGY, perm_fingerprint="0" * 64)),
    ("error_fingerprint_on_random_split_dataset", "a fingerprint where the dataset has none is a mismatch",
     ROW_CONFIG, _STRATEGY),
    ("error_fingerprint_missing", "a split_strategy dataset needs the fingerprint", STRATEGY_CONFIG, _ROW),
    # a checkpoint of the other mode, or of other packing parameters
    ("error_row_checkpoint_packed_dataset", "row and packed checkpoints do not mix",
     PACKED_CONFIG, snapshot_row(_ROW_ONLY, RowState((0,) * 4, (0,) * 4))),
    ("error_packed_checkpoint_row_dataset", "row and packed checkpoints do not mix", _ROW_ONLY, _PACKED),
    ("error_pack_sequences_differs", _MATCH, PACKED_CONFIG, changed(_PACKED, pack_sequences=8)),
    ("error_eos_id_differs", _MATCH, PACKED_CONFIG, changed(_PACKED, eos_id=2)),
    ("error_pad_id_differs", _MATCH, PACKED_CONFIG, changed(_PACKED, pad_id=-1)),
    ("error_blocks_per_epoch_differs", _MATCH, PACKED_CONFIG, changed(_PACKED, blocks_per_epoch=12)),
    ("error_blocks_per_epoch_auto", "a checkpoint holds the resolved budget, never 'auto'",
     PACKED_CONFIG, changed(_PACKED, blocks_per_epoch="auto")),
    # progress beyond the split end or the budget
    ("error_row_position_beyond_split_end", "progress beyond the split end",
     ROW_CONFIG, changed(_ROW, positions_consumed_per_split=[3, 2, 6, 2])),
    ("error_row_legacy_beyond_split_end", "a legacy count beyond the split end",
     ROW_CONFIG, legacy_row(_ROW, 6)),
    ("error_packed_consumed_beyond_split_end", "progress beyond the split end",
     PACKED_CONFIG, changed(_PACKED, samples_consumed_per_split=[3, 2, 2, 6])),
    ("error_packed_emitted_beyond_budget", "more blocks than the per-split budget",
     PACKED_CONFIG, changed(_PACKED, blocks_emitted_per_split=[3, 3, 3, 3])),
)  # fmt: skip
"""The hand-made checkpoints, a row each, by theme (a comment heads each theme)."""


def _from_session(
    name: str, description: str, job: Job, saved: Saved, world_size: int, rank: int, as_json: bool = False
) -> CaseDef:
    """A case loading the checkpoint a session wrote (``as_json``: after a JSON round trip)."""
    checkpoint = snapshot_saved(saved)
    if as_json:
        checkpoint = json_form(checkpoint)
    return _case(name, description, job.config, checkpoint, job.split_len, world_size, rank)


def _session_cases() -> list[CaseDef]:
    """Checkpoints one rank of a session wrote, loaded by itself, another rank, another topology."""
    row = session(ROW_JOB, Shape(2, 2, 1), 3)
    inv.PartialStateRefusedInv(row, ROW_JOB.split_len)
    return [
        _from_session(
            "ours_row_on_its_own_rank",
            "rank 0's checkpoint of a 2-rank session with 2 workers, loaded on rank 0",
            ROW_JOB,
            row[0].checkpoint,
            2,
            0,
        ),
        _from_session(
            "ours_row_on_the_other_rank",
            "rank 0's checkpoint loaded on rank 1: rank 1's splits are inferred, exactly",
            ROW_JOB,
            row[0].checkpoint,
            2,
            1,
        ),
        _from_session(
            "ours_row_on_one_rank",
            "rank 1's checkpoint loaded by a job of one rank (the cursor is kept for its shape)",
            ROW_JOB,
            row[1].checkpoint,
            1,
            0,
        ),
        _from_session(
            "ours_row_through_json",
            "the same checkpoint after a JSON round trip",
            ROW_JOB,
            row[1].checkpoint,
            4,
            3,
            as_json=True,
        ),
    ]


def _more_session_cases() -> list[CaseDef]:
    """Packed projections, unknown splits and table pins of sessions' checkpoints."""
    packed = session(PACKED_JOB, Shape(2, 2, 1), 3)
    skip = session(SKIP_JOB, Shape(2, 0, 2), 2)
    pinned = session(ROW_JOB, Shape(2, 0, 3), 1, pinned=True)
    for results in (packed, skip):
        inv.PartialStateRefusedInv(results, ROW_JOB.split_len)
    return [
        _from_session(
            "ours_packed_projected",
            "rank 0's packed checkpoint: rank 1's splits are projected block counts",
            PACKED_JOB,
            packed[0].checkpoint,
            2,
            1,
        ),
        _from_session(
            "ours_packed_through_json",
            "a packed checkpoint after a JSON round trip: string keys in pack_buffers and projected",
            PACKED_JOB,
            packed[1].checkpoint,
            1,
            0,
            as_json=True,
        ),
        _from_session(
            "ours_unknown_splits_of_another_rank",
            "with skipping transforms rank 0 does not know rank 1's splits; rank 0 loads it",
            SKIP_JOB,
            skip[0].checkpoint,
            2,
            0,
        ),
        _from_session(
            "error_ours_unknown_splits_of_this_rank",
            "with skipping transforms rank 0 does not know rank 1's splits; rank 1 refuses it",
            SKIP_JOB,
            skip[0].checkpoint,
            2,
            1,
        ),
        _from_session(
            "error_ours_unknown_splits_on_another_topology",
            "a rank of one process owns every split, also the unknown ones",
            SKIP_JOB,
            skip[1].checkpoint,
            1,
            0,
        ),
        _from_session(
            "ours_with_table_pin",
            "a checkpoint records the table version and rows its permutation was built from",
            ROW_JOB,
            pinned[1].checkpoint,
            2,
            0,
        ),
    ]


def _edited_cases() -> list[CaseDef]:
    """A session's checkpoint edited: refused by its digest, loaded without one."""
    row = session(ROW_JOB, Shape(2, 2, 1), 3)
    edited = changed(snapshot_saved(row[0].checkpoint), samples_consumed_per_split=[1, 1, 2, 1])
    return [
        _case(
            "ours_edited_without_digest",
            "without a digest an edited checkpoint loads (a deliberate edit)",
            ROW_JOB.config,
            with_extra(edited),
            ROW_JOB.split_len,
        ),
        _case(
            "error_ours_edited",
            "an edited value no longer matches the digest",
            ROW_JOB.config,
            edited,
            ROW_JOB.split_len,
        ),
    ]


def _legacy_packed_cases() -> list[CaseDef]:
    """A packed checkpoint without our key is one rank's state when its splits emitted different counts."""
    partial = replace(PACKED_STATE, emitted=(2, 2, 1, 1))
    return [
        _case(
            "error_packed_partial_state",
            "without the provenance key, splits that emitted different counts are one rank's state",
            PACKED_CONFIG,
            snapshot_packed(PACKED_CONFIG, partial),
        ),
        _case(
            "packed_partial_state_with_provenance",
            "with the key the same progress says which splits are reported, and loads",
            PACKED_CONFIG,
            snapshot_saved(Saved(PACKED_CONFIG, partial, frozenset({2, 3}))),
            world_size=2,
            rank=1,
        ),
    ]


def _topology_cases() -> list[CaseDef]:
    """A loading topology that does not fit the checkpoint's splits."""
    return [
        _case("error_world_size_zero", "a job has at least one rank", ROW_CONFIG, _ROW, world_size=0),
        _case("error_rank_beyond_world_size", "rank < world_size", ROW_CONFIG, _ROW, world_size=2, rank=2),
        _case(
            "error_world_size_does_not_divide_splits",
            "every rank owns the same number of splits",
            ROW_CONFIG,
            _ROW,
            world_size=3,
        ),
    ]


FAMILY = family("load", cases, CODEC)
