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

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adapters import DatasetLike, Implementation, ModuleImplementation, implementation_from_module
    from .conformance import (
        KNOWN_REFERENCE_RESULTS,
        ConformanceReport,
        InvariantResult,
        ProgressEvent,
        VectorResult,
        conformance_settings,
        resolve_implementation,
        run_conformance,
    )
    from .vectors import load_vectors, run_family

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

__all__ = [
    "run_conformance",
    "ConformanceReport",
    "InvariantResult",
    "VectorResult",
    "ProgressEvent",
    "conformance_settings",
    "resolve_implementation",
    "KNOWN_REFERENCE_RESULTS",
    "Implementation",
    "DatasetLike",
    "ModuleImplementation",
    "implementation_from_module",
    "load_vectors",
    "run_family",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'elastic_loader.testing' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
