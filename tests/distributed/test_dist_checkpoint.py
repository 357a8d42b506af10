"""Checkpoint helpers: atomic writes under SIGKILL, and merging over a real two-rank gloo group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.multiprocessing as mp
from dist_harness import ATOMIC_KILLS, Database, merge_on_two_ranks, soak_trials

from elastic_loader import StreamingDataset
from elastic_loader.distributed import load_checkpoint, merged_state_dict, save_checkpoint

# Runs in a fresh interpreter: forks a writer that saves checkpoints of random sizes in a loop,
# SIGKILLs it at a random moment, then checks the file on disk; repeats. Prints a JSON summary.
_KILLER = r"""
import json, os, random, signal, sys, time
from pathlib import Path
import numpy as np
import torch
from elastic_loader.distributed import load_checkpoint, save_checkpoint

path, kills, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
summary = {"kills": 0, "mid_write": 0, "loaded": 0, "missing": 0, "torn": 0, "newest": -1}
counter = 0
for trial in range(kills):
    counter += 1_000_000
    pid = os.fork()
    if pid == 0:
        writer = random.Random(seed * 7919 + trial)
        n = counter
        while True:
            size = writer.randrange(1, 1 << 19)
            data = torch.full((size,), float(n), dtype=torch.float64)
            save_checkpoint({"n": n, "size": size, "data": data}, path)
            n += 1
    time.sleep(rng.uniform(0.0, 0.25))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    summary["kills"] += 1
    summary["mid_write"] += bool(list(path.parent.glob(f".{path.name}.*.tmp")))
    try:
        ckpt = load_checkpoint(path)
    except Exception as exc:
        summary["torn"] += 1
        print("torn:", repr(exc), file=sys.stderr)
        continue
    if ckpt is None:
        summary["missing"] += 1
        continue
    data = ckpt["data"].numpy()
    if data.shape != (ckpt["size"],) or not np.all(data == float(ckpt["n"])) or ckpt["n"] < summary["newest"]:
        summary["torn"] += 1
        continue
    summary["loaded"] += 1
    summary["newest"] = ckpt["n"]
print(json.dumps(summary))
"""


def test_a_checkpoint_is_never_torn_by_sigkill(tmp_path: Path) -> None:
    kills = soak_trials(2) * 15
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _KILLER, str(tmp_path / "ckpt.pt"), str(kills), "7"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    ATOMIC_KILLS.append(summary)
    assert summary["kills"] == kills
    assert summary["torn"] == 0, out.stderr
    assert summary["loaded"] + summary["missing"] == kills
    assert summary["mid_write"] > 0, "no kill landed during a write; the test did not exercise anything"
    # The next save clears the temporary files a killed writer left behind.
    save_checkpoint({"n": 0}, tmp_path / "ckpt.pt")
    assert not list(tmp_path.glob(".ckpt.pt.*.tmp"))
    assert load_checkpoint(tmp_path / "ckpt.pt") == {"n": 0}


def test_load_checkpoint_without_a_file_is_none(tmp_path: Path) -> None:
    assert load_checkpoint(tmp_path / "none.pt") is None


def test_merged_state_dict_in_one_process(database: Database) -> None:
    dataset = StreamingDataset(database.table, num_splits=12, shuffle_seed=7)
    iterator = iter(dataset)
    for _ in range(7):
        next(iterator)
    assert merged_state_dict(dataset) == dataset.state_dict()
    dataset._gate.after_failure("a failure injected by the test")  # as after a failed batch
    with pytest.raises(RuntimeError, match="rank 0: RuntimeError: checkpointing is disabled"):
        merged_state_dict(dataset)


def test_merged_state_dict_over_two_ranks_and_a_failing_rank(database: Database, tmp_path: Path) -> None:
    context = mp.start_processes(
        merge_on_two_ranks,
        args=(str(tmp_path / "init"), database.uri, str(tmp_path)),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + 240
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("a rank hung in merged_state_dict")
    results = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    assert results[0]["merged"] == results[1]["merged"]
    # Rank 0 took 5 rows (one from each of its splits 0-4), rank 1 took 6 (one from each of 6-11).
    assert results[0]["merged"]["samples_consumed_per_split"] == [1] * 5 + [0] + [1] * 6
    for result in results:
        assert (
            result["error"] is not None
            and "rank 1: RuntimeError: checkpointing is disabled" in result["error"]
        )
