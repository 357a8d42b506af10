"""PyTorch Lightning 2.x with a plain StreamingDataLoader: checkpoint at step 13 (and 26, in the
second epoch), crash, resume; the trained batches equal an uninterrupted 3-epoch run's, 0 lost and
0 repeated (issue 12, rows 1-4 of its table).

A 60-row table, 2 splits, batches of 4: 15 steps per epoch in-process, 16 with 2 workers (each
worker batches its own 30 rows: 8 batches, the last of 2 rows).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

from lightning_run import fit, make_table

ROWS = 60


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    where = str(tmp_path_factory.mktemp("lightning") / "db")
    make_table(where, ROWS)
    return where


def check_epochs(history: list[tuple[int, list[int]]], epochs: int) -> None:
    """Every epoch trains on every row exactly once."""
    for e in range(epochs):
        rows = sorted(r for epoch, ids in history if epoch == e for r in ids)
        assert rows == list(range(ROWS)), e


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_checkpoint_at_step_13_resumes_exactly(uri: str, tmp_path: Path, num_workers: int) -> None:
    whole = fit(uri, str(tmp_path / "whole"), num_workers=num_workers)
    assert len(whole) == 3 * (15 if num_workers == 0 else 16)
    check_epochs(whole, 3)
    per_epoch = len(whole) // 3
    assert whole[:per_epoch] != whole[per_epoch : 2 * per_epoch]  # each epoch has its own order
    ckpts = tmp_path / "ckpt"
    crash_at = 28 if num_workers == 0 else 14
    head = fit(uri, str(ckpts), num_workers=num_workers, crash_at=crash_at)
    assert head == whole[:crash_at]
    resumes = [13, 26] if num_workers == 0 else [13]
    for step in resumes:
        resume = str(ckpts / f"step={step}.ckpt")
        rest = fit(uri, str(tmp_path / f"after{step}"), num_workers=num_workers, resume=resume)
        assert head[:step] + rest == whole, step


def test_lightning_sees_the_loader_as_stateful(uri: str) -> None:
    import lancedb
    from lightning_fabric.utilities.types import _Stateful

    from elastic_loader import StreamingDataLoader, StreamingDataset

    table: Any = lancedb.connect(uri).open_table("t")
    assert isinstance(StreamingDataLoader(StreamingDataset(table, num_splits=2)), _Stateful)


def expected_rank_history(uri: str, rank: int, epochs: int) -> list[tuple[int, list[int]]]:
    """What rank ``rank`` of 2 trains on in an uninterrupted run: its loader's batches, epoch by epoch
    (the loader's own order is checked against the spec in tests/pipeline/loader)."""
    import lancedb

    from elastic_loader import StreamingDataLoader, StreamingDataset

    table = lancedb.connect(uri).open_table("t")
    ds = StreamingDataset(table, num_splits=2, columns=["id"], world_size=2, rank=rank)
    loader = StreamingDataLoader(ds, batch_size=4)
    return [(e, [int(v) for v in b["id"].tolist()]) for e in range(epochs) for b in loader]


def torchrun(*args: str) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    run = subprocess.run(
        [*command, str(Path(__file__).with_name("lightning_run.py")), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]


@pytest.mark.slow
def test_ddp_two_gloo_processes_resume_from_rank_0s_checkpoint(uri: str, tmp_path: Path) -> None:
    """Lightning saves rank 0's loader state only; it resumes both ranks (lockstep inference)."""
    ckpts, crashed, resumed = tmp_path / "ckpt", tmp_path / "crashed", tmp_path / "resumed"
    crashed.mkdir()
    resumed.mkdir()
    torchrun(uri, str(ckpts), str(crashed), "--crash-at", "20")  # 8 steps per epoch: 13 is in epoch 2
    torchrun(uri, str(tmp_path / "ckpt2"), str(resumed), "--resume", str(ckpts / "step=13.ckpt"))
    for rank in (0, 1):
        whole = [(e, ids) for e, ids in expected_rank_history(uri, rank, 3)]
        head = [tuple(x) for x in json.loads((crashed / f"rank{rank}.json").read_text())]
        rest = [tuple(x) for x in json.loads((resumed / f"rank{rank}.json").read_text())]
        assert len(whole) == 24 and head == whole[:20], rank
        assert head[:13] + rest == whole, rank
