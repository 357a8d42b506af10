"""Every error code of ``spec/ERRORS.md`` is raised by the model, with the documented class.

The codes and classes are read from ``spec/ERRORS.md``; each has at least one
trigger below (a call that must fail with exactly that code). A code listed in
the document without a trigger, or a trigger for a code the document does not
list, fails the suite.
"""

from __future__ import annotations

import builtins
import dataclasses
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from elastic_loader.spec import (
    CheckpointGate,
    Faults,
    LocalShuffle,
    PackBuffer,
    PackedState,
    PackingConfig,
    Params,
    RowState,
    RunConfig,
    TableFacts,
    Topology,
    commit_packed,
    commit_row,
    cut_splits,
    deliver_batches,
    estimate_blocks_per_epoch,
    gate_after_failure,
    gate_after_untracked_iteration,
    gate_check_state_dict,
    global_steps,
    group_permutation,
    initial_packed_state,
    initial_row_state,
    iterate_packed,
    iterate_rows,
    join_packed,
    join_row,
    load_packed,
    load_row,
    merge_state_dicts,
    owned_splits,
    rank_splits,
    run_loader,
    snapshot_packed,
    snapshot_row,
    validate_params,
)
from elastic_loader.spec.computed import (
    ComputedPermutation,
    computed_index,
    computed_inverse,
    computed_locate,
    computed_positions,
    round_keys,
)
from elastic_loader.spec.errors import SpecError, SpecRuntimeError, SpecTypeError, SpecValueError
from elastic_loader.spec.inference import Pass
from elastic_loader.spec.local import (
    LocalPermutation,
    clumped_index,
    clumped_inverse,
    local_index,
    local_locate,
    local_positions,
    local_runs,
    window_offset,
    window_offset_inverse,
    window_size,
)
from elastic_loader.spec.mixture import MixtureState, check_mixture_state, initial_mixture_state
from elastic_loader.spec.mixture_saved import exact_mixture, load_mixture, merge_mixture, snapshot_mixture
from elastic_loader.spec.mixture_schedule import (
    MixtureConfig,
    Regime,
    SourceData,
    check_data,
    edf_pick,
    integer_weights,
    mixture_schedule,
)
from elastic_loader.spec.protocols import Protocol, Shape, next_starts, run_session
from elastic_loader.spec.saved import (
    Cursor,
    Projection,
    Saved,
    TablePin,
    load_for_rank,
    load_saved,
    merge_saved,
    pinned_permutation,
    resolve,
    snapshot_saved,
)
from elastic_loader.spec.schedule import canonical_capacity, canonical_counts, round_robin_turns
from elastic_loader.spec.topology import check_permutation

ERRORS_MD = Path(__file__).resolve().parents[2] / "spec" / "ERRORS.md"
ROW = re.compile(r"^\|\s*`([a-z0-9_]+)`\s*\|\s*(ValueError|TypeError|RuntimeError)\s*\|", re.MULTILINE)
SPEC_CLASS: dict[str, type[SpecError]] = {
    "ValueError": SpecValueError,
    "TypeError": SpecTypeError,
    "RuntimeError": SpecRuntimeError,
}


def documented() -> dict[str, str]:
    """Code -> builtin class name, from the tables of ``spec/ERRORS.md``."""
    rows = ROW.findall(ERRORS_MD.read_text())
    codes = [code for code, _ in rows]
    assert len(codes) == len(set(codes)), "a code is listed twice in spec/ERRORS.md"
    return dict(rows)


# ---------------------------------------------------------------- fixtures of the triggers

TABLE = TableFacts({"tokens": "int_list", "text": "other_list", "label": "scalar"}, rows=100)
PACKS = {"pack_sequences": 4, "eos_id": 0, "pad_id": 1, "blocks_per_epoch": 4, "columns": ["tokens"]}
PACKING = PackingConfig(pack_sequences=4, eos_id=9, pad_id=0, blocks_per_epoch=4)
C = RunConfig(num_splits=2, shuffle_seed=0, epoch=0)
PC = RunConfig(num_splits=2, shuffle_seed=0, epoch=0, packing=PACKING)
FC = RunConfig(num_splits=2, shuffle_seed=0, epoch=0, perm_fingerprint="ab")
R = snapshot_row(C, RowState((1, 1), (1, 1)))
P = snapshot_packed(PC, PackedState((1, 1), (1, 1), {0: PackBuffer((5, 9), (0,))}))
PERM = cut_splits(range(4), 2)
COMPUTED = ComputedPermutation(10, 3, 0, 0)
LOCAL = LocalPermutation(10, 3, 0, 0, 2, 2)
CORPUS = {r: (r,) for r in range(4)}
BUFFER = {"tokens": [5], "starts": [0]}

MIX = MixtureConfig(("a", "b"), (C, dataclasses.replace(C, shuffle_seed=1)))
MIX_DATA = [SourceData({0: PERM}), SourceData({0: cut_splits(range(10, 14), 2)})]
MIX_REGIMES = [Regime(0, (1, 1))]
MIX_START = initial_mixture_state(MIX)
MIX_WIRE = snapshot_mixture(exact_mixture(MIX, MIX_REGIMES, MIX_START))


def with_extra(state: dict[str, object], **extra: object) -> dict[str, object]:
    return dict(state, elastic_loader={"format": 1, **extra})


ONE_RANK = with_extra(R, reported=[0])
EXACT_R = snapshot_saved(Saved(C, RowState((1, 1), (1, 1)), frozenset({0, 1})))
UNREACHABLE = Saved(PC, initial_packed_state(2), frozenset({0}), projections={1: Projection(1)})
EXACT_V1 = Saved(C, initial_row_state(2), frozenset({0, 1}), table=TablePin(1, 4))
EXACT_V2 = Saved(C, initial_row_state(2), frozenset({0, 1}), table=TablePin(2, 4))


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    id: object
    num_workers: object


def params(**kwargs: object) -> Callable[[], object]:
    return lambda: validate_params(Params(**kwargs), TABLE)


def without(state: dict[str, object], key: str) -> dict[str, object]:
    return {k: v for k, v in state.items() if k != key}


def row_run_prefix() -> object:
    return iterate_rows(PERM, Faults(), (0, 1), initial_row_state(2)).state_after(99)


def packed_run_prefix() -> object:
    return iterate_packed(PERM, CORPUS, Faults(), (0, 1), PACKING, initial_packed_state(2)).state_after(-1)


def loader_run_prefix() -> object:
    return run_loader(C, PERM, Faults(), Topology(), initial_row_state(2), 1).state_after(99)


INT_PARAMS = (
    "prefetch_batches",
    "world_size",
    "rank",
    "num_splits",
    "epoch",
    "shuffle_seed",
    "read_batch_size",
    "io_queue_depth",
    "transform_parallelism",
    "transform_queue_depth",
    "shuffle_clump_size",
    "pack_sequences",
    "eos_id",
    "pad_id",
    "read_ahead_bytes",
)
OTHER_PARAMS = (
    "shuffle",
    "split_strategy",
    "filter",
    "transform",
    "connection_factory",
    "columns",
    "worker_info_override",
    "pickle_storage_credentials",
    "permutation",
)
MINIMUMS = {
    "world_size": 0,
    "rank": -1,
    "num_splits": 0,
    "epoch": -1,
    "shuffle_seed": -1,
    "read_batch_size": 0,
    "transform_parallelism": 0,
    "transform_queue_depth": 0,
    "shuffle_clump_size": 0,
    "read_ahead_bytes": 0,
}
MAXIMA = {
    "world_size": 2**63,
    "num_splits": 2**63,
    "epoch": 2**64,
    "shuffle_seed": 2**64,
    "read_batch_size": 2**63,
    "transform_parallelism": 1025,
    "transform_queue_depth": 2**63,
    "shuffle_clump_size": 2**63,
    "read_ahead_bytes": 2**63,
}

TRIGGERS: list[tuple[str, str, Callable[[], object]]] = [
    # topology and permutations
    ("num_splits_not_positive", "RunConfig", lambda: RunConfig(0, 0, 0)),
    ("num_splits_not_positive", "rank_splits", lambda: rank_splits(0, 1, 0)),
    ("num_splits_not_positive", "cut_splits", lambda: cut_splits([1], 0)),
    ("num_splits_not_positive", "check_permutation", lambda: check_permutation(())),
    ("num_splits_not_positive", "estimate", lambda: estimate_blocks_per_epoch([], 0, 4)),
    ("num_splits_not_positive", "merge", lambda: merge_state_dicts([dict(R, num_splits=0)])),
    ("world_size_not_positive", "Topology", lambda: Topology(world_size=0)),
    ("world_size_not_positive", "rank_splits", lambda: rank_splits(2, 0, 0)),
    ("rank_out_of_range", "Topology", lambda: Topology(2, 2)),
    ("rank_out_of_range", "rank_splits", lambda: rank_splits(2, 2, -1)),
    ("rank_out_of_range", "params rank >= world_size", params(rank=2, world_size=2)),
    ("rank_out_of_range", "params rank < 0", params(rank=-1)),
    ("num_workers_negative", "Topology", lambda: Topology(num_workers=-1)),
    ("worker_id_out_of_range", "Topology", lambda: Topology(num_workers=2, worker_id=2)),
    ("worker_id_out_of_range", "Topology no workers", lambda: Topology(worker_id=1)),
    ("num_splits_not_divisible_by_world_size", "rank_splits", lambda: rank_splits(3, 2, 0)),
    ("num_splits_not_divisible_by_world_size", "params", params(num_splits=3, world_size=2)),
    ("rank_splits_not_divisible_by_num_workers", "owned_splits", lambda: owned_splits(4, Topology(1, 0, 3))),
    (
        "rank_splits_not_divisible_by_num_workers",
        "run_loader",
        lambda: run_loader(C, PERM, Faults(), Topology(1, 0, 3), initial_row_state(2), 1),
    ),
    ("fewer_rows_than_splits", "cut_splits", lambda: cut_splits([1, 2], 3)),
    ("fewer_rows_than_splits", "params", lambda: validate_params(Params(num_splits=101), TABLE)),
    ("fewer_rows_than_splits", "ComputedPermutation", lambda: ComputedPermutation(2, 3, 0, 0)),
    ("num_splits_not_positive", "ComputedPermutation", lambda: ComputedPermutation(2, 0, 0, 0)),
    ("computed_rows_out_of_range", "no rows", lambda: ComputedPermutation(0, 1, 0, 0)),
    ("computed_rows_out_of_range", "2**64 + 1 rows", lambda: ComputedPermutation(2**64 + 1, 1, 0, 0)),
    ("computed_index_out_of_range", "computed_index", lambda: computed_index(COMPUTED, 10)),
    ("computed_index_out_of_range", "computed_inverse", lambda: computed_inverse(COMPUTED, -1)),
    ("computed_index_out_of_range", "computed_locate", lambda: computed_locate(COMPUTED, 10)),
    ("computed_split_out_of_range", "split 3", lambda: computed_positions(COMPUTED, 3, 0, 1)),
    ("computed_split_out_of_range", "split -1", lambda: computed_positions(COMPUTED, -1, 0, 1)),
    ("computed_range_out_of_range", "past the end", lambda: computed_positions(COMPUTED, 0, 2, 2)),
    ("computed_range_out_of_range", "negative first", lambda: computed_positions(COMPUTED, 0, -1, 1)),
    ("computed_range_out_of_range", "negative count", lambda: computed_positions(COMPUTED, 0, 0, -1)),
    ("shuffle_seed_out_of_range", "round_keys negative", lambda: round_keys(-1, 0)),
    ("shuffle_seed_out_of_range", "round_keys seed + epoch * prime", lambda: round_keys(2**64 - 1, 1)),
    ("epoch_out_of_range", "round_keys", lambda: round_keys(0, -1)),
    ("epoch_out_of_range", "ComputedPermutation", lambda: ComputedPermutation(10, 1, 0, -1)),
    ("permutation_columns_unequal", "group_permutation", lambda: group_permutation([1, 2], [0], 1)),
    ("strategy_split_ids", "id out of range", lambda: group_permutation([1, 2], [0, 2], 2)),
    ("strategy_split_ids", "id missing", lambda: group_permutation([1, 2], [0, 0], 2)),
    ("strategy_unequal_splits", "group_permutation", lambda: group_permutation([1, 2, 3], [0, 0, 1], 2)),
    (
        "strategy_unequal_splits",
        "iterate_rows",
        lambda: iterate_rows(((1,), (2, 3)), Faults(), (0,), initial_row_state(2)),
    ),
    # constructor parameters
    *[(f"{name}_type", "str", params(**{name: "1"})) for name in INT_PARAMS],
    *[(f"{name}_type", "bool", params(**{name: True})) for name in ("world_size", "pack_sequences")],
    *[(f"{name}_type", "int", params(**{name: 3})) for name in OTHER_PARAMS],
    ("columns_type", "list of ints", params(columns=[1])),
    *[(f"{name}_out_of_range", "minimum", params(**{name: value})) for name, value in MINIMUMS.items()],
    ("shuffle_seed_out_of_range", "seed + epoch * prime", params(shuffle_seed=2**64 - 100003, epoch=1)),
    ("io_queue_depth_out_of_range", "io_queue_depth", params(io_queue_depth=0)),
    ("io_queue_depth_out_of_range", "prefetch_batches=0", params(prefetch_batches=0)),
    *[(f"{name}_out_of_range", "maximum", params(**{name: value})) for name, value in MAXIMA.items()],
    ("io_queue_depth_out_of_range", "1025 threads", params(io_queue_depth=1025)),
    ("io_queue_depth_out_of_range", "prefetch_batches=2**63", params(prefetch_batches=2**63)),
    ("worker_info_override_type", "float id", params(worker_info_override=WorkerInfo(1.5, 2))),
    ("worker_info_override_type", "bool workers", params(worker_info_override=WorkerInfo(0, True))),
    ("worker_info_override_out_of_range", "id", params(worker_info_override=WorkerInfo(2, 2))),
    ("worker_info_override_out_of_range", "negative", params(worker_info_override=WorkerInfo(-1, 2))),
    ("worker_info_override_out_of_range", "no workers", params(worker_info_override=WorkerInfo(0, 0))),
    ("read_timeout_type", "bool", params(read_timeout=True)),
    ("read_timeout_type", "str", params(read_timeout="5")),
    ("read_timeout_out_of_range", "zero", params(read_timeout=0)),
    ("read_timeout_out_of_range", "negative", params(read_timeout=-1.5)),
    ("read_timeout_out_of_range", "nan", params(read_timeout=math.nan)),
    ("read_timeout_out_of_range", "-inf", params(read_timeout=-math.inf)),
    ("read_timeout_out_of_range", "too long", params(read_timeout=10**9 + 1)),
    ("pickle_storage_credentials_type", "string", params(pickle_storage_credentials="false")),
    ("pickle_storage_credentials_type", "zero", params(pickle_storage_credentials=0)),
    ("permutation_type", "None", params(permutation=None)),
    ("permutation_type", "after every other type", params(permutation=1.5, pickle_storage_credentials=True)),
    (
        "pickle_storage_credentials_type",
        "before permutation",
        params(permutation=1, pickle_storage_credentials=0),
    ),
    ("permutation_unknown", "case matters", params(permutation="Computed")),
    ("permutation_unknown", "after the seed checks", params(permutation="x", io_queue_depth=0)),
    ("shuffle_seed_out_of_range", "before permutation", params(permutation="x", shuffle_seed=2**64)),
    ("permutation_with_shuffle_false", "computed", params(permutation="computed", shuffle=False)),
    ("permutation_with_shuffle_false", "first", params(permutation="local", shuffle=False, filter="a")),
    ("permutation_with_split_strategy", "local", params(permutation="local", split_strategy=lambda: 0)),
    (
        "permutation_with_shuffle_clump_size",
        "LocalShuffle",
        params(permutation=LocalShuffle(2, 8), shuffle_clump_size=4),
    ),
    ("permutation_with_filter", "computed", params(permutation="computed", filter="score > 0")),
    ("io_queue_depth_out_of_range", "after permutation", params(permutation="computed", io_queue_depth=0)),
    ("local_clump_type", "bool", lambda: LocalShuffle(clump=True)),
    ("local_clump_type", "float", lambda: LocalShuffle(clump=2.0, window="w")),  # type: ignore[arg-type]
    ("local_window_type", "str", lambda: LocalShuffle(window="8")),  # type: ignore[arg-type]
    ("local_clump_out_of_range", "LocalShuffle zero", lambda: LocalShuffle(clump=0)),
    ("local_clump_out_of_range", "LocalShuffle before window", lambda: LocalShuffle(0, "w")),  # type: ignore[arg-type]
    ("local_window_out_of_range", "LocalShuffle 2**64 + 1", lambda: LocalShuffle(window=2**64 + 1)),
    ("pack_sequences_exceeds_budget", "2**31", params(**dict(PACKS, pack_sequences=2**31))),
    (
        "pack_sequences_exceeds_budget",
        "small budget",
        params(**dict(PACKS, pack_sequences=4, read_ahead_bytes=63)),
    ),
    ("blocks_per_epoch_out_of_range", "2**63", params(**dict(PACKS, blocks_per_epoch=2**63))),
    ("eos_id_out_of_range", "int64", params(**dict(PACKS, eos_id=2**63))),
    ("pad_id_out_of_range", "int64", params(**dict(PACKS, pad_id=-(2**63) - 1))),
    ("shuffle_seed_none_multi_rank", "params", params(shuffle_seed=None, world_size=2)),
    ("pack_sequences_not_positive", "params", params(**dict(PACKS, pack_sequences=0))),
    ("pack_sequences_not_positive", "PackingConfig", lambda: PackingConfig(0, 1, 2, 4)),
    ("eos_id_required", "params", params(**dict(PACKS, eos_id=None))),
    ("pad_id_required", "params", params(**dict(PACKS, pad_id=None))),
    ("blocks_per_epoch_required", "params", params(**dict(PACKS, blocks_per_epoch=None))),
    ("blocks_per_epoch_type", "float", params(**dict(PACKS, blocks_per_epoch=2.0))),
    ("blocks_per_epoch_type", "bool", params(**dict(PACKS, blocks_per_epoch=True))),
    ("blocks_per_epoch_type", "AUTO", params(**dict(PACKS, blocks_per_epoch="AUTO"))),
    ("blocks_per_epoch_not_positive", "params", params(**dict(PACKS, blocks_per_epoch=0))),
    ("blocks_per_epoch_not_positive", "PackingConfig", lambda: PackingConfig(4, 1, 2, 0)),
    ("blocks_per_epoch_not_divisible", "params", params(**dict(PACKS, blocks_per_epoch=3, num_splits=2))),
    ("blocks_per_epoch_not_divisible", "RunConfig", lambda: RunConfig(3, 0, 0, packing=PACKING)),
    ("blocks_per_epoch_without_packing", "params", params(blocks_per_epoch=4)),
    ("transform_with_packing", "params", params(**dict(PACKS, transform=print))),
    ("packing_columns", "None", params(**dict(PACKS, columns=None))),
    ("packing_columns", "two", params(**dict(PACKS, columns=["tokens", "text"]))),
    ("unknown_column", "packing", params(**dict(PACKS, columns=["nope"]))),
    ("unknown_column", "row mode", params(columns=["tokens", "nope"])),
    ("token_column_not_list", "scalar", params(**dict(PACKS, columns=["label"]))),
    ("token_column_not_integer", "strings", params(**dict(PACKS, columns=["text"]))),
    ("on_transform_error_invalid", "params", params(on_transform_error="ignore")),
    ("columns_empty", "params", params(columns=[])),
    ("columns_duplicate", "params", params(columns=["text", "text"])),
    # row mode
    ("faults_overlap", "Faults", lambda: Faults(frozenset({1}), frozenset({1}))),
    ("list_length", "RowState", lambda: RowState((0,), (0, 0))),
    ("list_length", "iterate_rows", lambda: iterate_rows(PERM, Faults(), (0,), initial_row_state(3))),
    ("list_length", "PackedState", lambda: PackedState((0,), (0, 0))),
    (
        "list_length",
        "iterate_packed",
        lambda: iterate_packed(PERM, CORPUS, Faults(), (0,), PACKING, initial_packed_state(3)),
    ),
    ("list_length", "join_row", lambda: join_row(initial_row_state(1), initial_row_state(2))),
    ("list_length", "join_packed", lambda: join_packed(initial_packed_state(1), initial_packed_state(2))),
    ("list_length", "load_row", lambda: load_row(C, dict(R, samples_consumed_per_split=[1]), 5)),
    ("list_length", "merge", lambda: merge_state_dicts([R, dict(R, positions_consumed_per_split=[1, 1, 1])])),
    (
        "list_length",
        "commit_packed",
        lambda: commit_packed(PC, initial_packed_state(2), dict(P, blocks_emitted_per_split=[1])),
    ),
    ("positions_below_samples", "RowState", lambda: RowState((2,), (1,))),
    ("positions_below_samples", "RowState negative", lambda: RowState((-1,), (0,))),
    (
        "positions_below_samples",
        "load_row",
        lambda: load_row(C, dict(R, samples_consumed_per_split=[2, 1]), 5),
    ),
    (
        "position_out_of_range",
        "iterate_rows",
        lambda: iterate_rows(PERM, Faults(), (0, 1), RowState((0, 0), (3, 0))),
    ),
    ("owned_not_sorted", "iterate_rows", lambda: iterate_rows(PERM, Faults(), (1, 0), initial_row_state(2))),
    ("owned_not_sorted", "duplicates", lambda: iterate_rows(PERM, Faults(), (1, 1), initial_row_state(2))),
    ("prefix_out_of_range", "RowRun", row_run_prefix),
    ("prefix_out_of_range", "PackedRun", packed_run_prefix),
    ("prefix_out_of_range", "LoaderRun", loader_run_prefix),
    # packing
    ("buffer_starts_unsorted", "PackBuffer", lambda: PackBuffer((1, 2), (1, 0))),
    (
        "buffer_starts_unsorted",
        "load_packed",
        lambda: load_packed(PC, dict(P, pack_buffers={0: {"tokens": [1, 2], "starts": [0, 0]}}), 2),
    ),
    ("buffer_start_out_of_range", "PackBuffer", lambda: PackBuffer((1,), (1,))),
    (
        "buffer_key_out_of_range",
        "PackedState key",
        lambda: PackedState((0,), (0,), {1: PackBuffer((1,), ())}),
    ),
    ("buffer_key_out_of_range", "PackedState empty", lambda: PackedState((0,), (0,), {0: PackBuffer()})),
    (
        "buffer_key_out_of_range",
        "load_packed str",
        lambda: load_packed(PC, dict(P, pack_buffers={"x": BUFFER}), 2),
    ),
    (
        "buffer_key_out_of_range",
        "load_packed int",
        lambda: load_packed(PC, dict(P, pack_buffers={2: BUFFER}), 2),
    ),
    (
        "buffer_key_out_of_range",
        "merge bool",
        lambda: merge_state_dicts([dict(P, pack_buffers={True: BUFFER})]),
    ),
    (
        "buffer_key_duplicate",
        "load_packed",
        lambda: load_packed(PC, dict(P, pack_buffers={0: BUFFER, "0": BUFFER}), 2),
    ),
    ("auto_budget_empty", "estimate", lambda: estimate_blocks_per_epoch([[1], []], 0, 4)),
    ("null_tokens", "estimate", lambda: estimate_blocks_per_epoch([[None]], 0, 4)),
    # checkpoints
    ("checkpoint_type", "load_row", lambda: load_row(C, [1, 1], 5)),
    ("checkpoint_type", "load_packed", lambda: load_packed(PC, "state", 5)),
    ("checkpoint_type", "merge", lambda: merge_state_dicts([R, 3])),
    ("checkpoint_type", "commit_row", lambda: commit_row(C, initial_row_state(2), None)),
    ("checkpoint_missing_key", "load_row epoch", lambda: load_row(C, without(R, "epoch"), 5)),
    (
        "checkpoint_missing_key",
        "load_row samples",
        lambda: load_row(C, without(R, "samples_consumed_per_split"), 5),
    ),
    ("checkpoint_missing_key", "load_packed eos_id", lambda: load_packed(PC, without(P, "eos_id"), 5)),
    (
        "checkpoint_missing_key",
        "load_packed emitted",
        lambda: load_packed(PC, without(P, "blocks_emitted_per_split"), 5),
    ),
    ("checkpoint_missing_key", "merge later state", lambda: merge_state_dicts([R, without(R, "epoch")])),
    (
        "checkpoint_value_type",
        "bool progress",
        lambda: load_row(C, dict(R, samples_consumed_per_split=[True, 1]), 5),
    ),
    (
        "checkpoint_value_type",
        "str progress",
        lambda: load_row(C, dict(R, samples_consumed_per_split="11"), 5),
    ),
    ("checkpoint_value_type", "pack_buffers list", lambda: load_packed(PC, dict(P, pack_buffers=[]), 5)),
    (
        "checkpoint_value_type",
        "buffer without starts",
        lambda: load_packed(PC, dict(P, pack_buffers={0: {"tokens": [1]}}), 5),
    ),
    (
        "checkpoint_value_type",
        "merge fingerprint",
        lambda: merge_state_dicts([dict(R, perm_fingerprint=5), dict(R, perm_fingerprint=5)]),
    ),
    ("checkpoint_value_type", "merge config", lambda: merge_state_dicts([dict(R, epoch="0")])),
    (
        "progress_out_of_range",
        "negative",
        lambda: load_row(C, dict(R, samples_consumed_per_split=[-1, 0]), 5),
    ),
    (
        "progress_out_of_range",
        "legacy negative",
        lambda: load_row(
            C, without(dict(R, samples_consumed_per_split=-1), "positions_consumed_per_split"), 5
        ),
    ),
    (
        "progress_out_of_range",
        "past the end",
        lambda: load_row(C, dict(R, positions_consumed_per_split=[6, 1]), 5),
    ),
    (
        "progress_out_of_range",
        "packed past the end",
        lambda: load_packed(PC, dict(P, samples_consumed_per_split=[6, 1]), 5),
    ),
    (
        "progress_out_of_range",
        "over budget",
        lambda: load_packed(PC, dict(P, blocks_emitted_per_split=[3, 3]), 5),
    ),
    *[
        (f"{key}_mismatch", "load_row", (lambda key=key: load_row(C, dict(R, **{key: 7}), 5)))
        for key in ("shuffle_seed", "num_splits", "epoch")
    ],
    *[
        (f"{key}_mismatch", "load_packed", (lambda key=key: load_packed(PC, dict(P, **{key: 7}), 5)))
        for key in ("pack_sequences", "eos_id", "pad_id", "blocks_per_epoch")
    ],
    ("epoch_mismatch", "commit_row", lambda: commit_row(C, initial_row_state(2), dict(R, epoch=1))),
    ("pad_id_mismatch", "merge", lambda: merge_state_dicts([P, dict(P, pad_id=3)])),
    ("perm_fingerprint_mismatch", "load_row", lambda: load_row(C, dict(R, perm_fingerprint="ab"), 5)),
    ("perm_fingerprint_mismatch", "load_row other", lambda: load_row(FC, dict(R, perm_fingerprint="cd"), 5)),
    ("perm_fingerprint_mismatch", "merge", lambda: merge_state_dicts([R, dict(R, perm_fingerprint="ab")])),
    ("perm_fingerprint_missing", "load_row", lambda: load_row(FC, R, 5)),
    ("perm_fingerprint_missing", "commit_row", lambda: commit_row(FC, initial_row_state(2), R)),
    ("mode_mismatch", "snapshot_row", lambda: snapshot_row(PC, initial_row_state(2))),
    ("mode_mismatch", "snapshot_packed", lambda: snapshot_packed(C, initial_packed_state(2))),
    ("mode_mismatch", "load_row of packed", lambda: load_row(C, P, 5)),
    ("mode_mismatch", "load_packed of row", lambda: load_packed(PC, R, 5)),
    ("merge_empty", "merge", lambda: merge_state_dicts([])),
    ("merge_mode_mismatch", "merge", lambda: merge_state_dicts([R, P])),
    (
        "merge_packed_not_aligned",
        "merge",
        lambda: merge_state_dicts([dict(P, blocks_emitted_per_split=[1, 0])]),
    ),
    (
        "untracked_worker_iteration",
        "gate",
        lambda: gate_check_state_dict(gate_after_untracked_iteration(CheckpointGate())),
    ),
    (
        "checkpoint_invalid",
        "gate",
        lambda: gate_check_state_dict(gate_after_failure(CheckpointGate(), "x")),
    ),
    # StreamingDataLoader
    ("batch_size_not_positive", "deliver_batches", lambda: deliver_batches([], 0)),
    (
        "batch_size_not_positive",
        "run_loader",
        lambda: run_loader(C, PERM, Faults(), Topology(), initial_row_state(2), 0),
    ),
    (
        "rotation_out_of_range",
        "run_loader",
        lambda: run_loader(C, PERM, Faults(), Topology(1, 0, 2), initial_row_state(2), 1, rotation=2),
    ),
    ("rotation_out_of_range", "Pass", lambda: Pass(2, 1, 1, next_role=2)),
    ("cycles_per_step_not_positive", "global_steps", lambda: global_steps(PERM, Faults(), 0)),
    # delivery arithmetic
    ("list_length", "canonical_capacity", lambda: canonical_capacity([0], [1, 1])),
    ("cap_below_count", "canonical_capacity", lambda: canonical_capacity([2], [1])),
    ("items_negative", "canonical_counts", lambda: canonical_counts([0], -1)),
    ("items_beyond_capacity", "canonical_counts", lambda: canonical_counts([], 1)),
    ("batches_negative", "round_robin_turns", lambda: round_robin_turns([1], -1)),
    ("batches_negative", "Pass", lambda: Pass(0, 1, -1)),
    # saved checkpoints: provenance, inference, merge, resolution
    ("merge_missing_rank", "one rank's state", lambda: merge_state_dicts([ONE_RANK])),
    (
        "packed_partial_state",
        "legacy one rank",
        lambda: load_saved(PC, dict(P, blocks_emitted_per_split=[1, 0]), 5),
    ),
    (
        "merge_packed_not_aligned",
        "legacy",
        lambda: merge_state_dicts([dict(P, blocks_emitted_per_split=[1, 0])]),
    ),
    (
        "checkpoint_digest_mismatch",
        "edited",
        lambda: load_saved(C, dict(EXACT_R, epoch=0, samples_consumed_per_split=[0, 1]), 5),
    ),
    ("checkpoint_format", "format 2", lambda: load_saved(C, with_extra(R, format=2), 5)),
    ("checkpoint_value_type", "extra not a dict", lambda: load_saved(C, dict(R, elastic_loader=[]), 5)),
    ("reported_out_of_range", "reported id", lambda: load_saved(C, with_extra(R, reported=[2]), 5)),
    ("reported_out_of_range", "Saved", lambda: Saved(C, initial_row_state(2), frozenset({3}))),
    ("unknown_reported", "Saved", lambda: Saved(C, initial_row_state(2), frozenset({0}), frozenset({0}))),
    (
        "projection_rows",
        "Saved",
        lambda: Saved(C, initial_row_state(2), frozenset({0}), projections={1: Projection(1)}),
    ),
    (
        "projection_out_of_range",
        "load key",
        lambda: load_saved(PC, with_extra(P, reported=[0], projected={"7": 2}), 5),
    ),
    (
        "projection_below_base",
        "Saved",
        lambda: Saved(PC, initial_packed_state(2), frozenset({0}), projections={1: Projection(0)}),
    ),
    (
        "progress_unknown",
        "load_for_rank",
        lambda: load_for_rank(C, with_extra(R, reported=[0], unknown=[1]), 5, 2, 1),
    ),
    (
        "progress_unknown",
        "resolve",
        lambda: resolve(Saved(C, initial_row_state(2), frozenset({0}), frozenset({1})), PERM, Faults(), (1,)),
    ),
    (
        "projection_unreachable",
        "resolve",
        lambda: resolve(UNREACHABLE, PERM, Faults(frozenset(), frozenset({2})), (1,), CORPUS),
    ),
    (
        "buffer_unreachable",
        "no eos at the end",
        lambda: load_saved(PC, dict(P, pack_buffers={0: {"tokens": [5], "starts": [0]}}), 5),
    ),
    (
        "buffer_unreachable",
        "nothing consumed",
        lambda: load_saved(PC, dict(P, samples_consumed_per_split=[0, 1]), 5),
    ),
    ("cursor_out_of_range", "Cursor", lambda: Cursor(1, 2, (2,))),
    (
        "cursor_out_of_range",
        "Saved",
        lambda: Saved(C, initial_row_state(2), frozenset({0}), cursor=Cursor(1, 3, (0,))),
    ),
    ("table_out_of_range", "TablePin", lambda: TablePin(-1, 5)),
    ("table_version_missing", "pinned_permutation", lambda: pinned_permutation({2: PERM}, TablePin(1, 4), 2)),
    (
        "own_needs_same_world_size",
        "next_starts",
        lambda: next_starts(
            C,
            run_session(C, PERM, Faults(), None, [EXACT_V1], Shape(1, 0, 1), [1], 2, False),
            Protocol.OWN,
            Shape(2, 0, 1),
            2,
        ),
    ),
    ("table_version_mismatch", "merge", lambda: merge_saved([EXACT_V1, EXACT_V2])),
    # the local permutation
    ("local_clump_out_of_range", "zero", lambda: LocalPermutation(10, 3, 0, 0, 0, 2)),
    ("local_clump_out_of_range", "bool", lambda: LocalPermutation(10, 3, 0, 0, True, 2)),
    ("local_window_out_of_range", "2**64 + 1", lambda: LocalPermutation(10, 3, 0, 0, 2, 2**64 + 1)),
    ("fewer_rows_than_splits", "LocalPermutation", lambda: LocalPermutation(2, 3, 0, 0, 1, 1)),
    ("local_index_out_of_range", "clumped_index", lambda: clumped_index(LOCAL, 10)),
    ("local_index_out_of_range", "clumped_inverse", lambda: clumped_inverse(LOCAL, -1)),
    ("local_index_out_of_range", "local_locate", lambda: local_locate(LOCAL, 10)),
    ("local_index_out_of_range", "window_offset", lambda: window_offset(LOCAL, 0, 0, 2)),
    ("local_index_out_of_range", "window_offset_inverse", lambda: window_offset_inverse(LOCAL, 0, 1, -1)),
    ("local_window_index_out_of_range", "window_size", lambda: window_size(LOCAL, 2)),
    ("local_window_index_out_of_range", "local_runs", lambda: local_runs(LOCAL, 0, -1)),
    ("local_split_out_of_range", "local_positions", lambda: local_positions(LOCAL, 3, 0, 1)),
    ("local_split_out_of_range", "local_runs", lambda: local_runs(LOCAL, -1, 0)),
    ("local_range_out_of_range", "local_index", lambda: local_index(LOCAL, 0, 3)),
    ("local_range_out_of_range", "past the end", lambda: local_positions(LOCAL, 0, 2, 2)),
    # mixtures
    ("mixture_no_sources", "MixtureConfig", lambda: MixtureConfig((), ())),
    ("mixture_names", "MixtureConfig", lambda: MixtureConfig(("a", "a"), (C, C))),
    (
        "mixture_num_splits_mismatch",
        "MixtureConfig",
        lambda: MixtureConfig(("a", "b"), (C, dataclasses.replace(C, num_splits=4))),
    ),
    ("mixture_mode_mismatch", "MixtureConfig", lambda: MixtureConfig(("a", "b"), (C, PC))),
    ("on_exhausted_invalid", "MixtureConfig", lambda: MixtureConfig(("a",), (C,), on_exhausted="wrap")),
    ("mixture_cycles_not_positive", "MixtureConfig", lambda: MixtureConfig(("a",), (C,), cycles=0)),
    ("mixture_cycles_required", "MixtureConfig", lambda: MixtureConfig(("a",), (C,), on_exhausted="cycle")),
    ("mixture_data_mismatch", "check_data", lambda: check_data(MIX, [MIX_DATA[0], MIX_DATA[0], MIX_DATA[0]])),
    ("source_epoch_missing", "check_data", lambda: check_data(MIX, [SourceData({1: PERM}), MIX_DATA[1]])),
    ("proportions_invalid", "integer_weights", lambda: integer_weights([0, 0])),
    ("regimes_invalid", "check_regimes", lambda: mixture_schedule(MIX, [Regime(1, (1, 1))], MIX_DATA)),
    ("regime_weights_invalid", "Regime", lambda: Regime(0, (0, 0))),
    ("picks_inconsistent", "edf_pick", lambda: edf_pick((1, 1), (1, 1), 0, (0, 1))),
    ("mixture_state_invalid", "MixtureState", lambda: MixtureState((-1, 0), {})),
    (
        "mixture_state_invalid",
        "check_mixture_state",
        lambda: check_mixture_state(
            MIX,
            MIX_DATA,
            mixture_schedule(MIX, MIX_REGIMES, MIX_DATA),
            dataclasses.replace(MIX_START, cycles=(1, 0)),
        ),
    ),
    ("mixture_checkpoint_invalid", "format", lambda: load_mixture(MIX, MIX_DATA, dict(MIX_WIRE, format=7))),
    (
        "mixture_config_mismatch",
        "seed",
        lambda: load_mixture(dataclasses.replace(MIX, seed=5), MIX_DATA, MIX_WIRE),
    ),
    (
        "mixture_merge_mismatch",
        "regimes",
        lambda: merge_mixture(
            MIX_DATA,
            [exact_mixture(MIX, MIX_REGIMES, MIX_START), exact_mixture(MIX, [Regime(0, (1, 2))], MIX_START)],
        ),
    ),
]


@pytest.mark.parametrize(
    ("code", "trigger"),
    [pytest.param(code, trigger, id=f"{code}[{label}]") for code, label, trigger in TRIGGERS],
)
def test_error_code(code: str, trigger: Callable[[], object]) -> None:
    classes = documented()
    assert code in classes, f"{code} is raised but not listed in spec/ERRORS.md"
    with pytest.raises(SpecError) as info:
        trigger()
    assert info.value.code == code
    assert isinstance(info.value, getattr(builtins, classes[code]))
    assert type(info.value) is SPEC_CLASS[classes[code]]


def test_every_documented_code_has_a_trigger() -> None:
    missing = sorted(set(documented()) - {code for code, _, _ in TRIGGERS})
    assert not missing, f"codes in spec/ERRORS.md with no trigger here: {missing}"


def test_every_parameter_error_is_documented() -> None:
    """Sweep every constructor keyword with wrong values: whatever code comes out is documented."""
    codes = documented()
    seen = set()
    for field in dataclasses.fields(Params):
        for value in (object(), -1, 0, "x", True, [], 2**70):
            for base in ({}, PACKS):
                try:
                    validate_params(Params(**dict(base, **{field.name: value})), TABLE)
                except SpecError as exc:
                    assert exc.code in codes, f"{field.name}={value!r} raised undocumented {exc.code}"
                    seen.add(exc.code)
    assert len(seen) > 30


def test_parameter_bounds_accept_their_limits() -> None:
    """Every bound is inclusive: the largest accepted values resolve, and the defaults are named."""
    skip = ("world_size", "num_splits", "epoch", "shuffle_seed")  # bounded by the rows, and the seed rule
    limits = {name: value - 1 for name, value in MAXIMA.items() if name not in skip}
    resolved = validate_params(Params(**limits), TABLE)
    assert (resolved.read_ahead_bytes, resolved.read_timeout) == (2**63 - 1, 300)
    assert validate_params(Params(io_queue_depth=1024, read_timeout=math.inf), TABLE).read_timeout is None
    assert validate_params(Params(read_timeout=10**9), TABLE).read_timeout == 10**9
    assert validate_params(Params(read_timeout=0.25), TABLE).read_timeout == 0.25
    assert validate_params(Params(), TABLE).read_ahead_bytes == 256 * 2**20
    assert validate_params(Params(worker_info_override=WorkerInfo(1, 2)), TABLE).num_splits == 1
    for flag in (None, False, True):
        validate_params(Params(pickle_storage_credentials=flag), TABLE)
    assert validate_params(Params(), TABLE).permutation == "builder"
    assert validate_params(Params(permutation="local"), TABLE).permutation == LocalShuffle(64, 256)
    big = LocalShuffle(2**64, 2**64)
    assert validate_params(Params(permutation=big, shuffle_seed=None), TABLE).permutation == big
    assert (
        validate_params(Params(permutation="builder", shuffle=False, filter="a"), TABLE).permutation
        == "builder"
    )
    packs = dict(PACKS, pack_sequences=4, read_ahead_bytes=64, blocks_per_epoch=2**63 - 1 - (2**63 - 1) % 4)
    validate_params(Params(**packs), TABLE)
    validate_params(Params(**dict(PACKS, pack_sequences=2**24)), TABLE)  # 256 MiB: the default budget
