"""Resolving a conformance run: which machines, with which settings, against what implementation.

Rules of this module: an implementation is reached only through
:class:`~elastic_loader.testing.adapters.Implementation`; every machine run is
derandomized unless a seed is given (then Hypothesis's seed is forced for the
run, :func:`~elastic_loader.testing.machines.runner.forced_seed`); the defaults
come from :mod:`elastic_loader.testing.defaults`, shared with the CLI and the
pytest plugin.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import logging
import platform
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import cast

from hypothesis import HealthCheck, settings as Settings

from .. import defaults
from ..adapters import Implementation, implementation_from_module
from ..machines import PackedMachine, ProcessMachine, RowMachine
from ..machines.judges import DIFFERENTIAL_CHECKED, MIXTURE_CHECKED
from ..machines.mixture import MixtureMachine
from ..machines.runner import Machine

MACHINES: Mapping[str, Machine] = {
    "row": RowMachine,
    "packed": PackedMachine,
    "process": ProcessMachine,
    "mixture": MixtureMachine,
}
"""The state machines by CLI name: row mode and packing in process, real spawned workers, and
mixtures of three tables (only on implementations that have mixtures, see :func:`not_applicable`)."""

DEFAULT_MACHINES: tuple[str, ...] = defaults.MACHINES

_PACKING_ONLY = frozenset({"PackingConservationInv", "DocIdsInv", "AutoBudgetInv", "PackingBudgetProp"})

_SINGLE = frozenset(DIFFERENTIAL_CHECKED)

EXERCISED: Mapping[str, frozenset[str]] = {
    "row": _SINGLE - _PACKING_ONLY,
    "packed": _SINGLE - {"PartitionInv", "SkipAccountingInv", "CatchUpInv", "ExactlyOnceProp"},
    "process": _SINGLE - _PACKING_ONLY - {"PartitionInv", "CatchUpInv"},
    "mixture": frozenset(MIXTURE_CHECKED),
}
"""Which invariants each machine can observe a violation of (read from the machines' checks).

``row`` checks everything but the packing invariants. ``packed`` sees blocks,
whose split is known only from the owner, so it cannot check ``PartitionInv``;
skip accounting, catch-up and exactly-once are row-mode notions. ``process``
runs only lockstep ``StreamingDataLoader`` sessions in row mode (no per-slot
iteration, so neither the partition of a slot's rows nor its catch-up; merges
happen when a session resumes by merging every rank). An invariant none of the
selected machines exercises is reported ``not-checked`` rather than ``pass``.
``mixture`` checks only the four mixture invariants. A machine class may declare
its own set as a class attribute ``exercises``, which then takes precedence.
"""


def exercised(key: str) -> frozenset[str]:
    """The invariants machine ``key`` exercises (its class's ``exercises``, else :data:`EXERCISED`)."""
    declared = getattr(MACHINES[key], "exercises", None)
    if isinstance(declared, frozenset):
        return declared
    return EXERCISED[key]


def not_applicable(key: str, implementation: Implementation) -> str | None:
    """Why machine ``key`` cannot drive ``implementation`` (its class's ``applies``), or ``None``.

    A machine that does not apply is not run, and the invariants only it would
    check are reported ``not-applicable`` with this reason (the mixture machine on
    an implementation without mixtures, such as ``lancedb.streaming``).
    """
    applies = getattr(MACHINES[key], "applies", None)
    if applies is None:
        return None
    reason = applies(implementation)
    return reason if isinstance(reason, str) else None


def machine_settings(
    settings: Settings | Mapping[str, Settings] | None, machines: Sequence[str], seed: int | None
) -> dict[str, Settings]:
    """The settings of every selected machine: given (for all, or per key) or the defaults; unseeded
    runs stay derandomized, a seeded run is not.

    Raises:
        ValueError: an unknown machine key.
    """
    unknown = [m for m in machines if m not in MACHINES]
    if unknown:
        raise ValueError(f"unknown machine(s) {unknown}; choose from {sorted(MACHINES)}")
    fallback = conformance_settings()
    chosen: dict[str, Settings] = {}
    for key in machines:
        if settings is None:
            base = fallback[key]
        elif isinstance(settings, Mapping):
            base = settings.get(key, fallback[key])
        else:
            base = settings
        chosen[key] = base if seed is None else Settings(base, derandomize=False)
    return chosen


def conformance_settings(
    examples: int = defaults.EXAMPLES,
    steps: int = defaults.STEPS,
    *,
    process_examples: int = defaults.PROCESS_EXAMPLES,
    process_steps: int = defaults.PROCESS_STEPS,
    mixture_examples: int = defaults.MIXTURE_EXAMPLES,
    mixture_steps: int = defaults.MIXTURE_STEPS,
) -> dict[str, Settings]:
    """Per-machine Hypothesis settings: ``examples`` x ``steps`` for the in-process machines.

    The ``process`` machine starts worker processes in every rule, so it gets its
    own, much smaller budget; so does ``mixture``, every step of which runs every
    rank of a three-table mixture. Every run is derandomized (reproducible) unless
    :func:`run_conformance` is given a ``seed``; health checks that complain
    about slow examples are off (each example drives a real implementation).
    """

    def make(n: int, k: int) -> Settings:
        return Settings(
            max_examples=max(1, n),
            stateful_step_count=max(1, k),
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )

    return {
        "row": make(examples, steps),
        "packed": make(examples, steps),
        "process": make(process_examples, process_steps),
        "mixture": make(mixture_examples, mixture_steps),
    }


ImplementationLike = Implementation | ModuleType | str | Callable[[], object]
"""What :func:`run_conformance` accepts: an :class:`~.adapters.Implementation`; a module with
``StreamingDataset``, ``StreamingDataLoader`` and ``merge_state_dicts``; a module name ``"pkg.mod"``;
``"pkg.mod:attr"`` naming one of these or a zero-argument factory returning one; or such a factory."""


def _is_implementation(value: object) -> bool:
    return all(
        callable(getattr(value, a, None)) for a in ("dataset", "loader", "merge_state_dicts", "set_epoch")
    ) and (isinstance(getattr(value, "name", None), str))


def _adapt(value: object, label: str) -> Implementation:
    if _is_implementation(value):
        return cast(Implementation, value)
    if isinstance(value, ModuleType):
        return implementation_from_module(value.__name__)
    raise TypeError(
        f"{label} is neither an Implementation (name, dataset, loader, merge_state_dicts, set_epoch) "
        f"nor a module with StreamingDataset, StreamingDataLoader and merge_state_dicts"
    )


def resolve_implementation(target: ImplementationLike) -> Implementation:
    """The :class:`~.adapters.Implementation` that ``target`` stands for (see :data:`ImplementationLike`).

    Raises:
        ImportError: the module cannot be imported.
        AttributeError: the module lacks a required name, or ``:attr`` does not exist.
        TypeError: the object is not an implementation and its factory does not return one.
    """
    if isinstance(target, str):
        module_name, _, attr = target.partition(":")
        if not module_name:
            raise ImportError(f"no module in {target!r} (expected MODULE or MODULE:FACTORY)")
        if not attr:
            return implementation_from_module(module_name)
        value: object = functools.reduce(getattr, attr.split("."), importlib.import_module(module_name))
        label = target
    else:
        value, label = target, repr(target)
    if _is_implementation(value) or isinstance(value, ModuleType):
        return _adapt(value, label)
    if callable(value):
        return _adapt(value(), f"{label}()")
    raise TypeError(f"{label} is not an implementation, a module or a factory")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence warnings and log records below ERROR (restored afterwards)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def versions(implementation: Implementation) -> tuple[tuple[str, str], ...]:
    out = [("python", platform.python_version())]
    for dist in ("elastic-loader", "lancedb", "hypothesis", "torch"):
        try:
            out.append((dist, importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            continue
    top = implementation.name.split(":")[0].split(".")[0]
    if top and top not in ("elastic_loader", "lancedb"):
        with contextlib.suppress(Exception):
            module = importlib.import_module(top)
            version = getattr(module, "__version__", None)
            if isinstance(version, str):
                out.append((top, version))
    return tuple(out)
