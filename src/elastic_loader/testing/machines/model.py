"""The spec side of the machines: what the executable spec says about one epoch.

Rules of this module: only the spec is called here, never an implementation;
:class:`EpochModel` is built from the configuration and the shared table
(:func:`epoch_model`) and is frozen; the helpers turn spec runs and spec
errors into what the machines compare (:func:`state_after`,
:func:`builtin_error`, :func:`describe`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import currently_in_test_context
from hypothesis import note as _hypothesis_note

from ...spec import (
    Block,
    Faults,
    PackedRun,
    PackedState,
    PackingConfig,
    Permutation,
    RowRun,
    RowState,
    RunConfig,
    SpecError,
    SpecRuntimeError,
    SpecTypeError,
    Yielded,
    estimate_blocks_per_epoch,
    initial_packed_state,
    initial_row_state,
    iterate_packed,
    iterate_rows,
    load_packed,
    load_row,
    snapshot_packed,
    snapshot_row,
)
from ...spec import invariants as inv
from ..tables import TableCache, doc_lengths
from .plans import MachineConfig

Item = Yielded | Block
ModelState = RowState | PackedState
Run = RowRun | PackedRun
History = tuple[tuple[Item, ...], ...]
"""Per split, the items a trainer received in this epoch's lineage, in order."""
T = TypeVar("T")


@dataclass(frozen=True)
class EpochModel:
    """What the spec knows about one epoch of the configuration."""

    number: int
    perm: Permutation
    faults: Faults
    config: RunConfig
    corpus: Mapping[int, tuple[int, ...]]
    index: Mapping[int, tuple[int, int]]
    """``id`` -> (split, position)."""
    per_split: tuple[tuple[Item, ...], ...]
    """Per split, its topology-free item sequence of the epoch."""
    auto: bool

    @property
    def split_len(self) -> int:
        """The common split length."""
        return len(self.perm[0])

    @property
    def packing(self) -> PackingConfig | None:
        """The packing parameters (``None`` in row mode)."""
        return self.config.packing

    def initial(self) -> ModelState:
        """The state before anything is read."""
        s = self.config.num_splits
        return initial_row_state(s) if self.packing is None else initial_packed_state(s)

    def empty_history(self) -> History:
        """A lineage that has received nothing."""
        return tuple(() for _ in self.perm)

    def snapshot(self, state: ModelState) -> dict[str, object]:
        """The spec checkpoint dict of ``state``."""
        if isinstance(state, RowState):
            return snapshot_row(self.config, state)
        return snapshot_packed(self.config, state)

    def load(self, payload: object) -> ModelState:
        """The spec's reading of a checkpoint (raises ``SpecError`` when the spec rejects it)."""
        if self.packing is None:
            return load_row(self.config, payload, self.split_len)
        return load_packed(self.config, payload, self.split_len)

    def run(self, owned: Sequence[int], start: ModelState) -> Run:
        """The spec run of one iterator (raises ``SpecError`` when the spec says iteration fails)."""
        if isinstance(start, RowState):
            return iterate_rows(self.perm, self.faults, owned, start)
        assert self.packing is not None
        return iterate_packed(self.perm, self.corpus, self.faults, owned, self.packing, start)


def epoch_model(cfg: MachineConfig, tables: TableCache, number: int) -> EpochModel:
    """The spec's view of epoch ``number`` of ``cfg``: permutation, faults, budget, per-split items."""
    key = cfg.table_key
    perm = tables.permutation(
        key,
        num_splits=cfg.num_splits,
        shuffle_seed=cfg.shuffle_seed,
        epoch=number,
        shuffle=cfg.shuffle,
        filter=cfg.filter,
    )
    documents = tables.documents(key)
    corpus = {i: d for i, d in documents.items() if d is not None}
    faults = cfg.faults.faults(frozenset(documents))
    packing: PackingConfig | None = None
    if cfg.packing is not None:
        per_split_blocks = cfg.packing.blocks_per_split
        budget = (
            estimate_blocks_per_epoch(
                doc_lengths(perm, documents), cfg.shuffle_seed, cfg.packing.pack_sequences
            )
            if per_split_blocks is None
            else per_split_blocks * cfg.num_splits
        )
        packing = PackingConfig(cfg.packing.pack_sequences, cfg.packing.eos_id, cfg.packing.pad_id, budget)
    config = RunConfig(cfg.num_splits, cfg.shuffle_seed, number, None, packing)
    index = {row: (s, p) for s, split in enumerate(perm) for p, row in enumerate(split)}
    per_split: list[tuple[Item, ...]] = []
    for s, split in enumerate(perm):
        if packing is None:
            per_split.append(tuple(Yielded(s, p, split[p]) for p in inv.yieldable(split, faults)))
        else:
            run = iterate_packed(perm, corpus, faults, (s,), packing, initial_packed_state(len(perm)))
            per_split.append(run.blocks)
    auto = cfg.packing is not None and cfg.packing.blocks_per_split is None
    return EpochModel(number, perm, faults, config, corpus, index, tuple(per_split), auto)


def note(text: str) -> None:
    """``hypothesis.note`` inside a test; outside one (a printed program replayed by hand) print."""
    if currently_in_test_context():
        _hypothesis_note(text)
    else:
        print(text)


def builtin_error(error: SpecError) -> type[Exception]:
    """The builtin class an implementation raises where the spec raises ``error``."""
    if isinstance(error, SpecRuntimeError):
        return RuntimeError
    if isinstance(error, SpecTypeError):
        return TypeError
    return ValueError


def attempt(fn: Callable[[], T]) -> T | SpecError:
    """``fn()``, or the spec error it raised."""
    try:
        return fn()
    except SpecError as error:
        return error


def items_of(run: Run) -> tuple[Item, ...]:
    """The rows or blocks of a spec run."""
    return run.rows if isinstance(run, RowRun) else run.blocks


def state_after(run: Run | SpecError, start: ModelState, n: int) -> ModelState:
    """The spec state after ``n`` items of ``run`` (``start`` when the spec fails at once)."""
    if isinstance(run, SpecError):
        return start
    return run.state_after(min(n, len(items_of(run))))


def describe(error: BaseException) -> str:
    """``Class('last line of the message')``, for violation texts."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}({text[-1] if text else ''!r})"


def packed_split(state: PackedState, split: int) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """Everything a packed state holds about one split: emitted, consumed, buffer tokens and starts."""
    buffer = state.buffer(split)
    return state.emitted[split], state.consumed[split], buffer.tokens, buffer.starts
