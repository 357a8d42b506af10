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
  implementation was actually given (``load_for_rank``, projections replayed),
  and the slot's expected items are :func:`~elastic_loader.spec.iterate_rows` /
  ``iterate_packed`` from there;
* a slot's ``state_dict()`` must be the spec's ``rank_checkpoint`` of what the
  slot delivered since it loaded (one pass of single items; a simulated worker
  reports only its own splits), compared as :mod:`.checkpoints` says;
* the *truth* of a session is where the job really is (every split at its
  owner's progress), and the *history* of a lineage is what a trainer received
  since the epoch started, per split, carried along through checkpoints, merges
  and save protocols (:mod:`.protocols`); both are judged only while they
  describe the job (:mod:`.sessions` says when).

The comparisons are the judges' (:mod:`.judges`, :mod:`.checkpoints`); they
record every discrepancy under the name of the invariant it breaks. One
``@invariant`` method per name of :data:`~.judges.DIFFERENTIAL_CHECKED` (made from
:data:`~.judges.JUDGES`) runs that name's lineage check and raises its violation
after the step, so Hypothesis shrinks to a minimal program. Names not in
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
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ...spec import (
    CheckpointGate,
    Pass,
    SpecError,
    Topology,
    gate_check_state_dict,
    owned_splits,
)
from ...spec.saved import EXTRA_KEY, Saved, merge_saved, snapshot_saved
from ..adapters import DatasetLike, Implementation, State, accepts
from ..tables import TOKEN_COLUMN, FaultyTransform, TableCache
from . import checkpoints, judges, loader, protocols
from .judges import DIFFERENTIAL_CHECKED, JUDGES, Verdicts
from .model import (
    EpochModel,
    History,
    ModelState,
    assemble,
    attempt,
    describe,
    epoch_model,
    items_of,
    note,
    state_after,
)
from .observe import decode_item
from .plans import (
    DRAWN_PERMUTATIONS,
    PERMUTATIONS,
    LoaderPlan,
    MachineConfig,
    ProtocolName,
    SessionPlan,
    SimulatedWorker,
    loader_plans,
    machine_configs,
    session_plans,
)
from .sessions import CHECKPOINTS, Entry, Missing, Recorded, Session, Slot, close_iterator, lineage


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
    enforced: ClassVar[frozenset[str]] = frozenset(DIFFERENTIAL_CHECKED)
    """Names whose violation fails the example; the others are only recorded."""
    observed: ClassVar[dict[str, str] | None] = None
    """When set, the first violation text of every name, across all examples of a run."""
    loader_workers: ClassVar[int] = 0
    """``num_workers`` of the ``StreamingDataLoader`` rules (0: in-process)."""
    max_world_size: ClassVar[int] = 4
    """The largest topology a session or loader session is fitted to."""

    def __init__(self) -> None:
        super().__init__()
        kinds = PERMUTATIONS if accepts(self.implementation, "permutation") else ("builder",)
        self._kinds = DRAWN_PERMUTATIONS.set(kinds)  # before the first rule draws its config
        self.verdicts = Verdicts(self.observed)
        self.cfg: MachineConfig | None = None
        self.model: EpochModel | None = None
        self.session: Session | None = None
        self.table: object = None
        self.provenance: bool | None = None
        """Whether the implementation's checkpoints carry the provenance key (its first one says)."""

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
            "enforced": frozenset(DIFFERENTIAL_CHECKED) if enforced is None else enforced,
            "observed": observed,
            "__qualname__": cls.__qualname__,
            "__doc__": f"{cls.__doc__}\n\nBound to {implementation.name}.",
        }
        return type(cls.__name__, (cls,), attrs)

    def fail(self, name: str, detail: str) -> None:
        self.verdicts.fail(name, detail)

    def spec_model(self) -> EpochModel:
        assert self.model is not None
        return self.model

    def writes_provenance(self, state: Mapping[str, object], where: str) -> bool:
        """Whether the implementation writes the provenance key, as its first checkpoint says; a later
        checkpoint that differs breaks the format."""
        has = EXTRA_KEY in state
        if self.provenance is None:
            self.provenance = has
        elif has != self.provenance:
            self.fail(
                "CheckpointRoundTripInv",
                f"{where}: {'holds' if has else 'lacks'} the {EXTRA_KEY!r} key, unlike the first checkpoint",
            )
        return self.provenance

    # ------------------------------------------------------------ building

    def _params(self, plan: SessionPlan, rank: int, worker: SimulatedWorker | None) -> dict[str, object]:
        cfg, model = self.cfg, self.spec_model()
        assert cfg is not None
        params: dict[str, object] = {
            "num_splits": cfg.num_splits,
            "shuffle_seed": cfg.shuffle_seed,
            "epoch": model.number,
            "rank": rank,
            "world_size": plan.world_size,
            "read_batch_size": plan.read_batch_size,
            "io_queue_depth": plan.io_queue_depth,
            "transform_parallelism": plan.transform_parallelism,
        }
        params.update(cfg.permutation_params())
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

    def new_dataset(self, plan: SessionPlan, rank: int, worker: SimulatedWorker | None) -> DatasetLike | None:
        params = self._params(plan, rank, worker)
        try:
            return self.implementation.dataset(self.table, **params)
        except Exception as error:
            self.fail("CanonicalOrderProp", f"StreamingDataset(table, **{params!r}) raised {describe(error)}")
            return None

    def _slot(
        self,
        plan: SessionPlan,
        where: tuple[int, int, bool],
        dataset: DatasetLike | None,
        saved: Saved,
        true_saved: Saved,
        truth: ModelState,
        resumed: bool,
    ) -> Slot:
        """The slot of (rank, worker, simulated) ``where``, started from ``saved`` (the spec's reading of
        what it loaded); the conforming chain gave it ``true_saved``; the job is at ``truth``."""
        model = self.spec_model()
        rank, worker, simulated = where
        owned = owned_splits(
            model.config.num_splits, Topology(plan.world_size, rank, plan.num_workers, worker)
        )
        start = attempt(lambda: model.resolved(saved, owned))
        begin = saved.state if isinstance(start, SpecError) else start
        return Slot(
            rank,
            worker,
            owned,
            dataset,
            saved,
            true_saved,
            begin,
            truth,
            start if isinstance(start, SpecError) else attempt(lambda: model.run(owned, begin)),
            attempt(lambda: model.run(owned, truth)),
            resumed,
            simulated,
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
        model = self.spec_model()
        fresh = model.fresh()
        slots = [
            self._slot(
                plan,
                (r, w, info is not None),
                self.new_dataset(plan, r, info),
                fresh,
                fresh,
                fresh.state,
                False,
            )
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

    def fit_plan(self, plan: SessionPlan) -> SessionPlan:
        assert self.cfg is not None
        capped = replace(plan, world_size=min(plan.world_size, self.max_world_size))
        return capped.fit(self.cfg.num_splits, max(1, self.loader_workers))

    # ------------------------------------------------------------ rules

    @initialize(config=machine_configs(), plan=session_plans())
    def setup(self, config: MachineConfig, plan: SessionPlan) -> None:
        """Build the table and the spec's view of the first epoch; start a fresh session."""
        self._setup(config, plan)

    def _setup(self, config: MachineConfig, plan: SessionPlan) -> None:
        if config.permutation != "builder" and not accepts(self.implementation, "permutation"):
            config = replace(config, permutation="builder", clump=1, window=1)  # e.g. the reference
        self.cfg = config
        self.table = self.tables.table(config.table_key)
        self.model = epoch_model(config, self.tables, config.epoch)
        fitted = self.fit_plan(plan)
        note(f"config {config!r}; session {fitted!r}; permutation {self.model.perm!r}")
        self.session = self._fresh_session(fitted, "start")

    @rule(target=CHECKPOINTS, plan=loader_plans())
    def loader_from_start(self, plan: LoaderPlan) -> Entry:
        """A lockstep ``StreamingDataLoader`` session of every rank from the start of the epoch."""
        return loader.run(self, None, plan, False) or Missing("loader")

    @rule(target=CHECKPOINTS, checkpoint=CHECKPOINTS, plan=loader_plans(), via_json=st.booleans())
    def loader_from_checkpoint(self, checkpoint: Entry, plan: LoaderPlan, via_json: bool) -> Entry:
        """A lockstep ``StreamingDataLoader`` session of every rank, resumed from a checkpoint by the
        plan's save protocol."""
        if isinstance(checkpoint, Missing):
            note(f"{checkpoint!r}: nothing to load")
            return Missing("loader")
        return loader.run(self, checkpoint, plan, via_json) or Missing("loader")

    def teardown(self) -> None:
        """Close every live iterator (the pipelines own threads); the drawn kinds go back."""
        self._close_session()
        DRAWN_PERMUTATIONS.reset(self._kinds)

    # ------------------------------------------------------------ consuming

    def _advance(self, session: Session, slot: Slot, count: int) -> None:
        if slot.finished is not None or slot.dataset is None:
            return
        model = self.spec_model()
        where = f"{slot.label} ({session.origin})"
        if slot.iterator is None:
            try:
                slot.iterator = iter(slot.dataset)
            except Exception as error:
                self._on_end(slot, error, where)
                return
        spec_items = () if isinstance(slot.expected, SpecError) else items_of(slot.expected)
        for _ in range(count):
            try:
                raw = next(slot.iterator)
            except StopIteration:
                self._on_end(slot, None, where)
                break
            except Exception as error:
                self._on_end(slot, error, where)
                break
            item = decode_item(model, slot.owned, len(slot.delivered), raw, spec_items)
            if isinstance(item, str):
                packed = model.packing is not None
                self.fail("PackingConservationInv" if packed else "CanonicalOrderProp", f"{where}: {item}")
                slot.finished = "broken"
                break
            k = len(slot.delivered)
            judges.judge_item(self.verdicts, slot.owned, k, item, False, slot.expected, where)
            if slot.resumed and session.lineage:
                judges.judge_item(self.verdicts, slot.owned, k, item, True, slot.true_run, where)
            slot.delivered.append(item)
        judges.judge_catch_up(self.verdicts, slot)

    def _on_end(self, slot: Slot, error: Exception | None, where: str) -> None:
        """The iterator stopped (``error=None``) or raised ``error`` after ``len(delivered)`` items."""
        slot.iterator = None
        slot.finished = judges.judge_end(self.verdicts, self.spec_model(), slot, error, where)

    # ------------------------------------------------------------ checkpoints

    def take_state_dict(
        self, dataset: DatasetLike, gate: CheckpointGate, where: str
    ) -> Mapping[str, object] | None:
        """``state_dict()`` when the spec's gate allows it (a refusal must match the spec's; refusing a
        checkpoint after any batch breaks ``SameTopologyResumeProp``, D23)."""
        refusal = attempt(lambda: gate_check_state_dict(gate))
        name = "SameTopologyResumeProp"
        try:
            state: Mapping[str, object] = dataset.state_dict()
        except Exception as error:
            judges.judge_state_dict(self.verdicts, refusal, error, name, where)
            return None
        if not judges.judge_state_dict(self.verdicts, refusal, state, name, where):
            return None
        return copy.deepcopy(state)

    def _slot_checkpoint(self, session: Session, slot: Slot, true: bool) -> Saved:
        """The spec's checkpoint of ``slot`` after what it delivered: from what it loaded, or (``true``)
        in the conforming chain from the job's truth."""
        model = self.spec_model()
        k = len(slot.delivered)
        touched = frozenset(slot.owned) if k else frozenset()
        passes = (Pass(0, 1, k),)
        if true:
            committed, start = state_after(slot.true_run, slot.truth, k), slot.true_saved
        else:
            committed, start = state_after(slot.expected, slot.start, k), slot.saved
        partial = slot.owned if slot.simulated else None
        return model.checkpoint(
            start, committed, touched, passes, session.plan.world_size, slot.rank, partial
        )

    def _session_truth(self, session: Session) -> ModelState:
        """Where the job is: every split at its owner slot's true progress."""
        return assemble(
            [
                (state_after(slot.true_run, slot.truth, len(slot.delivered)), slot.owned)
                for slot in session.slots
            ]
        )

    def _snapshot(self, session: Session, slot: Slot) -> Recorded | None:
        model = self.spec_model()
        if slot.dataset is None:
            return None
        where = f"checkpoint of {slot.label} after {len(slot.delivered)} items"
        state = self.take_state_dict(slot.dataset, CheckpointGate(), where)
        if state is None:
            return None
        expected = self._slot_checkpoint(session, slot, False)
        provenance = self.writes_provenance(state, where)
        checkpoints.judge_checkpoint(
            self.verdicts,
            model,
            state,
            expected,
            slot.saved,
            slot.owned,
            "ResumeEquivalenceProp",
            where,
            provenance,
        )
        true = self._slot_checkpoint(session, slot, True)
        truth = self._session_truth(session)
        splits, _ = lineage(session)
        history: History = tuple(tuple(items) for items in splits)
        label = f"{slot.label}@{len(slot.delivered)} epoch {model.number}"
        sound = session.lineage and model.agrees(true, truth)
        recorded = Recorded(
            label, model.number, state, truth, history, true, session.lineage, sound, chain=session.chain
        )
        slot.latest = recorded
        return recorded

    # ------------------------------------------------------------ merging

    def impl_merge(self, states: Sequence[Mapping[str, object]]) -> State | Exception:
        try:
            return self.implementation.merge_state_dicts([copy.deepcopy(dict(s)) for s in states])
        except Exception as error:
            return error

    def _merge(self, session: Session) -> Recorded | None:
        """Merge the latest checkpoint of every slot (taking one now where a slot has none)."""
        model = self.spec_model()
        records: list[Recorded] = []
        for slot in session.slots:
            record = slot.latest if slot.latest is not None else self._snapshot(session, slot)
            if record is None:
                note(f"no checkpoint from {slot.label}: nothing to merge")
                return None
            records.append(record)
        states = [r.state for r in records]
        merged = self.impl_merge(states)
        owners = [(r.state, slot.owned) for slot, r in zip(session.slots, records)]
        truth = assemble([(r.truth, slot.owned) for slot, r in zip(session.slots, records)])
        true_dicts = [snapshot_saved(r.expected) for r in records]
        protocols.judge_merges(self, states, merged, owners, true_dicts, truth, session.lineage, "merge")
        if isinstance(merged, Exception):
            return None
        history = list(model.empty_history())
        for slot, record in zip(session.slots, records):
            for s in slot.owned:
                history[s] = record.history[s]
        expected = merge_saved([r.expected for r in records])
        label = f"merge of {len(records)} epoch {model.number}"
        return Recorded(
            label,
            model.number,
            merged,
            truth,
            tuple(history),
            expected,
            session.lineage,
            session.lineage,
            chain=session.chain,
        )

    # ------------------------------------------------------------ loading

    def load_checkpoint(
        self,
        dataset: DatasetLike,
        payload: Mapping[str, object],
        world_size: int,
        rank: int,
        record: Recorded,
        where: str,
    ) -> Saved | None:
        """Load ``payload`` (a copy of what ``record`` holds) into ``dataset`` of ``rank``; the result is
        the spec's reading, ``None`` when it is refused (which must match the spec's refusal)."""
        model = self.spec_model()
        spec = attempt(lambda: model.read(payload, world_size, rank))
        try:
            dataset.load_state_dict(dict(payload))
        except Exception as error:
            checkpoints.judge_load(self.verdicts, spec, error, record, where)
            return None
        if not checkpoints.judge_load(self.verdicts, spec, None, record, where):
            return None
        assert not isinstance(spec, SpecError)
        return spec

    def check_reload(
        self,
        dataset: DatasetLike,
        plan: SessionPlan,
        rank: int,
        loaded: Saved,
        owned: Sequence[int],
        simulated: bool,
        where: str,
    ) -> None:
        """After a load, ``state_dict()`` answers the spec's checkpoint of a session that did nothing."""
        model = self.spec_model()
        state = self.take_state_dict(dataset, CheckpointGate(), where)
        if state is None:
            return
        partial = owned if simulated else None
        expected = model.checkpoint(loaded, loaded.state, frozenset(), (), plan.world_size, rank, partial)
        checkpoints.judge_checkpoint(
            self.verdicts,
            model,
            state,
            expected,
            loaded,
            owned,
            "CheckpointRoundTripInv",
            f"{where}: state_dict() after the load",
            self.writes_provenance(state, where),
        )

    def _resumed_session(
        self, plan: SessionPlan, record: Recorded, via_json: bool, protocol: ProtocolName
    ) -> Session:
        """Every slot of ``plan`` loads what ``protocol`` gives its rank from ``record``; a refusal
        starts a fresh session instead."""
        given = protocols.starts(self, record, protocol)
        if given is None:
            return self._fresh_session(plan, f"fresh ({record!r} not merged)")
        if given.world_size is not None and given.world_size != plan.world_size:
            plan = self.fit_plan(replace(plan, world_size=given.world_size))
        slots: list[Slot] = []
        for r, w, info in self._topology(plan):
            where = f"resume {record!r} ({given.protocol}) on rank {r} worker {w}"
            dataset = self.new_dataset(plan, r, info)
            raw = given.payload(r)
            payload = json.loads(json.dumps(raw)) if via_json else copy.deepcopy(dict(raw))
            loaded = (
                None
                if dataset is None
                else self.load_checkpoint(dataset, payload, plan.world_size, r, record, where)
            )
            if loaded is None:
                return self._fresh_session(plan, f"fresh ({record!r} rejected)")
            assert dataset is not None
            true_saved = protocols.true_start(self, given, r, plan.world_size, record.truth)
            slot = self._slot(plan, (r, w, info is not None), dataset, loaded, true_saved, record.truth, True)
            self.check_reload(dataset, plan, r, loaded, slot.owned, slot.simulated, where)
            slots.append(slot)
        origin = f"from {record!r} ({given.protocol})"
        return Session(
            plan, self.spec_model(), slots, record.history, origin, given.lineage, record.chain + 1
        )


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


for _name in DIFFERENTIAL_CHECKED:
    setattr(DifferentialMachine, _name, _invariant(_name))
