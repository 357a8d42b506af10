"""Clean exit (issue 13): no helper process the loader started outlives the process that ran it.

A fresh interpreter runs a StreamingDataLoader with two workers (from the fork server), prints
the process ids of all its descendants (fork server, resource tracker, any worker left), then
exits normally or is SIGKILLed. Every one of them must be gone soon after; the fork server is
kept while the process lives, for the next loader, by design.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = r"""
import os, sys, tempfile
import lancedb, pyarrow as pa
from elastic_loader import StreamingDataLoader, StreamingDataset

def descendants(root):
    todo, found = [root], []
    while todo:
        pid = todo.pop()
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    kids = [int(x) for x in handle.read().split()]
            except OSError:
                kids = []
            found += kids
            todo += kids
    return found

if __name__ == "__main__":
    db = lancedb.connect(tempfile.mkdtemp())
    table = db.create_table("t", pa.table({"id": list(range(64))}))
    ds = StreamingDataset(table, num_splits=2, shuffle_seed=0)
    rows = sum(len(batch["id"]) for batch in StreamingDataLoader(ds, batch_size=4, num_workers=2))
    assert rows == 64, rows
    print("PIDS", *descendants(os.getpid()), flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), 9)
"""


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # a zombie has ended; its parent (gone) never reaped it


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
@pytest.mark.parametrize("ending", ["exit", "kill"])
def test_no_helper_process_outlives_the_process(tmp_path: Path, ending: str) -> None:
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), ending], capture_output=True, text=True, timeout=300, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PIDS")]
    assert lines, done.stderr[-2000:]
    pids = [int(x) for x in lines[0].split()[1:]]
    assert pids, "the loader started no helper process: nothing was checked"
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in pids if _alive(p)}
    for pid in left:
        os.kill(pid, 9)
    assert not left, left
