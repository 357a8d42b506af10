"""What ``lancedb.streaming`` is pinned to break under the conformance suite: data only.

``tests/conformance/test_conformance.py`` fails when the reference breaks an invariant or a
vector case not listed here, or stops breaking a listed one
(:func:`compare_with_known`); each entry was observed by running the suite and
is explained by the B-id of a weak point in ``spec/REFERENCE.md`` (our deviation D-id in
``spec/DEVIATIONS.md``, or an N-id of a weak point without a deviation).

Rules of this module: every reason is written once, as a constant below; an
invariant or a case refers to its reason, never restates it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .report import ConformanceReport

REFERENCE = "lancedb.streaming"
"""The reference implementation's module name."""


@dataclass(frozen=True)
class KnownViolation:
    """One invariant the reference is known to break."""

    machines: frozenset[str]
    """The machines whose exploration finds it at the CI settings (:func:`conformance_settings` defaults),
    as ``tests/conformance/test_conformance.py`` runs them. The reference run alone in a fresh process and the
    same run after elastic-loader's in one process find the same invariants on the same machines
    (2026-12-01: the file's ``test_reference_breaks_exactly_the_pinned_invariants_and_vectors`` run
    alone passes; ``run_conformance`` of the reference, alone and after the pipeline's, one
    process each, gives identical ``found_by`` sets). An earlier note that the row machine's
    results depended on the earlier run did not reproduce."""
    reason: str
    """The reference's weak point (B-id, ``spec/REFERENCE.md``) and our deviation (D-id) behind it."""


@dataclass(frozen=True)
class KnownResults:
    """What ``lancedb.streaming`` is known to break: invariants, and vector cases by family."""

    invariants: Mapping[str, KnownViolation]
    vectors: Mapping[str, Mapping[str, str]]
    """Family -> failing case name -> reason."""
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    """Invariant -> why the implementation cannot be checked for it (status ``not-applicable``)."""


# ---------------------------------------------------------------- the reasons, once each

B1 = "B1/D1: in-process snapshots report the iterator's own minimum for splits it does not own"
B9 = "B9/D7: a raising row fails its whole read batch and surfaces before earlier rows"
B2 = "B2/D2: row-mode load_state_dict ignores epoch (a missing or different epoch passes)"
D3_TYPES = "B22/D3: parameter types are not validated at construction (bools pass as ints)"
D3_VALUES = (
    "B3/B4/D3: values are not validated at construction (accepted, or a late backend error, "
    "OverflowError or RustPanic instead of ValueError)"
)
D4 = "B13/D4: shuffle_seed=None is accepted with world_size > 1"
D5 = "B14/D5: fingerprints are compared only when the first state has one (or not at all on load)"
D6 = "B15/D6: list lengths are not checked; a legacy int makes merge fail with TypeError"
D18 = "D18: progress beyond the split end or budget, or negative, is not rejected"
D19 = "D19: a missing checkpoint key raises KeyError, not ValueError"
D20 = "D20: prefetch_batches logs a warning but emits no DeprecationWarning"
N2 = "N2: checkpoint values are not type-checked (int() conversions, == comparisons)"
N3 = "N3: samples > positions is not rejected"
N5 = "N5: the merge keeps unknown keys instead of writing a canonical checkpoint"
N5_CONFIG = "N5: the merge copies the first state's config without validating it"
N6 = "N6: pack_buffers keys and buffers are not validated"
B1_D24 = (
    "B1/D24: a checkpoint gives other ranks' splits their loaded values (in-process rows: the iterator's "
    "own minimum) instead of their lockstep progress, and never says what it does not know, so one "
    "rank's checkpoint resumes a job only until the first resume, and a partial one loads"
)
B1_D24_MERGE = (
    "B1/D24: a checkpoint does not say which splits it reports, so merge_state_dicts accepts a subset "
    "of the ranks"
)
D23 = (
    "D23 (R7.2): state_dict() refuses unless every split of the rank is at one step (packed always; "
    "rows with several StreamingDataLoader workers)"
)

# the save protocols' vector cases (D23-D26)
D23_PACKED_MERGE = "D23: a packed merge refuses states not captured at one global step"
D23_PACKED_SNAPSHOT = (
    "D23: a packed checkpoint off a step boundary is refused (state_dict) or cannot be replayed"
)
D24_KEY_IGNORED = (
    "D24/D25/D26: the elastic_loader key is not read, so malformed entries in it are not refused"
)
D24_LEGACY_PACKED = (
    "D24: a legacy packed state whose splits emitted different block counts loads "
    "(only one rank's splits are exact)"
)
D24_MERGE_MAX = (
    "D24: the merge takes every state's values (element-wise maximum), not each split from the states "
    "that report it; N5: it copies the first state's elastic_loader key"
)
D24_PARTIAL_MERGE = "D24: a merge that leaves out a rank is not refused"
D24_PROJECTIONS = "D24: projections are ignored, so the loaded packed state is partial"
D24_UNKNOWN = "D24: splits the saver marked unknown are not refused"
D25_VERSIONS = "D25: checkpoints of different table versions merge"
D26_BUFFERS = "D26: packed buffers that no packer leaves behind are accepted"
D26_DIGEST = "D26: the digest is not checked, so edited checkpoints load"

NO_MIXTURES = (
    "lancedb.streaming has no mixtures (no StreamingMixture or MixtureSource); mixtures are "
    "elastic-loader's own (docs/MIXTURES.md), so the mixture machine and the mixture vectors do not apply"
)

# ---------------------------------------------------------------- invariants

_ROW = frozenset({"row"})
_PACKED = frozenset({"packed"})
_ROW_AND_PACKED = frozenset({"row", "packed"})

_B1_CONSEQUENCES: Mapping[str, tuple[frozenset[str], str]] = {
    "HonestProgressInv": (_ROW, ""),
    "SkipAccountingInv": (_ROW, " (as positions = samples, ignoring skipped rows)"),
    "ResumeEquivalenceProp": (_ROW, ", so resuming a checkpoint that overstates them skips or repeats rows"),
    "ExactlyOnceProp": (_ROW, ", so rows of lagging splits are repeated or never delivered"),
    "MergeExactProp": (
        _ROW_AND_PACKED,
        ", so merging overstates the lagging ranks (D24: the merge takes the furthest value any state "
        "gives a split, whether its owner reported it or not)",
    ),
}
"""The invariants B1 breaks, each with the machines that find it and what B1 does to it."""

_OTHER_VIOLATIONS: Mapping[str, KnownViolation] = {
    "CheckpointRoundTripInv": KnownViolation(
        _ROW_AND_PACKED,
        "B2/D2: row-mode load_state_dict accepts a checkpoint of another epoch; "
        "D9: pack_buffers keeps empty buffers (not the canonical form)",
    ),
    "RaisePositionProp": KnownViolation(_ROW, B9),
    "LockstepInferenceInv": KnownViolation(_ROW_AND_PACKED, B1_D24),
    "MergeReportedInv": KnownViolation(_ROW_AND_PACKED, B1_D24_MERGE),
    "PartialStateRefusedInv": KnownViolation(_PACKED, B1_D24 + " (packed: one rank's state, R6.1)"),
    "ProtocolChainProp": KnownViolation(_ROW_AND_PACKED, B1_D24 + ", so resumed rows and blocks repeat"),
    "PackingConservationInv": KnownViolation(_PACKED, B1_D24 + ", so resumed documents repeat"),
    "ElasticDeterminismProp": KnownViolation(
        _ROW_AND_PACKED, B1_D24 + ", so later global steps repeat or miss rows"
    ),
    "PackingBudgetProp": KnownViolation(_PACKED, B1_D24 + ", so a resumed split exceeds its budget"),
    "SameTopologyResumeProp": KnownViolation(frozenset({"packed", "process"}), D23),
}

# ---------------------------------------------------------------- vector cases, by family and reason

_MALFORMED_FIELDS: tuple[str, ...] = (
    "error_row_samples_not_a_list",
    "error_row_samples_bool_legacy",
    "error_row_samples_holds_string",
    "error_row_samples_holds_bool",
    "error_row_samples_holds_float",
    "error_row_positions_not_a_list",
    "error_packed_emitted_holds_null",
    "error_pack_buffers_not_a_dict",
    "error_buffer_not_a_dict",
    "error_buffer_without_starts",
    "error_buffer_tokens_not_a_list",
    "error_buffer_token_is_bool",
)
"""Malformed progress and buffer fields, the same cases in ``merge`` and ``load``: taken as written (N2)."""

_BUFFER_KEYS_AND_STARTS: tuple[str, ...] = (
    "error_buffer_key_int_beyond_splits",
    "error_buffer_key_bool",
    "error_buffer_start_beyond_tokens",
    "error_buffer_start_negative",
    "error_buffer_start_in_empty_buffer",
    "error_buffer_starts_unsorted",
    "error_buffer_starts_repeated",
)
"""Buffer keys and starts both families let through (N6), listed after the key cases."""

_BUFFER_KEYS_UNCHECKED: tuple[str, ...] = (
    "error_buffer_key_twice",
    "error_buffer_key_beyond_splits",
    "error_buffer_key_negative",
)
"""Buffer keys not validated (N6), the same cases in ``merge`` and ``load`` (``merge`` adds one)."""

_NEGATIVE_COUNTS: tuple[str, ...] = (
    "error_row_negative_sample",
    "error_row_negative_legacy_int",
    "error_packed_negative_emitted",
)
"""Negative counts let through (D18), the same cases in ``merge`` and ``load``."""

_MERGE_FAILURES: Mapping[str, tuple[str, ...]] = {
    D19: (
        "error_missing_epoch",
        "error_first_missing_shuffle_seed",
        "error_missing_eos_id",
        "error_row_missing_samples",
        "error_packed_missing_emitted",
    ),
    N2: (
        "error_num_splits_not_int",
        "error_epoch_is_bool",
        "error_fingerprint_not_a_string",
        *_MALFORMED_FIELDS,
    ),
    D6: (
        "row_legacy_int_and_list",
        "error_row_samples_too_short",
        "error_row_positions_too_long",
    ),
    D18: _NEGATIVE_COUNTS,
    N3: ("error_row_positions_below_samples",),
    N6: (*_BUFFER_KEYS_UNCHECKED, "error_buffer_key_not_a_number", *_BUFFER_KEYS_AND_STARTS),
    D5: (
        "error_fingerprint_only_in_second",
        "error_fingerprint_only_in_first",
        "error_fingerprints_differ",
    ),
    N5_CONFIG: (
        "error_num_splits_zero",
        "error_pack_sequences_zero",
        "error_blocks_per_epoch_zero",
        "error_blocks_per_epoch_not_divisible",
    ),
    N5: ("row_unknown_keys_dropped",),
}

_LOAD_FAILURES: Mapping[str, tuple[str, ...]] = {
    D19: (
        "error_missing_shuffle_seed",
        "error_missing_num_splits",
        "error_row_missing_samples",
        "error_packed_missing_emitted",
    ),
    B2: (
        "error_missing_epoch",
        "error_epoch_differs_row_mode",
    ),
    N2: (*_MALFORMED_FIELDS,),
    D6: (
        "error_row_samples_too_short",
        "error_row_positions_too_long",
        "error_packed_consumed_too_short",
    ),
    D18: (
        "error_row_position_beyond_split_end",
        "error_row_legacy_beyond_split_end",
        "error_packed_consumed_beyond_split_end",
        "error_packed_emitted_beyond_budget",
        *_NEGATIVE_COUNTS,
    ),
    N3: ("error_row_positions_below_samples",),
    N6: (*_BUFFER_KEYS_UNCHECKED, *_BUFFER_KEYS_AND_STARTS),
    D5: ("error_fingerprint_on_random_split_dataset",),
}

_PARAMS_FAILURES: Mapping[str, tuple[str, ...]] = {
    D3_TYPES: (
        "row_columns_str_text",
        "row_columns_list_1",
        "row_columns_list_text_none",
        "packing_columns_str_tokens",
        "row_connection_factory_str_db",
        "packing_eos_id_str_1",
        "packing_eos_id_float",
        "packing_eos_id_true",
        "packing_pad_id_str_1",
        "packing_pad_id_float",
        "packing_pad_id_true",
        "row_epoch_true",
        "row_rank_true",
        "row_world_size_true",
        "row_shuffle_seed_true",
        "row_io_queue_depth_float",
        "row_io_queue_depth_true",
        "row_num_splits_float",
        "row_num_splits_true",
        "packing_pack_sequences_float",
        "packing_pack_sequences_true",
        "row_prefetch_batches_float",
        "row_prefetch_batches_true",
        "row_read_batch_size_str_1",
        "row_read_batch_size_float",
        "row_read_batch_size_true",
        "row_read_batch_size_none",
        "row_shuffle_clump_size_true",
        "row_shuffle_1",
        "row_shuffle_none",
        "row_shuffle_str_yes",
        "row_transform_1",
        "row_transform_str_upper",
        "row_transform_parallelism_float",
        "row_transform_parallelism_true",
        "row_transform_queue_depth_float",
        "row_transform_queue_depth_true",
        "row_worker_info_override_1",
        "row_worker_info_override_str_worker",
    ),
    D3_VALUES: (
        "packing_blocks_per_epoch_2pow63",
        "row_worker_info_override_worker_info_0_of_0",
        "row_worker_info_override_worker_info_2_of_2",
        "row_columns_list_text_text",
        "row_columns_empty_list",
        "row_columns_list_missing",
        "packing_columns_list_missing",
        "packing_eos_id_2pow63",
        "packing_pad_id_minus_2pow63_minus",
        "row_epoch_minus_1",
        "row_num_splits_0",
        "row_shuffle_clump_size_0",
        "row_rank_minus_1",
        "row_rank_1",
        "multi_rank_rank_4",
        "row_read_batch_size_0",
        "row_read_batch_size_minus_64",
        "row_shuffle_seed_minus_1",
        "row_shuffle_seed_2pow64",
        "row_epoch_184461906879890",
        "multi_rank_shuffle_seed_2pow64",
        "row_world_size_0",
        "row_world_size_minus_1",
    ),
    D4: ("multi_rank_shuffle_seed_none",),
    D20: ("row_prefetch_batches_overrides_queue_depth",),
}
"""Parameter cases the reference fails. None of the ``permutation`` cases (D46) is here: the
reference has no such keyword, so every case that passes a kind other than ``"builder"`` is not
applicable to it (2026-12-01: 33 such cases skipped, ``row_permutation_builder`` passes, where
``"builder"`` is left out), and a failure would mean the replay passed it a keyword it lacks."""


_KEY_CASES: tuple[str, ...] = (
    "error_cursor_next_roles_not_a_list",
    "error_cursor_not_a_dict",
    "error_cursor_of_one_worker",
    "error_cursor_role_beyond_workers",
    "error_cursor_role_per_rank",
    "error_cursor_without_next_roles",
    "error_cursor_workers_do_not_divide_splits",
    "error_format_missing",
    "error_format_unknown",
    "error_projected_beyond_budget",
    "error_projected_key_beyond_splits",
    "error_projected_key_twice",
    "error_projected_not_a_dict",
    "error_projected_not_beyond_base",
    "error_projected_row_split",
    "error_projected_target_string",
    "error_provenance_not_a_dict",
    "error_reported_beyond_splits",
    "error_reported_holds_a_string",
    "error_reported_not_a_list",
    "error_reported_repeated",
    "error_reported_repeated_signed",
    "error_table_negative_version",
    "error_table_no_rows",
    "error_table_not_a_dict",
    "error_table_without_rows",
    "error_unknown_and_reported",
    "error_unknown_negative",
)
"""Malformed entries of the elastic_loader key: the same cases in the merge and load families."""

_MERGE_PROTOCOL_FAILURES: Mapping[str, tuple[str, ...]] = {
    D23_PACKED_MERGE: (
        "ours_packed_lockstep",
        "ours_packed_out_of_lockstep",
    ),
    D24_KEY_IGNORED: _KEY_CASES,
    D24_PARTIAL_MERGE: (
        "error_ours_one_of_two_ranks",
        "error_ours_three_of_four_ranks",
    ),
    D24_MERGE_MAX: (
        "ours_pinned_and_unpinned",
        "ours_row_four_ranks",
        "ours_row_lockstep",
        "ours_row_out_of_lockstep",
        "ours_row_skipping_transforms",
        "ours_same_rank_twice",
        "ours_through_json_and_legacy",
        "ours_with_table_pin",
        "row_elementwise_maximum",
        "row_positions_missing",
        "row_with_fingerprint",
    ),
    D25_VERSIONS: ("error_table_versions_differ",),
    D26_BUFFERS: (
        "error_buffer_document_not_after_eos",
        "error_buffer_of_a_split_that_consumed_nothing",
        "error_buffer_of_more_documents_than_consumed",
        "error_buffer_without_final_eos",
    ),
    D26_DIGEST: ("error_digest_mismatch",),
}

_LOAD_PROTOCOL_FAILURES: Mapping[str, tuple[str, ...]] = {
    D24_LEGACY_PACKED: ("error_packed_partial_state",),
    D23_PACKED_SNAPSHOT: ("ours_packed_through_json",),
    D24_KEY_IGNORED: _KEY_CASES,
    D24_PROJECTIONS: (
        "ours_packed_projected",
        "packed_partial_state_with_provenance",
    ),
    D24_UNKNOWN: (
        "error_ours_unknown_splits_of_this_rank",
        "error_ours_unknown_splits_on_another_topology",
    ),
    D26_BUFFERS: (
        "error_buffer_document_not_after_eos",
        "error_buffer_of_a_split_that_consumed_nothing",
        "error_buffer_of_more_documents_than_consumed",
        "error_buffer_without_final_eos",
    ),
    D26_DIGEST: (
        "error_digest_mismatch",
        "error_ours_edited",
    ),
}

_SNAPSHOT_FAILURES: Mapping[str, tuple[str, ...]] = {
    D23_PACKED_SNAPSHOT: ("ours_packed_projected",),
}


def _by_case(failures: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """Case name -> reason, from reason -> case names."""
    return {case: reason for reason, cases in failures.items() for case in cases}


KNOWN_REFERENCE_RESULTS = KnownResults(
    invariants={
        **{name: KnownViolation(where, B1 + then) for name, (where, then) in _B1_CONSEQUENCES.items()},
        **_OTHER_VIOLATIONS,
    },
    vectors={
        "merge": {**_by_case(_MERGE_FAILURES), **_by_case(_MERGE_PROTOCOL_FAILURES)},
        "load": {**_by_case(_LOAD_FAILURES), **_by_case(_LOAD_PROTOCOL_FAILURES)},
        "checkpoint_snapshot": _by_case(_SNAPSHOT_FAILURES),
        "params": _by_case(_PARAMS_FAILURES),
    },
    not_applicable=dict.fromkeys(
        (
            "MixtureProportionInv",
            "MixtureLockstepInv",
            "MixtureElasticDeterminismProp",
            "MixtureExactlyOnceProp",
        ),
        NO_MIXTURES,
    ),
)
"""The pinned results of ``lancedb.streaming`` 0.40 under :func:`run_conformance` (later releases:
:func:`reference_results`)."""


FIXED_IN: Mapping[tuple[int, int], Mapping[str, Mapping[str, str]]] = {
    (0, 41): {
        "merge": {
            "error_fingerprints_differ": (
                "lancedb 0.41 compares perm_fingerprint in a merge when the first state has one"
            ),
        },
        "load": {
            "error_fingerprint_on_random_split_dataset": (
                "lancedb 0.41 compares a checkpoint's perm_fingerprint with every dataset's own on load"
            ),
        },
    },
}
"""Vector cases a lancedb release no longer fails: release -> family -> case -> what changed.

:data:`KNOWN_REFERENCE_RESULTS` pins lancedb 0.40 (the oldest release the package supports);
:func:`reference_results` takes these cases out for the release installed."""


def installed_release() -> tuple[int, int]:
    """The installed lancedb's ``(major, minor)`` release."""
    from importlib.metadata import version

    major, minor = version("lancedb").split(".")[:2]
    return int(major), int(minor)


def reference_results(release: tuple[int, int] | None = None) -> KnownResults:
    """What ``lancedb.streaming`` of ``release`` (default: the installed one) is pinned to break:
    :data:`KNOWN_REFERENCE_RESULTS` without the vector cases :data:`FIXED_IN` that release or earlier."""
    release = installed_release() if release is None else release
    fixed: dict[str, set[str]] = {}
    for since, families in FIXED_IN.items():
        if release >= since:
            for family, cases in families.items():
                fixed.setdefault(family, set()).update(cases)
    base = KNOWN_REFERENCE_RESULTS
    vectors = {
        family: {case: why for case, why in cases.items() if case not in fixed.get(family, set())}
        for family, cases in base.vectors.items()
    }
    return KnownResults(invariants=base.invariants, vectors=vectors, not_applicable=base.not_applicable)


def known_violations(machine: str, known: KnownResults = KNOWN_REFERENCE_RESULTS) -> dict[str, str]:
    """The invariants ``machine`` (a key of :data:`MACHINES`) is pinned to find violated, with reasons."""
    return {name: v.reason for name, v in known.invariants.items() if machine in v.machines}


def compare_with_known(report: ConformanceReport, known: KnownResults) -> list[str]:
    """Every difference between ``report`` and the pinned ``known`` results (empty when they agree).

    An invariant is compared per machine that ran: it must be found violated by
    exactly the pinned machines among them; the pinned ``not_applicable`` names, and
    only they, must be reported ``not-applicable``. Vector cases are compared per family
    that ran (status ``pass`` or ``fail``).
    """
    return [*_invariant_differences(report, known), *_vector_differences(report, known)]


def _invariant_differences(report: ConformanceReport, known: KnownResults) -> list[str]:
    problems: list[str] = []
    ran = {r.machine for r in report.runs}
    for result in report.invariants:
        if (result.status == "not-applicable") != (result.name in known.not_applicable):
            want_status = "not applicable" if result.name in known.not_applicable else "applicable"
            problems.append(f"{result.name} is {result.status}, pinned {want_status} ({result.note})")
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
    return problems


def _vector_differences(report: ConformanceReport, known: KnownResults) -> list[str]:
    problems: list[str] = []
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
