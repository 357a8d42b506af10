"""HF accelerate (1 process, and 2 gloo processes under torchrun): ``prepare`` returns the
StreamingDataLoader itself (it already reads this rank's splits), batches are the plain collated
batches, and ``register_for_checkpointing`` + ``save_state``/``load_state`` resume the loader
exactly (with 2 processes accelerate writes the main process's state only; it resumes both).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest

pytest.importorskip("accelerate")

import torch
from accelerate import Accelerator

from elastic_loader import StreamingDataLoader, StreamingDataset


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    data = pa.table({"id": pa.array(range(50), pa.int64())})
    return lancedb.connect(str(tmp_path_factory.mktemp("accelerate"))).create_table("t", data)


def run(table: Any, where: Path, *, stop: int | None = None, resume: bool = False) -> list[list[int]]:
    """Train 2 epochs; save the accelerator's state after ``stop`` steps and stop there."""
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = StreamingDataLoader(StreamingDataset(table, num_splits=2, columns=["id"]), batch_size=4)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    assert prepared is loader
    accelerator.register_for_checkpointing(loader)
    if resume:
        accelerator.load_state(str(where))
    seen: list[list[int]] = []
    for _ in range(2):
        for batch in prepared:
            assert isinstance(batch, dict) and isinstance(batch["id"], torch.Tensor)
            loss = model(batch["id"].float()[:, None]).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            seen.append([int(v) for v in batch["id"].tolist()])
            if stop is not None and len(seen) == stop:
                accelerator.save_state(str(where))
                return seen
    return seen


def test_prepare_save_state_load_state_resume_exactly(table: Any, tmp_path: Path) -> None:
    whole = run(table, tmp_path / "unused")
    assert len(whole) == 2 * 13
    assert sorted(r for b in whole[:13] for r in b) == list(range(50))
    head = run(table, tmp_path / "state", stop=17)  # in the second epoch
    rest = run(table, tmp_path / "state", resume=True)
    assert head == whole[:17]
    assert head + rest[: len(whole) - 17] == whole


@pytest.mark.slow
def test_two_processes_resume_from_the_main_process_state(table: Any, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    uri = str(Path(table._conn.uri))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    script = str(Path(__file__).with_name("accelerate_run.py"))
    run_ = subprocess.run([*command, script, uri, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert run_.returncode == 0, run_.stderr[-4000:]
    rows: list[int] = []
    for rank in (0, 1):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got["processes"] == 2
        whole, head, rest = got["whole"], got["head"], got["rest"]
        # 4 splits of 12 rows (the permutation drops 50 % 4 rows), 2 per process: 6 batches of 4
        # per epoch; the state is saved after step 7, in the second epoch
        assert len(whole) == 2 * 6
        assert head == whole[:7], rank
        assert head + rest[: len(whole) - 7] == whole, rank
        rows += [r for b in whole[:6] for r in b]
    assert len(rows) == len(set(rows)) == 48  # the processes share the epoch, each row once
