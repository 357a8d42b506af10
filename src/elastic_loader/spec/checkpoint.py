"""Checkpoints: snapshot format, load, merge, consumer commit and the checkpoint gate (item 4).

Rules: the snapshot keys and their order are the reference's, so checkpoints
are interchangeable with ``lancedb.streaming``. Parsing is shared: ``load``,
``merge`` and ``commit`` all read a checkpoint through ``_parse`` and reject
the same malformed inputs. Row progress joins by element-wise maximum; packed
progress joins per split by the lexicographically larger ``(emitted,
consumed)``, ties going to the earlier state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from .errors import SpecRuntimeError, SpecTypeError, SpecValueError, require
from .packing import PackBuffer, PackedState
from .rows import RowState
from .topology import PackingConfig, RunConfig

HEAD_KEYS = ("shuffle_seed", "num_splits", "perm_fingerprint", "epoch")
"""Leading keys of every checkpoint; ``perm_fingerprint`` only with a ``split_strategy``."""
ROW_KEYS = ("samples_consumed_per_split", "positions_consumed_per_split")
PACKED_PROGRESS_KEYS = ("samples_consumed_per_split", "blocks_emitted_per_split", "pack_buffers")
PACKING_KEYS = ("pack_sequences", "eos_id", "pad_id", "blocks_per_epoch")
CONFIG_KEYS = ("shuffle_seed", "num_splits", "epoch")

Checkpoint = dict[str, object]


def _head(config: RunConfig) -> Checkpoint:
    head: Checkpoint = {"shuffle_seed": config.shuffle_seed, "num_splits": config.num_splits}
    if config.perm_fingerprint is not None:
        head["perm_fingerprint"] = config.perm_fingerprint
    head["epoch"] = config.epoch
    return head


def snapshot_row(config: RunConfig, state: RowState) -> Checkpoint:
    """The row-mode checkpoint dict (reference keys, reference order)."""
    require(config.packing is None, "mode_mismatch", "row snapshot of a packed config")
    out = _head(config)
    out["samples_consumed_per_split"] = list(state.samples)
    out["positions_consumed_per_split"] = list(state.positions)
    return out


def snapshot_packed(config: RunConfig, state: PackedState) -> Checkpoint:
    """The packed checkpoint dict; ``pack_buffers`` lists only non-empty buffers."""
    packing = config.packing
    require(packing is not None, "mode_mismatch", "packed snapshot of a row config")
    assert packing is not None
    out = _head(config)
    out.update(
        pack_sequences=packing.pack_sequences,
        eos_id=packing.eos_id,
        pad_id=packing.pad_id,
        blocks_per_epoch=packing.blocks_per_epoch,
        samples_consumed_per_split=list(state.consumed),
        blocks_emitted_per_split=list(state.emitted),
        pack_buffers={
            s: {"tokens": list(b.tokens), "starts": list(b.starts)} for s, b in sorted(state.buffers.items())
        },
    )
    return out


# ---------------------------------------------------------------- parsing


def as_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecValueError("checkpoint_value_type", f"{what} must be an int, got {value!r}")
    return value


def as_int_list(value: object, length: int, what: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise SpecValueError("checkpoint_value_type", f"{what} must be a list")
    require(len(value) == length, "list_length", f"{what} has {len(value)} entries, expected {length}")
    out = tuple(as_int(v, what) for v in value)
    require(all(v >= 0 for v in out), "progress_out_of_range", f"{what} holds a negative value")
    return out


def as_split_id(key: object, num_splits: int) -> int | None:
    """The split a dict key names: an int in ``[0, num_splits)`` or, after JSON, its decimal string
    (a bool names none); ``None`` when it names none."""
    if isinstance(key, str) and key.isdigit():
        key = int(key)
    if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < num_splits:
        return None
    return key


def split_entries(
    raw: object, what: str, split_of: Callable[[object], int]
) -> Iterator[tuple[int, object, object]]:
    """``(split_of(key), key, value)`` for each entry of ``raw``, a dict keyed by split id, in order:
    each key is checked just before its entry is read, so the first bad entry fails first."""
    if not isinstance(raw, Mapping):
        raise SpecValueError("checkpoint_value_type", f"{what} must be a dict")
    for key, value in raw.items():
        yield split_of(key), key, value


def as_mapping(state: object) -> Mapping[str, object]:
    if not isinstance(state, Mapping):
        raise SpecTypeError("checkpoint_type", f"a checkpoint is a dict, got {type(state).__name__}")
    return state


def is_packed(state: Mapping[str, object]) -> bool:
    """Packed checkpoints are the ones holding ``pack_buffers``."""
    return "pack_buffers" in state


def require_keys(state: Mapping[str, object], keys: Sequence[str]) -> None:
    for key in keys:
        require(key in state, "checkpoint_missing_key", f"checkpoint has no {key!r}")


def config_keys(state: Mapping[str, object]) -> tuple[str, ...]:
    return CONFIG_KEYS + (PACKING_KEYS if is_packed(state) else ())


def parse_row(state: Mapping[str, object], num_splits: int) -> RowState:
    require_keys(state, ("samples_consumed_per_split",))
    raw = state["samples_consumed_per_split"]
    if isinstance(raw, int) and not isinstance(raw, bool):
        require(raw >= 0, "progress_out_of_range", "legacy sample count is negative")
        samples = (raw,) * num_splits
    else:
        samples = as_int_list(raw, num_splits, "samples_consumed_per_split")
    positions_raw = state.get("positions_consumed_per_split")
    positions = (
        samples
        if positions_raw is None
        else as_int_list(positions_raw, num_splits, "positions_consumed_per_split")
    )
    require(
        all(c <= p for c, p in zip(samples, positions)),
        "positions_below_samples",
        "every split needs samples <= positions",
    )
    return RowState(samples, positions)


def _parse_buffer(value: object, what: str) -> PackBuffer:
    if not isinstance(value, Mapping) or "tokens" not in value or "starts" not in value:
        raise SpecValueError("checkpoint_value_type", f"{what} must be a dict with tokens and starts")
    tokens, starts = value["tokens"], value["starts"]
    if not isinstance(tokens, (list, tuple)) or not isinstance(starts, (list, tuple)):
        raise SpecValueError("checkpoint_value_type", f"{what} tokens and starts must be lists")
    return PackBuffer(tuple(as_int(t, what) for t in tokens), tuple(as_int(s, what) for s in starts))


def _split_key(key: object, num_splits: int) -> int:
    split = as_split_id(key, num_splits)
    if split is None:
        raise SpecValueError("buffer_key_out_of_range", f"pack_buffers key {key!r} is not a split id")
    return split


def parse_packed(state: Mapping[str, object], num_splits: int) -> PackedState:
    require_keys(state, ("samples_consumed_per_split", "blocks_emitted_per_split", "pack_buffers"))
    consumed = as_int_list(state["samples_consumed_per_split"], num_splits, "samples_consumed_per_split")
    emitted = as_int_list(state["blocks_emitted_per_split"], num_splits, "blocks_emitted_per_split")
    buffers: dict[int, PackBuffer] = {}
    entries = split_entries(state["pack_buffers"], "pack_buffers", lambda key: _split_key(key, num_splits))
    for split, key, value in entries:
        require(split not in buffers, "buffer_key_duplicate", f"split {split} has two buffers")
        buffer = _parse_buffer(value, f"pack_buffers[{key!r}]")
        if buffer.tokens:
            buffers[split] = buffer
    return PackedState(consumed, emitted, buffers)


def check_same_config(
    state: Mapping[str, object], reference: Mapping[str, object], keys: Sequence[str]
) -> None:
    for key in keys:
        # Every config value is an int; True or 1.0 must not pass for 1.
        if as_int(state[key], key) != as_int(reference[key], key):
            raise SpecValueError(f"{key}_mismatch", f"{key} differs: {state[key]!r} != {reference[key]!r}")


def _config_view(config: RunConfig) -> Checkpoint:
    view = _head(config)
    if config.packing is not None:
        view.update(
            pack_sequences=config.packing.pack_sequences,
            eos_id=config.packing.eos_id,
            pad_id=config.packing.pad_id,
            blocks_per_epoch=config.packing.blocks_per_epoch,
        )
    return view


def check_against(config: RunConfig, state: Mapping[str, object]) -> None:
    """Shared by load and commit: ``state`` was written by a run with ``config``."""
    require_keys(state, CONFIG_KEYS)
    view = _config_view(config)
    check_same_config(state, view, CONFIG_KEYS)
    theirs = state.get("perm_fingerprint")
    if theirs is not None and theirs != config.perm_fingerprint:
        raise SpecValueError("perm_fingerprint_mismatch", "checkpoint was written for another permutation")
    if theirs is None and config.perm_fingerprint is not None:
        raise SpecValueError(
            "perm_fingerprint_missing", "checkpoint has no perm_fingerprint; this dataset uses split_strategy"
        )
    require(
        is_packed(state) == (config.packing is not None),
        "mode_mismatch",
        "row and packed checkpoints do not mix",
    )
    if config.packing is not None:
        require_keys(state, PACKING_KEYS)
        check_same_config(state, view, PACKING_KEYS)


# ---------------------------------------------------------------- load


def load_row(config: RunConfig, state: object, split_len: int) -> RowState:
    """Validate a row checkpoint against ``config`` and return its progress.

    Raises:
        SpecTypeError: ``state`` is not a dict.
        SpecValueError: a key is missing, a config value differs (``num_splits``,
            ``shuffle_seed``, ``epoch``, ``perm_fingerprint``), the mode differs,
            a list has the wrong length, or progress is out of range.
    """
    st = as_mapping(state)
    check_against(config, st)
    parsed = parse_row(st, config.num_splits)
    require(
        all(p <= split_len for p in parsed.positions),
        "progress_out_of_range",
        "progress beyond the split end",
    )
    return parsed


def load_packed(config: RunConfig, state: object, split_len: int) -> PackedState:
    """Validate a packed checkpoint against ``config`` and return its progress."""
    st = as_mapping(state)
    check_against(config, st)
    assert config.packing is not None
    parsed = parse_packed(st, config.num_splits)
    budget = config.packing.blocks_per_split(config.num_splits)
    require(
        all(c <= split_len for c in parsed.consumed), "progress_out_of_range", "progress beyond the split end"
    )
    require(all(e <= budget for e in parsed.emitted), "progress_out_of_range", "more blocks than the budget")
    return parsed


# ---------------------------------------------------------------- join and merge


def join_row(a: RowState, b: RowState) -> RowState:
    """Element-wise maximum of two row progress states (the row-mode join)."""
    require(len(a.samples) == len(b.samples), "list_length", "states differ in split count")
    return RowState(
        tuple(map(max, a.samples, b.samples)),
        tuple(map(max, a.positions, b.positions)),
    )


def join_packed(a: PackedState, b: PackedState) -> PackedState:
    """Per split, keep the state with the larger ``(emitted, consumed)``; ties keep ``a``."""
    require(len(a.emitted) == len(b.emitted), "list_length", "states differ in split count")
    consumed, emitted, buffers = [], [], {}
    for s in range(len(a.emitted)):
        owner = b if (b.emitted[s], b.consumed[s]) > (a.emitted[s], a.consumed[s]) else a
        consumed.append(owner.consumed[s])
        emitted.append(owner.emitted[s])
        if s in owner.buffers:
            buffers[s] = owner.buffers[s]
    return PackedState(tuple(consumed), tuple(emitted), buffers)


def config_from(state: Mapping[str, object]) -> RunConfig:
    num_splits = as_int(state["num_splits"], "num_splits")
    require(num_splits > 0, "num_splits_not_positive", "num_splits must be > 0")
    fingerprint = state.get("perm_fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise SpecValueError("checkpoint_value_type", "perm_fingerprint must be a string")
    packing = None
    if is_packed(state):
        packing = PackingConfig(*(as_int(state[k], k) for k in PACKING_KEYS))
    return RunConfig(
        num_splits,
        as_int(state["shuffle_seed"], "shuffle_seed"),
        as_int(state["epoch"], "epoch"),
        fingerprint,
        packing,
    )


# ---------------------------------------------------------------- consumer commit


def commit_row(config: RunConfig, parent: RowState, incoming: object) -> RowState:
    """Fold the snapshot carried by one consumed worker batch into the parent's state."""
    st = as_mapping(incoming)
    check_against(config, st)
    return join_row(parent, parse_row(st, config.num_splits))


def commit_packed(config: RunConfig, parent: PackedState, incoming: object) -> PackedState:
    """Packed commit: a split takes the incoming state when its ``(emitted, consumed)`` is larger."""
    st = as_mapping(incoming)
    check_against(config, st)
    return join_packed(parent, parse_packed(st, config.num_splits))


# ---------------------------------------------------------------- checkpoint gate


@dataclass(frozen=True)
class CheckpointGate:
    """Lifecycle flags deciding whether ``state_dict()`` may answer."""

    invalid_reason: str | None = None
    """A consumed batch failed; the parent state has a hole."""
    untracked_workers: bool = False
    """A plain DataLoader with workers iterated the dataset; the parent state is stale."""


def gate_after_load(gate: CheckpointGate) -> CheckpointGate:
    """Loading a checkpoint makes the state known again: every flag is cleared."""
    return CheckpointGate()


def gate_after_failure(gate: CheckpointGate, reason: str) -> CheckpointGate:
    """A failed batch invalidates checkpoints; the first reason is kept."""
    return gate if gate.invalid_reason is not None else replace(gate, invalid_reason=reason)


def gate_after_untracked_iteration(gate: CheckpointGate) -> CheckpointGate:
    """A plain multi-worker DataLoader iterated the dataset."""
    return replace(gate, untracked_workers=True)


def gate_check_state_dict(gate: CheckpointGate, in_worker: bool = False) -> None:
    """Raise ``SpecRuntimeError`` when ``state_dict()`` must refuse to answer.

    A checkpoint can be taken after any delivered batch: mid-step, with packing, with several
    workers (the step-boundary requirements of the reference are gone, see D23).

    Raises:
        SpecRuntimeError: ``untracked_worker_iteration`` or ``checkpoint_invalid``.
    """
    if gate.untracked_workers and not in_worker:
        raise SpecRuntimeError(
            "untracked_worker_iteration",
            "a plain DataLoader with workers iterated this dataset; use StreamingDataLoader",
        )
    if gate.invalid_reason is not None:
        raise SpecRuntimeError("checkpoint_invalid", f"checkpointing is invalid: {gate.invalid_reason}")
