"""The ``checkpoint_snapshot`` family: the exact checkpoint dict written for a config and a state.

Keys and key order are part of the output. Every successful case is checked
against ``CheckpointRoundTripInv``.

Rules of this module (the same for every family module): the input is a frozen
dataclass with a JSON codec (``_encode``/``_decode``) and a model run
(``_run``) that checks the invariants of the result; :func:`cases` builds the
cases, deterministically, in the order the vector file lists them, and the
first line of its docstring is the family's summary in that file.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....spec import invariants as inv
from ....spec.checkpoint import snapshot_packed, snapshot_row
from ....spec.errors import SpecError
from ....spec.packing import PackBuffer, PackedState, initial_packed_state
from ....spec.rows import RowState, initial_row_state
from ....spec.topology import RunConfig
from ..codec import (
    JsonObject,
    VectorFormatError,
    as_str,
    dec_config,
    dec_packed_state,
    dec_row_state,
    enc_checkpoint,
    enc_config,
    enc_state,
    error_json,
)
from ..plumbing import CaseDef, Codec, attempt, family, make_case
from .fixtures import FINGERPRINT, PACKING4


@dataclass(frozen=True)
class SnapshotInput:
    """A config and a state of ``mode`` (``"row"`` or ``"packed"``) to write as a checkpoint."""

    config: RunConfig
    mode: str
    state: RowState | PackedState


def _encode(x: SnapshotInput) -> JsonObject:
    return {"config": enc_config(x.config), "mode": x.mode, "state": enc_state(x.state)}


def _decode(j: JsonObject) -> SnapshotInput:
    mode = as_str(j["mode"])
    if mode not in ("row", "packed"):
        raise VectorFormatError(f"mode {mode!r}")
    state = dec_row_state(j["state"]) if mode == "row" else dec_packed_state(j["state"])
    return SnapshotInput(dec_config(j["config"]), mode, state)


def _run(x: SnapshotInput) -> JsonObject:
    def compute() -> dict[str, object]:
        if isinstance(x.state, RowState):
            return snapshot_row(x.config, x.state)
        return snapshot_packed(x.config, x.state)

    checkpoint = attempt(compute)
    if isinstance(checkpoint, SpecError):
        return error_json(checkpoint)
    progress = x.state.positions if isinstance(x.state, RowState) else x.state.consumed
    inv.CheckpointRoundTripInv(x.config, x.state, max(progress, default=0))
    return enc_checkpoint(checkpoint)


CODEC = Codec(_encode, _decode, _run)


def cases() -> list[CaseDef]:
    """The exact checkpoint dict (keys and key order) written for a config and a state."""

    def case(name: str, description: str, config: RunConfig, state: RowState | PackedState) -> CaseDef:
        mode = "row" if isinstance(state, RowState) else "packed"
        return make_case("checkpoint_snapshot", CODEC, name, description, SnapshotInput(config, mode, state))

    row = RowState((2, 2, 1, 1), (3, 2, 1, 2))
    packed = PackedState((3, 2, 2, 4), (1, 1, 1, 1), {0: PackBuffer((10, 1), (1,)), 3: PackBuffer((1,), ())})
    return [
        case("row_fresh", "row mode before any row", RunConfig(4, 0, 0), initial_row_state(4)),
        case("row_mid_epoch", "row mode with skipped rows behind", RunConfig(4, 42, 1), row),
        case(
            "row_with_fingerprint",
            "perm_fingerprint sits between num_splits and epoch",
            RunConfig(4, 42, 0, FINGERPRINT),
            row,
        ),
        case(
            "row_seed_at_limit",
            "shuffle_seed 2**64 - 1 is written exactly",
            RunConfig(2, 2**64 - 1, 0),
            RowState((1, 0), (1, 0)),
        ),
        case(
            "packed_with_buffers",
            "packed mode; pack_buffers lists the non-empty buffers by split id",
            RunConfig(4, 7, 2, None, PACKING4),
            packed,
        ),
        case(
            "packed_without_buffers",
            "packed mode with every buffer empty: pack_buffers is {}",
            RunConfig(4, 7, 0, None, PACKING4),
            PackedState((2, 2, 2, 2), (1, 1, 1, 1), {}),
        ),
        case(
            "packed_with_fingerprint",
            "packed mode with a split_strategy fingerprint",
            RunConfig(4, 7, 0, FINGERPRINT, PACKING4),
            packed,
        ),
        case(
            "packed_fresh",
            "packed mode before any block",
            RunConfig(4, 7, 0, None, PACKING4),
            initial_packed_state(4),
        ),
        case(
            "error_row_snapshot_of_packed_config",
            "a row state cannot be written for a packed config",
            RunConfig(4, 7, 0, None, PACKING4),
            row,
        ),
        case(
            "error_packed_snapshot_of_row_config",
            "a packed state cannot be written for a row config",
            RunConfig(4, 7, 0),
            packed,
        ),
    ]


FAMILY = family("checkpoint_snapshot", cases, CODEC)
