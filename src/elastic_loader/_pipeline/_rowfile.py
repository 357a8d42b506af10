"""The row ids a dataset sends to its worker processes: inline, or a shared-memory file.

Rules:
* A plain pickle carries the row ids inline: the copy is self-contained.
* While multiprocessing starts a worker (``_stats.spawning``), the row ids go
  into one ``.npy`` file in ``/dev/shm`` (else the temporary directory), made
  once and reused by every worker; a worker maps it read-only and reads only
  the splits it owns. The pickle carries the file's path.
* A file is named ``elastic-loader-rows-<pid>-*.npy`` after the process that
  made it. It is removed when its :class:`RowFile` is collected or the process
  exits; files of processes that no longer exist (killed, say) are removed
  the next time a file is made.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
import weakref
from typing import Any

import numpy as np

from ._stats import spawning

PREFIX = "elastic-loader-rows-"
_CLEANUP: set[str] = set()
"""Files this process made and has not removed yet."""

Payload = tuple[str, Any]
"""``("inline", row ids)`` or ``("shared", path of the file)``."""


class RowFile:
    """The shared-memory file of one owner's row ids, made on first use."""

    def __init__(self) -> None:
        self._path: str | None = None

    def path(self, rows: np.ndarray) -> str:
        """The file holding ``rows``, made if it does not exist (any more)."""
        if self._path is None or not os.path.exists(self._path):
            directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
            reclaim_orphans(directory)
            fd, path = tempfile.mkstemp(prefix=f"{PREFIX}{os.getpid()}-", suffix=".npy", dir=directory)
            with os.fdopen(fd, "wb") as handle:
                np.save(handle, rows)
            weakref.finalize(self, _unlink, path)
            _CLEANUP.add(path)
            self._path = path
        return self._path

    def payload(self, rows: np.ndarray) -> Payload:
        """How ``rows`` travel in a pickle made now."""
        return ("shared", self.path(rows)) if spawning() else ("inline", rows)


def rows_of(payload: Payload) -> np.ndarray:
    """The row ids a :meth:`RowFile.payload` carries (a read-only map of a shared file)."""
    kind, rows = payload
    if kind == "shared":
        mapped: np.ndarray = np.load(rows, mmap_mode="r")
        return mapped
    return np.asarray(rows)


def reclaim_orphans(directory: str) -> None:
    """Remove row-id files whose creating process no longer exists (it was killed, say)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX) :].split("-", 1)[0]
        if not owner.isdigit() or _alive(int(owner)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unlink(path: str) -> None:
    _CLEANUP.discard(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@atexit.register
def _cleanup_all() -> None:
    for path in list(_CLEANUP):
        _unlink(path)
