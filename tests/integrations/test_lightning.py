"""PyTorch Lightning 2.x with a plain StreamingDataLoader: checkpoint at step 13 (and 26, in the
second epoch), crash, resume; the trained batches equal an uninterrupted 3-epoch run's, 0 lost and
0 repeated (issue 12, rows 1-4 of its table).

A 60-row table, 2 splits, batches of 4: 15 steps per epoch in-process, 16 with 2 workers (each
worker batches its own 30 rows: 8 batches, the last of 2 rows).
"""

from __future__ import annotations

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
