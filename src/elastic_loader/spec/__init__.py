"""The executable specification of elastic-loader.

Rules of this package (a test enforces the first two):

* Standard library only. No threads, no clock, no I/O, no randomness except
  ``random.Random(seed)`` where the reference uses it on purpose.
* Nothing outside ``elastic_loader.spec`` imports from the pipeline, and the
  pipeline never imports this package: the differential tests compare two
  independent things.
* Every value is immutable (frozen dataclasses, tuples). Functions take explicit
  inputs and return new values.
* The public names are the ones re-exported below, each once, as
  ``from .module import name as name``.

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

# checkpoints: snapshot, load, join, commit, the gate
from .checkpoint import (
    CheckpointGate as CheckpointGate,
    commit_packed as commit_packed,
    commit_row as commit_row,
    gate_after_failure as gate_after_failure,
    gate_after_load as gate_after_load,
    gate_after_untracked_iteration as gate_after_untracked_iteration,
    gate_check_state_dict as gate_check_state_dict,
    join_packed as join_packed,
    join_row as join_row,
    load_packed as load_packed,
    load_row as load_row,
    snapshot_packed as snapshot_packed,
    snapshot_row as snapshot_row,
)

# the computed permutation
from .computed import (
    ComputedPermutation as ComputedPermutation,
    computed_fingerprint as computed_fingerprint,
    computed_index as computed_index,
    computed_inverse as computed_inverse,
    computed_locate as computed_locate,
    computed_order as computed_order,
    computed_positions as computed_positions,
    computed_splits as computed_splits,
    feistel_decrypt as feistel_decrypt,
    feistel_encrypt as feistel_encrypt,
    half_width as half_width,
    mix64 as mix64,
    round_keys as round_keys,
)

# errors
from .errors import (
    SpecError as SpecError,
    SpecRuntimeError as SpecRuntimeError,
    SpecTypeError as SpecTypeError,
    SpecValueError as SpecValueError,
)

# lockstep inference of saved checkpoints
from .inference import (
    Pass as Pass,
    rank_checkpoint as rank_checkpoint,
)

# the loader: delivery and global steps
from .loader import (
    Delivery as Delivery,
    deliver_batches as deliver_batches,
    global_steps as global_steps,
    rank_steps as rank_steps,
    run_loader as run_loader,
    topology_steps as topology_steps,
)

# the local (clumped, windowed) permutation
from .local import (
    LocalPermutation as LocalPermutation,
    clumped_index as clumped_index,
    clumped_inverse as clumped_inverse,
    local_fingerprint as local_fingerprint,
    local_index as local_index,
    local_locate as local_locate,
    local_positions as local_positions,
    local_run_bound as local_run_bound,
    local_runs as local_runs,
    local_splits as local_splits,
    window_keys as window_keys,
    window_offset as window_offset,
    window_offset_inverse as window_offset_inverse,
    window_size as window_size,
)

# mixtures (spec/MIXTURES.md)
from .mixture import (
    MixtureItem as MixtureItem,
    MixtureRun as MixtureRun,
    MixtureState as MixtureState,
    initial_mixture_state as initial_mixture_state,
    iterate_mixture as iterate_mixture,
    mixture_global_steps as mixture_global_steps,
    mixture_topology_steps as mixture_topology_steps,
    run_mixture_loader as run_mixture_loader,
)

# mixture checkpoints
from .mixture_saved import (
    MixtureSaved as MixtureSaved,
    MixtureSession as MixtureSession,
    exact_mixture as exact_mixture,
    load_mixture as load_mixture,
    load_mixture_for_rank as load_mixture_for_rank,
    merge_mixture as merge_mixture,
    rank_mixture_checkpoint as rank_mixture_checkpoint,
    resolve_mixture as resolve_mixture,
    reweighted as reweighted,
    run_mixture_session as run_mixture_session,
    snapshot_mixture as snapshot_mixture,
)

# the mixture schedule
from .mixture_schedule import (
    MixtureConfig as MixtureConfig,
    Regime as Regime,
    Schedule as Schedule,
    SourceData as SourceData,
    integer_weights as integer_weights,
    mixture_schedule as mixture_schedule,
)

# packing
from .packing import (
    Block as Block,
    PackBuffer as PackBuffer,
    PackedRun as PackedRun,
    PackedState as PackedState,
    estimate_blocks_per_epoch as estimate_blocks_per_epoch,
    initial_packed_state as initial_packed_state,
    iterate_packed as iterate_packed,
)

# parameters
from .params import (
    DEFAULT_IO_QUEUE_DEPTH as DEFAULT_IO_QUEUE_DEPTH,
    DEFAULT_READ_BATCH_SIZE as DEFAULT_READ_BATCH_SIZE,
    EPOCH_PRIME as EPOCH_PRIME,
    LocalShuffle as LocalShuffle,
    Params as Params,
    TableFacts as TableFacts,
    perm_seed as perm_seed,
    validate_params as validate_params,
)

# rows
from .rows import (
    Exhausted as Exhausted,
    Faults as Faults,
    Raised as Raised,
    RowRun as RowRun,
    RowState as RowState,
    Yielded as Yielded,
    initial_row_state as initial_row_state,
    iterate_rows as iterate_rows,
)

# saved checkpoints (provenance, merge, resolution)
from .saved import (
    Cursor as Cursor,
    Projection as Projection,
    Saved as Saved,
    TablePin as TablePin,
    load_for_rank as load_for_rank,
    load_saved as load_saved,
    merge_saved as merge_saved,
    merge_state_dicts as merge_state_dicts,
    resolve as resolve,
    snapshot_saved as snapshot_saved,
)

# delivery arithmetic
from .schedule import (
    canonical_capacity as canonical_capacity,
    canonical_counts as canonical_counts,
    next_worker as next_worker,
    round_robin_turns as round_robin_turns,
)

# topology
from .topology import (
    PackingConfig as PackingConfig,
    Permutation as Permutation,
    RunConfig as RunConfig,
    Topology as Topology,
    cut_splits as cut_splits,
    group_permutation as group_permutation,
    owned_splits as owned_splits,
    perm_fingerprint as perm_fingerprint,
    rank_splits as rank_splits,
    worker_blocks as worker_blocks,
)
