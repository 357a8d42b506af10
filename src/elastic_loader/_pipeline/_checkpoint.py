"""Checkpoint dicts: writing, validating, merging and committing them.

Rules: the keys and their order are lancedb.streaming's, so checkpoints are
interchangeable. Every reader of a checkpoint (load and merge in ``_provenance``,
commit here) parses the reference keys with these functions and rejects the same
malformed inputs with ValueError (TypeError when the checkpoint is not a dict). A
commit joins row progress by element-wise maximum and packed progress per split by
the larger (blocks emitted, position consumed), ties to the parent. A live packed progress may
hold a split's buffer as NumPy arrays (views of its stream, so a batch's progress costs no list
per token); the checkpoint dict always holds lists (:func:`snapshot`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

SAMPLES = "samples_consumed_per_split"
POSITIONS = "positions_consumed_per_split"
EMITTED = "blocks_emitted_per_split"
BUFFERS = "pack_buffers"
FINGERPRINT = "perm_fingerprint"
CONFIG = ("shuffle_seed", "num_splits", "epoch")
PACKING = ("pack_sequences", "eos_id", "pad_id", "blocks_per_epoch")


@dataclass
class RowState:
    """Row-mode progress of every split: rows yielded and positions consumed (the spec's ``RowState``)."""

    samples: list[int]
    positions: list[int]


Tokens = list[int] | np.ndarray
"""A buffer's tokens or document starts: a list (parsed, or the spec's), or int64 arrays (live)."""


def ints(values: Tokens) -> list[int]:
    """``values`` as a list of Python ints."""
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


@dataclass
class PackedState:
    """Packed progress of every split: positions consumed, blocks emitted, partial buffers (the spec's
    ``PackedState``)."""

    consumed: list[int]
    emitted: list[int]
    buffers: dict[int, tuple[Tokens, Tokens]] = field(default_factory=dict)
    """Split -> (tokens, document starts); only non-empty buffers."""


State = RowState | PackedState
"""The progress a checkpoint records, in either mode."""


@dataclass(frozen=True)
class Identity:
    """What a checkpoint must agree on with the dataset that loads it."""

    shuffle_seed: int
    num_splits: int
    epoch: int
    fingerprint: str | None
    packing: tuple[int, int, int, int] | None  # pack_sequences, eos_id, pad_id, blocks_per_epoch

    def head(self) -> dict[str, object]:
        out: dict[str, object] = {"shuffle_seed": self.shuffle_seed, "num_splits": self.num_splits}
        if self.fingerprint is not None:
            out[FINGERPRINT] = self.fingerprint
        out["epoch"] = self.epoch
        if self.packing is not None:
            out.update(zip(PACKING, self.packing))
        return out


def snapshot(identity: Identity, progress: State) -> dict[str, object]:
    """The checkpoint dict (keys in lancedb.streaming's order)."""
    out = identity.head()
    if isinstance(progress, RowState):
        out[SAMPLES] = list(progress.samples)
        out[POSITIONS] = list(progress.positions)
    else:
        out[SAMPLES] = list(progress.consumed)
        out[EMITTED] = list(progress.emitted)
        out[BUFFERS] = {
            split: {"tokens": ints(tokens), "starts": ints(starts)}
            for split, (tokens, starts) in sorted(progress.buffers.items())
            if len(tokens)
        }
    return out


# ------------------------------------------------------------------ parsing


def as_dict(state: object) -> Mapping[str, object]:
    if not isinstance(state, Mapping):
        raise TypeError(f"a checkpoint must be a dict, got {type(state).__name__}")
    return state


def need_keys(state: Mapping[str, object], keys: Sequence[str]) -> None:
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"checkpoint is missing {', '.join(repr(k) for k in missing)}")


def as_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must hold ints, got {value!r}")
    return value


def _int_list(value: object, length: int, what: str) -> list[int]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{what} must be a list, got {type(value).__name__}")
    if len(value) != length:
        raise ValueError(f"{what} has {len(value)} entries; the dataset has {length} splits")
    out = [as_int(v, what) for v in value]
    if any(v < 0 for v in out):
        raise ValueError(f"{what} holds a negative value")
    return out


def is_packed(state: Mapping[str, object]) -> bool:
    return BUFFERS in state


def parse_row(state: Mapping[str, object], num_splits: int) -> RowState:
    need_keys(state, (SAMPLES,))
    raw = state[SAMPLES]
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw < 0:
            raise ValueError(f"{SAMPLES} is negative")
        samples = [raw] * num_splits
    else:
        samples = _int_list(raw, num_splits, SAMPLES)
    raw_positions = state.get(POSITIONS)
    positions = list(samples) if raw_positions is None else _int_list(raw_positions, num_splits, POSITIONS)
    bad = [s for s in range(num_splits) if positions[s] < samples[s]]
    if bad:
        raise ValueError(
            f"split {bad[0]} has fewer positions than samples consumed: no run produces this. A state "
            "assembled key by key from several ranks' states (torch.distributed.checkpoint saving a "
            "StreamingDataset) can; save the StreamingDataLoader instead, whose state is one entry"
        )
    return RowState(samples, positions)


def _split_key(key: object, num_splits: int) -> int:
    if isinstance(key, str) and key.isdigit():
        key = int(key)
    if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < num_splits:
        raise ValueError(f"{BUFFERS} key {key!r} is not a split id in [0, {num_splits})")
    return key


def parse_packed(state: Mapping[str, object], num_splits: int) -> PackedState:
    need_keys(state, (SAMPLES, EMITTED, BUFFERS))
    consumed = _int_list(state[SAMPLES], num_splits, SAMPLES)
    emitted = _int_list(state[EMITTED], num_splits, EMITTED)
    raw = state[BUFFERS]
    if not isinstance(raw, Mapping):
        raise ValueError(f"{BUFFERS} must be a dict")
    buffers: dict[int, tuple[Tokens, Tokens]] = {}
    for key, value in raw.items():
        split = _split_key(key, num_splits)
        if split in buffers:
            raise ValueError(f"{BUFFERS} has two entries for split {split}")
        tokens, starts = _parse_buffer(key, value)
        if tokens:
            buffers[split] = (tokens, starts)
    return PackedState(consumed, emitted, buffers)


def _parse_buffer(key: object, value: object) -> tuple[list[int], list[int]]:
    """The (tokens, starts) of the pack buffer entry ``key: value``."""
    if not isinstance(value, Mapping) or "tokens" not in value or "starts" not in value:
        raise ValueError(f"{BUFFERS}[{key!r}] must be a dict with 'tokens' and 'starts'")
    tokens_raw, starts_raw = value["tokens"], value["starts"]
    if not isinstance(tokens_raw, (list, tuple)) or not isinstance(starts_raw, (list, tuple)):
        raise ValueError(f"{BUFFERS}[{key!r}] tokens and starts must be lists")
    tokens = [as_int(t, "pack buffer tokens") for t in tokens_raw]
    starts = [as_int(t, "pack buffer starts") for t in starts_raw]
    ordered = all(a < b for a, b in itertools.pairwise(starts))
    if not ordered or any(not 0 <= s < len(tokens) for s in starts):
        raise ValueError(f"{BUFFERS}[{key!r}] starts must increase strictly and index its tokens")
    return tokens, starts


def _permutation_of(fingerprint: str | None) -> str:
    """How a message names the permutation a fingerprint identifies."""
    if fingerprint is None:
        return "the permutation builder without split_strategy"
    algorithm, _, parameters = fingerprint.partition(":")
    if not parameters:
        return "a split_strategy permutation"
    kind = "permutation='computed'" if algorithm.startswith("feistel") else "a local permutation"
    return f"{kind} {fingerprint}"


def check_identity(state: Mapping[str, object], identity: Identity) -> None:
    need_keys(state, CONFIG)
    for key in CONFIG:
        ours = getattr(identity, key)
        if as_int(state[key], key) != ours:
            raise ValueError(f"{key} mismatch: checkpoint has {state[key]!r}, this dataset has {ours!r}")
    theirs = state.get(FINGERPRINT)
    if theirs is not None and theirs != identity.fingerprint:
        raise ValueError(
            "perm_fingerprint mismatch: the checkpoint was written for a different permutation "
            f"({_permutation_of(str(theirs))}), this dataset reads {_permutation_of(identity.fingerprint)}"
        )
    if theirs is None and identity.fingerprint is not None:
        raise ValueError(
            "the checkpoint has no perm_fingerprint (it was written for LanceDB's permutation builder), "
            f"but this dataset reads {_permutation_of(identity.fingerprint)}"
        )
    if is_packed(state) != (identity.packing is not None):
        raise ValueError(
            "cannot load a "
            + ("packed" if is_packed(state) else "row-mode")
            + " checkpoint into a "
            + ("packed" if identity.packing is not None else "row-mode")
            + " dataset"
        )
    if identity.packing is not None:
        need_keys(state, PACKING)
        for key, ours in zip(PACKING, identity.packing):
            if as_int(state[key], key) != ours:
                raise ValueError(f"{key} mismatch: checkpoint has {state[key]!r}, this dataset has {ours!r}")


def parse_for(identity: Identity, state: object, split_len: int | None) -> State:
    """Validate the reference keys of ``state`` for a dataset with ``identity``; its progress.

    ``split_len=None`` (merging) skips the checks against the split length.

    Raises:
        TypeError: ``state`` is not a dict.
        ValueError: a missing key, a mismatched setting, a list of the wrong
            length, or progress outside the split or the block budget.
    """
    st = as_dict(state)
    check_identity(st, identity)
    n = identity.num_splits
    if identity.packing is None:
        row = parse_row(st, n)
        if split_len is not None and any(p > split_len for p in row.positions):
            raise ValueError(f"checkpoint progress lies beyond the end of the splits ({split_len} rows each)")
        return row
    packed = parse_packed(st, n)
    budget = identity.packing[3] // n
    if split_len is not None and any(c > split_len for c in packed.consumed):
        raise ValueError(f"checkpoint progress lies beyond the end of the splits ({split_len} rows each)")
    if any(e > budget for e in packed.emitted):
        raise ValueError(f"checkpoint emitted more blocks than the budget of {budget} per split")
    return packed


def commit(identity: Identity, parent: State, incoming: object) -> State:
    """Fold one consumed worker batch's checkpoint into the parent's progress."""
    st = as_dict(incoming)
    check_identity(st, identity)
    parse = parse_row if isinstance(parent, RowState) else parse_packed
    return join(parent, parse(st, identity.num_splits))


def _join_rows(states: Sequence[RowState]) -> RowState:
    return RowState(
        [max(values) for values in zip(*(s.samples for s in states))],
        [max(values) for values in zip(*(s.positions for s in states))],
    )


def _join_packed(states: Sequence[PackedState]) -> PackedState:
    first = states[0]
    consumed, emitted = list(first.consumed), list(first.emitted)
    buffers = dict(first.buffers)
    for other in states[1:]:
        for s in range(len(emitted)):
            if (other.emitted[s], other.consumed[s]) > (emitted[s], consumed[s]):
                emitted[s], consumed[s] = other.emitted[s], other.consumed[s]
                if s in other.buffers:
                    buffers[s] = other.buffers[s]
                else:
                    buffers.pop(s, None)
    return PackedState(consumed, emitted, buffers)


def _identity_of(state: Mapping[str, object]) -> Identity:
    num_splits = as_int(state["num_splits"], "num_splits")
    if num_splits <= 0:
        raise ValueError("num_splits must be > 0")
    fingerprint = state.get(FINGERPRINT)
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise ValueError("perm_fingerprint must be a string")
    packing = None
    if is_packed(state):
        values = tuple(as_int(state[k], k) for k in PACKING)
        packing = (values[0], values[1], values[2], values[3])
        pack_sequences, blocks_per_epoch = packing[0], packing[3]
        # No dataset could have written (or could load) these settings; say so instead of merging.
        if pack_sequences <= 0:
            raise ValueError(f"pack_sequences must be > 0 in a packed state dict, got {pack_sequences}")
        if blocks_per_epoch <= 0:
            raise ValueError(f"blocks_per_epoch must be > 0 in a packed state dict, got {blocks_per_epoch}")
        if blocks_per_epoch % num_splits:
            raise ValueError(
                f"blocks_per_epoch ({blocks_per_epoch}) in a packed state dict must be divisible by "
                f"num_splits ({num_splits})"
            )
    return Identity(
        as_int(state["shuffle_seed"], "shuffle_seed"),
        num_splits,
        as_int(state["epoch"], "epoch"),
        fingerprint,
        packing,
    )


def identity_of(parsed: Sequence[Mapping[str, object]]) -> Identity:
    """The settings every state of a merge shares (ints, not bools or floats), as an identity.

    Raises:
        ValueError: no states, mixed modes, a missing or mismatched setting, or settings no
            dataset can have.
    """
    if not parsed:
        raise ValueError("merge_state_dicts needs at least one state dict")
    first = parsed[0]
    keys = CONFIG + (PACKING if is_packed(first) else ())
    for st in parsed:
        if is_packed(st) != is_packed(first):
            raise ValueError("cannot merge packed and row-mode state dicts")
        need_keys(st, keys)
    for st in parsed:
        for key in keys:
            as_int(st[key], key)  # True or 1.0 must not pass for 1
    for st in parsed[1:]:
        for key in keys:
            if st[key] != first[key]:
                raise ValueError(f"{key} mismatch across state dicts: {st[key]!r} != {first[key]!r}")
        if st.get(FINGERPRINT) != first.get(FINGERPRINT):
            raise ValueError("perm_fingerprint mismatch across state dicts")
    return _identity_of(first)


def join(parent: State, incoming: State) -> State:
    """Fold progress this process recorded itself (a batch collated in the main process) into the
    parent's: what :func:`commit` does after parsing, without the dict round trip."""
    if isinstance(parent, RowState) and isinstance(incoming, RowState):
        return _join_rows([parent, incoming])
    if isinstance(parent, PackedState) and isinstance(incoming, PackedState):
        return _join_packed([parent, incoming])
    raise ValueError("cannot join row-mode and packed progress")
