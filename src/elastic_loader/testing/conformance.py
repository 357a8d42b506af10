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
:mod:`.adapters` (:class:`~elastic_loader.testing.adapters.Implementation`):
build a ``StreamingDataset`` from a table and keywords, build a
``StreamingDataLoader``, merge checkpoints, optionally ``set_epoch``.

1. **State machines.** Each selected machine of :mod:`.machines`
   (:data:`MACHINES`: ``row``, ``packed``, ``process``) drives the
   implementation and the executable spec side by side on real LanceDB tables
   (:func:`~elastic_loader.testing.machines.check_invariants`). Every violated
   invariant is shrunk once, in the first machine that found it, to a minimal
   program that replays by hand.
2. **Vectors.** The language-neutral vectors (``spec/VECTORS.md``) that a
   black-box implementation can answer through its public API are replayed:
   ``merge`` (``merge_state_dicts``), ``load`` (``load_state_dict`` then
   ``state_dict``), ``checkpoint_snapshot`` (``state_dict`` of a dataset put in
   the vector's state by loading the spec's checkpoint) and ``params``
   (constructor validation on a table with the vector's columns and row count).
   An expected error matches when the implementation raises that builtin class
   (or a subclass); the spec's error *code* is not observable from outside and
   is not compared. The other families take arbitrary permutations, corpora or
   internal functions as input; :data:`VECTOR_FAMILIES` says why each is not
   applicable and which invariant covers it on real tables instead.

The result is a :class:`ConformanceReport`: per invariant name of
:data:`~elastic_loader.spec.invariants.INVARIANT_NAMES` a status (``pass``,
``fail`` or ``not-checked``), the machine whose counterexample is shown, and the
counterexample; per vector family its failing cases. :data:`KNOWN_REFERENCE_RESULTS`
pins what ``lancedb.streaming`` breaks, each with its ``BEHAVIOR.md`` B-id.

Runs are reproducible: derandomized by default, or seeded (``seed=``). While
running, warnings and log records below ``ERROR`` are silenced (the reference
logs one warning per skipped batch); the machines' tables live in a temporary
directory unless ``tables_dir`` is given.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import datetime
import functools
import importlib
import importlib.metadata
import json
import logging
import platform
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Literal, cast

import hypothesis.core
import lancedb
import pyarrow as pa
from hypothesis import HealthCheck
from hypothesis import settings as Settings
from hypothesis.errors import FlakyStrategyDefinition

from ..spec import (
    PackedState,
    RowState,
    RunConfig,
    SpecError,
    load_packed,
    load_row,
    snapshot_packed,
    snapshot_row,
)
from ..spec.invariants import INVARIANT_NAMES
from ..spec.params import CALLABLE, Params
from . import defaults
from .adapters import DatasetLike, Implementation, implementation_from_module
from .machines import (
    CHECKED,
    DifferentialMachine,
    PackedMachine,
    ProcessMachine,
    RowMachine,
    _search_enforcing,
    _shrunk_counterexample,
    _violation,
    check_invariants,
)
from .tables import TOKEN_COLUMN, TableCache, TableKey
from .vector_cases import (
    FAMILIES,
    Json,
    JsonObject,
    as_int,
    as_list,
    as_object,
    as_str,
    dec_config,
    dec_packed_state,
    dec_row_state,
    decode_value,
    enc_checkpoint,
    enc_state,
    encode_int,
)
from .vectors import VectorCase, default_directory, load_vectors

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
    "resolve_implementation",
    "run_conformance",
]

REFERENCE = "lancedb.streaming"
"""The reference implementation's module name."""

InvariantStatus = Literal["pass", "fail", "not-checked"]
VectorStatus = Literal["pass", "fail", "not-applicable"]

MACHINES: Mapping[str, type[DifferentialMachine]] = {
    "row": RowMachine,
    "packed": PackedMachine,
    "process": ProcessMachine,
}
"""The state machines by CLI name: row mode and packing in process, and real spawned workers."""

DEFAULT_MACHINES: tuple[str, ...] = defaults.MACHINES

_PACKING_ONLY = frozenset({"PackingConservationInv", "DocIdsInv", "AutoBudgetInv", "PackingBudgetProp"})

EXERCISED: Mapping[str, frozenset[str]] = {
    "row": frozenset(CHECKED) - _PACKING_ONLY,
    "packed": frozenset(CHECKED) - {"PartitionInv", "SkipAccountingInv", "CatchUpInv", "ExactlyOnceProp"},
    "process": frozenset(
        {
            "ProgressBoundsInv",
            "SkipAccountingInv",
            "HonestProgressInv",
            "CheckpointRoundTripInv",
            "CanonicalOrderProp",
            "ElasticDeterminismProp",
            "ResumeEquivalenceProp",
            "ExactlyOnceProp",
            "ConsumerCommitProp",
            "RaisePositionProp",
        }
    ),
}
"""Which invariants each machine can observe a violation of (read from the machines' checks).

``row`` checks everything but the packing invariants. ``packed`` sees blocks,
whose split is known only from the owner, so it cannot check ``PartitionInv``;
skip accounting, catch-up and exactly-once are row-mode notions. ``process``
runs only ``StreamingDataLoader`` (no per-slot iteration, no merge), in row
mode. An invariant none of the selected machines exercises is reported
``not-checked`` rather than ``pass``. A machine class may declare its own set as
a class attribute ``exercises``, which then takes precedence.
"""

_NOT_CHECKED_BY_DESIGN: Mapping[str, str] = {
    "SplitSizeInv": "a property of the storage backend's permutation, which implementation and spec share",
    "ComputedBijectionInv": "a property of the opt-in computed permutation, which StreamingDataset "
    "does not read yet; tests/pipeline/test_pipe_computed.py compares the pipeline's with the spec's",
}


@dataclass(frozen=True)
class KnownViolation:
    """One invariant the reference is known to break."""

    machines: frozenset[str]
    """The machines whose exploration finds it at the CI settings (:func:`conformance_settings` defaults)."""
    reason: str
    """The ``BEHAVIOR.md`` weak point (B-id) and our deviation (D-id) it comes from."""


@dataclass(frozen=True)
class KnownResults:
    """What ``lancedb.streaming`` is known to break: invariants, and vector cases by family."""

    invariants: Mapping[str, KnownViolation]
    vectors: Mapping[str, Mapping[str, str]]
    """Family -> failing case name -> reason."""


_B1 = "B1/D1: in-process snapshots report the iterator's own minimum for splits it does not own"
_B9 = "B9/D7: a raising row fails its whole read batch and surfaces before earlier rows"
_B2 = "B2/D2: row-mode load_state_dict ignores epoch (a missing or different epoch passes)"
_D3_TYPES = "B22/D3: parameter types are not validated at construction (bools pass as ints)"
_D3_VALUES = (
    "B3/B4/D3: values are not validated at construction (accepted, or a late backend error, "
    "OverflowError or RustPanic instead of ValueError)"
)
_D4 = "B13/D4: shuffle_seed=None is accepted with world_size > 1"
_D5 = "B14/D5: fingerprints are compared only when the first state has one (or not at all on load)"
_D6 = "B15/D6: list lengths are not checked; a legacy int makes merge fail with TypeError"
_D18 = "D18: progress beyond the split end or budget, or negative, is not rejected"
_D19 = "D19: a missing checkpoint key raises KeyError, not ValueError"
_D20 = "D20: prefetch_batches logs a warning but emits no DeprecationWarning"
_N2 = "N2: checkpoint values are not type-checked (int() conversions, == comparisons)"
_N3 = "N3: samples > positions is not rejected"
_N5 = "N5: the merge keeps unknown keys instead of writing a canonical checkpoint"
_N5_CONFIG = "N5: the merge copies the first state's config without validating it"
_N6 = "N6: pack_buffers keys and buffers are not validated"


def _pin(*groups: tuple[str, tuple[str, ...]]) -> dict[str, str]:
    """Case name -> reason, from (reason, case names) groups."""
    return {case: reason for reason, cases in groups for case in cases}


KNOWN_REFERENCE_RESULTS = KnownResults(
    invariants={
        "HonestProgressInv": KnownViolation(frozenset({"row"}), _B1),
        "SkipAccountingInv": KnownViolation(
            frozenset({"row"}), _B1 + " (as positions = samples, ignoring skipped rows)"
        ),
        "MergeExactProp": KnownViolation(
            frozenset({"row"}), _B1 + ", so merging overstates the lagging ranks"
        ),
        "ConsumerCommitProp": KnownViolation(
            frozenset({"row"}), _B1 + " (StreamingDataLoader with num_workers=0 commits them)"
        ),
        "ResumeEquivalenceProp": KnownViolation(
            frozenset({"row"}), _B1 + ", so resuming a merged checkpoint skips rows"
        ),
        "ExactlyOnceProp": KnownViolation(
            frozenset({"row"}), _B1 + ", so rows of lagging splits are never delivered"
        ),
        "ElasticDeterminismProp": KnownViolation(
            frozenset({"row"}), _B1 + ", so later global steps miss rows"
        ),
        "CheckpointRoundTripInv": KnownViolation(
            frozenset({"row", "packed"}),
            "B2/D2: row-mode load_state_dict accepts a checkpoint of another epoch; "
            "D9: pack_buffers keeps empty buffers (not the canonical form)",
        ),
        "RaisePositionProp": KnownViolation(frozenset({"row", "packed"}), _B9),
    },
    vectors={
        "merge": _pin(
            (_D19, ("error_missing_epoch", "error_first_missing_shuffle_seed", "error_missing_eos_id")),
            (_D19, ("error_row_missing_samples", "error_packed_missing_emitted")),
            (_N2, ("error_num_splits_not_int", "error_epoch_is_bool", "error_fingerprint_not_a_string")),
            (_N2, ("error_row_samples_not_a_list", "error_row_samples_bool_legacy")),
            (_N2, ("error_row_samples_holds_string", "error_row_samples_holds_bool")),
            (_N2, ("error_row_samples_holds_float", "error_row_positions_not_a_list")),
            (_N2, ("error_packed_emitted_holds_null", "error_pack_buffers_not_a_dict")),
            (_N2, ("error_buffer_not_a_dict", "error_buffer_without_starts")),
            (_N2, ("error_buffer_tokens_not_a_list", "error_buffer_token_is_bool")),
            (_D6, ("row_legacy_int_and_list", "error_row_samples_too_short", "error_row_positions_too_long")),
            (
                _D18,
                (
                    "error_row_negative_sample",
                    "error_row_negative_legacy_int",
                    "error_packed_negative_emitted",
                ),
            ),
            (_N3, ("error_row_positions_below_samples",)),
            (_N6, ("error_buffer_key_twice", "error_buffer_key_beyond_splits", "error_buffer_key_negative")),
            (_N6, ("error_buffer_key_not_a_number", "error_buffer_key_int_beyond_splits")),
            (
                _N6,
                ("error_buffer_key_bool", "error_buffer_start_beyond_tokens", "error_buffer_start_negative"),
            ),
            (_N6, ("error_buffer_start_in_empty_buffer", "error_buffer_starts_unsorted")),
            (_N6, ("error_buffer_starts_repeated",)),
            (_D5, ("error_fingerprint_only_in_second", "error_fingerprint_only_in_first")),
            (_D5, ("error_fingerprints_differ",)),
            (
                _N5_CONFIG,
                ("error_num_splits_zero", "error_pack_sequences_zero", "error_blocks_per_epoch_zero"),
            ),
            (_N5_CONFIG, ("error_blocks_per_epoch_not_divisible",)),
            (_N5, ("row_unknown_keys_dropped",)),
        ),
        "load": _pin(
            (_D19, ("error_missing_shuffle_seed", "error_missing_num_splits", "error_row_missing_samples")),
            (_D19, ("error_packed_missing_emitted",)),
            (_B2, ("error_missing_epoch", "error_epoch_differs_row_mode")),
            (_N2, ("error_row_samples_not_a_list", "error_row_samples_bool_legacy")),
            (_N2, ("error_row_samples_holds_string", "error_row_samples_holds_bool")),
            (_N2, ("error_row_samples_holds_float", "error_row_positions_not_a_list")),
            (_N2, ("error_packed_emitted_holds_null", "error_pack_buffers_not_a_dict")),
            (_N2, ("error_buffer_not_a_dict", "error_buffer_without_starts")),
            (_N2, ("error_buffer_tokens_not_a_list", "error_buffer_token_is_bool")),
            (_D6, ("error_row_samples_too_short", "error_row_positions_too_long")),
            (_D6, ("error_packed_consumed_too_short",)),
            (_D18, ("error_row_position_beyond_split_end", "error_row_legacy_beyond_split_end")),
            (_D18, ("error_packed_consumed_beyond_split_end", "error_packed_emitted_beyond_budget")),
            (
                _D18,
                (
                    "error_row_negative_sample",
                    "error_row_negative_legacy_int",
                    "error_packed_negative_emitted",
                ),
            ),
            (_N3, ("error_row_positions_below_samples",)),
            (_N6, ("error_buffer_key_twice", "error_buffer_key_beyond_splits", "error_buffer_key_negative")),
            (_N6, ("error_buffer_key_int_beyond_splits", "error_buffer_key_bool")),
            (_N6, ("error_buffer_start_beyond_tokens", "error_buffer_start_negative")),
            (_N6, ("error_buffer_start_in_empty_buffer", "error_buffer_starts_unsorted")),
            (_N6, ("error_buffer_starts_repeated",)),
            (_D5, ("error_fingerprint_on_random_split_dataset",)),
        ),
        "params": _pin(
            (_D3_TYPES, ("row_columns_str_text", "row_columns_list_1", "row_columns_list_text_none")),
            (_D3_TYPES, ("packing_columns_str_tokens", "row_connection_factory_str_db")),
            (_D3_TYPES, ("packing_eos_id_str_1", "packing_eos_id_float", "packing_eos_id_true")),
            (_D3_TYPES, ("packing_pad_id_str_1", "packing_pad_id_float", "packing_pad_id_true")),
            (_D3_TYPES, ("row_epoch_true", "row_rank_true", "row_world_size_true", "row_shuffle_seed_true")),
            (_D3_TYPES, ("row_io_queue_depth_float", "row_io_queue_depth_true")),
            (_D3_TYPES, ("row_num_splits_float", "row_num_splits_true")),
            (_D3_TYPES, ("packing_pack_sequences_float", "packing_pack_sequences_true")),
            (_D3_TYPES, ("row_prefetch_batches_float", "row_prefetch_batches_true")),
            (_D3_TYPES, ("row_read_batch_size_str_1", "row_read_batch_size_float")),
            (_D3_TYPES, ("row_read_batch_size_true", "row_read_batch_size_none")),
            (_D3_TYPES, ("row_shuffle_clump_size_true", "row_shuffle_1", "row_shuffle_none")),
            (_D3_TYPES, ("row_shuffle_str_yes", "row_transform_1", "row_transform_str_upper")),
            (_D3_TYPES, ("row_transform_parallelism_float", "row_transform_parallelism_true")),
            (_D3_TYPES, ("row_transform_queue_depth_float", "row_transform_queue_depth_true")),
            (_D3_TYPES, ("row_worker_info_override_1", "row_worker_info_override_str_worker")),
            (_D3_VALUES, ("row_columns_list_text_text", "row_columns_empty_list")),
            (_D3_VALUES, ("row_columns_list_missing", "packing_columns_list_missing")),
            (_D3_VALUES, ("packing_eos_id_2pow63", "packing_pad_id_minus_2pow63_minus")),
            (_D3_VALUES, ("row_epoch_minus_1", "row_num_splits_0", "row_shuffle_clump_size_0")),
            (_D3_VALUES, ("row_rank_minus_1", "row_rank_1", "multi_rank_rank_4")),
            (_D3_VALUES, ("row_read_batch_size_0", "row_read_batch_size_minus_64")),
            (
                _D3_VALUES,
                ("row_shuffle_seed_minus_1", "row_shuffle_seed_2pow64", "row_epoch_184461906879890"),
            ),
            (_D3_VALUES, ("multi_rank_shuffle_seed_2pow64", "row_world_size_0", "row_world_size_minus_1")),
            (_D4, ("multi_rank_shuffle_seed_none",)),
            (_D20, ("row_prefetch_batches_overrides_queue_depth",)),
        ),
    },
)
"""The pinned results of ``lancedb.streaming`` (the installed reference) under :func:`run_conformance`.

``tests/test_conformance.py`` fails when the reference breaks an invariant or a
vector not listed here, or stops breaking a listed one; each entry was observed
by running the suite and is explained by the B-id of ``BEHAVIOR.md`` section 11
(our deviation D-id in ``spec/DEVIATIONS.md``).
"""


def known_violations(machine: str, known: KnownResults = KNOWN_REFERENCE_RESULTS) -> dict[str, str]:
    """The invariants ``machine`` (a key of :data:`MACHINES`) is pinned to find violated, with reasons."""
    return {name: v.reason for name, v in known.invariants.items() if machine in v.machines}


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class InvariantResult:
    """The verdict on one named invariant."""

    name: str
    status: InvariantStatus
    counterexample: str | None = None
    """The violation and the minimal program that shows it (``status == "fail"``)."""
    machine: str | None = None
    """The machine whose counterexample is shown."""
    found_by: tuple[str, ...] = ()
    """Every machine whose exploration found a violation."""
    checked_by: tuple[str, ...] = ()
    """The selected machines that exercise this invariant."""
    note: str | None = None
    """Why the invariant was not checked."""


@dataclass(frozen=True)
class VectorCaseResult:
    """A vector case that failed or could not be run, and why."""

    case: str
    detail: str


@dataclass(frozen=True)
class VectorResult:
    """The verdict on one vector family."""

    family: str
    status: VectorStatus
    passed: int = 0
    failures: tuple[VectorCaseResult, ...] = ()
    skipped: tuple[VectorCaseResult, ...] = ()
    """Cases of an applicable family that this implementation cannot run, with the reason."""
    note: str = ""
    """How the family is run, or why it is not applicable."""


@dataclass(frozen=True)
class MachineRun:
    """How one machine was run."""

    machine: str
    examples: int
    steps: int
    derandomized: bool
    seconds: float


@dataclass(frozen=True)
class ConformanceReport:
    """Everything :func:`run_conformance` found, in :data:`INVARIANT_NAMES` and family order."""

    implementation: str
    invariants: tuple[InvariantResult, ...]
    vectors: tuple[VectorResult, ...]
    runs: tuple[MachineRun, ...]
    seed: int | None
    shrink: bool
    shrink_seconds: int | None
    started: str
    """When the run started (UTC, ISO 8601)."""
    seconds: float
    versions: tuple[tuple[str, str], ...]
    vectors_source: str = ""

    @property
    def passed(self) -> bool:
        """No invariant and no vector family failed."""
        return not self.violated() and not any(v.status == "fail" for v in self.vectors)

    def result(self, name: str) -> InvariantResult:
        """The result of invariant ``name``."""
        for result in self.invariants:
            if result.name == name:
                return result
        raise KeyError(name)

    def violated(self) -> tuple[str, ...]:
        """The names of the failed invariants."""
        return tuple(r.name for r in self.invariants if r.status == "fail")

    def vector_failures(self) -> dict[str, tuple[str, ...]]:
        """Family -> names of its failed cases (families without failures omitted)."""
        return {v.family: tuple(f.case for f in v.failures) for v in self.vectors if v.failures}

    def to_dict(self) -> JsonObject:
        """The report as JSON-ready data (``to_json`` writes exactly this)."""

        def cases(items: Sequence[VectorCaseResult]) -> list[Json]:
            return [{"case": c.case, "detail": c.detail} for c in items]

        return {
            "implementation": self.implementation,
            "passed": self.passed,
            "started": self.started,
            "seconds": round(self.seconds, 1),
            "settings": {
                "machines": [
                    {
                        "machine": r.machine,
                        "examples": r.examples,
                        "steps": r.steps,
                        "derandomized": r.derandomized,
                        "seconds": round(r.seconds, 1),
                    }
                    for r in self.runs
                ],
                "seed": self.seed,
                "shrink": self.shrink,
                "shrink_seconds": self.shrink_seconds,
            },
            "versions": {name: version for name, version in self.versions},
            "invariants": [
                {
                    "name": r.name,
                    "status": r.status,
                    "machine": r.machine,
                    "found_by": list(r.found_by),
                    "checked_by": list(r.checked_by),
                    "counterexample": r.counterexample,
                    "note": r.note,
                }
                for r in self.invariants
            ],
            "vectors_source": self.vectors_source,
            "vectors": [
                {
                    "family": v.family,
                    "status": v.status,
                    "passed": v.passed,
                    "failures": cases(v.failures),
                    "skipped": cases(v.skipped),
                    "note": v.note,
                }
                for v in self.vectors
            ],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent) + "\n"

    def to_table(self, *, counterexamples: bool = True, width: int = 100) -> str:
        """A plain-text report: the per-invariant table, the vector table, then the counterexamples."""
        lines = [f"Conformance of {self.implementation} to the elastic-loader spec"]
        runs = ", ".join(f"{r.machine} {r.examples}x{r.steps}" for r in self.runs) or "none"
        mode = "derandomized" if self.seed is None else f"seed {self.seed}"
        shrink = (
            "off"
            if not self.shrink
            else ("on" if self.shrink_seconds is None else f"<= {self.shrink_seconds}s per violation")
        )
        lines.append(f"machines (examples x steps): {runs}; {mode}; shrinking {shrink}")
        lines.append(f"started {self.started}, {self.seconds:.0f}s")
        lines.append("")
        name_w = max(len(n) for n in INVARIANT_NAMES)
        lines.append(f"{'invariant':<{name_w}}  {'status':<11}  {'machine':<8}  detail")
        lines.append(f"{'-' * name_w}  {'-' * 11}  {'-' * 8}  {'-' * 30}")
        for r in self.invariants:
            status = {"pass": "pass", "fail": "FAIL", "not-checked": "not checked"}[r.status]
            if r.status == "fail":
                detail = _first_line(r.counterexample or "", width - name_w - 25)
            elif r.status == "pass":
                detail = "checked by " + ", ".join(r.checked_by)
            else:
                detail = r.note or ""
            lines.append(f"{r.name:<{name_w}}  {status:<11}  {r.machine or '-':<8}  {detail}")
        if self.vectors:
            lines.append("")
            fam_w = max(len("vectors"), *(len(v.family) for v in self.vectors))
            lines.append(f"{'vectors':<{fam_w}}  {'status':<14}  cases")
            lines.append(f"{'-' * fam_w}  {'-' * 14}  {'-' * 30}")
            for v in self.vectors:
                status = {"fail": "FAIL"}.get(v.status, v.status)
                if v.status in ("pass", "fail"):
                    total = v.passed + len(v.failures)
                    detail = f"{v.passed}/{total} pass"
                    if v.skipped:
                        detail += f", {len(v.skipped)} not applicable"
                else:
                    detail = _first_line(v.note, width - fam_w - 20)
                lines.append(f"{v.family:<{fam_w}}  {status:<14}  {detail}")
        failed = [r for r in self.invariants if r.status == "fail"]
        checked = sum(1 for r in self.invariants if r.status != "not-checked")
        lines.append("")
        lines.append(
            f"{checked - len(failed)} of {checked} checked invariants hold, {len(failed)} violated, "
            f"{len(self.invariants) - checked} not checked; "
            f"vector families: {sum(v.status == 'fail' for v in self.vectors)} failing"
        )
        lines.append("PASSED" if self.passed else "FAILED")
        if counterexamples:
            for r in failed:
                cls = MACHINES.get(r.machine or "")
                machine = cls.__name__ if cls is not None else str(r.machine)
                lines += ["", f"=== {r.name} ({machine}; found by {', '.join(r.found_by)}) ==="]
                lines.append(r.counterexample or "")
            for v in self.vectors:
                for failure in v.failures:
                    lines += ["", f"=== vector {v.family}/{failure.case} ===", failure.detail]
        return "\n".join(lines) + "\n"


def _first_line(text: str, limit: int) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    limit = max(limit, 20)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def compare_with_known(report: ConformanceReport, known: KnownResults) -> list[str]:
    """Every difference between ``report`` and the pinned ``known`` results (empty when they agree).

    An invariant is compared per machine that ran: it must be found violated by
    exactly the pinned machines among them. Vector cases are compared per family
    that ran (status ``pass`` or ``fail``).
    """
    problems: list[str] = []
    ran = {r.machine for r in report.runs}
    for result in report.invariants:
        pinned = known.invariants.get(result.name)
        want = set(pinned.machines) & ran if pinned is not None else set()
        got = set(result.found_by)
        for machine in sorted(got - want):
            text = result.counterexample if machine == result.machine else "(counterexample shown for "
            text = text or ""
            if machine != result.machine:
                text += f"{result.machine})"
            problems.append(f"new violation of {result.name} in the {machine} machine:\n{text}")
        for machine in sorted(want - got):
            assert pinned is not None
            problems.append(
                f"{result.name} no longer violated in the {machine} machine (pinned: {pinned.reason})"
            )
    for vector in report.vectors:
        if vector.status not in ("pass", "fail"):
            continue
        pinned_cases = known.vectors.get(vector.family, {})
        failed = {f.case: f.detail for f in vector.failures}
        for case in sorted(set(failed) - set(pinned_cases)):
            problems.append(f"new vector failure {vector.family}/{case}: {failed[case]}")
        for case in sorted(set(pinned_cases) - set(failed)):
            skipped = {s.case for s in vector.skipped}
            state = "not applicable" if case in skipped else "passes"
            problems.append(f"vector {vector.family}/{case} now {state} (pinned: {pinned_cases[case]})")
    return problems


# ---------------------------------------------------------------- progress


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a run, for progress bars.

    ``machine`` is a key of :data:`MACHINES` or ``"vectors"``; ``phase`` is
    ``"explore"``, ``"shrink <Invariant>"`` or a vector family. ``total`` is
    ``None`` when unknown (shrinking). The last event of a phase has
    ``finished=True``.
    """

    machine: str
    phase: str
    done: int
    total: int | None
    unit: str
    finished: bool = False


ProgressCallback = Callable[[ProgressEvent], None]


class _Ticker:
    """Turns machine instantiations (one per Hypothesis example) into :class:`ProgressEvent` values."""

    def __init__(self, machine: str, total: int, progress: ProgressCallback | None) -> None:
        self.machine, self.total, self.progress = machine, total, progress
        self.phase: str | None = None
        self.done = 0

    def tick(self, enforced: frozenset[str]) -> None:
        phase = "explore" if not enforced else "shrink " + ", ".join(sorted(enforced))
        if phase != self.phase:
            self.close()
            self.phase, self.done = phase, 0
        self.done += 1
        self._emit(False)

    def close(self) -> None:
        if self.phase is not None:
            self._emit(True)
        self.phase = None

    def _emit(self, finished: bool) -> None:
        if self.progress is None or self.phase is None:
            return
        explore = self.phase == "explore"
        # Hypothesis may start a few more machines than max_examples (discarded examples).
        done = min(self.done, self.total) if explore else self.done
        self.progress(
            ProgressEvent(
                self.machine,
                self.phase,
                done,
                self.total if explore else None,
                "examples" if explore else "runs",
                finished,
            )
        )


def _counted(machine: type[DifferentialMachine], ticker: _Ticker) -> type[DifferentialMachine]:
    """A subclass of ``machine`` (same name, so printed programs replay) that reports each example."""

    def __init__(self: DifferentialMachine) -> None:
        machine.__init__(self)
        ticker.tick(self.enforced)

    attrs: dict[str, object] = {
        "__init__": __init__,
        "__qualname__": machine.__qualname__,
        "__module__": machine.__module__,
        "__doc__": machine.__doc__,
    }
    return cast(type[DifferentialMachine], type(machine.__name__, (machine,), attrs))


# ---------------------------------------------------------------- settings and implementations


def conformance_settings(
    examples: int = defaults.EXAMPLES,
    steps: int = defaults.STEPS,
    *,
    process_examples: int = defaults.PROCESS_EXAMPLES,
    process_steps: int = defaults.PROCESS_STEPS,
) -> dict[str, Settings]:
    """Per-machine Hypothesis settings: ``examples`` x ``steps`` for the in-process machines.

    The ``process`` machine starts worker processes in every rule, so it gets its
    own, much smaller budget. Every run is derandomized (reproducible) unless
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
def _seeded(seed: int | None) -> Iterator[None]:
    """Force Hypothesis's seed (what ``pytest --hypothesis-seed`` does) for the runs inside."""
    if seed is None:
        yield
        return
    saved = hypothesis.core.global_force_seed
    hypothesis.core.global_force_seed = seed  # type: ignore[assignment]
    try:
        yield
    finally:
        hypothesis.core.global_force_seed = saved


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence warnings and log records below ERROR (restored afterwards)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _versions(implementation: Implementation) -> tuple[tuple[str, str], ...]:
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


# ---------------------------------------------------------------- the runner


def run_conformance(
    implementation: ImplementationLike,
    *,
    settings: Settings | Mapping[str, Settings] | None = None,
    machines: Sequence[str] = DEFAULT_MACHINES,
    tables_dir: Path | str | None = None,
    shrink: bool = True,
    shrink_seconds: int | None = defaults.SHRINK_SECONDS,
    seed: int | None = None,
    vectors: bool = True,
    vectors_dir: Path | str | None = None,
    progress: ProgressCallback | None = None,
) -> ConformanceReport:
    """Run the conformance suite against ``implementation``; report per invariant and per vector family.

    Args:
        implementation: what to test (see :data:`ImplementationLike`), e.g. ``"lancedb.streaming"``,
            ``"elastic_loader"``, ``"mypkg.streaming:make_impl"`` or an ``Implementation`` object.
        settings: Hypothesis settings for every machine, or per machine key; the
            defaults of :func:`conformance_settings` for machines not given.
        machines: keys of :data:`MACHINES` to run, in order (the first machine that
            finds a violation shrinks it).
        tables_dir: where to build the LanceDB test tables (a temporary directory
            when omitted, removed afterwards).
        shrink: shrink every violation to a minimal program (each replay runs the
            implementation for real: this is the expensive part of a failing run).
        shrink_seconds: stop shrinking one violation after this long and report the
            smallest program found so far (``None``: Hypothesis's own limit).
        seed: run with this Hypothesis seed instead of derandomized.
        vectors: also replay the applicable vector families.
        vectors_dir: where the vectors are (default: ``spec/vectors`` of the
            checkout, or ``$ELASTIC_LOADER_VECTORS``); when no files are found the
            cases are generated from the spec in memory (byte-identical, as
            ``tests/test_vectors.py`` checks).
        progress: called with a :class:`ProgressEvent` for every example and case.

    Raises:
        ValueError: an unknown machine key.
        ImportError, AttributeError, TypeError: ``implementation`` cannot be resolved.
    """
    unknown = [m for m in machines if m not in MACHINES]
    if unknown:
        raise ValueError(f"unknown machine(s) {unknown}; choose from {sorted(MACHINES)}")
    impl = resolve_implementation(implementation)
    defaults = conformance_settings()
    chosen: dict[str, Settings] = {}
    for key in machines:
        if settings is None:
            base = defaults[key]
        elif isinstance(settings, Mapping):
            base = settings.get(key, defaults[key])
        else:
            base = settings
        chosen[key] = base if seed is None else Settings(base, derandomize=False)
    started = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    clock = time.monotonic()
    found: dict[str, dict[str, str | None]] = {}
    runs: list[MachineRun] = []
    with contextlib.ExitStack() as stack:
        if tables_dir is None:
            tables_dir = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="elastic-loader-conformance-")
            )
        directory = Path(tables_dir)
        tables = TableCache(directory)
        stack.enter_context(_quiet())
        stack.enter_context(_seeded(seed))
        shown: dict[str, str] = {}
        """Invariant -> the machine whose counterexample is shown (the first that shrank it, else the first
        that found it): a violation another machine could not shrink is shrunk again by the next."""
        shrunk: set[str] = set()
        for key in machines:
            machine_settings = chosen[key]
            ticker = _Ticker(key, machine_settings.max_examples, progress)
            begin = time.monotonic()
            counted = _counted(MACHINES[key], ticker)
            try:
                results = check_invariants(counted, impl, tables, settings_=machine_settings, shrink=False)
                for name in sorted(n for n, text in results.items() if text):
                    shown.setdefault(name, key)
                    if not shrink or name in shrunk:
                        continue
                    text, done = _shrink_one(
                        counted, impl, tables, name, machine_settings, shrink_seconds, results[name] or ""
                    )
                    results[name] = text
                    if done:
                        shrunk.add(name)
                        shown[name] = key
            finally:
                ticker.close()
            found[key] = results
            runs.append(
                MachineRun(
                    key,
                    machine_settings.max_examples,
                    machine_settings.stateful_step_count,
                    machine_settings.derandomize,
                    time.monotonic() - begin,
                )
            )
        vector_results: tuple[VectorResult, ...] = ()
        source = ""
        if vectors:
            vector_results, source = _run_vectors(impl, directory / "vectors", vectors_dir, progress)
    return ConformanceReport(
        implementation=impl.name,
        invariants=_invariant_results(machines, found, shown),
        vectors=vector_results,
        runs=tuple(runs),
        seed=seed,
        shrink=shrink,
        shrink_seconds=shrink_seconds if shrink else None,
        started=started,
        seconds=time.monotonic() - clock,
        versions=_versions(impl),
        vectors_source=source,
    )


def _shrink_one(
    machine: type[DifferentialMachine],
    implementation: Implementation,
    tables: TableCache,
    name: str,
    base: Settings,
    seconds: int | None,
    explored: str,
) -> tuple[str, bool]:
    """Search ``name`` again with only it enforced; Hypothesis shrinks the failing program.

    Like the shrinking step of :func:`~elastic_loader.testing.machines.check_invariants`,
    and also robust to implementations whose behaviour varies between replays
    (``FlakyStrategyDefinition``: the replay stopped at another step): then the
    violation is reported as found during exploration, marked as not shrunk.

    Returns:
        The counterexample text, and whether it holds a shrunk program.
    """
    reported: list[object] = []
    try:
        _search_enforcing(machine, implementation, tables, name, base, seconds, reported)
    except Exception as error:
        found = _violation(error)
        if found is None:
            raise
        if isinstance(error, FlakyStrategyDefinition):
            return (
                f"{explored}\n(not shrunk: the implementation behaved differently when the program was "
                "replayed, so Hypothesis could not replay it; timing-dependent behaviour)",
                False,
            )
        return _shrunk_counterexample(found, error, reported), True
    return f"{explored}\n(not reproduced when searching again; not shrunk)", False


def _exercised(key: str) -> frozenset[str]:
    declared = getattr(MACHINES[key], "exercises", None)
    if isinstance(declared, frozenset):
        return declared
    return EXERCISED[key]


def _invariant_results(
    machines: Sequence[str], found: Mapping[str, Mapping[str, str | None]], shown: Mapping[str, str]
) -> tuple[InvariantResult, ...]:
    out: list[InvariantResult] = []
    for name in INVARIANT_NAMES:
        if name in _NOT_CHECKED_BY_DESIGN:
            out.append(InvariantResult(name, "not-checked", note=_NOT_CHECKED_BY_DESIGN[name]))
            continue
        checked_by = tuple(k for k in machines if name in _exercised(k))
        found_by = tuple(k for k in machines if found.get(k, {}).get(name))
        if found_by:
            machine = shown.get(name, found_by[0])
            out.append(InvariantResult(name, "fail", found[machine][name], machine, found_by, checked_by))
        elif checked_by:
            out.append(InvariantResult(name, "pass", checked_by=checked_by))
        else:
            owners = [k for k in MACHINES if name in _exercised(k)]
            note = "none of the machines run exercises it; " + " or ".join(owners) + " does"
            out.append(InvariantResult(name, "not-checked", note=note))
    return tuple(out)


# ---------------------------------------------------------------- vectors


class _NotApplicable(Exception):
    """This case cannot be asked of the implementation through its public API."""


_BLACK_BOX = {
    "merge": "merge_state_dicts(checkpoints); error class compared, not the spec's code",
    "load": "load_state_dict(checkpoint) on a fresh dataset of the config (world_size 1), then "
    "state_dict(); error class compared",
    "checkpoint_snapshot": "state_dict() of a dataset that loaded the spec's checkpoint of the state; "
    "keys and key order compared",
    "params": "StreamingDataset(table, **params) on a table with the vector's columns and rows; error "
    "class, resolved num_splits, drawn seed and DeprecationWarning compared (io_queue_depth is not "
    "observable)",
}

VECTOR_FAMILIES: Mapping[str, str] = {
    "topology": "split ownership is internal; PartitionInv checks it on real runs",
    "row_order": "takes arbitrary permutations and faults; the machines run real tables",
    "packing": "takes arbitrary permutations and corpora; the machines run real tables",
    **_BLACK_BOX,
    "commit": "the consumer commit is internal; ConsumerCommitProp checks it end to end",
    "auto_budget": "takes arbitrary document lengths; AutoBudgetInv checks real tables",
    "loader": "takes arbitrary permutations; the machines run StreamingDataLoader on tables",
}
"""Every vector family and how it is run against an implementation (or why it cannot be)."""

_ERROR_CLASSES: Mapping[str, type[Exception]] = {
    "ValueError": ValueError,
    "TypeError": TypeError,
    "RuntimeError": RuntimeError,
}


def _compact(value: object, limit: int = 400) -> str:
    try:
        text = json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}({_first_line(lines[-1] if lines else '', 200)!r})"


def _expected_error(expected: JsonObject) -> tuple[str, str] | None:
    error = expected.get("error")
    if not isinstance(error, dict):
        return None
    return as_str(error["class"]), as_str(error["code"])


def _judge_error(error: Exception, expected: JsonObject, call: str) -> str | None:
    want = _expected_error(expected)
    if want is None:
        return f"{call} raised {_describe(error)}; the spec gives {_compact(expected)}"
    cls = _ERROR_CLASSES.get(want[0], getattr(builtins, want[0], Exception))
    if isinstance(error, cls):
        return None
    return f"{call} raised {_describe(error)}; the spec raises {want[0]} ({want[1]})"


def _judge_success(expected: JsonObject, what: str) -> str | None:
    """``None`` when the spec expects no error; else the complaint that ``what`` happened instead."""
    want = _expected_error(expected)
    if want is None:
        return None
    return f"{what}; the spec raises {want[0]} ({want[1]})"


def _diff(got: Json, expected: Json, what: str) -> str | None:
    if json.dumps(got) == json.dumps(expected):
        return None
    return f"{what}: got {_compact(got)}; the spec gives {_compact(expected)}"


@dataclass
class _VectorContext:
    """Tables and datasets for replaying vectors against one implementation."""

    implementation: Implementation
    directory: Path
    tables: TableCache = field(init=False)
    _params_tables: dict[tuple[tuple[tuple[str, str], ...], int], object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tables = TableCache(self.directory)

    def dataset(self, config: RunConfig, split_len: int) -> DatasetLike:
        """A fresh world-size-1 dataset of ``config`` over ``num_splits * split_len`` rows."""
        params: dict[str, object] = {
            "num_splits": config.num_splits,
            "shuffle": True,
            "shuffle_seed": config.shuffle_seed,
            "epoch": config.epoch,
            "rank": 0,
            "world_size": 1,
        }
        if config.packing is not None:
            params.update(
                columns=[TOKEN_COLUMN],
                pack_sequences=config.packing.pack_sequences,
                eos_id=config.packing.eos_id,
                pad_id=config.packing.pad_id,
                blocks_per_epoch=config.packing.blocks_per_epoch,
            )
        table = self.tables.table(TableKey(config.num_splits * max(1, split_len)))
        try:
            return self.implementation.dataset(table, **params)
        except Exception as error:
            raise AssertionError(
                f"StreamingDataset(table, **{params!r}) raised {_describe(error)}; the spec accepts it"
            ) from error

    def params_table(self, columns: Mapping[str, str], rows: int) -> object:
        """A table with ``rows`` rows and one column per kind (int lists, string lists, floats 1.0)."""
        key = (tuple(sorted(columns.items())), rows)
        if key not in self._params_tables:
            arrays: dict[str, pa.Array] = {}
            for name, kind in sorted(columns.items()):
                if kind == "int_list":
                    arrays[name] = pa.array([[i, i + 1] for i in range(rows)], pa.list_(pa.int64()))
                elif kind == "other_list":
                    arrays[name] = pa.array([["a"] for _ in range(rows)], pa.list_(pa.string()))
                else:
                    arrays[name] = pa.array([1.0] * rows, pa.float64())
            db = lancedb.connect(str(self.directory))
            name = f"params_{len(self._params_tables)}"
            self._params_tables[key] = db.create_table(name, pa.table(arrays), mode="overwrite")
        return self._params_tables[key]


def _progress_of(dataset: DatasetLike, config: RunConfig, split_len: int) -> Json:
    state = dataset.state_dict()
    parsed: RowState | PackedState
    try:
        if config.packing is None:
            parsed = load_row(config, state, split_len)
        else:
            parsed = load_packed(config, state, split_len)
    except SpecError as error:
        raise AssertionError(
            f"state_dict() gave {_compact(state)}, which the spec cannot read: {error}"
        ) from error
    return enc_state(parsed)


def _vector_merge(ctx: _VectorContext, case: VectorCase) -> str | None:
    checkpoints = [cast(Mapping[str, object], decode_value(c)) for c in as_list(case["input"]["checkpoints"])]
    expected = case["output"]
    try:
        merged = ctx.implementation.merge_state_dicts(checkpoints)
    except Exception as error:
        return _judge_error(error, expected, "merge_state_dicts")
    if (
        problem := _judge_success(expected, f"merge_state_dicts returned {_compact(merged, 200)}")
    ) is not None:
        return problem
    if not isinstance(merged, Mapping):
        return f"merge_state_dicts returned {merged!r}, not a dict"
    try:
        got = enc_checkpoint(merged)
    except TypeError as error:
        return f"merge_state_dicts returned {_compact(merged)}: {error}"
    return _diff(cast(Json, got), cast(Json, expected), "merged checkpoint")


def _vector_load(ctx: _VectorContext, case: VectorCase) -> str | None:
    given = case["input"]
    config = dec_config(given["config"])
    split_len = as_int(given["split_len"])
    if config.perm_fingerprint is not None:
        raise _NotApplicable("needs a split_strategy dataset (perm_fingerprint)")
    expected = case["output"]
    dataset = ctx.dataset(config, split_len)
    try:
        dataset.load_state_dict(cast(Mapping[str, object], decode_value(given["checkpoint"])))
    except Exception as error:
        return _judge_error(error, expected, "load_state_dict")
    if (problem := _judge_success(expected, "load_state_dict accepted it")) is not None:
        return problem
    return _diff(_progress_of(dataset, config, split_len), expected["state"], "progress after the load")


def _vector_snapshot(ctx: _VectorContext, case: VectorCase) -> str | None:
    given = case["input"]
    config = dec_config(given["config"])
    expected = case["output"]
    if _expected_error(expected) is not None:
        raise _NotApplicable("a snapshot of the other mode cannot be requested through the public API")
    if config.perm_fingerprint is not None:
        raise _NotApplicable("needs a split_strategy dataset (perm_fingerprint)")
    if config.packing is None:
        row = dec_row_state(given["state"])
        payload, progress = snapshot_row(config, row), row.positions
    else:
        packed = dec_packed_state(given["state"])
        payload, progress = snapshot_packed(config, packed), packed.consumed
    dataset = ctx.dataset(config, max(1, *progress))
    try:
        dataset.load_state_dict(payload)
    except Exception as error:
        return f"load_state_dict({_compact(payload, 200)}) raised {_describe(error)}"
    state = dataset.state_dict()
    if not isinstance(state, Mapping):
        return f"state_dict() returned {state!r}"
    return _diff(cast(Json, enc_checkpoint(state)), cast(Json, expected), "state_dict()")


_PARAM_DEFAULTS: Mapping[str, object] = {f.name: f.default for f in dataclasses.fields(Params)}


def _vector_params(ctx: _VectorContext, case: VectorCase) -> str | None:
    given = case["input"]
    decoded = {name: decode_value(value) for name, value in as_object(given["params"]).items()}
    for name in ("split_strategy", "connection_factory"):
        if decoded.get(name) is CALLABLE:
            raise _NotApplicable(f"needs a working {name}")
    # Keywords left at a default of None are not passed (an implementation may lack rare keywords).
    kwargs = {k: v for k, v in decoded.items() if not (v is None and _PARAM_DEFAULTS.get(k, 0) is None)}
    for name, value in kwargs.items():
        if value is CALLABLE:
            kwargs[name] = _some_callable
    facts = as_object(given["table"])
    columns = {name: as_str(kind) for name, kind in as_object(facts["columns"]).items()}
    rows = as_int(facts["rows"])
    table = ctx.params_table(columns, rows)
    flt = kwargs.get("filter")
    if isinstance(flt, str) and table.count_rows(flt) != rows:  # type: ignore[attr-defined]
        raise _NotApplicable(f"cannot build a table where exactly {rows} rows pass {flt!r}")
    expected = case["output"]
    call = "StreamingDataset(table, " + ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items())) + ")"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            dataset = ctx.implementation.dataset(table, **kwargs)
        except TypeError as error:
            if "unexpected keyword argument" in str(error):
                raise _NotApplicable(f"the implementation has no such keyword: {error}") from error
            return _judge_error(error, expected, call)
        except Exception as error:
            return _judge_error(error, expected, call)
    if (problem := _judge_success(expected, f"{call} succeeded")) is not None:
        return problem
    problems: list[str] = []
    deprecated = any(
        issubclass(w.category, DeprecationWarning) and "prefetch_batches" in str(w.message) for w in caught
    )
    warned = ["prefetch_batches_deprecated"] if deprecated else []
    if warned != expected["warnings"]:
        problems.append(f"warnings {warned}, the spec {expected['warnings']}")
    try:
        state = dataset.state_dict()
    except Exception as error:
        return f"{call}.state_dict() raised {_describe(error)}"
    if encode_int(cast(int, state.get("num_splits"))) != expected["num_splits"] or not isinstance(
        state.get("num_splits"), int
    ):
        problems.append(f"num_splits {state.get('num_splits')!r}, the spec {expected['num_splits']}")
    seed = state.get("shuffle_seed")
    if expected["draws_seed"]:
        if not (isinstance(seed, int) and 0 <= seed < 2**32):
            problems.append(f"shuffle_seed=None drew {seed!r}, the spec draws one in [0, 2**32)")
    elif seed != decoded["shuffle_seed"]:
        problems.append(f"shuffle_seed {seed!r}, given {decoded['shuffle_seed']!r}")
    return f"{call}: " + "; ".join(problems) if problems else None


def _some_callable(*args: object, **kwargs: object) -> object:
    """Stands for ``{"$": "callable"}`` (a transform or error handler that is never called here)."""
    raise AssertionError("the conformance vectors never call this")


_RUNNERS: Mapping[str, Callable[[_VectorContext, VectorCase], str | None]] = {
    "merge": _vector_merge,
    "load": _vector_load,
    "checkpoint_snapshot": _vector_snapshot,
    "params": _vector_params,
}


def _cases(family: str, directory: Path | str | None) -> tuple[list[VectorCase], str]:
    """The committed cases of ``family``, or (no files) the same cases generated from the spec."""
    try:
        return load_vectors(family, directory), str(default_directory() if directory is None else directory)
    except FileNotFoundError:
        built: list[VectorCase] = []
        for case in FAMILIES[family].cases():
            vector = case.build()
            built.append(
                {
                    "name": case.name,
                    "description": case.description,
                    "input": vector.input,
                    "output": vector.output,
                }
            )
        return built, "generated from the spec in memory (no vector files found)"


def _run_vectors(
    implementation: Implementation,
    directory: Path,
    vectors_dir: Path | str | None,
    progress: ProgressCallback | None,
) -> tuple[tuple[VectorResult, ...], str]:
    ctx = _VectorContext(implementation, directory)
    results: list[VectorResult] = []
    sources: set[str] = set()
    for family, note in VECTOR_FAMILIES.items():
        runner = _RUNNERS.get(family)
        if runner is None:
            results.append(VectorResult(family, "not-applicable", note=note))
            continue
        cases, source = _cases(family, vectors_dir)
        sources.add(source)
        passed = 0
        failures: list[VectorCaseResult] = []
        skipped: list[VectorCaseResult] = []
        for done, case in enumerate(cases, 1):
            try:
                problem = runner(ctx, case)
            except _NotApplicable as reason:
                skipped.append(VectorCaseResult(case["name"], str(reason)))
            except AssertionError as error:
                failures.append(VectorCaseResult(case["name"], str(error)))
            except Exception as error:
                failures.append(VectorCaseResult(case["name"], f"unexpected {_describe(error)}"))
            else:
                if problem is None:
                    passed += 1
                else:
                    failures.append(VectorCaseResult(case["name"], problem))
            if progress is not None:
                progress(ProgressEvent("vectors", family, done, len(cases), "cases", done == len(cases)))
        status: VectorStatus = "fail" if failures else ("pass" if passed else "not-applicable")
        results.append(VectorResult(family, status, passed, tuple(failures), tuple(skipped), note))
    return tuple(results), "; ".join(sorted(sources))
