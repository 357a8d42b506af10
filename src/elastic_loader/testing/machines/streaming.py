"""The full machines: every slot of a topology iterated on its own, in process.

:class:`StreamingMachine` adds to :class:`~.differential.DifferentialMachine`
the rules that consume from one slot or from every slot in lockstep,
checkpoint one slot or every slot at once, merge the latest checkpoints of all
slots, resume a checkpoint on another topology by a save protocol and start a
new epoch. :class:`RowMachine` draws row-mode configurations only,
:class:`PackedMachine` packing ones.

Rules of this module: rules only orchestrate (the judging is in
:mod:`.judges`, the bookkeeping in :mod:`.differential`); slot numbers are
drawn modulo the session's slot count, so every draw is valid on any topology.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from ...spec import SpecError
from ...spec.saved import Saved
from . import checkpoints, protocols
from .differential import DifferentialMachine
from .model import attempt, describe, epoch_model, items_of, note
from .plans import (
    MachineConfig,
    ProtocolName,
    SessionPlan,
    machine_configs,
    protocols as protocol_names,
    session_plans,
)
from .sessions import CHECKPOINTS, Entry, Missing, Session, Slot


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

    @rule(count=st.integers(1, 24))
    def consume_lockstep(self, count: int) -> None:
        """Every slot takes the same number of items: ``count``, or what the slot that can deliver the
        fewest still can, as ``sync_epoch_end`` does (a slot's own count per the spec's run)."""
        session = self.session
        assert session is not None
        n = min([count, *(_remaining(slot) for slot in session.slots)])
        for target in session.slots:
            self._advance(session, target, n)
        totals = [len(target.delivered) for target in session.slots]
        note(f"lockstep: every slot took {n} items; delivered {totals}")

    @rule(target=CHECKPOINTS, saver=st.integers(0, 63))
    def save_all(self, saver: int) -> Entry:
        """``state_dict()`` of every slot at once; the saver's is kept, with the others beside it when
        every slot is a rank (a group: merge all, or each its own). In lockstep, every rank's
        checkpoint must infer the others'."""
        session = self.session
        assert session is not None
        records = [self._snapshot(session, slot) for slot in session.slots]
        if any(r is None for r in records):
            note("save_all: a slot has no checkpoint")
            return Missing("save_all")
        kept = [r for r in records if r is not None]
        chosen = saver % len(kept)
        record = kept[chosen]
        if session.plan.num_workers == 0:
            parsed = [attempt_parse(self, r.state) for r in kept]
            started = session.lineage and all(
                self.spec_model().agrees(s.saved, s.truth) for s in session.slots
            )
            if started and all(p is not None for p in parsed):
                taken = [len(slot.delivered) for slot in session.slots]
                where = f"save_all of {session.origin}"
                checkpoints.judge_lockstep(
                    self.verdicts, self.spec_model(), [p for p in parsed if p], taken, where
                )
            record = replace(
                record,
                label=f"{record.label} (of all)",
                group=tuple(r.state for r in kept),
                true_group=tuple(r.expected for r in kept),
            )
        protocols.probe(self, session.plan, session.slots[chosen].rank, record, "save_all")
        note(f"saved every slot; kept {record!r}: {record.state!r}")
        return record

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

    @rule(checkpoint=CHECKPOINTS, plan=session_plans(), via_json=st.booleans(), protocol=protocol_names())
    def resume(self, checkpoint: Entry, plan: SessionPlan, via_json: bool, protocol: ProtocolName) -> None:
        """Load a checkpoint into fresh datasets on another topology, by a save protocol, and continue."""
        if isinstance(checkpoint, Missing):
            note(f"{checkpoint!r}: nothing to resume")
            return
        fitted = self.fit_plan(plan)
        self._close_session()
        self.session = self._resumed_session(fitted, checkpoint, via_json, protocol)
        note(
            f"resumed {checkpoint!r} on {self.session.plan!r} (json={via_json}, {protocol}); "
            f"start {self.session.origin}, lineage judged: {self.session.lineage}"
        )

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
        fitted = self.fit_plan(plan)
        self._close_session()
        self.model = epoch_model(self.cfg, self.tables, self.model.number + 1)
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
                self.fail("CanonicalOrderProp", f"set_epoch({self.model.number}) raised {describe(error)}")
        if moved:
            model = self.model
            fresh = model.fresh()
            slots = [
                self._slot(
                    fitted, (s.rank, s.worker, s.simulated), s.dataset, fresh, fresh, fresh.state, False
                )
                for s in old.slots
            ]
            self.session = Session(fitted, model, slots, model.empty_history(), "set_epoch")
        else:
            self.session = self._fresh_session(fitted, "new epoch")
        note(
            f"epoch {self.model.number} via {self.session.origin} on {fitted!r}; "
            f"permutation {self.model.perm!r}"
        )


def _remaining(slot: Slot) -> int:
    """Items the spec's run of ``slot`` still yields (0 once the slot finished)."""
    if slot.finished is not None or isinstance(slot.expected, SpecError):
        return 0
    return max(0, len(items_of(slot.expected)) - len(slot.delivered))


def attempt_parse(machine: DifferentialMachine, state: Mapping[str, object]) -> Saved | None:
    """The spec's reading of a checkpoint the implementation wrote (``None``: it cannot read it,
    which was judged when it was written)."""
    parsed = attempt(lambda: machine.spec_model().parse(state))
    return None if isinstance(parsed, SpecError) else parsed


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
