"""The spec side of the machines: what the executable spec says about one epoch.

Rules of this module: only the spec is called here, never an implementation;
:class:`EpochModel` is built from the configuration and the shared table
(:func:`epoch_model`) and is frozen; the helpers turn spec runs and spec
errors into what the machines compare (:func:`state_after`,
:func:`builtin_error`, :func:`describe`). Checkpoints are the spec's
:class:`~elastic_loader.spec.saved.Saved` values: what a rank writes is
:meth:`EpochModel.checkpoint` (``rank_checkpoint``), what it loads
:meth:`EpochModel.read` (``load_for_rank``), where it starts
:meth:`EpochModel.resolved` (projections replayed). Two states of a split are
the same progress when they resume alike (:meth:`EpochModel.future`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import currently_in_test_context, note as _hypothesis_note

from ...spec import (
    Block,
    Faults,
    PackedRun,
    PackedState,
    PackingConfig,
    Pass,
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
    invariants as inv,
    iterate_packed,
    iterate_rows,
    load_packed,
    load_row,
    rank_checkpoint,
    resolve,
    snapshot_packed,
    snapshot_row,
)
from ...spec.computed import ComputedPermutation, computed_fingerprint
from ...spec.local import local_fingerprint
from ...spec.saved import Saved, TablePin, exact, load_for_rank, load_saved
from ..tables import PositionSource, TableCache, doc_lengths, position_source, positions_in_ids
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
    pin: TablePin | None = None
    """The table version and row count a checkpoint of this epoch records."""
    skipping: bool = False
    """The transform errors may skip rows (``on_transform_error`` is ``"skip"`` or ``"warn"``)."""
    source: PositionSource | None = None
    """The spec's computed or local permutation the epoch reads (``None``: the builder's)."""

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

    def fresh(self) -> Saved:
        """The checkpoint of the epoch's start (every split reported, nothing read)."""
        return exact(self.config, self.initial(), self.pin)

    def read(self, payload: object, world_size: int, rank: int) -> Saved:
        """``load_state_dict`` on ``rank`` of ``world_size`` ranks (raises ``SpecError`` when refused)."""
        return load_for_rank(self.config, payload, self.split_len, world_size, rank)

    def parse(self, payload: object) -> Saved:
        """A checkpoint as the spec reads it, whoever would load it (raises ``SpecError``)."""
        return load_saved(self.config, payload, self.split_len, alone=False)

    def resolved(self, saved: Saved, splits: Sequence[int]) -> ModelState:
        """Where an iterator over ``splits`` starts from ``saved`` (projections replayed)."""
        corpus = self.corpus if self.packing is not None else None
        return resolve(saved, self.perm, self.faults, splits, corpus)

    def checkpoint(
        self,
        start: Saved,
        committed: ModelState,
        touched: frozenset[int],
        passes: Sequence[Pass],
        world_size: int,
        rank: int,
        partial: Sequence[int] | None = None,
    ) -> Saved:
        """What ``state_dict()`` of ``rank`` says after ``passes`` from ``start`` (``rank_checkpoint``)."""
        return rank_checkpoint(
            start, committed, touched, passes, world_size, rank, self.split_len, self.skipping, partial
        )

    def future(self, state: ModelState, split: int) -> tuple[object, ...]:
        """How a resume of ``split`` from ``state`` goes on: its row progress, or its block count and
        the blocks it still emits (a fill not emitted yet resumes alike)."""
        if isinstance(state, RowState):
            return state.samples[split], state.positions[split]
        assert self.packing is not None
        run = iterate_packed(self.perm, self.corpus, self.faults, (split,), self.packing, state)
        return state.emitted[split], run.blocks

    def agrees(self, saved: Saved, truth: ModelState) -> bool:
        """Every split ``saved`` knows resumes as ``truth`` does (its inferences are the owners')."""
        known = [s for s in range(self.config.num_splits) if s not in saved.unknown]
        state = attempt(lambda: self.resolved(saved, known))
        if isinstance(state, SpecError):
            return False
        return all(self.future(state, s) == self.future(truth, s) for s in known)

    def run(self, owned: Sequence[int], start: ModelState) -> Run:
        """The spec run of one iterator (raises ``SpecError`` when the spec says iteration fails)."""
        if isinstance(start, RowState):
            return iterate_rows(self.perm, self.faults, owned, start)
        assert self.packing is not None
        return iterate_packed(self.perm, self.corpus, self.faults, owned, self.packing, start)


def epoch_model(cfg: MachineConfig, tables: TableCache, number: int) -> EpochModel:
    """The spec's view of epoch ``number`` of ``cfg``: permutation, faults, budget, per-split items."""
    key = cfg.table_key
    source: PositionSource | None = None
    fingerprint: str | None = None
    if cfg.permutation == "builder":
        perm = tables.permutation(
            key,
            num_splits=cfg.num_splits,
            shuffle_seed=cfg.shuffle_seed,
            epoch=number,
            shuffle=cfg.shuffle,
            filter=cfg.filter,
        )
    else:
        source = position_source(cfg.rows, cfg.num_splits, cfg.shuffle_seed, number, cfg.local)
        perm = positions_in_ids(tables.table(key), source)
        if isinstance(source, ComputedPermutation):
            fingerprint = computed_fingerprint(source)
        else:
            fingerprint = local_fingerprint(source)
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
    config = RunConfig(cfg.num_splits, cfg.shuffle_seed, number, fingerprint, packing)
    index = {row: (s, p) for s, split in enumerate(perm) for p, row in enumerate(split)}
    per_split: list[tuple[Item, ...]] = []
    for s, split in enumerate(perm):
        if packing is None:
            per_split.append(tuple(Yielded(s, p, split[p]) for p in inv.yieldable(split, faults)))
        else:
            run = iterate_packed(perm, corpus, faults, (s,), packing, initial_packed_state(len(perm)))
            per_split.append(run.blocks)
    auto = cfg.packing is not None and cfg.packing.blocks_per_split is None
    version = getattr(tables.table(key), "version", None)
    pin = TablePin(version if isinstance(version, int) else None, cfg.num_splits * len(perm[0]))
    skipping = cfg.faults.mode in ("skip", "warn")
    return EpochModel(
        number, perm, faults, config, corpus, index, tuple(per_split), auto, pin, skipping, source
    )


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


def assemble(parts: Sequence[tuple[ModelState, Sequence[int]]]) -> ModelState:
    """One state holding, for the splits of each part, that part's values (later parts win)."""
    base = parts[0][0]
    if isinstance(base, RowState):
        samples, positions = list(base.samples), list(base.positions)
        for state, splits in parts:
            assert isinstance(state, RowState)
            for s in splits:
                samples[s], positions[s] = state.samples[s], state.positions[s]
        return RowState(tuple(samples), tuple(positions))
    assert isinstance(base, PackedState)
    consumed, emitted, buffers = list(base.consumed), list(base.emitted), dict(base.buffers)
    for state, splits in parts:
        assert isinstance(state, PackedState)
        for s in splits:
            consumed[s], emitted[s] = state.consumed[s], state.emitted[s]
            buffers.pop(s, None)
            if s in state.buffers:
                buffers[s] = state.buffers[s]
    return PackedState(tuple(consumed), tuple(emitted), buffers)


def split_value(state: ModelState, split: int) -> tuple[object, ...]:
    """The plain values one split has in a state (what the reference keys say about it)."""
    if isinstance(state, RowState):
        return state.samples[split], state.positions[split]
    return packed_split(state, split)
