"""The executable specification of elastic-loader.

Rules of this package (a test enforces the first two):

* Standard library only. No threads, no clock, no I/O, no randomness except
  ``random.Random(seed)`` where the reference uses it on purpose.
* Nothing outside ``elastic_loader.spec`` imports from the pipeline, and the
  pipeline never imports this package: the differential tests compare two
  independent things.
* Every value is immutable (frozen dataclasses, tuples). Functions take explicit
  inputs and return new values.

Theory of operation
-------------------
The loader's behaviour is fully determined by a few inputs: the *permutation*
(split id -> ordered row ids, produced by the storage backend), the *faults*
(which rows make the transform skip or raise), the *topology* (world size,
rank, DataLoader workers) and the *progress state* loaded from a checkpoint.
Given those, :func:`iterate_rows` and :func:`iterate_packed` say exactly which
rows or blocks an iterator yields and what its checkpoint says after each one;
:mod:`.checkpoint` says how checkpoints are written, loaded, merged and
committed; :mod:`.loader` says how ``StreamingDataLoader`` interleaves worker
batches and commits them; :mod:`.params` says which parameters are rejected and
with which exception. :mod:`.computed` defines the opt-in computed
permutation, a keyed bijection of storage positions that is never
materialised (spec/COMPUTED.md); :mod:`.local` cuts it into clumps and windows so
reads are contiguous runs (spec/LOCAL.md). :mod:`.mixture` and :mod:`.mixture_saved` model
mixtures of several sources and their checkpoints (spec/MIXTURES.md). :mod:`.invariants`
holds one predicate per named invariant of ``spec/INVARIANTS.md``.
"""

from .checkpoint import (
    CheckpointGate,
    commit_packed,
    commit_row,
    gate_after_failure,
    gate_after_load,
    gate_after_untracked_iteration,
    gate_check_state_dict,
    join_packed,
    join_row,
    load_packed,
    load_row,
    snapshot_packed,
    snapshot_row,
)
from .computed import (
    ComputedPermutation,
    computed_fingerprint,
    computed_index,
    computed_inverse,
    computed_locate,
    computed_order,
    computed_positions,
    computed_splits,
    feistel_decrypt,
    feistel_encrypt,
    half_width,
    mix64,
    round_keys,
)
from .errors import SpecError, SpecRuntimeError, SpecTypeError, SpecValueError
from .inference import Pass, rank_checkpoint
from .loader import (
    Delivery,
    deliver_batches,
    global_steps,
    rank_steps,
    run_loader,
    topology_steps,
)
from .local import (
    LocalPermutation,
    clumped_index,
    clumped_inverse,
    local_fingerprint,
    local_index,
    local_locate,
    local_positions,
    local_run_bound,
    local_runs,
    local_splits,
    window_keys,
    window_offset,
    window_offset_inverse,
    window_size,
)
from .mixture import (
    MixtureItem,
    MixtureRun,
    MixtureState,
    initial_mixture_state,
    iterate_mixture,
    mixture_global_steps,
    mixture_topology_steps,
    run_mixture_loader,
)
from .mixture_saved import (
    MixtureSaved,
    MixtureSession,
    exact_mixture,
    load_mixture,
    load_mixture_for_rank,
    merge_mixture,
    rank_mixture_checkpoint,
    resolve_mixture,
    reweighted,
    run_mixture_session,
    snapshot_mixture,
)
from .mixture_schedule import MixtureConfig, Regime, Schedule, SourceData, integer_weights, mixture_schedule
from .packing import (
    Block,
    PackBuffer,
    PackedRun,
    PackedState,
    estimate_blocks_per_epoch,
    initial_packed_state,
    iterate_packed,
)
from .params import (
    DEFAULT_IO_QUEUE_DEPTH,
    DEFAULT_READ_BATCH_SIZE,
    EPOCH_PRIME,
    LocalShuffle,
    Params,
    TableFacts,
    perm_seed,
    validate_params,
)
from .rows import (
    Exhausted,
    Faults,
    Raised,
    RowRun,
    RowState,
    Yielded,
    initial_row_state,
    iterate_rows,
)
from .saved import (
    Cursor,
    Projection,
    Saved,
    TablePin,
    load_for_rank,
    load_saved,
    merge_saved,
    merge_state_dicts,
    resolve,
    snapshot_saved,
)
from .schedule import canonical_capacity, canonical_counts, next_worker, round_robin_turns
from .topology import (
    PackingConfig,
    Permutation,
    RunConfig,
    Topology,
    cut_splits,
    group_permutation,
    owned_splits,
    perm_fingerprint,
    rank_splits,
    worker_blocks,
)

__all__ = [
    # topology
    "Permutation",
    "RunConfig",
    "PackingConfig",
    "Topology",
    "cut_splits",
    "group_permutation",
    "owned_splits",
    "perm_fingerprint",
    "rank_splits",
    "worker_blocks",
    # the computed permutation
    "ComputedPermutation",
    "computed_fingerprint",
    "computed_index",
    "computed_inverse",
    "computed_locate",
    "computed_order",
    "computed_positions",
    "computed_splits",
    "feistel_decrypt",
    "feistel_encrypt",
    "half_width",
    "mix64",
    "round_keys",
    # the local (clumped, windowed) permutation
    "LocalPermutation",
    "clumped_index",
    "clumped_inverse",
    "local_fingerprint",
    "local_index",
    "local_locate",
    "local_positions",
    "local_run_bound",
    "local_runs",
    "local_splits",
    "window_keys",
    "window_offset",
    "window_offset_inverse",
    "window_size",
    # parameters
    "EPOCH_PRIME",
    "DEFAULT_IO_QUEUE_DEPTH",
    "DEFAULT_READ_BATCH_SIZE",
    "LocalShuffle",
    "Params",
    "TableFacts",
    "perm_seed",
    "validate_params",
    # rows
    "Exhausted",
    "Faults",
    "Raised",
    "RowRun",
    "RowState",
    "Yielded",
    "initial_row_state",
    "iterate_rows",
    # packing
    "Block",
    "PackBuffer",
    "PackedRun",
    "PackedState",
    "estimate_blocks_per_epoch",
    "initial_packed_state",
    "iterate_packed",
    # checkpoints
    "CheckpointGate",
    "commit_packed",
    "commit_row",
    "gate_after_failure",
    "gate_after_load",
    "gate_after_untracked_iteration",
    "gate_check_state_dict",
    "join_packed",
    "join_row",
    "load_packed",
    "load_row",
    "merge_state_dicts",
    "snapshot_packed",
    "snapshot_row",
    # saved checkpoints (provenance, lockstep inference, merge, resolution)
    "Cursor",
    "Pass",
    "Projection",
    "Saved",
    "TablePin",
    "load_for_rank",
    "load_saved",
    "merge_saved",
    "rank_checkpoint",
    "resolve",
    "snapshot_saved",
    # delivery arithmetic
    "canonical_capacity",
    "canonical_counts",
    "next_worker",
    "round_robin_turns",
    # loader
    "Delivery",
    "deliver_batches",
    "global_steps",
    "rank_steps",
    "run_loader",
    "topology_steps",
    # errors
    "SpecError",
    "SpecRuntimeError",
    "SpecTypeError",
    "SpecValueError",
    # mixtures (spec/MIXTURES.md)
    "MixtureConfig",
    "MixtureItem",
    "MixtureRun",
    "MixtureState",
    "Regime",
    "Schedule",
    "SourceData",
    "initial_mixture_state",
    "integer_weights",
    "iterate_mixture",
    "mixture_global_steps",
    "mixture_schedule",
    "mixture_topology_steps",
    "run_mixture_loader",
    "MixtureSaved",
    "MixtureSession",
    "exact_mixture",
    "load_mixture",
    "load_mixture_for_rank",
    "merge_mixture",
    "rank_mixture_checkpoint",
    "resolve_mixture",
    "reweighted",
    "run_mixture_session",
    "snapshot_mixture",
]
