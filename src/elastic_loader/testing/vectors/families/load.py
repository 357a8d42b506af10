"""The ``load`` family: checkpoint validation on load, the parsed progress or the error.

The checkpoints come from :mod:`.fixtures`; each error case changes one thing
(the malformed variants are shared with ``merge``). Every accepted checkpoint
is checked against ``CheckpointRoundTripInv``.

Rules of this module (the same for every family module): the input is a frozen
dataclass with a JSON codec (``_encode``/``_decode``) and a model run
(``_run``) that checks the invariants of the result; :func:`cases` builds the
cases, deterministically, in the order the vector file lists them, and the
first line of its docstring is the family's summary in that file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ....spec import invariants as inv
from ....spec.checkpoint import load_packed, load_row, snapshot_packed, snapshot_row
from ....spec.errors import SpecError
from ....spec.packing import PackedState, initial_packed_state
from ....spec.rows import RowState, initial_row_state
from ....spec.topology import RunConfig
from ..codec import (
    JsonObject,
    as_int,
    dec_config,
    decode_value,
    enc_config,
    enc_state,
    encode_value,
    error_json,
)
from ..plumbing import CaseDef, Codec, attempt, family, make_case
from .fixtures import (
    PACKED_CONFIG,
    PACKED_STATE,
    ROW_CONFIG,
    ROW_STATE,
    STRATEGY_CONFIG,
    changed,
    checkpoint_fault_cases,
    with_buffers,
    without,
)


@dataclass(frozen=True)
class LoadInput:
    """A dataset config, its split length, and the checkpoint to load (possibly malformed)."""

    config: RunConfig
    split_len: int
    checkpoint: object


def _encode(x: LoadInput) -> JsonObject:
    return {
        "config": enc_config(x.config),
        "split_len": x.split_len,
        "checkpoint": encode_value(x.checkpoint),
    }


def _decode(j: JsonObject) -> LoadInput:
    return LoadInput(dec_config(j["config"]), as_int(j["split_len"]), decode_value(j["checkpoint"]))


def _run(x: LoadInput) -> JsonObject:
    def compute() -> RowState | PackedState:
        if x.config.packing is None:
            return load_row(x.config, x.checkpoint, x.split_len)
        return load_packed(x.config, x.checkpoint, x.split_len)

    state = attempt(compute)
    if isinstance(state, SpecError):
        return error_json(state)
    inv.CheckpointRoundTripInv(x.config, state, x.split_len)
    return {"state": enc_state(state)}


CODEC = Codec(_encode, _decode, _run)


_ROW = snapshot_row(ROW_CONFIG, ROW_STATE)
_STRATEGY = snapshot_row(STRATEGY_CONFIG, ROW_STATE)
_PACKED = snapshot_packed(PACKED_CONFIG, PACKED_STATE)


def _case(name: str, description: str, config: RunConfig, checkpoint: object, split_len: int = 5) -> CaseDef:
    """A case of this family (split length 5 unless given)."""
    return make_case("load", CODEC, name, description, LoadInput(config, split_len, checkpoint))


def _auto(name: str, description: str, checkpoint: object) -> CaseDef:
    """A case whose config is the packed one when the checkpoint has ``pack_buffers``, else the row one."""
    config = PACKED_CONFIG if isinstance(checkpoint, Mapping) and "pack_buffers" in checkpoint else ROW_CONFIG
    return _case(name, description, config, checkpoint)


def cases() -> list[CaseDef]:
    """Checkpoint validation on load: the parsed progress, or the error class and code."""
    return [
        *_row_cases(),
        *_packed_cases(),
        *_shape_cases(),
        *_config_mismatch_cases(),
        *_mode_mismatch_cases(),
        *_range_cases(),
        *checkpoint_fault_cases(_auto, _ROW, _PACKED),
    ]


def _row_cases() -> list[CaseDef]:
    """Row checkpoints the model accepts: as written, legacy forms, extra keys, other key orders."""
    return [
        _case("row_snapshot", "a row checkpoint as written (in-memory form)", ROW_CONFIG, _ROW),
        _case(
            "row_fresh",
            "a row checkpoint before any row",
            ROW_CONFIG,
            snapshot_row(ROW_CONFIG, initial_row_state(4)),
        ),
        _case(
            "row_at_split_end",
            "progress may reach the split end",
            ROW_CONFIG,
            changed(_ROW, positions_consumed_per_split=[5, 5, 5, 5], samples_consumed_per_split=[5, 4, 5, 3]),
        ),
        _case(
            "row_legacy_int_samples",
            "a legacy int count is a uniform list; positions default to it",
            ROW_CONFIG,
            without(changed(_ROW, samples_consumed_per_split=3), "positions_consumed_per_split"),
        ),
        _case(
            "row_legacy_int_with_positions",
            "a legacy int count with a positions list",
            ROW_CONFIG,
            changed(_ROW, samples_consumed_per_split=1),
        ),
        _case(
            "row_positions_missing",
            "without positions, positions equal samples",
            ROW_CONFIG,
            without(_ROW, "positions_consumed_per_split"),
        ),
        _case(
            "row_positions_null",
            "a null positions entry counts as missing",
            ROW_CONFIG,
            changed(_ROW, positions_consumed_per_split=None),
        ),
        _case(
            "row_unknown_key_ignored",
            "keys the format does not define are ignored",
            ROW_CONFIG,
            changed(_ROW, note="written by another tool"),
        ),
        _case(
            "row_keys_in_other_order",
            "key order does not matter on load",
            ROW_CONFIG,
            dict(reversed(list(_ROW.items()))),
        ),
        _case(
            "row_with_fingerprint",
            "a split_strategy dataset loads its own fingerprint",
            STRATEGY_CONFIG,
            _STRATEGY,
        ),
        _case(
            "row_big_seed",
            "a shuffle_seed near 2**64 compares exactly",
            RunConfig(4, 2**64 - 2, 0),
            snapshot_row(RunConfig(4, 2**64 - 2, 0), ROW_STATE),
        ),
    ]


def _packed_cases() -> list[CaseDef]:
    """Packed checkpoints the model accepts: int or string buffer keys, empty buffers, at the budget."""
    return [
        _case("packed_snapshot", "a packed checkpoint as written (int buffer keys)", PACKED_CONFIG, _PACKED),
        _case(
            "packed_string_buffer_keys",
            "JSON turns buffer keys into strings; they are accepted",
            PACKED_CONFIG,
            with_buffers(
                _PACKED, {"0": {"tokens": [10, 1], "starts": [1]}, "3": {"tokens": [1], "starts": []}}
            ),
        ),
        _case(
            "packed_empty_buffer_dropped",
            "an empty buffer is the same as a missing one",
            PACKED_CONFIG,
            with_buffers(
                _PACKED,
                {
                    "0": {"tokens": [10, 1], "starts": [1]},
                    "1": {"tokens": [], "starts": []},
                    "3": {"tokens": [1], "starts": []},
                },
            ),
        ),
        _case(
            "packed_fresh",
            "a packed checkpoint before any block",
            PACKED_CONFIG,
            snapshot_packed(PACKED_CONFIG, initial_packed_state(4)),
        ),
        _case(
            "packed_at_budget",
            "every split emitted its budget",
            PACKED_CONFIG,
            changed(_PACKED, blocks_emitted_per_split=[2, 2, 2, 2]),
        ),
    ]


def _shape_cases() -> list[CaseDef]:
    """Not a checkpoint dict, or a required key missing."""
    return [
        _case("error_not_a_dict", "a checkpoint is a dict", ROW_CONFIG, [_ROW]),
        _case("error_null", "a checkpoint is a dict", ROW_CONFIG, None),
        _case("error_string", "a checkpoint is a dict", PACKED_CONFIG, "checkpoint"),
        _case(
            "error_missing_shuffle_seed",
            "config keys are required",
            ROW_CONFIG,
            without(_ROW, "shuffle_seed"),
        ),
        _case(
            "error_missing_num_splits", "config keys are required", ROW_CONFIG, without(_ROW, "num_splits")
        ),
        _case("error_missing_epoch", "config keys are required", ROW_CONFIG, without(_ROW, "epoch")),
        _case(
            "error_missing_pack_sequences",
            "packing keys are required",
            PACKED_CONFIG,
            without(_PACKED, "pack_sequences"),
        ),
    ]


def _config_mismatch_cases() -> list[CaseDef]:
    """A checkpoint of another configuration or permutation."""
    return [
        _case("error_num_splits_differs", "num_splits must match", ROW_CONFIG, changed(_ROW, num_splits=8)),
        _case(
            "error_shuffle_seed_differs",
            "shuffle_seed must match",
            ROW_CONFIG,
            changed(_ROW, shuffle_seed=41),
        ),
        _case(
            "error_epoch_differs_row_mode",
            "row mode checks the epoch too",
            ROW_CONFIG,
            changed(_ROW, epoch=2),
        ),
        _case(
            "error_epoch_differs_packed_mode",
            "packed mode checks the epoch",
            PACKED_CONFIG,
            changed(_PACKED, epoch=1),
        ),
        _case(
            "error_num_splits_is_string",
            "a string is not the configured number",
            ROW_CONFIG,
            changed(_ROW, num_splits="4"),
        ),
        _case(
            "error_fingerprint_differs",
            "a checkpoint of another permutation",
            STRATEGY_CONFIG,
            changed(_STRATEGY, perm_fingerprint="0" * 64),
        ),
        _case(
            "error_fingerprint_on_random_split_dataset",
            "a fingerprint where the dataset has none is a mismatch",
            ROW_CONFIG,
            _STRATEGY,
        ),
        _case(
            "error_fingerprint_missing",
            "a split_strategy dataset needs the fingerprint",
            STRATEGY_CONFIG,
            _ROW,
        ),
    ]


def _mode_mismatch_cases() -> list[CaseDef]:
    """A checkpoint of the other mode, or of other packing parameters."""
    return [
        _case(
            "error_row_checkpoint_packed_dataset",
            "row and packed checkpoints do not mix",
            PACKED_CONFIG,
            snapshot_row(replace(PACKED_CONFIG, packing=None), RowState((0,) * 4, (0,) * 4)),
        ),
        _case(
            "error_packed_checkpoint_row_dataset",
            "row and packed checkpoints do not mix",
            replace(PACKED_CONFIG, packing=None),
            _PACKED,
        ),
        _case(
            "error_pack_sequences_differs",
            "packing keys must match",
            PACKED_CONFIG,
            changed(_PACKED, pack_sequences=8),
        ),
        _case("error_eos_id_differs", "packing keys must match", PACKED_CONFIG, changed(_PACKED, eos_id=2)),
        _case("error_pad_id_differs", "packing keys must match", PACKED_CONFIG, changed(_PACKED, pad_id=-1)),
        _case(
            "error_blocks_per_epoch_differs",
            "packing keys must match",
            PACKED_CONFIG,
            changed(_PACKED, blocks_per_epoch=12),
        ),
        _case(
            "error_blocks_per_epoch_auto",
            "a checkpoint holds the resolved budget, never 'auto'",
            PACKED_CONFIG,
            changed(_PACKED, blocks_per_epoch="auto"),
        ),
    ]


def _range_cases() -> list[CaseDef]:
    """Progress beyond the split end or the budget."""
    return [
        _case(
            "error_row_position_beyond_split_end",
            "progress beyond the split end",
            ROW_CONFIG,
            changed(_ROW, positions_consumed_per_split=[3, 2, 6, 2]),
        ),
        _case(
            "error_row_legacy_beyond_split_end",
            "a legacy count beyond the split end",
            ROW_CONFIG,
            without(changed(_ROW, samples_consumed_per_split=6), "positions_consumed_per_split"),
        ),
        _case(
            "error_packed_consumed_beyond_split_end",
            "progress beyond the split end",
            PACKED_CONFIG,
            changed(_PACKED, samples_consumed_per_split=[3, 2, 2, 6]),
        ),
        _case(
            "error_packed_emitted_beyond_budget",
            "more blocks than the per-split budget",
            PACKED_CONFIG,
            changed(_PACKED, blocks_emitted_per_split=[3, 3, 3, 3]),
        ),
    ]


FAMILY = family("load", cases, CODEC)
