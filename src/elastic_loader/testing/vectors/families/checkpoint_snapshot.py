"""The ``checkpoint_snapshot`` family: the exact checkpoint dict a dataset's ``state_dict()`` writes.

The model is :func:`~elastic_loader.spec.saved.snapshot_saved`: the reference's keys in the
reference's order, then the ``elastic_loader`` key (format, reported, unknown, projected, cursor,
table, digest). Keys and key order are part of the output. The input gives the provenance as raw
fields, so the cases include provenance no checkpoint can have (the model refuses to write it).
Every written checkpoint is checked against ``CheckpointRoundTripInv`` and ``ReachableLoadInv``.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ....spec.packing import PackBuffer, PackedState, initial_packed_state
from ....spec.protocols import Shape
from ....spec.rows import RowState, initial_row_state
from ....spec.saved import Cursor, Projection, Saved, TablePin, snapshot_saved
from ....spec.topology import RunConfig
from ..codec import (
    Json,
    VectorFormatError,
    as_int,
    as_ints,
    as_object,
    as_str,
    dec_config,
    dec_packed_state,
    dec_row_state,
    enc_checkpoint,
    enc_config,
    enc_state,
    encode_int,
)
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case
from .fixtures import FINGERPRINT, PACKING4
from .sessions import PACKED_JOB, ROW_JOB, SKIP_JOB, session

RawCursor = tuple[int, int, tuple[int, ...]]
RawTable = tuple[int | None, int]


@dataclass(frozen=True)
class SnapshotInput:
    """A config, a state of ``mode`` (``"row"`` or ``"packed"``) and its provenance, as raw fields."""

    config: RunConfig
    mode: str
    state: RowState | PackedState
    reported: tuple[int, ...]
    unknown: tuple[int, ...] = ()
    projected: tuple[tuple[int, int], ...] = ()
    cursor: RawCursor | None = None
    table: RawTable | None = None


def _encode(x: SnapshotInput) -> JsonObject:
    cursor: Json = None
    if x.cursor is not None:
        cursor = {"world_size": x.cursor[0], "num_workers": x.cursor[1], "next_roles": list(x.cursor[2])}
    table: Json = None
    if x.table is not None:
        table = {"version": x.table[0], "rows": encode_int(x.table[1])}
    return {
        "config": enc_config(x.config),
        "mode": x.mode,
        "state": enc_state(x.state),
        "reported": list(x.reported),
        "unknown": list(x.unknown),
        "projected": {str(s): t for s, t in x.projected},
        "cursor": cursor,
        "table": table,
    }


def _decode(j: JsonObject) -> SnapshotInput:
    mode = as_str(j["mode"])
    if mode not in ("row", "packed"):
        raise VectorFormatError(f"mode {mode!r}")
    state = dec_row_state(j["state"]) if mode == "row" else dec_packed_state(j["state"])
    cursor: RawCursor | None = None
    if j["cursor"] is not None:
        c = as_object(j["cursor"])
        cursor = (as_int(c["world_size"]), as_int(c["num_workers"]), as_ints(c["next_roles"]))
    table: RawTable | None = None
    if j["table"] is not None:
        t = as_object(j["table"])
        table = (None if t["version"] is None else as_int(t["version"]), as_int(t["rows"]))
    return SnapshotInput(
        dec_config(j["config"]),
        mode,
        state,
        as_ints(j["reported"]),
        as_ints(j["unknown"]),
        tuple((int(k), as_int(v)) for k, v in as_object(j["projected"]).items()),
        cursor,
        table,
    )


def _saved(x: SnapshotInput) -> Saved:
    """The model's checkpoint of the raw fields (raises what ``Saved`` and its parts refuse)."""
    return Saved(
        x.config,
        x.state,
        frozenset(x.reported),
        frozenset(x.unknown),
        {s: Projection(t) for s, t in x.projected},
        None if x.cursor is None else Cursor(*x.cursor),
        None if x.table is None else TablePin(*x.table),
    )


def _run(x: SnapshotInput) -> JsonObject:
    saved = attempt(lambda: _saved(x))
    checkpoint = saved if isinstance(saved, SpecError) else attempt(lambda: snapshot_saved(saved))
    if isinstance(checkpoint, SpecError):
        return error_json(checkpoint)
    assert isinstance(saved, Saved)
    progress = x.state.positions if isinstance(x.state, RowState) else x.state.consumed
    split_len = max(1, *progress)
    inv.CheckpointRoundTripInv(x.config, x.state, split_len)
    inv.ReachableLoadInv(saved, split_len)
    return enc_checkpoint(checkpoint)


CODEC = Codec(_encode, _decode, _run)


def _of(saved: Saved) -> SnapshotInput:
    """The raw fields of a checkpoint the model holds."""
    cursor = (
        None
        if saved.cursor is None
        else (saved.cursor.world_size, saved.cursor.num_workers, saved.cursor.next_roles)
    )
    table = None if saved.table is None else (saved.table.version, saved.table.rows)
    return SnapshotInput(
        saved.config,
        "row" if isinstance(saved.state, RowState) else "packed",
        saved.state,
        tuple(sorted(saved.reported)),
        tuple(sorted(saved.unknown)),
        tuple((s, p.target) for s, p in sorted(saved.projections.items())),
        cursor,
        table,
    )


def _case(name: str, description: str, value: SnapshotInput) -> CaseDef:
    return make_case("checkpoint_snapshot", CODEC, name, description, value)


def _every(config: RunConfig, state: RowState | PackedState, **fields: Any) -> SnapshotInput:
    """A checkpoint reporting every split (``fields`` override the raw provenance)."""
    mode = "row" if isinstance(state, RowState) else "packed"
    return replace(SnapshotInput(config, mode, state, tuple(range(config.num_splits))), **fields)


_ROW = RowState((2, 2, 1, 1), (3, 2, 1, 2))
_PACKED = PackedState((3, 2, 2, 4), (1, 1, 1, 1), {0: PackBuffer((1, 10, 1), (1,)), 3: PackBuffer((1,), ())})
_PCONFIG = RunConfig(4, 7, 0, None, PACKING4)


def cases() -> list[CaseDef]:
    """The exact checkpoint dict (keys, key order, provenance, digest) a dataset's state_dict() writes."""
    return [*_plain_cases(), *_session_cases(), *_error_cases()]


def _plain_cases() -> list[CaseDef]:
    """Checkpoints that report every split: the reference's keys, then the format and the digest."""
    return [
        _case("row_fresh", "row mode before any row", _every(RunConfig(4, 0, 0), initial_row_state(4))),
        _case("row_mid_epoch", "row mode with skipped rows behind", _every(RunConfig(4, 42, 1), _ROW)),
        _case(
            "row_with_fingerprint",
            "perm_fingerprint sits between num_splits and epoch",
            _every(RunConfig(4, 42, 0, FINGERPRINT), _ROW),
        ),
        _case(
            "row_seed_at_limit",
            "shuffle_seed 2**64 - 1 is written exactly (the digest hashes its decimal digits)",
            _every(RunConfig(2, 2**64 - 1, 0), RowState((1, 0), (1, 0))),
        ),
        _case(
            "packed_with_buffers",
            "packed mode; pack_buffers lists the non-empty buffers by split id",
            _every(RunConfig(4, 7, 2, None, PACKING4), _PACKED),
        ),
        _case(
            "packed_without_buffers",
            "packed mode with every buffer empty: pack_buffers is {}",
            _every(_PCONFIG, PackedState((2, 2, 2, 2), (1, 1, 1, 1), {})),
        ),
        _case(
            "packed_with_fingerprint",
            "packed mode with a split_strategy fingerprint",
            _every(RunConfig(4, 7, 0, FINGERPRINT, PACKING4), _PACKED),
        ),
        _case("packed_fresh", "packed mode before any block", _every(_PCONFIG, initial_packed_state(4))),
        _case(
            "with_table_pin",
            "the table version and row count the permutation was built from",
            _every(RunConfig(4, 42, 1), _ROW, table=(12, 20)),
        ),
        _case(
            "with_unversioned_table",
            "a table without versions: version null",
            _every(RunConfig(4, 42, 1), _ROW, table=(None, 20)),
        ),
    ]


def _session_cases() -> list[CaseDef]:
    """Checkpoints one rank of a session writes: reported, unknown and projected splits, the cursor."""
    return [
        _case(
            "ours_rank_0_of_2_with_workers",
            "rank 0 reports splits 0 and 1 and records where both ranks' workers stand",
            _of(session(ROW_JOB, Shape(2, 2, 1), 3)[0].checkpoint),
        ),
        _case(
            "ours_rank_1_of_2_unknown",
            "with skipping transforms rank 1 does not know rank 0's splits",
            _of(session(SKIP_JOB, Shape(2, 0, 2), 2)[1].checkpoint),
        ),
        _case(
            "ours_packed_projected",
            "packed: rank 1 projects the block counts of rank 0's splits",
            _of(session(PACKED_JOB, Shape(2, 2, 1), 3)[1].checkpoint),
        ),
        _case(
            "ours_pinned_rank_of_4",
            "rank 3 of 4 with a table pin",
            _of(session(ROW_JOB, Shape(4, 0, 1), 2, pinned=True)[3].checkpoint),
        ),
    ]


def _error_cases() -> list[CaseDef]:
    """What no dataset writes: a snapshot of the other mode, provenance the model refuses."""
    return [
        _case(
            "error_row_snapshot_of_packed_config",
            "a row state cannot be written for a packed config",
            _every(_PCONFIG, _ROW),
        ),
        _case(
            "error_packed_snapshot_of_row_config",
            "a packed state cannot be written for a row config",
            _every(RunConfig(4, 7, 0), _PACKED),
        ),
        _case(
            "error_reported_beyond_splits",
            "reported splits are split ids",
            _every(RunConfig(4, 42, 1), _ROW, reported=(0, 4)),
        ),
        _case(
            "error_unknown_and_reported",
            "a split its owner reports is never unknown",
            _every(RunConfig(4, 42, 1), _ROW, reported=(0, 1), unknown=(1, 2)),
        ),
        _case(
            "error_projected_row_split",
            "row progress is never projected",
            _every(RunConfig(4, 42, 1), _ROW, reported=(0, 1), projected=((2, 3),)),
        ),
        _case(
            "error_projected_beyond_splits",
            "projected splits are split ids",
            _every(_PCONFIG, _PACKED, reported=(0, 1), projected=((5, 2),)),
        ),
        _case(
            "error_projected_not_beyond_base",
            "a projection goes beyond the block count it starts from",
            _every(_PCONFIG, _PACKED, reported=(0, 1), projected=((2, 1),)),
        ),
        _case(
            "error_cursor_of_one_worker",
            "a cursor is recorded for 2 workers or more",
            _every(RunConfig(4, 42, 1), _ROW, cursor=(1, 1, (0,))),
        ),
        _case(
            "error_cursor_shape_does_not_divide_splits",
            "3 ranks cannot share 4 splits",
            _every(RunConfig(4, 42, 1), _ROW, cursor=(3, 2, (0, 0, 0))),
        ),
        _case(
            "error_table_no_rows",
            "a table pin counts at least one row",
            _every(RunConfig(4, 42, 1), _ROW, table=(1, 0)),
        ),
    ]


FAMILY = family("checkpoint_snapshot", cases, CODEC)
