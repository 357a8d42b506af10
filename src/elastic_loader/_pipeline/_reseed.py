"""Persistent workers: each new iteration re-seeds the workers' dataset copies from the parent.

Rules:
* With ``persistent_workers=True`` torch keeps the worker processes between iterations and asks
  each one to iterate its *own* dataset copy again. That copy holds the progress it read ahead,
  not what the trainer received, and knows nothing of a ``set_epoch`` or ``load_state_dict`` in
  the parent. So before torch reuses its workers, the parent writes the dataset as it stands (a
  plain pickle: progress, epoch, permutation, rotation) to ``<dir>/iteration-<k>.pkl``, ``k``
  counting the loader's iterations from 1, and every worker, at the first item of its ``k``-th
  iteration, replaces its copy with that file's dataset.
* Worker copies keep what only the start-up pickle can carry: the shared counters slot and the
  checkpoint gate's flags (``dataset.LoaderLink.keep_shared``).
* The parent writes a file before it asks torch for the iteration (before torch sends the workers
  the signal to start it) and keeps the last two files (a worker may still be loading the previous
  one when a new iteration is asked for at once); the directory goes when the loader is collected.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import weakref
from typing import Any


class Reseed:
    """The parent's side: numbered snapshots of the dataset for persistent workers."""

    def __init__(self) -> None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.directory = tempfile.mkdtemp(prefix="elastic-loader-reseed-", dir=base)
        self.iterations = 0
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.directory, True)

    def next_iteration(self, dataset: Any) -> int:
        """Count an iteration; from the second on, write ``dataset`` for the workers to load."""
        self.iterations += 1
        k = self.iterations
        if k > 1:
            path = _path(self.directory, k)
            with open(path + ".tmp", "wb") as handle:
                pickle.dump(dataset, handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(path + ".tmp", path)
            stale = _path(self.directory, k - 2)
            if os.path.exists(stale):
                os.unlink(stale)
        return k

    def close(self) -> None:
        """Remove the directory now."""
        self._cleanup()


def load(directory: str, iteration: int) -> Any:
    """The dataset the parent wrote for ``iteration`` (a worker's side)."""
    with open(_path(directory, iteration), "rb") as handle:
        return pickle.load(handle)


def _path(directory: str, iteration: int) -> str:
    return os.path.join(directory, f"iteration-{iteration}.pkl")
