"""Differential state machines: an implementation under test and the spec, side by side.

Machines: :class:`RowMachine` and :class:`PackedMachine` (everything in
process; ``StreamingDataLoader`` with ``num_workers=0``) and
:class:`ProcessMachine` (``StreamingDataLoader`` runs only, two spawned worker
processes each). Run one with :func:`check_invariants`, for example::

    results = check_invariants(RowMachine, implementation_from_module("lancedb.streaming"),
                               TableCache(directory), settings_=settings(max_examples=60))
    # {"LockstepInferenceInv": "... rank 0 infers split 2 at (1, 1), which does not resume as its
    #  owner ...\\nstate = RowMachine()...", "PartitionInv": None, ...}

A printed program replays by hand after ``RowMachine = RowMachine.bind(implementation, tables)``
and ``from elastic_loader.testing.machines import *`` (the plans it prints).

Layout: :mod:`.plans` (what is drawn), :mod:`.model` (the spec's view of an
epoch), :mod:`.sessions` (slots and recorded checkpoints), :mod:`.observe`
(reading delivered items), :mod:`.judges` (the comparisons and the table of
invariants), :mod:`.differential` (the base machine), :mod:`.streaming` and
:mod:`.process` (the machines), :mod:`.runner` (exploring and shrinking; the
only module that touches Hypothesis internals).

Rules of this package: the names below are the public interface (docs/CONFORMANCE.md
replays programs through them); keep them.
"""

from __future__ import annotations

from .differential import DifferentialMachine
from .judges import CHECKED, JUDGES, NOT_CHECKED
from .model import EpochModel
from .plans import (
    FaultPlan,
    LoaderPlan,
    MachineConfig,
    PackingPlan,
    SessionPlan,
    SimulatedWorker,
    loader_plans,
    machine_configs,
    session_plans,
)
from .process import ProcessMachine
from .runner import check_invariants
from .sessions import CHECKPOINTS, Missing, Recorded
from .streaming import PackedMachine, RowMachine, StreamingMachine

__all__ = [
    "CHECKED",
    "CHECKPOINTS",
    "JUDGES",
    "NOT_CHECKED",
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
