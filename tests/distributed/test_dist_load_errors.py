"""No rank waits forever on a checkpoint file (issue 13): load_checkpoint over a real gloo group
when the reading rank fails, and save_checkpoint refusing what load_checkpoint could not read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from dist_harness import two_ranks

from elastic_loader.distributed import load_checkpoint, save_checkpoint

HANG_GUARD_S = 240  # the default group timeout is 30 min: a rank left in the broadcast shows as a hang


def load_on_two_ranks(rank: int, init_file: str, paths: list[str], src: int | None, out_dir: str) -> None:
    """Rank ``rank`` of 2: ``load_checkpoint(paths[rank], src=src)``; writes what it got or raised."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        got = load_checkpoint(paths[rank], src=src)
        result = {"value": None if got is None else got["n"], "error": None, "type": None}
    except Exception as exc:
        result = {"value": None, "error": str(exc), "type": type(exc).__name__}
    dist.barrier()  # both ranks are still in step after the failure
    dist.destroy_process_group()
    Path(out_dir, f"rank-{rank}.json").write_text(json.dumps(result))


def run_two(tmp_path: Path, paths: list[Path], src: int | None) -> list[dict[str, object]]:
    args = (str(tmp_path / "init"), [str(p) for p in paths], src, str(tmp_path))
    return two_ranks(load_on_two_ranks, args, tmp_path, HANG_GUARD_S, "in load_checkpoint")


def test_every_rank_raises_when_the_reading_rank_reads_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"not a checkpoint at all")
    results = run_two(tmp_path, [path, path], src=0)
    assert results[0]["error"] is not None  # the reading rank raises torch's own error
    assert "could not read" not in str(results[0]["error"])
    assert results[1]["type"] == "RuntimeError"
    assert f"rank 0 could not read {str(path)!r}" in str(results[1]["error"])


def test_every_rank_raises_when_weights_only_refuses_the_object(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save({"n": np.float64(1.0)}, path)  # written without save_checkpoint's check
    results = run_two(tmp_path, [path, path], src=1)
    assert results[1]["type"] == "UnpicklingError"
    assert results[0]["type"] == "RuntimeError"
    message = str(results[0]["error"])
    assert "rank 1 could not read" in message and "UnpicklingError" in message


def test_a_good_file_reaches_both_ranks(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"n": 7}, path)
    assert [r["value"] for r in run_two(tmp_path, [path, path], src=0)] == [7, 7]


def test_src_none_every_rank_raises_when_one_rank_fails(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.pt", tmp_path / "bad.pt"
    save_checkpoint({"n": 3}, good)
    bad.write_bytes(b"\x00" * 64)
    results = run_two(tmp_path, [good, bad], src=None)
    assert results[1]["error"] is not None and "could not be read on" not in str(results[1]["error"])
    assert results[0]["type"] == "RuntimeError"
    assert "could not be read on rank 1" in str(results[0]["error"])


@pytest.mark.parametrize("obj", [{"n": np.float64(1.0)}, {"n": np.int64(2)}, {"cls": Path("/x")}])
def test_save_checkpoint_refuses_what_load_checkpoint_cannot_read(tmp_path: Path, obj: object) -> None:
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"n": 1, "w": torch.ones(3)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match="weights_only=True"):
        save_checkpoint(obj, path)
    assert path.read_bytes() == before  # the previous checkpoint stands
    assert not list(tmp_path.glob(".ckpt.pt.*.tmp"))  # no stray temporary file
    assert load_checkpoint(path)["n"] == 1


def test_save_checkpoint_accepts_what_weights_only_reads(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    obj = {"n": 1, "f": 2.5, "s": "x", "l": [1, (2, 3)], "t": torch.arange(4), "none": None}
    save_checkpoint(obj, path)
    got = load_checkpoint(path)
    assert got["l"] == [1, (2, 3)] and torch.equal(got["t"], torch.arange(4)) and got["none"] is None
