"""The conformance suite behind one call: check any ``lancedb.streaming``-API implementation.

Usage::

    from elastic_loader.testing import run_conformance

    report = run_conformance("mypkg.streaming")      # a module, "module:factory", or an Implementation
    print(report.to_table())                         # per invariant: pass / FAIL / not checked
    assert report.passed, report.to_table()

The same run is available as ``elastic-loader conformance --impl mypkg.streaming``
(:mod:`elastic_loader.cli`) and as ``pytest --elastic-loader-impl mypkg.streaming``
(:mod:`elastic_loader.testing.pytest_plugin`); elastic-loader's own tests go
through :func:`run_conformance` exactly like an outside implementation.

Theory of operation
-------------------
The implementation is reached only through the adapter protocol of
:mod:`elastic_loader.testing.adapters` (``Implementation``): build a
``StreamingDataset`` from a table and keywords, build a ``StreamingDataLoader``,
merge checkpoints, optionally ``set_epoch``.

1. **State machines.** Each selected machine of
   :mod:`elastic_loader.testing.machines` (:data:`MACHINES`: ``row``,
   ``packed``, ``process``) drives the implementation and the executable spec
   side by side on real LanceDB tables. Every violated invariant is shrunk
   once, in the first machine that found it, to a minimal program that replays
   by hand (:mod:`.run`).
2. **Vectors.** The language-neutral vectors (``spec/VECTORS.md``) that a
   black-box implementation can answer through its public API are replayed
   (:mod:`.black_box`); :data:`VECTOR_FAMILIES` says why each other family is
   not applicable and which invariant covers it on real tables instead.

The result is a :class:`ConformanceReport` (:mod:`.report`): per invariant name
of :data:`~elastic_loader.spec.invariants.INVARIANT_NAMES` a status (``pass``,
``fail`` or ``not-checked``), the machine whose counterexample is shown, and the
counterexample; per vector family its failing cases.
:data:`KNOWN_REFERENCE_RESULTS` (:mod:`.known_reference`) pins what
``lancedb.streaming`` breaks, each with the B-id of its weak point (``spec/REFERENCE.md``). Settings,
machines and implementations are resolved in :mod:`.resolve`; progress events
come from :mod:`.progress`.

Rules of this package: runs are reproducible, derandomized by default or
seeded (``seed=``); the names below are the public interface
(``docs/CONFORMANCE.md``); keep them.
"""

from __future__ import annotations

from .black_box import VECTOR_FAMILIES
from .known_reference import (
    KNOWN_REFERENCE_RESULTS,
    REFERENCE,
    KnownResults,
    KnownViolation,
    compare_with_known,
    known_violations,
    reference_results,
)
from .progress import ProgressCallback, ProgressEvent
from .report import ConformanceReport, InvariantResult, MachineRun, VectorCaseResult, VectorResult
from .resolve import (
    DEFAULT_MACHINES,
    EXERCISED,
    MACHINES,
    ImplementationLike,
    conformance_settings,
    resolve_implementation,
)
from .run import run_conformance

__all__ = [
    "DEFAULT_MACHINES",
    "EXERCISED",
    "KNOWN_REFERENCE_RESULTS",
    "MACHINES",
    "REFERENCE",
    "VECTOR_FAMILIES",
    "ConformanceReport",
    "ImplementationLike",
    "InvariantResult",
    "KnownResults",
    "KnownViolation",
    "MachineRun",
    "ProgressCallback",
    "ProgressEvent",
    "VectorCaseResult",
    "VectorResult",
    "compare_with_known",
    "conformance_settings",
    "known_violations",
    "reference_results",
    "resolve_implementation",
    "run_conformance",
]
