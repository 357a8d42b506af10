"""The checkpoint gate: whether ``state_dict()`` may answer, and the one step-boundary check.

The pipeline's copy of the spec's ``CheckpointGate`` and its ``gate_*``
functions (``spec/checkpoint.py``), as one mutable object per dataset.

Rules:
* Three facts close the gate. ``invalid_reason``: a batch failed before it
  reached the trainer (the first reason is kept). ``untracked_workers``: a
  plain DataLoader with workers iterated the dataset, so the parent's progress
  is stale; a worker process sets it, so it lives in the slot
  ``FLAG_UNTRACKED`` of the counters' shared array, which the parent reads.
  ``require_uniform``: StreamingDataLoader committed batches that are only
  exact at step boundaries (several workers).
* Loading a checkpoint or starting an epoch clears all three.
* ``state_dict()`` refuses, in this order: untracked workers (except inside a
  worker), an invalid checkpoint, then a state off a step boundary: packed
  states always need one, row states when ``require_uniform`` is set.
  StreamingDataLoader starts only at a step boundary when packing or with
  several workers. :func:`uneven_counts` is the one test of a step boundary.
* The shared array travels only to processes being started (see
  ``_stats.spawning``); a plainly pickled gate keeps its flags without it.
"""

from __future__ import annotations

from typing import Any

from ._checkpoint import PackedState, State
from ._stats import FLAG_UNTRACKED, spawning


def uneven_counts(progress: State, splits: list[int], *, rows_too: bool) -> list[int]:
    """The distinct counts of ``splits`` when they are not at one global step, else ``[]``.

    Packed states count blocks emitted; row states count rows yielded, and are
    only checked when ``rows_too``.
    """
    if isinstance(progress, PackedState):
        counts = {progress.emitted[s] for s in splits}
    elif rows_too:
        counts = {progress.samples[s] for s in splits}
    else:
        return []
    return sorted(counts) if len(counts) > 1 else []


def check_loader_start(progress: State, rank_splits: list[int], num_workers: int) -> None:
    """Raise ``RuntimeError`` when a StreamingDataLoader may not start from ``progress``."""
    counts = uneven_counts(progress, rank_splits, rows_too=num_workers > 1)
    if counts:
        raise RuntimeError(
            "StreamingDataLoader must start at a step boundary (every split of this rank at the same "
            f"count, now {counts}); load a checkpoint taken at a step boundary"
        )


class CheckpointGate:
    """Whether this dataset's ``state_dict()`` may answer (see the module rules)."""

    def __init__(self, shared: Any) -> None:
        self.invalid_reason: str | None = None
        self.require_uniform = False
        self._shared = shared

    @property
    def untracked_workers(self) -> bool:
        """A plain DataLoader with workers iterated the dataset (in any process)."""
        shared = self._shared
        return bool(shared is not None and shared[FLAG_UNTRACKED])

    def _set_untracked(self, value: bool) -> None:
        if self._shared is not None:
            self._shared[FLAG_UNTRACKED] = int(value)

    def after_load(self) -> None:
        """A checkpoint was loaded or an epoch started: the state is known again."""
        self.invalid_reason = None
        self.require_uniform = False
        self._set_untracked(False)

    def after_commit(self, require_uniform: bool) -> None:
        """A delivered batch was committed; it can only add the step-boundary requirement."""
        self.require_uniform = self.require_uniform or require_uniform

    def after_failure(self, reason: str) -> None:
        """A batch failed before it reached the trainer; the first reason is kept."""
        if self.invalid_reason is None:
            self.invalid_reason = reason

    def after_untracked_iteration(self) -> None:
        """This process iterates inside a worker of a plain DataLoader."""
        self._set_untracked(True)

    def check_state_dict(self, progress: State, rank_splits: list[int], *, in_worker: bool) -> None:
        """Raise ``RuntimeError`` when ``state_dict()`` must refuse to answer for ``progress``."""
        if self.untracked_workers and not in_worker:
            raise RuntimeError(
                "a plain torch DataLoader with num_workers > 0 iterated this dataset, so its progress is "
                "unknown here; use StreamingDataLoader, or load a checkpoint to continue"
            )
        if self.invalid_reason is not None:
            raise RuntimeError(
                f"checkpointing is disabled because {self.invalid_reason}; load the last good checkpoint "
                "(load_state_dict) to continue"
            )
        counts = uneven_counts(progress, rank_splits, rows_too=self.require_uniform)
        if not counts:
            return
        if isinstance(progress, PackedState):
            raise RuntimeError(
                "packed checkpoints are only exact at step boundaries, when every split of this rank "
                f"has emitted the same number of blocks (now {counts}); consume more blocks first"
            )
        raise RuntimeError(
            "with several StreamingDataLoader workers, checkpoints are only exact at step "
            f"boundaries, when every split of this rank has yielded the same number of rows (now "
            f"{counts}); consume more batches first"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if not spawning():
            state["_shared"] = None
        return state
