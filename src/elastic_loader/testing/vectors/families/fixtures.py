"""The hand-made checkpoints the ``load``, ``merge`` and ``checkpoint_snapshot`` cases start from.

Rules of this module: data and pure helpers only (no case is built here); a
helper returns a new dict and never changes the checkpoint it is given. The
malformed checkpoints of :func:`checkpoint_fault_cases` and
:func:`provenance_fault_cases` change one thing each, so every case names
exactly one fault. Every packed buffer here is one a packer leaves behind
(whole documents, each followed by ``eos_id``), unless a case is about a buffer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from ....spec.checkpoint import snapshot_packed, snapshot_row
from ....spec.packing import PackBuffer, PackedState
from ....spec.rows import RowState
from ....spec.saved import EXTRA_KEY, FORMAT, digest
from ....spec.topology import PackingConfig, RunConfig, perm_fingerprint
from ..plumbing import CaseDef

FINGERPRINT = perm_fingerprint([5, 2, 7, 0, 3, 6, 1, 4], [0, 0, 1, 1, 2, 2, 3, 3])
PACKING4 = PackingConfig(4, 1, 0, 8)

ROW_CONFIG = RunConfig(4, 42, 1)
ROW_STATE = RowState((2, 2, 1, 1), (3, 2, 1, 2))
STRATEGY_CONFIG = RunConfig(4, 42, 1, FINGERPRINT)
PACKED_CONFIG = RunConfig(4, 7, 0, None, PACKING4)
PACKED_STATE = PackedState(
    (3, 2, 2, 4), (1, 1, 1, 1), {0: PackBuffer((1, 10, 1), (1,)), 3: PackBuffer((1,), ())}
)
ROW_CHECKPOINT = snapshot_row(ROW_CONFIG, ROW_STATE)
STRATEGY_CHECKPOINT = snapshot_row(STRATEGY_CONFIG, ROW_STATE)
PACKED_CHECKPOINT = snapshot_packed(PACKED_CONFIG, PACKED_STATE)
"""The checkpoints a dataset of each configuration writes at ``ROW_STATE`` or ``PACKED_STATE``."""


Wrap = Callable[[str, str, object], CaseDef]
"""Makes the case ``(name, description, checkpoint)`` of a family."""


def changed(checkpoint: Mapping[str, object], **changes: object) -> dict[str, object]:
    """A copy of ``checkpoint`` with ``changes`` applied (keys keep their place; new keys go last)."""
    out = dict(checkpoint)
    out.update(changes)
    return out


def without(checkpoint: Mapping[str, object], key: str) -> dict[str, object]:
    """A copy of ``checkpoint`` without ``key``."""
    return {k: v for k, v in checkpoint.items() if k != key}


def with_buffers(checkpoint: Mapping[str, object], buffers: object) -> dict[str, object]:
    """A copy of ``checkpoint`` with ``pack_buffers`` replaced."""
    return changed(checkpoint, pack_buffers=buffers)


def legacy_row(checkpoint: Mapping[str, object], samples: int) -> dict[str, object]:
    """A copy of row ``checkpoint`` in the legacy form: one int count for every split, no positions."""
    return without(changed(checkpoint, samples_consumed_per_split=samples), "positions_consumed_per_split")


def is_packed(checkpoint: object) -> bool:
    """Whether ``checkpoint`` is a packed one: a dict with ``pack_buffers``."""
    return isinstance(checkpoint, Mapping) and "pack_buffers" in checkpoint


def json_form(checkpoint: Mapping[str, object]) -> dict[str, object]:
    """``checkpoint`` after a JSON round trip (integer keys become decimal strings)."""
    out = json.loads(json.dumps(checkpoint))
    assert isinstance(out, dict)
    return out


def with_extra(checkpoint: Mapping[str, object], sign: bool = False, **entries: object) -> dict[str, object]:
    """A copy of ``checkpoint`` whose ``elastic_loader`` entry has ``entries`` set (a fresh one
    holding the format when it had none) and no digest; ``sign``: a digest of the new content."""
    extra = checkpoint.get(EXTRA_KEY, {"format": FORMAT})
    assert isinstance(extra, Mapping)
    new = {k: v for k, v in extra.items() if k != "digest"}
    new.update(entries)
    out = changed(checkpoint, **{EXTRA_KEY: new})
    if sign:
        new["digest"] = digest(out)
    return out


def checkpoint_fault_cases(wrap: Wrap) -> list[CaseDef]:
    """Malformed-checkpoint cases shared by load and merge (one fault each of the fixtures' checkpoints)."""
    row, packed = ROW_CHECKPOINT, PACKED_CHECKPOINT
    return [
        *_row_faults(wrap, row),
        *_packed_faults(wrap, packed),
        *_buffer_faults(wrap, packed),
        *_reachability_faults(wrap, packed),
    ]


def _row_faults(wrap: Wrap, row: dict[str, object]) -> list[CaseDef]:
    """Malformed row progress: missing, mistyped, of the wrong length, negative, inconsistent."""
    return [
        wrap(
            "error_row_missing_samples",
            "samples_consumed_per_split is required",
            without(row, "samples_consumed_per_split"),
        ),
        wrap(
            "error_row_samples_not_a_list",
            "a string is neither a list nor a legacy int",
            changed(row, samples_consumed_per_split="2"),
        ),
        wrap(
            "error_row_samples_bool_legacy",
            "true is not a legacy int",
            changed(row, samples_consumed_per_split=True),
        ),
        wrap(
            "error_row_samples_holds_string",
            "list entries are ints",
            changed(row, samples_consumed_per_split=[2, "2", 1, 1]),
        ),
        wrap(
            "error_row_samples_holds_bool",
            "bools are not ints in a checkpoint",
            changed(row, samples_consumed_per_split=[2, True, 1, 1]),
        ),
        wrap(
            "error_row_samples_holds_float",
            "floats are not ints in a checkpoint",
            changed(row, samples_consumed_per_split=[2, 2.5, 1, 1]),
        ),
        wrap(
            "error_row_positions_not_a_list",
            "positions must be a list",
            changed(row, positions_consumed_per_split=3),
        ),
        wrap(
            "error_row_samples_too_short",
            "one entry per split",
            changed(row, samples_consumed_per_split=[2, 2, 1]),
        ),
        wrap(
            "error_row_positions_too_long",
            "one entry per split",
            changed(row, positions_consumed_per_split=[3, 2, 1, 2, 0]),
        ),
        wrap(
            "error_row_negative_sample",
            "progress is never negative",
            changed(row, samples_consumed_per_split=[2, -1, 1, 1]),
        ),
        wrap(
            "error_row_negative_legacy_int",
            "a legacy count is never negative",
            changed(row, samples_consumed_per_split=-1, positions_consumed_per_split=None),
        ),
        wrap(
            "error_row_positions_below_samples",
            "every split needs samples <= positions",
            changed(row, positions_consumed_per_split=[1, 2, 1, 2]),
        ),
    ]


def _packed_faults(wrap: Wrap, packed: dict[str, object]) -> list[CaseDef]:
    """Malformed packed progress and malformed ``pack_buffers`` values."""
    b0 = {"tokens": [1, 10, 1], "starts": [1]}
    return [
        wrap(
            "error_packed_missing_emitted",
            "blocks_emitted_per_split is required",
            without(packed, "blocks_emitted_per_split"),
        ),
        wrap(
            "error_packed_emitted_holds_null",
            "list entries are ints",
            changed(packed, blocks_emitted_per_split=[1, None, 1, 1]),
        ),
        wrap(
            "error_packed_consumed_too_short",
            "one entry per split",
            changed(packed, samples_consumed_per_split=[3, 2, 2]),
        ),
        wrap(
            "error_packed_negative_emitted",
            "progress is never negative",
            changed(packed, blocks_emitted_per_split=[1, 1, -1, 1]),
        ),
        wrap("error_pack_buffers_not_a_dict", "pack_buffers is a dict", with_buffers(packed, [b0])),
        wrap(
            "error_buffer_not_a_dict",
            "a buffer is a dict with tokens and starts",
            with_buffers(packed, {"0": [10, 1]}),
        ),
        wrap(
            "error_buffer_without_starts",
            "a buffer needs starts",
            with_buffers(packed, {"0": {"tokens": [10, 1]}}),
        ),
        wrap(
            "error_buffer_tokens_not_a_list",
            "tokens is a list",
            with_buffers(packed, {"0": {"tokens": "10 1", "starts": []}}),
        ),
        wrap(
            "error_buffer_token_is_bool",
            "tokens are ints",
            with_buffers(packed, {"0": {"tokens": [True], "starts": []}}),
        ),
    ]


def _buffer_faults(wrap: Wrap, packed: dict[str, object]) -> list[CaseDef]:
    """``pack_buffers`` keys that are not split ids, and document starts that do not index the buffer."""
    b0 = {"tokens": [1, 10, 1], "starts": [1]}
    return [
        wrap("error_buffer_key_beyond_splits", "buffer keys are split ids", with_buffers(packed, {"4": b0})),
        wrap("error_buffer_key_negative", "buffer keys are split ids", with_buffers(packed, {"-1": b0})),
        wrap("error_buffer_key_not_a_number", "buffer keys are split ids", with_buffers(packed, {"x": b0})),
        wrap(
            "error_buffer_key_int_beyond_splits",
            "an int key must also be a split id",
            with_buffers(packed, {4: b0}),
        ),
        wrap("error_buffer_key_bool", "a bool is not a split id", with_buffers(packed, {True: b0})),
        wrap(
            "error_buffer_key_twice", "0 and '0' name the same split", with_buffers(packed, {0: b0, "0": b0})
        ),
        wrap(
            "error_buffer_starts_unsorted",
            "document starts strictly increase",
            with_buffers(packed, {"0": {"tokens": [10, 1, 11, 1], "starts": [2, 0]}}),
        ),
        wrap(
            "error_buffer_starts_repeated",
            "document starts strictly increase",
            with_buffers(packed, {"0": {"tokens": [10, 1, 11, 1], "starts": [2, 2]}}),
        ),
        wrap(
            "error_buffer_start_beyond_tokens",
            "a start indexes the buffer",
            with_buffers(packed, {"0": {"tokens": [10, 1], "starts": [2]}}),
        ),
        wrap(
            "error_buffer_start_negative",
            "a start indexes the buffer",
            with_buffers(packed, {"0": {"tokens": [10, 1], "starts": [-1]}}),
        ),
        wrap(
            "error_buffer_start_in_empty_buffer",
            "an empty buffer has no starts",
            with_buffers(packed, {"0": {"tokens": [], "starts": [0]}}),
        ),
    ]


def _reachability_faults(wrap: Wrap, packed: dict[str, object]) -> list[CaseDef]:
    """Well-formed buffers that no packer leaves behind (D26)."""
    b0 = {"tokens": [1, 10, 1], "starts": [1]}
    b3 = {"tokens": [1], "starts": []}
    return [
        wrap(
            "error_buffer_of_a_split_that_consumed_nothing",
            "split 0 buffers tokens but consumed no document",
            changed(packed, samples_consumed_per_split=[0, 2, 2, 4]),
        ),
        wrap(
            "error_buffer_of_more_documents_than_consumed",
            "split 1 consumed 2 documents but buffers 3",
            with_buffers(
                packed, {"0": b0, "1": {"tokens": [5, 1, 6, 1, 7, 1], "starts": [0, 2, 4]}, "3": b3}
            ),
        ),
        wrap(
            "error_buffer_without_final_eos",
            "a buffer ends with the eos_id of its last document",
            with_buffers(packed, {"0": {"tokens": [1, 10], "starts": [1]}, "3": b3}),
        ),
        wrap(
            "error_buffer_document_not_after_eos",
            "every document in a buffer follows the eos_id of the one before",
            with_buffers(packed, {"0": {"tokens": [10, 10, 1], "starts": [1]}, "3": b3}),
        ),
    ]


def provenance_fault_cases(wrap: Wrap) -> list[CaseDef]:
    """The ``elastic_loader`` entry of the fixtures' checkpoints: the format and digest, then each of
    its fields malformed."""
    row, packed = ROW_CHECKPOINT, PACKED_CHECKPOINT
    return [
        *_format_faults(wrap, row),
        *_split_list_faults(wrap, row),
        *_projection_faults(wrap, row, packed),
        *_cursor_faults(wrap, row),
        *_table_faults(wrap, row),
    ]


def _format_faults(wrap: Wrap, row: dict[str, object]) -> list[CaseDef]:
    """The entry itself, its format, its digest."""
    return [
        wrap("provenance_without_digest", "the entry may hold the format alone", with_extra(row)),
        wrap("error_provenance_not_a_dict", "the entry is a dict", changed(row, **{EXTRA_KEY: [FORMAT]})),
        wrap("error_format_missing", "the entry names its format", changed(row, **{EXTRA_KEY: {}})),
        wrap("error_format_unknown", "format 2 is not known", with_extra(row, sign=True, format=2)),
        wrap(
            "error_digest_mismatch",
            "a digest that is not the content's",
            with_extra(row, digest="0" * 64),
        ),
    ]


def _split_list_faults(wrap: Wrap, row: dict[str, object]) -> list[CaseDef]:
    """``reported`` and ``unknown``: lists of distinct split ids, never both for one split."""
    return [
        wrap("error_reported_not_a_list", "reported is a list", with_extra(row, reported=3)),
        wrap("error_reported_holds_a_string", "split ids are ints", with_extra(row, reported=["0"])),
        wrap("error_reported_beyond_splits", "split ids are below num_splits", with_extra(row, reported=[4])),
        wrap("error_reported_repeated", "a split is reported once", with_extra(row, reported=[0, 0])),
        wrap(
            "error_reported_repeated_signed",
            "a digest does not make a malformed entry acceptable",
            with_extra(row, sign=True, reported=[1, 1]),
        ),
        wrap("error_unknown_negative", "split ids are not negative", with_extra(row, unknown=[-1])),
        wrap(
            "error_unknown_and_reported",
            "a split its owner reported is never unknown",
            with_extra(row, reported=[0, 1], unknown=[1, 2]),
        ),
    ]


def _projection_faults(wrap: Wrap, row: dict[str, object], packed: dict[str, object]) -> list[CaseDef]:
    """``projected``: packed split id -> a block count beyond its base and within the budget."""
    return [
        wrap("error_projected_not_a_dict", "projected is a dict", with_extra(packed, projected=[2])),
        wrap(
            "error_projected_key_beyond_splits", "keys are split ids", with_extra(packed, projected={"4": 2})
        ),
        wrap(
            "error_projected_key_twice",
            "1 and '1' name the same split",
            with_extra(packed, projected={1: 2, "1": 2}),
        ),
        wrap("error_projected_target_string", "targets are ints", with_extra(packed, projected={"1": "2"})),
        wrap(
            "error_projected_not_beyond_base",
            "split 1 emitted 1 block; a projection to 1 is no projection",
            with_extra(packed, projected={"1": 1}),
        ),
        wrap(
            "error_projected_beyond_budget",
            "a projection to 3 blocks where every split emits 2",
            with_extra(packed, projected={"1": 3}),
        ),
        wrap(
            "error_projected_row_split",
            "inferred rows are exact or unknown, never projected",
            with_extra(row, projected={"0": 0}),
        ),
    ]


_CURSORS: tuple[tuple[str, str, object], ...] = (
    # name, description, the cursor written into a row checkpoint
    ("cursor_of_two_ranks", "a cursor of 2 ranks of 2 workers",
     {"world_size": 2, "num_workers": 2, "next_roles": [1, 0]}),
    ("error_cursor_not_a_dict", "a cursor is a dict", [1, 2, [0]]),
    ("error_cursor_without_next_roles", "a cursor names the next roles", {"world_size": 1, "num_workers": 2}),
    ("error_cursor_next_roles_not_a_list", "next_roles is a list",
     {"world_size": 1, "num_workers": 2, "next_roles": 0}),
    ("error_cursor_of_one_worker", "a cursor is recorded for 2 workers or more",
     {"world_size": 1, "num_workers": 1, "next_roles": [0]}),
    ("error_cursor_role_beyond_workers", "a next role is below num_workers",
     {"world_size": 1, "num_workers": 2, "next_roles": [2]}),
    ("error_cursor_role_per_rank", "one next role per rank",
     {"world_size": 2, "num_workers": 2, "next_roles": [0]}),
    ("error_cursor_workers_do_not_divide_splits", "3 workers cannot share the 4 splits of a rank",
     {"world_size": 1, "num_workers": 3, "next_roles": [0]}),
)  # fmt: skip


def _cursor_faults(wrap: Wrap, row: dict[str, object]) -> list[CaseDef]:
    """``cursor``: a loader shape of at least 2 workers that divides the splits, one role per rank."""
    return [wrap(name, description, with_extra(row, cursor=cursor)) for name, description, cursor in _CURSORS]


def _table_faults(wrap: Wrap, row: dict[str, object]) -> list[CaseDef]:
    """``table``: a version (null: an unversioned table) that is not negative, and at least one row."""
    return [
        wrap(
            "table_unversioned",
            "a table without versions",
            with_extra(row, table={"version": None, "rows": 20}),
        ),
        wrap("error_table_not_a_dict", "a table pin is a dict", with_extra(row, table=20)),
        wrap(
            "error_table_without_rows",
            "a table pin counts its rows",
            with_extra(row, table={"version": None}),
        ),
        wrap(
            "error_table_negative_version",
            "versions are not negative",
            with_extra(row, table={"version": -1, "rows": 20}),
        ),
        wrap("error_table_no_rows", "a table has a row", with_extra(row, table={"version": None, "rows": 0})),
    ]
