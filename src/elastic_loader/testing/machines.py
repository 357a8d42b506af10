"""Differential state machines: an implementation under test and the spec, side by side.

Theory of operation
-------------------
:class:`StreamingMachine` draws one configuration (table, splits, faults,
packing) in ``@initialize`` and then applies rules to a *session*: one fresh
dataset per (rank, worker) *slot* of a topology, every slot iterated on its own
(ranks need not stay in step; workers are simulated with
``worker_info_override``). Rules consume items, take checkpoints into a
:class:`~hypothesis.stateful.Bundle` (so old checkpoints come back later),
merge the latest checkpoints of all slots, resume a checkpoint on another
topology, run a ``StreamingDataLoader`` and checkpoint at its committed
boundary, and start a new epoch. For every operation the machine asks the
executable spec what must happen, from the same inputs:

* the *start* of a slot is the spec's reading of the checkpoint the
  implementation was actually given, and the slot's expected items are
  :func:`~elastic_loader.spec.iterate_rows` / ``iterate_packed`` from there;
* the *truth* of a slot is where the job really is (the spec's own state for
  the same history), so a wrong checkpoint shows up when it is resumed;
* the *history* of a lineage is what a trainer received since the epoch
  started, per split, carried along through checkpoints and merges.

Every discrepancy is recorded under the name of the invariant it breaks (the
names of :data:`elastic_loader.spec.invariants.INVARIANT_NAMES`); an
``@invariant`` method with exactly that name raises it after the step, so
Hypothesis shrinks to a minimal program. Names not in
:attr:`DifferentialMachine.enforced` are recorded without raising, which lets
:func:`check_invariants` report every invariant in one run and shrink each
violation separately.

Machines: :class:`RowMachine` and :class:`PackedMachine` (everything in
process; ``StreamingDataLoader`` with ``num_workers=0``) and
:class:`ProcessMachine` (``StreamingDataLoader`` runs only, two spawned worker
processes each). Run one with :func:`check_invariants`, for example::

    results = check_invariants(RowMachine, implementation_from_module("lancedb.streaming"),
                               TableCache(directory), settings_=settings(max_examples=60))
    # {"HonestProgressInv": "after row 0, unowned split 1 moved ...\nstate = RowMachine()...", ...}

A printed program replays by hand after ``RowMachine = RowMachine.bind(implementation, tables)``.

Rules of this module: the spec is called only on inputs it accepts (every
call on implementation data is guarded); every rule calls ``note()``; rule
arguments are plain values or frozen dataclasses whose repr is valid Python;
what Hypothesis draws never depends on how the implementation behaved (see
:class:`Missing`), so timing differences cannot make data generation flaky.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal, TypeVar

from hypothesis import Phase, currently_in_test_context, settings
from hypothesis import note as _hypothesis_note
from hypothesis import strategies as st
from hypothesis.errors import FlakyFailure
from hypothesis.internal.conjecture import engine as _engine
from hypothesis.reporting import with_reporter
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ..spec import (
    Block,
    CheckpointGate,
    Exhausted,
    Faults,
    PackedRun,
    PackedState,
    PackingConfig,
    Permutation,
    Raised,
    RowRun,
    RowState,
    RunConfig,
    SpecError,
    SpecRuntimeError,
    SpecTypeError,
    Topology,
    Yielded,
    estimate_blocks_per_epoch,
    gate_after_commit,
    gate_after_failure,
    gate_check_state_dict,
    global_steps,
    initial_packed_state,
    initial_row_state,
    iterate_packed,
    iterate_rows,
    load_packed,
    load_row,
    merge_state_dicts,
    owned_splits,
    rank_splits,
    run_loader,
    snapshot_packed,
    snapshot_row,
)
from ..spec import invariants as inv
from ..spec.loader import Delivery, LoaderRun
from .adapters import DatasetLike, Implementation, State
from .tables import ID_COLUMN, TOKEN_COLUMN, FaultyTransform, InjectedFault, TableCache, TableKey, doc_lengths
from .tables import fault_row as _fault_row

CHECKED = (
    "PartitionInv",
    "ProgressBoundsInv",
    "SkipAccountingInv",
    "HonestProgressInv",
    "CatchUpInv",
    "MergeLatticeInv",
    "CheckpointRoundTripInv",
    "PackingConservationInv",
    "DocIdsInv",
    "AutoBudgetInv",
    "CanonicalOrderProp",
    "ElasticDeterminismProp",
    "ResumeEquivalenceProp",
    "ExactlyOnceProp",
    "MergeExactProp",
    "ConsumerCommitProp",
    "PackingBudgetProp",
    "RaisePositionProp",
)
"""The invariants the machines check, in ``INVARIANT_NAMES`` order (``SplitSizeInv`` is a
property of the storage backend's permutation, which both sides share)."""

Item = Yielded | Block
ModelState = RowState | PackedState
Run = RowRun | PackedRun
History = tuple[tuple[Item, ...], ...]
"""Per split, the items a trainer received in this epoch's lineage, in order."""
T = TypeVar("T")

# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class SimulatedWorker:
    """A ``worker_info_override`` value: DataLoader worker ``id`` of ``num_workers``."""

    id: int
    num_workers: int


@dataclass(frozen=True)
class FaultPlan:
    """Which ids fail and how: ``mode`` is ``"none"`` or an ``on_transform_error`` value."""

    mode: Literal["none", "skip", "warn", "raise"] = "none"
    ids: frozenset[int] = frozenset()

    def faults(self, present: frozenset[int]) -> Faults:
        """The spec faults for the ids that exist (``present``)."""
        ids = self.ids & present
        if self.mode == "raise":
            return Faults(raising=ids)
        if self.mode in ("skip", "warn"):
            return Faults(skipped=ids)
        return Faults()


@dataclass(frozen=True)
class PackingPlan:
    """Packing parameters; ``blocks_per_split=None`` asks for ``blocks_per_epoch="auto"``."""

    pack_sequences: int
    blocks_per_split: int | None
    eos_id: int = -1
    pad_id: int = -2


@dataclass(frozen=True)
class MachineConfig:
    """Everything fixed for one example: the table, the permutation, faults and mode."""

    rows: int
    fragments: int
    num_splits: int
    shuffle: bool = True
    shuffle_seed: int = 0
    epoch: int = 0
    filter: str | None = None
    columns: tuple[str, ...] | None = None
    faults: FaultPlan = FaultPlan()
    packing: PackingPlan | None = None

    @property
    def table_key(self) -> TableKey:
        """Packing faults are null token lists in the table; row faults come from the transform."""
        nulls = self.faults.ids if self.packing is not None and self.faults.mode != "none" else frozenset()
        return TableKey(self.rows, self.fragments, frozenset(nulls))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class SessionPlan:
    """A topology and pipeline knobs for one session; :meth:`fit` adapts it to ``num_splits``."""

    world_size: int = 1
    num_workers: int = 0
    read_batch_size: int = 4
    io_queue_depth: int = 1
    transform_parallelism: int = 1

    def fit(self, num_splits: int, splits_per_rank_multiple: int = 1) -> SessionPlan:
        """The nearest valid plan: ``W | S``, ``(S/W) % multiple == 0`` and ``nw | S/W``."""
        sizes = [
            d
            for d in _divisors(num_splits)
            if d <= max(1, self.world_size) and (num_splits // d) % splits_per_rank_multiple == 0
        ]
        world = max(sizes) if sizes else 1
        per_rank = num_splits // world
        workers = 0 if self.num_workers <= 0 else max(d for d in _divisors(per_rank) if d <= self.num_workers)
        return replace(self, world_size=world, num_workers=workers)


FILTERS: dict[str | None, Callable[[int], bool]] = {
    None: lambda i: True,
    "id % 3 != 1": lambda i: i % 3 != 1,
    "id >= 5": lambda i: i >= 5,
}
ROW_COUNTS = (8, 9, 12, 17, 24, 33, 48, 64, 95, 120)


@st.composite
def machine_configs(
    draw: st.DrawFn,
    *,
    packing: bool | None = None,
    splits_multiple_of: int = 1,
    max_splits: int = 8,
    modes: Sequence[Literal["none", "skip", "raise", "warn"]] = ("none", "skip", "raise", "warn"),
) -> MachineConfig:
    """Draw a valid :class:`MachineConfig` (``packing=None`` draws the mode too; ``modes`` are
    the ``FaultPlan`` modes to draw from)."""
    rows = draw(st.sampled_from(ROW_COUNTS))
    fragments = draw(st.integers(1, 3))
    flt = draw(st.sampled_from(list(FILTERS)))
    available = sum(1 for i in range(rows) if FILTERS[flt](i))
    # Simplest first: 4 and 2 splits (several ranks and workers fit), then the rest.
    preferred = sorted(range(1, max_splits + 1), key=lambda s: (s not in (4, 2), s != 4, s))
    choices = [s for s in preferred if s <= available and s % splits_multiple_of == 0]
    num_splits = choices[draw(st.integers(0, len(choices) - 1))]
    packed = draw(st.booleans()) if packing is None else packing
    mode = draw(st.sampled_from(list(modes)))
    ids: frozenset[int] = frozenset()
    if mode != "none" and draw(st.booleans()):
        ids = draw(st.frozensets(st.integers(0, rows - 1), min_size=1, max_size=max(1, rows // 4)))
    elif mode != "none":
        # Every period-th id: faults spread over every split, so short runs meet them too.
        period = draw(st.integers(2, 12))
        ids = frozenset(range(draw(st.integers(0, period - 1)), rows, period))
    plan: PackingPlan | None = None
    columns: tuple[str, ...] | None = None
    if packed:
        auto = mode == "none" and draw(st.integers(0, 3)) == 3
        plan = PackingPlan(
            pack_sequences=draw(st.integers(1, 8)),
            blocks_per_split=None if auto else draw(st.integers(1, 8)),
            eos_id=draw(st.sampled_from((-1, 0))),
            pad_id=draw(st.sampled_from((-2, 7))),
        )
    else:
        columns = draw(st.sampled_from(((ID_COLUMN,), None, (ID_COLUMN, TOKEN_COLUMN))))
    return MachineConfig(
        rows=rows,
        fragments=fragments,
        num_splits=num_splits,
        shuffle=draw(st.booleans()),
        shuffle_seed=draw(st.integers(0, 1000)),
        epoch=draw(st.integers(0, 3)),
        filter=flt,
        columns=columns,
        faults=FaultPlan(mode, ids),
        packing=plan,
    )


def session_plans() -> st.SearchStrategy[SessionPlan]:
    """Draw a :class:`SessionPlan` (fitted to the configuration when used)."""
    return st.builds(
        SessionPlan,
        world_size=st.sampled_from((2, 1, 4, 3)),
        num_workers=st.integers(0, 2),
        read_batch_size=st.integers(1, 8),
        io_queue_depth=st.integers(1, 3),
        transform_parallelism=st.integers(1, 2),
    )


@dataclass(frozen=True)
class LoaderPlan:
    """One ``StreamingDataLoader`` run: rank (modulo ``W``), batch size and number of batches.

    ``aligned`` scales ``batch_size`` by the splits per worker and ``batches`` by
    the worker count, so the run ends on a step boundary (a packed or
    multi-worker checkpoint is allowed only there).
    """

    rank: int = 0
    batch_size: int = 1
    batches: int = 1
    aligned: bool = True
    world_size: int = 0
    """Run on this many ranks (fitted like :meth:`SessionPlan.fit`); 0 keeps the session's."""


def loader_plans() -> st.SearchStrategy[LoaderPlan]:
    """Draw a :class:`LoaderPlan` (the simplest plan is aligned: it can end in a checkpoint)."""
    return st.builds(
        LoaderPlan,
        rank=st.integers(0, 7),
        batch_size=st.integers(1, 6),
        batches=st.integers(1, 4),
        aligned=st.booleans().map(lambda unaligned: not unaligned),
        world_size=st.integers(0, 4),
    )


# ---------------------------------------------------------------- the spec side


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


def _epoch_model(cfg: MachineConfig, tables: TableCache, number: int) -> EpochModel:
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


def _builtin(error: SpecError) -> type[Exception]:
    if isinstance(error, SpecRuntimeError):
        return RuntimeError
    if isinstance(error, SpecTypeError):
        return TypeError
    return ValueError


def _attempt(fn: Callable[[], T]) -> T | SpecError:
    try:
        return fn()
    except SpecError as error:
        return error


def _items(run: Run) -> tuple[Item, ...]:
    return run.rows if isinstance(run, RowRun) else run.blocks


def _state_after(run: Run | SpecError, start: ModelState, n: int) -> ModelState:
    if isinstance(run, SpecError):
        return start
    return run.state_after(min(n, len(_items(run))))


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}({text[-1] if text else ''!r})"


# ---------------------------------------------------------------- the implementation side


@dataclass(frozen=True, eq=False)
class Recorded:
    """A checkpoint in the bundle: what the implementation wrote, and the spec's truth beside it."""

    label: str
    epoch: int
    state: Mapping[str, object]
    truth: ModelState
    history: History

    def __repr__(self) -> str:
        return f"<checkpoint {self.label}>"


@dataclass(frozen=True, eq=False)
class Missing:
    """What a checkpointing rule adds when there is no checkpoint; rules drawing it do nothing.

    Adding something every time keeps the bundle's contents, and with them
    Hypothesis's choices, independent of how the implementation behaved.
    """

    label: str

    def __repr__(self) -> str:
        return f"<no checkpoint: {self.label}>"


Entry = Recorded | Missing


@dataclass
class Slot:
    """One (rank, worker) iterator of a session."""

    rank: int
    worker: int
    owned: tuple[int, ...]
    dataset: DatasetLike | None
    start: ModelState
    truth: ModelState
    expected: Run | SpecError
    true_run: Run | SpecError
    resumed: bool
    delivered: list[Item] = field(default_factory=list)
    iterator: Iterator[object] | None = None
    finished: str | None = None
    """``None`` while live; else ``"exhausted"``, ``"raised"``, ``"error"`` or ``"broken"``."""
    latest: Recorded | None = None

    @property
    def label(self) -> str:
        """``rank r worker w``."""
        return f"rank {self.rank} worker {self.worker}"


@dataclass
class Session:
    """Slots of one topology over one epoch, started from one checkpoint (or from scratch)."""

    plan: SessionPlan
    epoch: EpochModel
    slots: list[Slot]
    history: History
    origin: str


def _close(iterator: Iterator[object] | None) -> None:
    close = getattr(iterator, "close", None)
    if callable(close):
        close()


def _to_list(value: object) -> list[object]:
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        out = tolist()
        return out if isinstance(out, list) else [out]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TypeError(f"cannot read {type(value).__name__} as a list")


def _int_list(value: object) -> tuple[int, ...]:
    out = _to_list(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in out):
        raise TypeError(f"expected integers, got {out!r}")
    return tuple(v for v in out if isinstance(v, int))


CHECKPOINTS: Bundle[Entry] = Bundle("checkpoints")
"""Every checkpoint taken, merged or committed; rules draw old ones again."""


class DifferentialMachine(RuleBasedStateMachine):
    """Drive an implementation and the spec side by side; compare after every step.

    This base class holds the comparison machinery, the invariants and the
    ``StreamingDataLoader`` rules; :class:`StreamingMachine` adds the rules that
    iterate slots, checkpoint, merge, resume and change epochs. Bind a machine
    to an implementation and a table directory with :meth:`bind` (or
    :func:`check_invariants`); an unbound class cannot run.
    """

    implementation: ClassVar[Implementation]
    tables: ClassVar[TableCache]
    enforced: ClassVar[frozenset[str]] = frozenset(CHECKED)
    """Names whose violation fails the example; the others are only recorded."""
    observed: ClassVar[dict[str, str] | None] = None
    """When set, the first violation text of every name, across all examples of a run."""
    loader_workers: ClassVar[int] = 0
    """``num_workers`` of the ``StreamingDataLoader`` rules (0: in-process)."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: dict[str, str] = {}
        self.cfg: MachineConfig | None = None
        self.model: EpochModel | None = None
        self.session: Session | None = None
        self.table: object = None

    # ------------------------------------------------------------ binding

    @classmethod
    def bind(
        cls,
        implementation: Implementation,
        tables: TableCache,
        *,
        enforced: frozenset[str] | None = None,
        observed: dict[str, str] | None = None,
    ) -> type[DifferentialMachine]:
        """A subclass of this machine that drives ``implementation`` over tables in ``tables``.

        The subclass keeps this class's name, so a printed failing program
        (``state = RowMachine()`` ...) replays after ``RowMachine = RowMachine.bind(...)``.
        """
        attrs: dict[str, object] = {
            "implementation": implementation,
            "tables": tables,
            "enforced": frozenset(CHECKED) if enforced is None else enforced,
            "observed": observed,
            "__qualname__": cls.__qualname__,
            "__doc__": f"{cls.__doc__}\n\nBound to {implementation.name}.",
        }
        return type(cls.__name__, (cls,), attrs)

    # ------------------------------------------------------------ recording

    def _fail(self, name: str, detail: str) -> None:
        assert name in CHECKED, name
        self.violations.setdefault(name, detail)
        if self.observed is not None:
            self.observed.setdefault(name, detail)

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except inv.InvariantViolation as violation:
            self._fail(violation.name, violation.detail)
        except SpecError as error:
            raise AssertionError(f"the spec rejected its own inputs: {error}") from error

    def _report(self, name: str) -> None:
        if name in self.violations and name in self.enforced:
            raise inv.InvariantViolation(name, self.violations[name])

    # ------------------------------------------------------------ building

    def _params(self, plan: SessionPlan, rank: int, worker: SimulatedWorker | None) -> dict[str, object]:
        cfg, model = self.cfg, self.model
        assert cfg is not None and model is not None
        params: dict[str, object] = {
            "num_splits": cfg.num_splits,
            "shuffle": cfg.shuffle,
            "shuffle_seed": cfg.shuffle_seed,
            "epoch": model.number,
            "rank": rank,
            "world_size": plan.world_size,
            "read_batch_size": plan.read_batch_size,
            "io_queue_depth": plan.io_queue_depth,
            "transform_parallelism": plan.transform_parallelism,
        }
        if cfg.filter is not None:
            params["filter"] = cfg.filter
        if cfg.faults.mode != "none":
            params["on_transform_error"] = cfg.faults.mode
        if cfg.packing is None:
            params["transform"] = FaultyTransform(cfg.faults.ids if cfg.faults.mode != "none" else ())
            if cfg.columns is not None:
                params["columns"] = list(cfg.columns)
        else:
            assert model.packing is not None
            params.update(
                columns=[TOKEN_COLUMN],
                pack_sequences=cfg.packing.pack_sequences,
                eos_id=cfg.packing.eos_id,
                pad_id=cfg.packing.pad_id,
                blocks_per_epoch="auto" if model.auto else model.packing.blocks_per_epoch,
            )
        if worker is not None:
            params["worker_info_override"] = worker
        return params

    def _dataset(self, plan: SessionPlan, rank: int, worker: SimulatedWorker | None) -> DatasetLike | None:
        params = self._params(plan, rank, worker)
        try:
            return self.implementation.dataset(self.table, **params)
        except Exception as error:
            self._fail(
                "CanonicalOrderProp", f"StreamingDataset(table, **{params!r}) raised {_describe(error)}"
            )
            return None

    def _slot(
        self,
        plan: SessionPlan,
        rank: int,
        worker: int,
        dataset: DatasetLike | None,
        start: ModelState,
        truth: ModelState,
        resumed: bool,
    ) -> Slot:
        model = self.model
        assert model is not None
        owned = owned_splits(
            model.config.num_splits, Topology(plan.world_size, rank, plan.num_workers, worker)
        )
        return Slot(
            rank,
            worker,
            owned,
            dataset,
            start,
            truth,
            _attempt(lambda: model.run(owned, start)),
            _attempt(lambda: model.run(owned, truth)),
            resumed,
            finished=None if dataset is not None else "broken",
        )

    def _topology(self, plan: SessionPlan) -> list[tuple[int, int, SimulatedWorker | None]]:
        workers = max(1, plan.num_workers)
        return [
            (r, w, SimulatedWorker(w, plan.num_workers) if plan.num_workers else None)
            for r in range(plan.world_size)
            for w in range(workers)
        ]

    def _fresh_session(self, plan: SessionPlan, origin: str) -> Session:
        model = self.model
        assert model is not None
        slots = [
            self._slot(plan, r, w, self._dataset(plan, r, info), model.initial(), model.initial(), False)
            for r, w, info in self._topology(plan)
        ]
        return Session(plan, model, slots, model.empty_history(), origin)

    def _close_session(self) -> None:
        if self.session is None:
            return
        for slot in self.session.slots:
            iterator, slot.iterator = slot.iterator, None
            try:
                _close(iterator)
            except Exception as error:
                note(f"closing the iterator of {slot.label} raised {_describe(error)}")
        self.session = None

    def _fit(self, plan: SessionPlan) -> SessionPlan:
        assert self.cfg is not None
        return plan.fit(self.cfg.num_splits, max(1, self.loader_workers))

    # ------------------------------------------------------------ rules

    @initialize(config=machine_configs(), plan=session_plans())
    def setup(self, config: MachineConfig, plan: SessionPlan) -> None:
        """Build the table and the spec's view of the first epoch; start a fresh session."""
        self._setup(config, plan)

    def _setup(self, config: MachineConfig, plan: SessionPlan) -> None:
        self.cfg = config
        self.table = self.tables.table(config.table_key)
        self.model = _epoch_model(config, self.tables, config.epoch)
        fitted = self._fit(plan)
        note(f"config {config!r}; session {fitted!r}; permutation {self.model.perm!r}")
        self.session = self._fresh_session(fitted, "start")

    @rule(target=CHECKPOINTS, plan=loader_plans())
    def loader_from_start(self, plan: LoaderPlan) -> Entry:
        """Run a ``StreamingDataLoader`` from the start of the epoch; checkpoint its committed state."""
        return self._loader(None, plan, False) or Missing("loader")

    @rule(target=CHECKPOINTS, checkpoint=CHECKPOINTS, plan=loader_plans(), via_json=st.booleans())
    def loader_from_checkpoint(self, checkpoint: Entry, plan: LoaderPlan, via_json: bool) -> Entry:
        """Run a ``StreamingDataLoader`` from a checkpoint; checkpoint its committed state."""
        if isinstance(checkpoint, Missing):
            note(f"{checkpoint!r}: nothing to load")
            return Missing("loader")
        return self._loader(checkpoint, plan, via_json) or Missing("loader")

    def teardown(self) -> None:
        """Close every live iterator (the pipelines own threads)."""
        self._close_session()

    # ------------------------------------------------------------ consuming

    def _decode(self, slot: Slot, raw: object) -> Item | str:
        model = self.model
        assert model is not None
        try:
            if model.packing is None:
                if not isinstance(raw, Mapping) or ID_COLUMN not in raw:
                    return f"row {raw!r} has no {ID_COLUMN!r}"
                row_id = raw[ID_COLUMN]
                if isinstance(row_id, bool) or not isinstance(row_id, int) or row_id not in model.index:
                    return f"row id {row_id!r} is not in the permutation"
                split, position = model.index[row_id]
                return Yielded(split, position, row_id)
            if not isinstance(raw, Mapping) or "input_ids" not in raw or "doc_ids" not in raw:
                return f"block {raw!r} lacks input_ids/doc_ids"
            ids, doc_ids = _int_list(raw["input_ids"]), _int_list(raw["doc_ids"])
        except TypeError as error:
            return str(error)
        pad = model.packing.pad_id
        real = ids.index(pad) if pad in ids else len(ids)
        split = slot.owned[len(slot.delivered) % len(slot.owned)]
        return Block(split, ids, doc_ids, real)

    def _check_item(
        self, slot: Slot, item: Item, resumed: bool, expected: Run | SpecError, where: str
    ) -> None:
        """Compare the ``len(slot.delivered)``-th item with the spec run ``expected``."""
        k = len(slot.delivered)
        if isinstance(item, Yielded):
            if item.split not in slot.owned:
                self._fail("PartitionInv", f"{where}: row {item} of split {item.split}, owned {slot.owned}")
            name = "ResumeEquivalenceProp" if resumed else "CanonicalOrderProp"
            if not isinstance(expected, RowRun):
                self._fail(name, f"{where}: yielded {item}, the spec fails first: {expected}")
            elif k >= len(expected.rows):
                self._fail(name, f"{where}: row #{k} {item} after the spec's last row ({expected.end})")
            elif expected.rows[k] != item:
                self._fail(name, f"{where}: row #{k} is {item}, spec {expected.rows[k]}")
            return
        if isinstance(expected, SpecError):
            name = "ResumeEquivalenceProp" if resumed else "PackingConservationInv"
            self._fail(name, f"{where}: yielded a block, the spec fails first: {expected}")
            return
        assert isinstance(expected, PackedRun)
        if k >= len(expected.blocks):
            self._fail(
                "PackingBudgetProp", f"{where}: block #{k} after the spec's {len(expected.blocks)} blocks"
            )
            return
        want = expected.blocks[k]
        if len(item.input_ids) != len(want.input_ids):
            self._fail("PackingBudgetProp", f"{where}: block #{k} has {len(item.input_ids)} tokens")
        if resumed and (item.input_ids, item.doc_ids) != (want.input_ids, want.doc_ids):
            self._fail("ResumeEquivalenceProp", f"{where}: block #{k} {item} != spec {want}")
        elif item.input_ids != want.input_ids:
            self._fail(
                "PackingConservationInv",
                f"{where}: block #{k} input_ids {item.input_ids} != {want.input_ids}",
            )
        elif item.doc_ids != want.doc_ids:
            self._fail("DocIdsInv", f"{where}: block #{k} doc_ids {item.doc_ids} != {want.doc_ids}")

    def _advance(self, session: Session, slot: Slot, count: int) -> None:
        if slot.finished is not None or slot.dataset is None:
            return
        where = f"{slot.label} ({session.origin})"
        if slot.iterator is None:
            try:
                slot.iterator = iter(slot.dataset)
            except Exception as error:
                self._on_end(slot, error, where)
                return
        for _ in range(count):
            try:
                raw = next(slot.iterator)
            except StopIteration:
                self._on_end(slot, None, where)
                break
            except Exception as error:
                self._on_end(slot, error, where)
                break
            item = self._decode(slot, raw)
            if isinstance(item, str):
                packed = self.model is not None and self.model.packing is not None
                self._fail("PackingConservationInv" if packed else "CanonicalOrderProp", f"{where}: {item}")
                slot.finished = "broken"
                break
            self._check_item(slot, item, False, slot.expected, where)
            if slot.resumed:
                self._check_item(slot, item, True, slot.true_run, where)
            slot.delivered.append(item)
        self._check_catch_up(slot)

    def _on_end(self, slot: Slot, error: Exception | None, where: str) -> None:
        """The iterator stopped (``error=None``) or raised ``error`` after ``len(delivered)`` items."""
        model = self.model
        assert model is not None
        k = len(slot.delivered)
        slot.iterator = None
        slot.finished = "exhausted" if error is None else "raised"
        expected = slot.expected
        packed = model.packing is not None
        order = "PackingBudgetProp" if packed else "CanonicalOrderProp"
        if isinstance(expected, SpecError):
            slot.finished = "error"
            if error is None or not isinstance(error, _builtin(expected)):
                got = "stopped" if error is None else f"raised {_describe(error)}"
                self._fail(order, f"{where}: {got} after {k} items; the spec raises {expected}")
            return
        count = len(_items(expected))
        end = expected.end
        if error is None:
            if isinstance(end, Raised):
                self._fail(
                    "RaisePositionProp",
                    f"{where}: stopped after {k} items; spec raises at {end} after {count}",
                )
            elif k != count:
                self._fail(order, f"{where}: stopped after {k} items; the spec yields {count}")
            self._check_finished_run(slot)
            return
        fault = isinstance(error, InjectedFault) or (packed and isinstance(error, ValueError))
        if not fault:
            slot.finished = "error"
            self._fail(order, f"{where}: raised {_describe(error)} after {k} items; the spec ends with {end}")
            return
        row = _fault_row(error)
        if not isinstance(end, Raised):
            self._fail(
                "RaisePositionProp", f"{where}: raised {_describe(error)} after {k} items; spec: {end}"
            )
        elif k != count or (not packed and row != end.row_id):
            self._fail(
                "RaisePositionProp",
                f"{where}: raised at id {row} after {k} items; the spec raises at id {end.row_id} "
                f"(split {end.split}, position {end.position}) after {count} items",
            )

    def _observed_rows(self, slot: Slot) -> RowRun | None:
        if not isinstance(slot.start, RowState):
            return None
        samples, positions = list(slot.start.samples), list(slot.start.positions)
        rows: list[Yielded] = []
        states: list[RowState] = []
        for item in slot.delivered:
            if not isinstance(item, Yielded):
                return None
            samples[item.split] += 1
            positions[item.split] = item.position + 1
            if samples[item.split] > positions[item.split]:
                return None
            rows.append(item)
            states.append(RowState(tuple(samples), tuple(positions)))
        return RowRun(slot.start, tuple(rows), tuple(states), Exhausted())

    def _check_catch_up(self, slot: Slot) -> None:
        observed = self._observed_rows(slot)
        if observed is not None:
            self._guard(lambda: inv.CatchUpInv(observed.start, observed, slot.owned))

    def _check_finished_run(self, slot: Slot) -> None:
        """An exhausted row iterator: the whole run is known, so check CanonicalOrderProp on it."""
        model = self.model
        observed = self._observed_rows(slot)
        if model is not None and observed is not None and not isinstance(slot.expected, SpecError):
            self._guard(lambda: inv.CanonicalOrderProp(model.perm, model.faults, slot.owned, observed))

    # ------------------------------------------------------------ checkpoints

    def _check_state(
        self,
        state: Mapping[str, object],
        expected: ModelState,
        start: ModelState,
        owned: Sequence[int],
        exact: str,
        where: str,
    ) -> ModelState | None:
        """Judge a checkpoint the implementation wrote; return the spec's reading of it."""
        model = self.model
        assert model is not None
        want = model.snapshot(expected)
        if list(state) != list(want):
            self._fail("CheckpointRoundTripInv", f"{where}: keys {list(state)} != {list(want)}")
        if model.auto and state.get("blocks_per_epoch") != want["blocks_per_epoch"]:
            reported = state.get("blocks_per_epoch")
            self._fail(
                "AutoBudgetInv",
                f"{where}: blocks_per_epoch {reported!r}, spec estimate {want['blocks_per_epoch']}",
            )
            if isinstance(reported, int):
                self._guard(lambda: inv.AutoBudgetInv(reported, model.config.num_splits))
        try:
            parsed = model.load(state)
        except SpecError as error:
            bounds = error.code in ("progress_out_of_range", "positions_below_samples")
            name = "ProgressBoundsInv" if bounds else "CheckpointRoundTripInv"
            self._fail(name, f"{where}: the spec cannot read {dict(state)!r}: {error}")
            return None
        canonical = model.snapshot(parsed)
        if dict(state) != canonical:
            self._fail(
                "CheckpointRoundTripInv", f"{where}: {dict(state)!r} is not the canonical {canonical!r}"
            )
        unowned = [s for s in range(model.config.num_splits) if s not in owned]
        if isinstance(parsed, RowState):
            assert isinstance(start, RowState) and isinstance(expected, RowState)
            self._guard(lambda: inv.ProgressBoundsInv(parsed, model.split_len))
            self._guard(lambda: inv.SkipAccountingInv(model.perm, model.faults, parsed))
            self._guard(
                lambda: inv.HonestProgressInv(start, RowRun(start, (), (parsed,), Exhausted()), owned)
            )
            got: list[object] = [(parsed.samples[s], parsed.positions[s]) for s in owned]
            exp: list[object] = [(expected.samples[s], expected.positions[s]) for s in owned]
        else:
            assert isinstance(start, PackedState) and isinstance(expected, PackedState)
            moved = [s for s in unowned if _packed_split(parsed, s) != _packed_split(start, s)]
            if moved:
                self._fail(
                    "HonestProgressInv", f"{where}: unowned packed splits {moved} changed: {dict(state)!r}"
                )
            got = [_packed_split(parsed, s) for s in owned]
            exp = [_packed_split(expected, s) for s in owned]
        if got != exp:
            self._fail(exact, f"{where}: splits {list(owned)} at {got}, the spec says {exp}")
        return parsed

    def _state_dict(
        self,
        dataset: DatasetLike,
        gate: CheckpointGate,
        expected: ModelState,
        rank_owned: Sequence[int],
        name: str,
        where: str,
    ) -> Mapping[str, object] | None:
        """``state_dict()`` when the spec's gate allows it (a refusal must match the spec's)."""
        refusal = _attempt(lambda: gate_check_state_dict(gate, expected, rank_owned))
        try:
            state: Mapping[str, object] | None = dataset.state_dict()
        except Exception as error:
            if not isinstance(refusal, SpecError) or not isinstance(error, RuntimeError):
                self._fail(name, f"{where}: state_dict() raised {_describe(error)}; spec: {refusal}")
            return None
        if isinstance(refusal, SpecError):
            self._fail(name, f"{where}: state_dict() answered {state!r}; the spec refuses: {refusal}")
            return None
        return copy.deepcopy(state)

    def _snapshot(self, session: Session, slot: Slot) -> Recorded | None:
        model = self.model
        assert model is not None
        if slot.dataset is None:
            return None
        where = f"checkpoint of {slot.label} after {len(slot.delivered)} items"
        expected = _state_after(slot.expected, slot.start, len(slot.delivered))
        rank_owned = rank_splits(model.config.num_splits, session.plan.world_size, slot.rank)
        state = self._state_dict(
            slot.dataset, CheckpointGate(), expected, rank_owned, "CheckpointRoundTripInv", where
        )
        if state is None:
            return None
        self._check_state(state, expected, slot.start, slot.owned, "ResumeEquivalenceProp", where)
        truth = _state_after(slot.true_run, slot.truth, len(slot.delivered))
        history = list(session.history)
        for item in slot.delivered:
            history[item.split] = (*history[item.split], item)
        recorded = Recorded(
            f"{slot.label}@{len(slot.delivered)} epoch {model.number}",
            model.number,
            state,
            truth,
            tuple(history),
        )
        slot.latest = recorded
        return recorded

    # ------------------------------------------------------------ merging

    def _impl_merge(self, states: Sequence[Mapping[str, object]]) -> State | Exception:
        try:
            return self.implementation.merge_state_dicts([copy.deepcopy(dict(s)) for s in states])
        except Exception as error:
            return error

    def _same_merge(
        self, impl: State | Exception, spec: dict[str, object] | SpecError, name: str, what: str
    ) -> None:
        model = self.model
        assert model is not None
        if isinstance(spec, SpecError):
            if not isinstance(impl, _builtin(spec)):
                self._fail(name, f"{what}: implementation gave {impl!r}; the spec raises {spec}")
            return
        if isinstance(impl, Exception):
            self._fail(name, f"{what}: implementation raised {_describe(impl)}; spec {spec!r}")
            return
        mine = _attempt(lambda: model.load(impl))
        theirs = _attempt(lambda: model.load(spec))
        if isinstance(mine, SpecError) or mine != theirs:
            self._fail(name, f"{what}: implementation {impl!r} != spec {spec!r}")

    def _merge(self, session: Session) -> Recorded | None:
        model = self.model
        assert model is not None
        records: list[Recorded] = []
        for slot in session.slots:
            record = slot.latest if slot.latest is not None else self._snapshot(session, slot)
            if record is None:
                note(f"no checkpoint from {slot.label}: nothing to merge")
                return None
            records.append(record)
        states = [r.state for r in records]
        merged = self._impl_merge(states)
        self._same_merge(merged, _attempt(lambda: merge_state_dicts(states)), "MergeLatticeInv", "merge")
        variants: list[tuple[str, list[Mapping[str, object]]]] = [
            ("merge(reversed)", states[::-1]),
            ("merge(states + states)", states + states),
        ]
        half = max(1, len(states) // 2)
        left, right = self._impl_merge(states[:half]), self._impl_merge(states[half:])
        if not isinstance(left, Exception) and not isinstance(right, Exception):
            variants.append(("merge([merge(left), merge(right)])", [left, right]))
        for what, variant in variants:
            self._same_merge(
                self._impl_merge(variant),
                _attempt(functools.partial(merge_state_dicts, variant)),
                "MergeLatticeInv",
                what,
            )
        truths = [model.snapshot(r.truth) for r in records]
        exact = _attempt(lambda: merge_state_dicts(truths))
        self._same_merge(merged, exact, "MergeExactProp", "merge of the latest checkpoints")
        if isinstance(merged, Exception) or isinstance(exact, SpecError):
            return None
        truth = _attempt(lambda: model.load(exact))
        if isinstance(truth, SpecError):
            return None
        history = list(model.empty_history())
        for slot, record in zip(session.slots, records):
            for s in slot.owned:
                history[s] = record.history[s]
        return Recorded(
            f"merge of {len(records)} epoch {model.number}", model.number, merged, truth, tuple(history)
        )

    # ------------------------------------------------------------ loading

    def _load(self, dataset: DatasetLike, record: Recorded, via_json: bool, where: str) -> ModelState | None:
        """Load ``record`` into ``dataset``; the result is the spec's reading, ``None`` when rejected."""
        model = self.model
        assert model is not None
        payload = json.loads(json.dumps(record.state)) if via_json else copy.deepcopy(dict(record.state))
        spec = _attempt(lambda: model.load(payload))
        try:
            dataset.load_state_dict(payload)
        except Exception as error:
            if not isinstance(spec, SpecError):
                self._fail("CheckpointRoundTripInv", f"{where}: load_state_dict raised {_describe(error)}")
            elif not isinstance(error, _builtin(spec)):
                self._fail(
                    "CheckpointRoundTripInv",
                    f"{where}: load_state_dict raised {_describe(error)}; spec: {spec}",
                )
            return None
        if isinstance(spec, SpecError):
            self._fail(
                "CheckpointRoundTripInv",
                f"{where}: load_state_dict accepted {record!r} (epoch {record.epoch}); "
                f"the spec rejects it: {spec}",
            )
            return None
        return spec

    def _check_reload(
        self, dataset: DatasetLike, plan: SessionPlan, rank: int, loaded: ModelState, where: str
    ) -> None:
        """After a load, ``state_dict()`` answers the loaded checkpoint in canonical form."""
        model = self.model
        assert model is not None
        rank_owned = rank_splits(model.config.num_splits, plan.world_size, rank)
        state = self._state_dict(
            dataset, CheckpointGate(), loaded, rank_owned, "CheckpointRoundTripInv", where
        )
        if state is not None and dict(state) != model.snapshot(loaded):
            self._fail(
                "CheckpointRoundTripInv",
                f"{where}: state_dict() after load is {dict(state)!r}, loaded {model.snapshot(loaded)!r}",
            )

    def _resumed_session(self, plan: SessionPlan, record: Recorded, via_json: bool) -> Session:
        model = self.model
        assert model is not None
        slots: list[Slot] = []
        for r, w, info in self._topology(plan):
            where = f"resume {record!r} on rank {r} worker {w}"
            dataset = self._dataset(plan, r, info)
            loaded = None if dataset is None else self._load(dataset, record, via_json, where)
            if loaded is None:
                return self._fresh_session(plan, f"fresh ({record!r} rejected)")
            assert dataset is not None
            self._check_reload(dataset, plan, r, loaded, where)
            slots.append(self._slot(plan, r, w, dataset, loaded, record.truth, True))
        return Session(plan, model, slots, record.history, f"from {record!r}")

    # ------------------------------------------------------------ StreamingDataLoader

    def _decode_batch(self, batch: object, model_items: Sequence[Item], offset: int) -> list[Item] | str:
        model = self.model
        assert model is not None
        if not isinstance(batch, Mapping):
            return f"batch {batch!r} is not a mapping"
        try:
            if model.packing is None:
                out: list[Item] = []
                for row_id in _int_list(batch.get(ID_COLUMN)):
                    if row_id not in model.index:
                        return f"row id {row_id} is not in the permutation"
                    s, p = model.index[row_id]
                    out.append(Yielded(s, p, row_id))
                return out
            ids_rows, doc_rows = _to_list(batch.get("input_ids")), _to_list(batch.get("doc_ids"))
            blocks: list[Item] = []
            for j, (ids_raw, docs_raw) in enumerate(zip(ids_rows, doc_rows)):
                ids, docs = _int_list(ids_raw), _int_list(docs_raw)
                at = offset + j
                split = model_items[at].split if at < len(model_items) else -1
                real = ids.index(model.packing.pad_id) if model.packing.pad_id in ids else len(ids)
                blocks.append(Block(split, ids, docs, real))
            return blocks
        except TypeError as error:
            return str(error)

    def _loader(self, record: Recorded | None, loader_plan: LoaderPlan, via_json: bool) -> Recorded | None:
        model, session = self.model, self.session
        assert model is not None and session is not None
        plan = session.plan
        if loader_plan.world_size:
            plan = self._fit(replace(plan, world_size=loader_plan.world_size))
        rank = loader_plan.rank % plan.world_size
        nw = self.loader_workers
        batch_size, batches = loader_plan.batch_size, loader_plan.batches
        if loader_plan.aligned:
            batch_size *= model.config.num_splits // plan.world_size // max(1, nw)
            batches *= max(1, nw)
        where = f"StreamingDataLoader(rank {rank}, batch_size={batch_size}, num_workers={nw})"
        dataset = self._dataset(plan, rank, None)
        if dataset is None:
            return None
        start, truth, history = model.initial(), model.initial(), model.empty_history()
        if record is not None:
            loaded = self._load(dataset, record, via_json, f"{where} from {record!r}")
            if loaded is None:
                dataset = self._dataset(plan, rank, None)
                if dataset is None:
                    return None
            else:
                start, truth, history = loaded, record.truth, record.history
        topology = Topology(plan.world_size, rank, nw)
        corpus = model.corpus if model.packing is not None else None
        expected = _attempt(
            lambda: run_loader(model.config, model.perm, model.faults, topology, start, batch_size, corpus)
        )
        true_run = _attempt(
            lambda: run_loader(model.config, model.perm, model.faults, topology, truth, batch_size, corpus)
        )
        summary = (
            f"raises {expected}"
            if isinstance(expected, SpecError)
            else f"delivers {len(expected.deliveries)} batches, then {expected.error or 'ends'}"
        )
        note(f"{where} from {'the start' if record is None else repr(record)}: the spec {summary}")
        kwargs: dict[str, object] = {"batch_size": batch_size, "num_workers": nw}
        if nw:
            kwargs["multiprocessing_context"] = "spawn"
        received: list[list[Item]] = []
        order = "CanonicalOrderProp" if model.packing is None else "PackingBudgetProp"
        try:
            iterator = iter(self.implementation.loader(dataset, **kwargs))
        except Exception as error:
            if not isinstance(expected, SpecError) or not isinstance(error, _builtin(expected)):
                self._fail(order, f"{where}: iter() raised {_describe(error)}; spec: {expected}")
            return None
        if isinstance(expected, SpecError):
            self._fail(order, f"{where}: iter() succeeded; the spec raises {expected}")
            return None
        # The loader stays alive until the checkpoint is taken, as in a training loop.
        failed = self._receive(iterator, expected, received, batches, where)
        items = [item for batch in received for item in batch]
        n = len(received)
        if record is not None and not isinstance(true_run, SpecError):
            truly = [item for d in true_run.deliveries for item in d.items]
            if items != truly[: len(items)]:
                self._fail(
                    "ResumeEquivalenceProp",
                    f"{where} from {record!r}: received {items}, the uninterrupted run continues with "
                    f"{truly[: len(items)]}",
                )
        self._check_loader_history(history, items, where)
        gate = CheckpointGate()
        if n:
            gate = gate_after_commit(gate, nw > 1 or model.packing is not None)
        if failed:
            gate = gate_after_failure(gate, "a batch failed")
        committed = expected.state_after(min(n, len(expected.deliveries)))
        rank_owned = rank_splits(model.config.num_splits, plan.world_size, rank)
        state = self._state_dict(
            dataset, gate, committed, rank_owned, "ConsumerCommitProp", f"{where} after {n} batches"
        )
        del iterator
        if state is None:
            return None
        parsed = self._check_state(
            state, committed, start, rank_owned, "ConsumerCommitProp", f"{where} after {n}"
        )
        if isinstance(parsed, RowState) and isinstance(start, RowState):
            observed = LoaderRun(
                start,
                tuple(Delivery(0, j, tuple(batch), parsed) for j, batch in enumerate(received)),
                None,
            )
            self._guard(lambda: inv.ConsumerCommitProp(model.perm, model.faults, observed, n))
        new_history = list(history)
        for item in items:
            if 0 <= item.split < len(new_history):
                new_history[item.split] = (*new_history[item.split], item)
        truth_after = (
            true_run.state_after(min(n, len(true_run.deliveries)))
            if not isinstance(true_run, SpecError)
            else truth
        )
        return Recorded(
            f"loader rank {rank} after {n} batches epoch {model.number}",
            model.number,
            state,
            truth_after,
            tuple(new_history),
        )

    def _receive(
        self,
        iterator: Iterator[object],
        expected: LoaderRun,
        received: list[list[Item]],
        batches: int,
        where: str,
    ) -> bool:
        """Take up to ``batches`` batches, comparing each with the spec; return whether one failed."""
        model = self.model
        assert model is not None
        packed = model.packing is not None
        order = "PackingBudgetProp" if packed else "CanonicalOrderProp"
        flat = [item for d in expected.deliveries for item in d.items]
        offset = 0
        for j in range(batches):
            try:
                batch = next(iterator)
            except StopIteration:
                if j < len(expected.deliveries) or expected.error is not None:
                    self._fail(
                        "RaisePositionProp" if expected.error is not None else order,
                        f"{where}: stopped after {j} batches; spec delivers {len(expected.deliveries)} "
                        f"then {expected.error}",
                    )
                return False
            except Exception as error:
                fault = isinstance(error, InjectedFault) or (packed and isinstance(error, ValueError))
                if not (fault and expected.error is not None and j == len(expected.deliveries)):
                    self._fail(
                        "RaisePositionProp" if fault else order,
                        f"{where}: batch {j} raised {_describe(error)}; spec delivers "
                        f"{len(expected.deliveries)} batches then {expected.error}",
                    )
                return True
            items = self._decode_batch(batch, flat, offset)
            if isinstance(items, str):
                self._fail(
                    "CanonicalOrderProp" if not packed else "PackingConservationInv", f"{where}: {items}"
                )
                return True
            if j >= len(expected.deliveries):
                self._fail(order, f"{where}: batch {j} {items} after the spec's last batch")
                return True
            want = list(expected.deliveries[j].items)
            if items != want:
                if not packed:
                    self._fail("CanonicalOrderProp", f"{where}: batch {j} is {items}, spec {want}")
                elif [b.input_ids for b in items if isinstance(b, Block)] != [
                    b.input_ids for b in want if isinstance(b, Block)
                ]:
                    self._fail("PackingConservationInv", f"{where}: batch {j} blocks {items} != spec {want}")
                else:
                    self._fail("DocIdsInv", f"{where}: batch {j} doc_ids differ: {items} != spec {want}")
            received.append(items)
            offset += len(items)
        return False

    def _check_loader_history(self, history: History, items: Sequence[Item], where: str) -> None:
        model = self.model
        assert model is not None
        lineage = [list(h) for h in history]
        for item in items:
            if 0 <= item.split < len(lineage):
                lineage[item.split].append(item)
        self._check_lineage(lineage, False, where)

    # ------------------------------------------------------------ lineage checks

    def _lineage(self) -> tuple[list[list[Item]], bool]:
        """The current session's history plus what its slots delivered; and whether the epoch is over."""
        session = self.session
        assert session is not None
        lineage = [list(h) for h in session.history]
        for slot in session.slots:
            for item in slot.delivered:
                if 0 <= item.split < len(lineage):
                    lineage[item.split].append(item)
        finished = all(slot.finished == "exhausted" for slot in session.slots)
        return lineage, finished

    def _check_lineage(self, lineage: Sequence[Sequence[Item]], finished: bool, where: str) -> None:
        model = self.model
        assert model is not None
        if model.packing is None:
            rows = [item for split in lineage for item in split if isinstance(item, Yielded)]
            self._guard(lambda: inv.ExactlyOnceProp(model.perm, model.faults, rows, finished))
            self._check_steps(lineage, where)
            return
        packing = model.packing
        for s, blocks in enumerate(lineage):
            expected = model.per_split[s]
            got = [b for b in blocks if isinstance(b, Block)]
            delivered = [t for b in got for t in b.input_ids[: b.real]]
            stream = [t for b in expected if isinstance(b, Block) for t in b.input_ids[: b.real]]
            if delivered != stream[: len(delivered)]:
                self._fail(
                    "PackingConservationInv",
                    f"{where}: split {s} delivered tokens {delivered} are not a prefix of "
                    f"its stream {stream}",
                )
            if any(t != packing.pad_id for b in got for t in b.input_ids[b.real :]):
                self._fail("PackingConservationInv", f"{where}: split {s} padding is not pad_id")
            if list(expected[: len(got)]) != got:
                self._fail(
                    "ElasticDeterminismProp",
                    f"{where}: split {s} blocks {got} differ from its topology-free blocks {list(expected)}",
                )
            budget = packing.blocks_per_split(model.config.num_splits)
            if len(got) > budget or (finished and len(got) != budget):
                self._fail(
                    "PackingBudgetProp", f"{where}: split {s} emitted {len(got)} blocks, budget {budget}"
                )

    def _check_steps(self, lineage: Sequence[Sequence[Item]], where: str) -> None:
        """Global step ``g`` (one cycle of every split) holds the same rows whatever the topology was."""
        model = self.model
        assert model is not None
        expected = global_steps(model.perm, model.faults, 1)
        complete = min(len(split) for split in lineage)
        for g in range(complete):
            got = frozenset(
                (y.split, y.position) for y in (split[g] for split in lineage) if isinstance(y, Yielded)
            )
            if g >= len(expected) or got != expected[g]:
                want = expected[g] if g < len(expected) else "no step"
                self._fail(
                    "ElasticDeterminismProp", f"{where}: global step {g} holds {sorted(got)}, spec {want}"
                )
                return

    # ------------------------------------------------------------ invariants (one per name)

    @invariant()
    def PartitionInv(self) -> None:
        """Every row comes from a split its (rank, worker) owns."""
        self._report("PartitionInv")

    @invariant()
    def ProgressBoundsInv(self) -> None:
        """Checkpoints keep ``0 <= samples <= positions <= split length``."""
        self._report("ProgressBoundsInv")

    @invariant()
    def SkipAccountingInv(self) -> None:
        """``positions - samples`` counts the skipped rows before ``positions``."""
        self._report("SkipAccountingInv")

    @invariant()
    def HonestProgressInv(self) -> None:
        """A checkpoint reports loaded values for the splits its iterator does not own."""
        self._report("HonestProgressInv")

    @invariant()
    def CatchUpInv(self) -> None:
        """Lagging splits catch up first, in (count, split) order."""
        self._report("CatchUpInv")

    @invariant()
    def MergeLatticeInv(self) -> None:
        """``merge_state_dicts`` is the spec's join (commutative, associative, idempotent)."""
        self._report("MergeLatticeInv")

    @invariant()
    def CheckpointRoundTripInv(self) -> None:
        """Checkpoints have the spec's format, load iff the spec accepts them, and save(load(c)) == c."""
        self._report("CheckpointRoundTripInv")

    @invariant()
    def PackingConservationInv(self) -> None:
        """Delivered tokens of a split are exactly its documents, each followed by EOS, in order."""
        if self.session is not None and self.model is not None and self.model.packing is not None:
            lineage, finished = self._lineage()
            self._check_lineage(lineage, finished, f"lineage of {self.session.origin}")
        self._report("PackingConservationInv")

    @invariant()
    def DocIdsInv(self) -> None:
        """``doc_ids`` number the documents inside each block."""
        self._report("DocIdsInv")

    @invariant()
    def AutoBudgetInv(self) -> None:
        """``blocks_per_epoch="auto"`` resolves to the spec's estimate."""
        self._report("AutoBudgetInv")

    @invariant()
    def CanonicalOrderProp(self) -> None:
        """Items come in the spec's order and the run ends where the spec's does."""
        self._report("CanonicalOrderProp")

    @invariant()
    def ElasticDeterminismProp(self) -> None:
        """Each global step (rows) or each split's blocks (packing) are the same whatever the topology."""
        if self.session is not None and self.model is not None and self.model.packing is None:
            lineage, _ = self._lineage()
            self._check_steps(lineage, f"lineage of {self.session.origin}")
        self._report("ElasticDeterminismProp")

    @invariant()
    def ResumeEquivalenceProp(self) -> None:
        """A checkpoint is exact, and resuming it continues the uninterrupted run."""
        self._report("ResumeEquivalenceProp")

    @invariant()
    def ExactlyOnceProp(self) -> None:
        """Across checkpoints and resumes no row is delivered twice or skipped over."""
        if self.session is not None and self.model is not None and self.model.packing is None:
            lineage, finished = self._lineage()
            rows = [item for split in lineage for item in split if isinstance(item, Yielded)]
            model = self.model
            self._guard(lambda: inv.ExactlyOnceProp(model.perm, model.faults, rows, finished))
        self._report("ExactlyOnceProp")

    @invariant()
    def MergeExactProp(self) -> None:
        """Merging every slot's latest checkpoint gives the job's true progress."""
        self._report("MergeExactProp")

    @invariant()
    def ConsumerCommitProp(self) -> None:
        """``StreamingDataLoader`` checkpoints count exactly the batches the trainer received."""
        self._report("ConsumerCommitProp")

    @invariant()
    def PackingBudgetProp(self) -> None:
        """Every split emits exactly ``blocks_per_epoch / S`` blocks of ``pack_sequences`` tokens."""
        self._report("PackingBudgetProp")

    @invariant()
    def RaisePositionProp(self) -> None:
        """A raising row surfaces after every row before its cycle, never earlier."""
        self._report("RaisePositionProp")


class StreamingMachine(DifferentialMachine):
    """The full machine: slots iterated independently, checkpoints, merges and resumes on any topology,
    ``StreamingDataLoader`` runs and new epochs."""

    extra_epochs: ClassVar[int] = 2
    """How many times ``new_epoch`` may run in one example."""

    @rule(slot=st.integers(0, 63), count=st.integers(1, 24))
    def consume(self, slot: int, count: int) -> None:
        """Take up to ``count`` items from one slot's iterator (ranks need not stay in step)."""
        session = self.session
        assert session is not None
        target = session.slots[slot % len(session.slots)]
        before = len(target.delivered)
        self._advance(session, target, count)
        note(
            f"{target.label} owns {target.owned}: items {before}..{len(target.delivered)} "
            f"{target.delivered[before:]!r}, finished={target.finished}"
        )

    @rule(target=CHECKPOINTS, slot=st.integers(0, 63))
    def take_checkpoint(self, slot: int) -> Entry:
        """``state_dict()`` of one slot (when the spec allows it)."""
        session = self.session
        assert session is not None
        chosen = session.slots[slot % len(session.slots)]
        recorded = self._snapshot(session, chosen)
        note(f"checkpoint of {chosen.label}: {None if recorded is None else recorded.state!r}")
        return recorded or Missing(chosen.label)

    @rule(target=CHECKPOINTS)
    def merge_latest(self) -> Entry:
        """Merge the latest checkpoint of every slot (taking one now where a slot has none)."""
        session = self.session
        assert session is not None
        recorded = self._merge(session)
        note(f"merged: {None if recorded is None else recorded.state!r}")
        return recorded or Missing("merge")

    @rule(checkpoint=CHECKPOINTS, plan=session_plans(), via_json=st.booleans())
    def resume(self, checkpoint: Entry, plan: SessionPlan, via_json: bool) -> None:
        """Load a checkpoint into fresh datasets on another topology and continue from there."""
        if isinstance(checkpoint, Missing):
            note(f"{checkpoint!r}: nothing to resume")
            return
        fitted = self._fit(plan)
        self._close_session()
        self.session = self._resumed_session(fitted, checkpoint, via_json)
        note(f"resumed {checkpoint!r} on {fitted!r} (json={via_json}); start {self.session.origin}")

    @rule(slot=st.integers(0, 63))
    def drain(self, slot: int) -> None:
        """Run one slot's iterator to its end."""
        self.consume(slot, 100_000)

    def _may_start_epoch(self) -> bool:
        return (
            self.cfg is not None
            and self.model is not None
            and self.model.number < self.cfg.epoch + self.extra_epochs
        )

    @precondition(_may_start_epoch)
    @rule(plan=session_plans(), use_set_epoch=st.booleans())
    def new_epoch(self, plan: SessionPlan, use_set_epoch: bool) -> None:
        """Start the next epoch: ``set_epoch`` on the datasets when possible, else fresh datasets."""
        assert self.cfg is not None and self.model is not None and self.session is not None
        old = self.session
        fitted = self._fit(plan)
        self._close_session()
        self.model = _epoch_model(self.cfg, self.tables, self.model.number + 1)
        moved = False
        if use_set_epoch and all(slot.dataset is not None for slot in old.slots):
            fitted = old.plan
            try:
                moved = all(
                    self.implementation.set_epoch(slot.dataset, self.model.number)
                    for slot in old.slots
                    if slot.dataset is not None
                )
            except Exception as error:
                self._fail("CanonicalOrderProp", f"set_epoch({self.model.number}) raised {_describe(error)}")
        if moved:
            model = self.model
            slots = [
                self._slot(fitted, s.rank, s.worker, s.dataset, model.initial(), model.initial(), False)
                for s in old.slots
            ]
            self.session = Session(fitted, model, slots, model.empty_history(), "set_epoch")
        else:
            self.session = self._fresh_session(fitted, "new epoch")
        note(
            f"epoch {self.model.number} via {self.session.origin} on {fitted!r}; "
            f"permutation {self.model.perm!r}"
        )


def _packed_split(state: PackedState, split: int) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    buffer = state.buffer(split)
    return state.emitted[split], state.consumed[split], buffer.tokens, buffer.starts


class RowMachine(StreamingMachine):
    """Row mode only."""

    @initialize(config=machine_configs(packing=False), plan=session_plans())
    def setup(self, config: MachineConfig, plan: SessionPlan) -> None:
        """Build the table and the spec's view of the first epoch; start a fresh session."""
        self._setup(config, plan)


class PackedMachine(StreamingMachine):
    """Sequence packing only."""

    @initialize(config=machine_configs(packing=True), plan=session_plans())
    def setup(self, config: MachineConfig, plan: SessionPlan) -> None:
        """Build the table and the spec's view of the first epoch; start a fresh session."""
        self._setup(config, plan)


class ProcessMachine(DifferentialMachine):
    """``StreamingDataLoader`` runs only, each with two real worker processes (spawn); row mode.

    Every rule starts worker processes, so keep examples few. Checkpoints come
    only from committed loader state (workers report exact lower bounds), and
    transforms skip but never raise, so a conforming run has nothing to forgive.
    """

    loader_workers = 2

    @initialize(
        config=machine_configs(packing=False, splits_multiple_of=2, modes=("none", "skip", "warn")),
        plan=session_plans(),
    )
    def setup(self, config: MachineConfig, plan: SessionPlan) -> None:
        """Build the table and the spec's view of the first epoch; start a fresh session."""
        self._setup(config, plan)


# ---------------------------------------------------------------- running


@contextlib.contextmanager
def _shrink_limit(seconds: int | None) -> Iterator[None]:
    """Bound Hypothesis's shrinking time (an engine constant, not a public setting)."""
    if seconds is None or not hasattr(_engine, "MAX_SHRINKING_SECONDS"):
        yield
        return
    saved = _engine.MAX_SHRINKING_SECONDS
    _engine.MAX_SHRINKING_SECONDS = seconds
    try:
        yield
    finally:
        _engine.MAX_SHRINKING_SECONDS = saved


_INVARIANT_CALL = re.compile(r"state\.[A-Z][A-Za-z]*(Inv|Prop)\(\)")


def _violation(error: BaseException | None, seen: set[int] | None = None) -> inv.InvariantViolation | None:
    """The :class:`InvariantViolation` inside ``error`` (grouped, as its cause, or as its context)."""
    seen = set() if seen is None else seen
    if error is None or id(error) in seen:
        return None
    seen.add(id(error))
    if isinstance(error, inv.InvariantViolation):
        return error
    inner: list[BaseException | None] = list(getattr(error, "exceptions", None) or ())
    inner += [error.__cause__, error.__context__]
    for candidate in inner:
        found = _violation(candidate, seen)
        if found is not None:
            return found
    return None


def check_invariants(
    machine: type[DifferentialMachine],
    implementation: Implementation,
    tables: TableCache,
    *,
    settings_: settings | None = None,
    shrink: bool | Collection[str] = True,
    shrink_seconds: int | None = None,
) -> dict[str, str | None]:
    """Run ``machine`` against ``implementation``; report every checked invariant.

    A first run (generation only) records, without stopping, the first
    violation of every name. Then each violated name selected by ``shrink``
    (``True``: all of them) is searched again with only that name enforced, so
    Hypothesis shrinks it to a minimal program, which is appended to the text.

    Args:
        machine: :class:`RowMachine`, :class:`PackedMachine`, :class:`ProcessMachine`
            or another subclass of :class:`DifferentialMachine`.
        implementation: the implementation under test (see :mod:`.adapters`).
        tables: where the test tables live (reused across examples).
        settings_: Hypothesis settings (``max_examples``, ``stateful_step_count``,
            ``derandomize``...); the default profile when omitted.
        shrink: which violations to shrink.
        shrink_seconds: stop shrinking each violation after this long and report the
            smallest program found so far (Hypothesis's own limit is five minutes;
            every replay runs the implementation for real, so shrinking is the
            expensive part of a run).

    Returns:
        ``{name: None}`` for every name in :data:`CHECKED` that held and
        ``{name: text}`` for every violation.
    """
    base = settings_ if settings_ is not None else settings()
    observed: dict[str, str] = {}
    explore = machine.bind(implementation, tables, enforced=frozenset(), observed=observed)
    run_state_machine_as_test(
        explore, settings=settings(base, phases=(Phase.explicit, Phase.generate), database=None)
    )
    results: dict[str, str | None] = {name: observed.get(name) for name in CHECKED}
    selected = set(observed) if shrink is True else set(observed) & set(shrink or ())
    for name in sorted(selected):
        reported: list[object] = []
        try:
            _search_enforcing(machine, implementation, tables, name, base, shrink_seconds, reported)
        except Exception as error:
            found = _violation(error)
            if found is None:
                raise
            results[name] = _shrunk_counterexample(found, error, reported)
        else:
            results[name] = f"{observed[name]}\n(not reproduced when searching again; not shrunk)"
    return results


def _search_enforcing(
    machine: type[DifferentialMachine],
    implementation: Implementation,
    tables: TableCache,
    name: str,
    base: settings,
    shrink_seconds: int | None,
    reported: list[object],
) -> None:
    """Search again with only ``name`` enforced, so Hypothesis shrinks its violation (raised).

    Hypothesis's report lines go to ``reported``; shrinking stops after ``shrink_seconds``.
    """
    bound = machine.bind(implementation, tables, enforced=frozenset({name}))
    with _shrink_limit(shrink_seconds), with_reporter(reported.append):
        run_state_machine_as_test(bound, settings=settings(base, database=None, report_multiple_bugs=False))


def _shrunk_counterexample(
    found: inv.InvariantViolation, error: BaseException, reported: list[object]
) -> str:
    """The violation's text, then the program Hypothesis shrank it to (from the error's notes)."""
    notes = list(getattr(found, "__notes__", []) or getattr(error, "__notes__", []))
    program: list[str] = []
    for line in notes:
        if line.startswith("Explanation:"):
            break
        if not _INVARIANT_CALL.fullmatch(line):
            program.append(line)
    remarks = " (flaky: did not fail on every replay)" if isinstance(error, FlakyFailure) else ""
    if any("shrink" in str(line) for line in reported):
        remarks += " (shrinking stopped at its time limit; the program may not be minimal)"
    return f"{found.detail}{remarks}\n" + "\n".join(program)


__all__ = [
    "CHECKED",
    "CHECKPOINTS",
    "DifferentialMachine",
    "EpochModel",
    "FaultPlan",
    "LoaderPlan",
    "MachineConfig",
    "Missing",
    "PackedMachine",
    "PackingPlan",
    "ProcessMachine",
    "Recorded",
    "RowMachine",
    "SessionPlan",
    "SimulatedWorker",
    "StreamingMachine",
    "check_invariants",
    "loader_plans",
    "machine_configs",
    "session_plans",
]
