"""The process machine: ``StreamingDataLoader`` sessions only, with real worker processes.

Rules of this module: every rule starts worker processes (``spawn``), so an
example must stay short and its topologies small (at most two ranks);
configurations are row mode with transforms that skip but never raise, and an
even split count, so a conforming run has nothing to forgive. Every example
starts with a loader session saved mid-round (an odd number of batches over two
workers) and resumed on the same shape by a save protocol, so the cursor that
continues the round robin is exercised with real workers each time.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import initialize

from .differential import DifferentialMachine
from .loader import run
from .model import note
from .plans import (
    LoaderPlan,
    MachineConfig,
    ProtocolName,
    SessionPlan,
    machine_configs,
    protocols,
    session_plans,
)
from .sessions import CHECKPOINTS, Entry, Missing


class ProcessMachine(DifferentialMachine):
    """``StreamingDataLoader`` sessions only, each rank with two real worker processes (spawn); row mode.

    Every rule starts worker processes, so keep examples few. Transforms skip but
    never raise, so a conforming run has nothing to forgive.
    """

    loader_workers = 2
    max_world_size = 2

    @initialize(
        target=CHECKPOINTS,
        config=machine_configs(packing=False, splits_multiple_of=2, modes=("none", "skip", "warn")),
        plan=session_plans(),
        batches=st.integers(1, 2),
        protocol=protocols(),
    )
    def setup(  # type: ignore[override]
        self, config: MachineConfig, plan: SessionPlan, batches: int, protocol: ProtocolName
    ) -> Entry:
        """Build the table and the spec's view of the first epoch; run a loader session that saves
        after ``2 * batches - 1`` batches (mid-round: two workers) and resume it on its own shape."""
        self._setup(config, plan)
        cut = LoaderPlan(batch_size=1, batches=2 * batches - 1, aligned=True)
        first = run(self, None, cut, False)
        if first is None:
            note("the mid-round session wrote no checkpoint")
            return Missing("mid-round")
        return run(self, first, replace(cut, batches=2, protocol=protocol, same_shape=True), True) or Missing(
            "mid-round resume"
        )
