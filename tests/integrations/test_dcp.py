"""torch.distributed.checkpoint, torchtitan's way: ``dcp.save({"dataloader": loader})`` on 2 gloo
ranks, ``dcp.load`` on 3. DCP keeps one rank's value per key; the loader's state is one key, so the
kept value is a whole state and resumes every rank of the new job: over the two jobs each row
(rows) or each block (packing) of the epoch is delivered exactly once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest
from dcp_run import PACKED

from elastic_loader import StreamingDataset

ROWS = 90


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    where = str(tmp_path_factory.mktemp("dcp") / "db")
    tokens = [[10 + i] * (1 + i % 7) for i in range(ROWS)]
    ids = pa.array(range(ROWS), pa.int64())
    data = pa.table({"id": ids, "tokens": pa.array(tokens, pa.list_(pa.int64()))})
    lancedb.connect(where).create_table("t", data)
    return where


def torchrun(nproc: int, *args: str) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
    script = str(Path(__file__).with_name("dcp_run.py"))
    run = subprocess.run([*command, script, *args], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]


def delivered(out: Path, mode: str, ranks: int) -> list[Any]:
    return [x for r in range(ranks) for x in json.loads((out / f"{mode}{r}.json").read_text())]


@pytest.mark.slow
def test_save_on_two_ranks_load_on_three(uri: str, tmp_path: Path) -> None:
    torchrun(2, "save", uri, str(tmp_path))
    torchrun(3, "load", uri, str(tmp_path))
    table = lancedb.connect(uri).open_table("t")
    for name in ("rows", "packed"):
        before, after = delivered(tmp_path / name, "save", 2), delivered(tmp_path / name, "load", 3)
        assert len(before) == 2 * 4 * 3, name
        if name == "packed":
            epoch = [tuple(b["input_ids"].tolist()) for b in StreamingDataset(table, num_splits=6, **PACKED)]
            assert Counter(map(tuple, before + after)) == Counter(epoch)
        else:
            assert sorted(before + after) == list(range(ROWS))
