"""The checkpoints the ``load``, ``merge`` and ``checkpoint_snapshot`` cases start from.

Rules of this module: data and pure helpers only (no case is built here); a
helper returns a new dict and never changes the checkpoint it is given. The
malformed checkpoints of :func:`checkpoint_fault_cases` change one thing each,
so every case names exactly one fault.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ....spec.packing import PackBuffer, PackedState
from ....spec.rows import RowState
from ....spec.topology import PackingConfig, RunConfig, perm_fingerprint
from ..plumbing import CaseDef

FINGERPRINT = perm_fingerprint([5, 2, 7, 0, 3, 6, 1, 4], [0, 0, 1, 1, 2, 2, 3, 3])
PACKING4 = PackingConfig(4, 1, 0, 8)

ROW_CONFIG = RunConfig(4, 42, 1)
ROW_STATE = RowState((2, 2, 1, 1), (3, 2, 1, 2))
STRATEGY_CONFIG = RunConfig(4, 42, 1, FINGERPRINT)
PACKED_CONFIG = RunConfig(4, 7, 0, None, PACKING4)
PACKED_STATE = PackedState(
    (3, 2, 2, 4), (1, 1, 1, 1), {0: PackBuffer((10, 1), (1,)), 3: PackBuffer((1,), ())}
)


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


def checkpoint_fault_cases(wrap: Wrap, row: dict[str, object], packed: dict[str, object]) -> list[CaseDef]:
    """Malformed-checkpoint cases shared by load and merge (one fault each)."""
    return [*_row_faults(wrap, row), *_packed_faults(wrap, packed), *_buffer_faults(wrap, packed)]


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
    b0 = {"tokens": [10, 1], "starts": [1]}
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
    b0 = {"tokens": [10, 1], "starts": [1]}
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
