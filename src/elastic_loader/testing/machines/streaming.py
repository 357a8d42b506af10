"""The full machines: every slot of a topology iterated on its own, in process.

:class:`StreamingMachine` adds to :class:`~.differential.DifferentialMachine`
the rules that consume from one slot, checkpoint one slot, merge the latest
checkpoints of all slots, resume a checkpoint on another topology and start a
new epoch. :class:`RowMachine` draws row-mode configurations only,
:class:`PackedMachine` packing ones.

Rules of this module: rules only orchestrate (the judging is in
:mod:`.judges`, the bookkeeping in :mod:`.differential`); slot numbers are
drawn modulo the session's slot count, so every draw is valid on any topology.
"""

from __future__ import annotations

from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from .differential import DifferentialMachine
from .model import describe, epoch_model, note
from .plans import MachineConfig, SessionPlan, machine_configs, session_plans
from .sessions import CHECKPOINTS, Entry, Missing, Session


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
                self._fail("CanonicalOrderProp", f"set_epoch({self.model.number}) raised {describe(error)}")
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
