"""The checkpoint gate: whether ``state_dict()`` may answer.

The pipeline's copy of the spec's ``CheckpointGate`` and its ``gate_*``
functions (``spec/checkpoint.py``), as one mutable object per dataset.

Rules:
* Two facts close the gate. ``invalid_reason``: a batch failed before it
  reached the trainer (the first reason is kept). ``untracked_workers``: a
  plain DataLoader with workers iterated the dataset, so the parent's progress
  is stale; a worker process sets it, so it lives in the slot
  ``FLAG_UNTRACKED`` of the counters' shared array, which the parent reads.
* Loading a checkpoint or starting an epoch clears both.
* ``state_dict()`` refuses, in this order: untracked workers (except inside a
  worker), then an invalid checkpoint. Nothing else: a checkpoint may be taken
  after any delivered batch (D23).
* The shared array travels only to processes being started (see
  ``_stats.spawning``); a plainly pickled gate keeps its flags without it.
"""

from __future__ import annotations

from typing import Any

from ._stats import FLAG_UNTRACKED, spawning


class CheckpointGate:
    """Whether this dataset's ``state_dict()`` may answer (see the module rules)."""

    def __init__(self, shared: Any) -> None:
        self.invalid_reason: str | None = None
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
        self._set_untracked(False)

    def after_failure(self, reason: str) -> None:
        """A batch failed before it reached the trainer; the first reason is kept."""
        if self.invalid_reason is None:
            self.invalid_reason = reason

    def after_untracked_iteration(self) -> None:
        """This process iterates inside a worker of a plain DataLoader."""
        self._set_untracked(True)

    def check_state_dict(self, *, in_worker: bool) -> None:
        """Raise ``RuntimeError`` when ``state_dict()`` must refuse to answer."""
        if self.untracked_workers and not in_worker:
            raise RuntimeError(
                "a plain torch DataLoader with num_workers > 0 iterated this dataset, so its progress is "
                "unknown here. Use StreamingDataLoader (or torchdata's StatefulDataLoader), or load a "
                "checkpoint to continue"
            )
        if self.invalid_reason is not None:
            raise RuntimeError(
                f"checkpointing is disabled because {self.invalid_reason}; load the last good checkpoint "
                "(load_state_dict) to continue"
            )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if not spawning():
            state["_shared"] = None
        return state
