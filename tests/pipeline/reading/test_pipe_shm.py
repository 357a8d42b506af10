"""Row-id files for worker start-up: named after their process, reclaimed once that process is gone."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from elastic_loader import StreamingDataset
from elastic_loader._pipeline import _rowfile


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_orphaned_row_files_are_reclaimed_and_live_ones_kept(tmp_path: Path) -> None:
    dead = tmp_path / f"elastic-loader-rows-{_dead_pid()}-abc.npy"
    live = tmp_path / f"elastic-loader-rows-{os.getpid()}-def.npy"
    other = tmp_path / "unrelated-file.npy"
    for path in (dead, live, other):
        path.write_bytes(b"x")
    _rowfile.reclaim_orphans(str(tmp_path))
    assert not dead.exists()
    assert live.exists() and other.exists()


def test_row_file_carries_the_creating_pid_and_is_removed_with_the_dataset(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    multiprocessing.context.set_spawning_popen(object())  # what spawn does while pickling a worker
    try:
        state = ds.__getstate__()
    finally:
        multiprocessing.context.set_spawning_popen(None)
    kind, path = state["_row_ids"]
    assert kind == "shared"
    assert Path(path).name.startswith(f"elastic-loader-rows-{os.getpid()}-")
    assert Path(path).exists()
    del ds, state
    import gc

    gc.collect()
    assert not Path(path).exists()


def _worker_copy(ds: StreamingDataset) -> StreamingDataset:
    """The dataset as a worker process receives it (row ids through the shared file)."""
    multiprocessing.context.set_spawning_popen(object())
    try:
        state = ds.__getstate__()
    finally:
        multiprocessing.context.set_spawning_popen(None)
    assert state["_row_ids"][0] == "shared"
    copy = StreamingDataset.__new__(StreamingDataset)
    copy.__setstate__(state)
    return copy


def test_the_row_file_follows_the_epoch(multi_table: Any) -> None:
    """After set_epoch, workers map the new epoch's row ids, not the file made for the old epoch."""
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    before = [row["id"] for row in _worker_copy(ds)]
    ds.set_epoch(1)
    after = [row["id"] for row in _worker_copy(ds)]
    assert after == [row["id"] for row in ds]
    assert after != before
