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


def cases() -> list[CaseDef]:
    """Checkpoint validation on load: the parsed progress, or the error class and code."""
    row = snapshot_row(ROW_CONFIG, ROW_STATE)
    strategy = snapshot_row(STRATEGY_CONFIG, ROW_STATE)
    packed = snapshot_packed(PACKED_CONFIG, PACKED_STATE)

    def case(
        name: str, description: str, config: RunConfig, checkpoint: object, split_len: int = 5
    ) -> CaseDef:
        return make_case("load", CODEC, name, description, LoadInput(config, split_len, checkpoint))

    def auto(name: str, description: str, checkpoint: object) -> CaseDef:
        config = (
            PACKED_CONFIG if isinstance(checkpoint, Mapping) and "pack_buffers" in checkpoint else ROW_CONFIG
        )
        return case(name, description, config, checkpoint)

    return [
        case("row_snapshot", "a row checkpoint as written (in-memory form)", ROW_CONFIG, row),
        case(
            "row_fresh",
            "a row checkpoint before any row",
            ROW_CONFIG,
            snapshot_row(ROW_CONFIG, initial_row_state(4)),
        ),
        case(
            "row_at_split_end",
            "progress may reach the split end",
            ROW_CONFIG,
            changed(row, positions_consumed_per_split=[5, 5, 5, 5], samples_consumed_per_split=[5, 4, 5, 3]),
        ),
        case(
            "row_legacy_int_samples",
            "a legacy int count is a uniform list; positions default to it",
            ROW_CONFIG,
            without(changed(row, samples_consumed_per_split=3), "positions_consumed_per_split"),
        ),
        case(
            "row_legacy_int_with_positions",
            "a legacy int count with a positions list",
            ROW_CONFIG,
            changed(row, samples_consumed_per_split=1),
        ),
        case(
            "row_positions_missing",
            "without positions, positions equal samples",
            ROW_CONFIG,
            without(row, "positions_consumed_per_split"),
        ),
        case(
            "row_positions_null",
            "a null positions entry counts as missing",
            ROW_CONFIG,
            changed(row, positions_consumed_per_split=None),
        ),
        case(
            "row_unknown_key_ignored",
            "keys the format does not define are ignored",
            ROW_CONFIG,
            changed(row, note="written by another tool"),
        ),
        case(
            "row_keys_in_other_order",
            "key order does not matter on load",
            ROW_CONFIG,
            dict(reversed(list(row.items()))),
        ),
        case(
            "row_with_fingerprint",
            "a split_strategy dataset loads its own fingerprint",
            STRATEGY_CONFIG,
            strategy,
        ),
        case(
            "row_big_seed",
            "a shuffle_seed near 2**64 compares exactly",
            RunConfig(4, 2**64 - 2, 0),
            snapshot_row(RunConfig(4, 2**64 - 2, 0), ROW_STATE),
        ),
        case("packed_snapshot", "a packed checkpoint as written (int buffer keys)", PACKED_CONFIG, packed),
        case(
            "packed_string_buffer_keys",
            "JSON turns buffer keys into strings; they are accepted",
            PACKED_CONFIG,
            with_buffers(
                packed, {"0": {"tokens": [10, 1], "starts": [1]}, "3": {"tokens": [1], "starts": []}}
            ),
        ),
        case(
            "packed_empty_buffer_dropped",
            "an empty buffer is the same as a missing one",
            PACKED_CONFIG,
            with_buffers(
                packed,
                {
                    "0": {"tokens": [10, 1], "starts": [1]},
                    "1": {"tokens": [], "starts": []},
                    "3": {"tokens": [1], "starts": []},
                },
            ),
        ),
        case(
            "packed_fresh",
            "a packed checkpoint before any block",
            PACKED_CONFIG,
            snapshot_packed(PACKED_CONFIG, initial_packed_state(4)),
        ),
        case(
            "packed_at_budget",
            "every split emitted its budget",
            PACKED_CONFIG,
            changed(packed, blocks_emitted_per_split=[2, 2, 2, 2]),
        ),
        case("error_not_a_dict", "a checkpoint is a dict", ROW_CONFIG, [row]),
        case("error_null", "a checkpoint is a dict", ROW_CONFIG, None),
        case("error_string", "a checkpoint is a dict", PACKED_CONFIG, "checkpoint"),
        case(
            "error_missing_shuffle_seed",
            "config keys are required",
            ROW_CONFIG,
            without(row, "shuffle_seed"),
        ),
        case("error_missing_num_splits", "config keys are required", ROW_CONFIG, without(row, "num_splits")),
        case("error_missing_epoch", "config keys are required", ROW_CONFIG, without(row, "epoch")),
        case(
            "error_missing_pack_sequences",
            "packing keys are required",
            PACKED_CONFIG,
            without(packed, "pack_sequences"),
        ),
        case("error_num_splits_differs", "num_splits must match", ROW_CONFIG, changed(row, num_splits=8)),
        case(
            "error_shuffle_seed_differs", "shuffle_seed must match", ROW_CONFIG, changed(row, shuffle_seed=41)
        ),
        case(
            "error_epoch_differs_row_mode", "row mode checks the epoch too", ROW_CONFIG, changed(row, epoch=2)
        ),
        case(
            "error_epoch_differs_packed_mode",
            "packed mode checks the epoch",
            PACKED_CONFIG,
            changed(packed, epoch=1),
        ),
        case(
            "error_num_splits_is_string",
            "a string is not the configured number",
            ROW_CONFIG,
            changed(row, num_splits="4"),
        ),
        case(
            "error_fingerprint_differs",
            "a checkpoint of another permutation",
            STRATEGY_CONFIG,
            changed(strategy, perm_fingerprint="0" * 64),
        ),
        case(
            "error_fingerprint_on_random_split_dataset",
            "a fingerprint where the dataset has none is a mismatch",
            ROW_CONFIG,
            strategy,
        ),
        case(
            "error_fingerprint_missing",
            "a split_strategy dataset needs the fingerprint",
            STRATEGY_CONFIG,
            row,
        ),
        case(
            "error_row_checkpoint_packed_dataset",
            "row and packed checkpoints do not mix",
            PACKED_CONFIG,
            snapshot_row(replace(PACKED_CONFIG, packing=None), RowState((0,) * 4, (0,) * 4)),
        ),
        case(
            "error_packed_checkpoint_row_dataset",
            "row and packed checkpoints do not mix",
            replace(PACKED_CONFIG, packing=None),
            packed,
        ),
        case(
            "error_pack_sequences_differs",
            "packing keys must match",
            PACKED_CONFIG,
            changed(packed, pack_sequences=8),
        ),
        case("error_eos_id_differs", "packing keys must match", PACKED_CONFIG, changed(packed, eos_id=2)),
        case("error_pad_id_differs", "packing keys must match", PACKED_CONFIG, changed(packed, pad_id=-1)),
        case(
            "error_blocks_per_epoch_differs",
            "packing keys must match",
            PACKED_CONFIG,
            changed(packed, blocks_per_epoch=12),
        ),
        case(
            "error_blocks_per_epoch_auto",
            "a checkpoint holds the resolved budget, never 'auto'",
            PACKED_CONFIG,
            changed(packed, blocks_per_epoch="auto"),
        ),
        case(
            "error_row_position_beyond_split_end",
            "progress beyond the split end",
            ROW_CONFIG,
            changed(row, positions_consumed_per_split=[3, 2, 6, 2]),
        ),
        case(
            "error_row_legacy_beyond_split_end",
            "a legacy count beyond the split end",
            ROW_CONFIG,
            without(changed(row, samples_consumed_per_split=6), "positions_consumed_per_split"),
        ),
        case(
            "error_packed_consumed_beyond_split_end",
            "progress beyond the split end",
            PACKED_CONFIG,
            changed(packed, samples_consumed_per_split=[3, 2, 2, 6]),
        ),
        case(
            "error_packed_emitted_beyond_budget",
            "more blocks than the per-split budget",
            PACKED_CONFIG,
            changed(packed, blocks_emitted_per_split=[3, 3, 3, 3]),
        ),
        *checkpoint_fault_cases(auto, row, packed),
    ]


FAMILY = family("load", cases, CODEC)
