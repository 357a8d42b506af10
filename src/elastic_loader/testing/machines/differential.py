"""The differential machine: an implementation under test and the spec, side by side.

Theory of operation
-------------------
:class:`DifferentialMachine` draws one configuration (table, splits, faults,
packing) in ``@initialize`` and then applies rules to a *session*: one fresh
dataset per (rank, worker) *slot* of a topology, every slot iterated on its own
(ranks need not stay in step; workers are simulated with
``worker_info_override``). For every operation the machine asks the executable
spec what must happen, from the same inputs:

* the *start* of a slot is the spec's reading of the checkpoint the
  implementation was actually given, and the slot's expected items are
  :func:`~elastic_loader.spec.iterate_rows` / ``iterate_packed`` from there;
* the *truth* of a slot is where the job really is (the spec's own state for
  the same history), so a wrong checkpoint shows up when it is resumed;
* the *history* of a lineage is what a trainer received since the epoch
  started, per split, carried along through checkpoints and merges.

The comparisons are the judges' (:mod:`.judges`); they record every
discrepancy under the name of the invariant it breaks. One ``@invariant``
method per name of :data:`~.judges.CHECKED` (made from :data:`~.judges.JUDGES`)
runs that name's lineage check and raises its violation after the step, so
Hypothesis shrinks to a minimal program. Names not in
:attr:`DifferentialMachine.enforced` are recorded without raising, which lets
:func:`~.runner.check_invariants` report every invariant in one run and shrink
each violation separately.

Rules of this module: the spec is called only on inputs it accepts (every
call on implementation data is guarded); every rule calls ``note()``; rule
arguments are plain values or frozen dataclasses whose repr is valid Python;
what Hypothesis draws never depends on how the implementation behaved (see
:class:`~.sessions.Missing`), so timing differences cannot make data
generation flaky. Rule and invariant names are part of printed programs: keep
them.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ...spec import (
    CheckpointGate,
    SpecError,
    Topology,
    gate_check_state_dict,
    merge_state_dicts,
    owned_splits,
    rank_splits,
)
from ..adapters import DatasetLike, Implementation, State
from ..tables import TOKEN_COLUMN, FaultyTransform, TableCache
from . import judges, loader
from .judges import CHECKED, JUDGES, Verdicts
from .model import (
    EpochModel,
    ModelState,
    attempt,
    describe,
    epoch_model,
    note,
    state_after,
)
from .observe import decode_item
from .plans import (
    LoaderPlan,
    MachineConfig,
    SessionPlan,
    SimulatedWorker,
    loader_plans,
    machine_configs,
    session_plans,
)
from .sessions import CHECKPOINTS, Entry, Missing, Recorded, Session, Slot, close_iterator


class DifferentialMachine(RuleBasedStateMachine):
    """Drive an implementation and the spec side by side; compare after every step.

    This base class holds the comparison machinery, the invariants and the
    ``StreamingDataLoader`` rules; :class:`~.streaming.StreamingMachine` adds the
    rules that iterate slots, checkpoint, merge, resume and change epochs. Bind
    a machine to an implementation and a table directory with :meth:`bind` (or
    :func:`~.runner.check_invariants`); an unbound class cannot run.
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
        self.verdicts = Verdicts(self.observed)
        self.cfg: MachineConfig | None = None
        self.model: EpochModel | None = None
        self.session: Session | None = None
        self.table: object = None

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
        (``state = RowMachine()`` ...) replays after ``RowMachine = RowMachine.bind(...)``,
        and its module and qualified name, so Hypothesis finds the class's source:
        derandomized runs draw from a seed Hypothesis derives from that source
        (``function_digest``), which keeps the examples of a derandomized run
        the same whoever binds the machine.
        """
        attrs: dict[str, object] = {
            "__module__": cls.__module__,
            "implementation": implementation,
            "tables": tables,
            "enforced": frozenset(CHECKED) if enforced is None else enforced,
            "observed": observed,
            "__qualname__": cls.__qualname__,
            "__doc__": f"{cls.__doc__}\n\nBound to {implementation.name}.",
        }
        return type(cls.__name__, (cls,), attrs)

    def _fail(self, name: str, detail: str) -> None:
        self.verdicts.fail(name, detail)

    def _model(self) -> EpochModel:
        assert self.model is not None
        return self.model

    # ------------------------------------------------------------ building

    def _params(self, plan: SessionPlan, rank: int, worker: SimulatedWorker | None) -> dict[str, object]:
        cfg, model = self.cfg, self._model()
        assert cfg is not None
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
                "CanonicalOrderProp", f"StreamingDataset(table, **{params!r}) raised {describe(error)}"
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
        model = self._model()
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
            attempt(lambda: model.run(owned, start)),
            attempt(lambda: model.run(owned, truth)),
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
        model = self._model()
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
                close_iterator(iterator)
            except Exception as error:
                note(f"closing the iterator of {slot.label} raised {describe(error)}")
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
        self.model = epoch_model(config, self.tables, config.epoch)
        fitted = self._fit(plan)
        note(f"config {config!r}; session {fitted!r}; permutation {self.model.perm!r}")
        self.session = self._fresh_session(fitted, "start")

    @rule(target=CHECKPOINTS, plan=loader_plans())
    def loader_from_start(self, plan: LoaderPlan) -> Entry:
        """Run a ``StreamingDataLoader`` from the start of the epoch; checkpoint its committed state."""
        return loader.run(self, None, plan, False) or Missing("loader")

    @rule(target=CHECKPOINTS, checkpoint=CHECKPOINTS, plan=loader_plans(), via_json=st.booleans())
    def loader_from_checkpoint(self, checkpoint: Entry, plan: LoaderPlan, via_json: bool) -> Entry:
        """Run a ``StreamingDataLoader`` from a checkpoint; checkpoint its committed state."""
        if isinstance(checkpoint, Missing):
            note(f"{checkpoint!r}: nothing to load")
            return Missing("loader")
        return loader.run(self, checkpoint, plan, via_json) or Missing("loader")

    def teardown(self) -> None:
        """Close every live iterator (the pipelines own threads)."""
        self._close_session()

    # ------------------------------------------------------------ consuming

    def _advance(self, session: Session, slot: Slot, count: int) -> None:
        if slot.finished is not None or slot.dataset is None:
            return
        model = self._model()
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
            item = decode_item(model, slot.owned, len(slot.delivered), raw)
            if isinstance(item, str):
                packed = model.packing is not None
                self._fail("PackingConservationInv" if packed else "CanonicalOrderProp", f"{where}: {item}")
                slot.finished = "broken"
                break
            k = len(slot.delivered)
            judges.judge_item(self.verdicts, slot.owned, k, item, False, slot.expected, where)
            if slot.resumed:
                judges.judge_item(self.verdicts, slot.owned, k, item, True, slot.true_run, where)
            slot.delivered.append(item)
        judges.judge_catch_up(self.verdicts, slot)

    def _on_end(self, slot: Slot, error: Exception | None, where: str) -> None:
        """The iterator stopped (``error=None``) or raised ``error`` after ``len(delivered)`` items."""
        slot.iterator = None
        slot.finished = judges.judge_end(self.verdicts, self._model(), slot, error, where)

    # ------------------------------------------------------------ checkpoints

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
        refusal = attempt(lambda: gate_check_state_dict(gate))
        try:
            state: Mapping[str, object] = dataset.state_dict()
        except Exception as error:
            judges.judge_state_dict(self.verdicts, refusal, error, name, where)
            return None
        if not judges.judge_state_dict(self.verdicts, refusal, state, name, where):
            return None
        return copy.deepcopy(state)

    def _snapshot(self, session: Session, slot: Slot) -> Recorded | None:
        model = self._model()
        if slot.dataset is None:
            return None
        where = f"checkpoint of {slot.label} after {len(slot.delivered)} items"
        expected = state_after(slot.expected, slot.start, len(slot.delivered))
        rank_owned = rank_splits(model.config.num_splits, session.plan.world_size, slot.rank)
        state = self._state_dict(
            slot.dataset, CheckpointGate(), expected, rank_owned, "CheckpointRoundTripInv", where
        )
        if state is None:
            return None
        judges.judge_state(
            self.verdicts, model, state, expected, slot.start, slot.owned, "ResumeEquivalenceProp", where
        )
        truth = state_after(slot.true_run, slot.truth, len(slot.delivered))
        history = list(session.history)
        for item in slot.delivered:
            history[item.split] = (*history[item.split], item)
        label = f"{slot.label}@{len(slot.delivered)} epoch {model.number}"
        recorded = Recorded(label, model.number, state, truth, tuple(history))
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
        judges.judge_merge(self.verdicts, self._model(), impl, spec, name, what)

    def _merge(self, session: Session) -> Recorded | None:
        model = self._model()
        records: list[Recorded] = []
        for slot in session.slots:
            record = slot.latest if slot.latest is not None else self._snapshot(session, slot)
            if record is None:
                note(f"no checkpoint from {slot.label}: nothing to merge")
                return None
            records.append(record)
        states = [r.state for r in records]
        merged = self._impl_merge(states)
        self._same_merge(merged, attempt(lambda: merge_state_dicts(states)), "MergeLatticeInv", "merge")
        self._check_lattice(states)
        truths = [model.snapshot(r.truth) for r in records]
        exact = attempt(lambda: merge_state_dicts(truths))
        self._same_merge(merged, exact, "MergeExactProp", "merge of the latest checkpoints")
        if isinstance(merged, Exception) or isinstance(exact, SpecError):
            return None
        truth = attempt(lambda: model.load(exact))
        if isinstance(truth, SpecError):
            return None
        history = list(model.empty_history())
        for slot, record in zip(session.slots, records):
            for s in slot.owned:
                history[s] = record.history[s]
        return Recorded(
            f"merge of {len(records)} epoch {model.number}", model.number, merged, truth, tuple(history)
        )

    def _check_lattice(self, states: list[Mapping[str, object]]) -> None:
        """The merge commutes, is idempotent and associative, as the spec's join is."""
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
                attempt(functools.partial(merge_state_dicts, variant)),
                "MergeLatticeInv",
                what,
            )

    # ------------------------------------------------------------ loading

    def _load(self, dataset: DatasetLike, record: Recorded, via_json: bool, where: str) -> ModelState | None:
        """Load ``record`` into ``dataset``; the result is the spec's reading, ``None`` when rejected."""
        model = self._model()
        payload = json.loads(json.dumps(record.state)) if via_json else copy.deepcopy(dict(record.state))
        spec = attempt(lambda: model.load(payload))
        try:
            dataset.load_state_dict(payload)
        except Exception as error:
            judges.judge_load(self.verdicts, spec, error, record, where)
            return None
        if not judges.judge_load(self.verdicts, spec, None, record, where):
            return None
        assert not isinstance(spec, SpecError)
        return spec

    def _check_reload(
        self, dataset: DatasetLike, plan: SessionPlan, rank: int, loaded: ModelState, where: str
    ) -> None:
        """After a load, ``state_dict()`` answers the loaded checkpoint in canonical form."""
        model = self._model()
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
        model = self._model()
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


def _invariant(name: str) -> Callable[[DifferentialMachine], None]:
    """The ``@invariant`` method named ``name``: its lineage check, then its violation, if enforced."""
    judge = JUDGES[name]

    def check(self: DifferentialMachine) -> None:
        if judge.after_step is not None and self.session is not None and self.model is not None:
            judge.after_step(self.verdicts, self.model, self.session)
        self.verdicts.report(name, self.enforced)

    check.__name__ = name
    check.__qualname__ = f"DifferentialMachine.{name}"
    check.__doc__ = judge.statement
    return invariant()(check)


for _name in CHECKED:
    setattr(DifferentialMachine, _name, _invariant(_name))
