"""The process machine: ``StreamingDataLoader`` runs only, with real worker processes.

Rules of this module: every rule starts worker processes (``spawn``), so an
example must stay short; configurations are row mode with transforms that
skip but never raise, and an even split count, so a conforming run has
nothing to forgive.
"""

from __future__ import annotations

from hypothesis.stateful import initialize

from .differential import DifferentialMachine
from .plans import MachineConfig, SessionPlan, machine_configs, session_plans


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
