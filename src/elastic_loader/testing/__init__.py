"""The shipped conformance suite: Hypothesis strategies, state machines, vectors and runner.

Other implementations of the ``lancedb.streaming`` API check themselves against the
executable spec (:mod:`elastic_loader.spec`) through this package; elastic-loader's
own tests use exactly the same entry points. ``docs/CONFORMANCE.md`` is the guide.

* :func:`run_conformance` -- run the state machines and the applicable vectors
  against an implementation; returns a :class:`ConformanceReport` (per invariant:
  pass / fail with a minimal counterexample / not checked). The same run is the
  ``elastic-loader conformance`` command and the pytest plugin
  (``pytest --elastic-loader-impl MODULE``).
* :class:`Implementation` and :func:`implementation_from_module` -- the adapter
  protocol through which the suite reaches an implementation.
* :func:`load_vectors` and :func:`run_family` -- read the language-neutral JSON
  vectors and compare an implementation's outputs with them.

Names are loaded on first use: importing this package imports neither
Hypothesis, LanceDB nor torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._exports import lazy_exports

if TYPE_CHECKING:  # the same names as _EXPORTS (tests/meta/test_exports.py checks it)
    from .adapters import (
        DatasetLike as DatasetLike,
        Implementation as Implementation,
        ModuleImplementation as ModuleImplementation,
        implementation_from_module as implementation_from_module,
    )
    from .conformance import (
        KNOWN_REFERENCE_RESULTS as KNOWN_REFERENCE_RESULTS,
        ConformanceReport as ConformanceReport,
        InvariantResult as InvariantResult,
        ProgressEvent as ProgressEvent,
        VectorResult as VectorResult,
        conformance_settings as conformance_settings,
        resolve_implementation as resolve_implementation,
        run_conformance as run_conformance,
    )
    from .vectors import load_vectors as load_vectors, run_family as run_family

_EXPORTS = {
    "run_conformance": ".conformance",
    "ConformanceReport": ".conformance",
    "InvariantResult": ".conformance",
    "VectorResult": ".conformance",
    "ProgressEvent": ".conformance",
    "conformance_settings": ".conformance",
    "resolve_implementation": ".conformance",
    "KNOWN_REFERENCE_RESULTS": ".conformance",
    "Implementation": ".adapters",
    "DatasetLike": ".adapters",
    "ModuleImplementation": ".adapters",
    "implementation_from_module": ".adapters",
    "load_vectors": ".vectors",
    "run_family": ".vectors",
}
"""Every public name, and the module that defines it (loaded on first use)."""

__all__ = [*_EXPORTS]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
