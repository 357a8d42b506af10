"""StreamingDataLoader's own state and epochs (D27-D31): ``state_dict``/``load_state_dict`` as one
opaque entry, ``set_epoch``, a finished epoch starting the next, one live iterator per loader,
``len``, ``drop_last`` per worker, persistent workers, the main-guard check, a worker that cannot
open its table.

Expected batches come from an uninterrupted loader over a fresh dataset of the same epoch (whose
order the other loader tests check against the spec), never from the loader under test's state.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest

from elastic_loader import StreamingDataLoader, StreamingDataset

ROWS = dict(num_splits=4, columns=["id"])


def ids(batch: Any) -> list[int]:
    return [int(v) for v in batch["id"].tolist()]


def whole(table: Any, epoch: int = 0, **loader: Any) -> list[list[int]]:
    """Every batch of an uninterrupted epoch ``epoch``."""
    ds = StreamingDataset(table, epoch=epoch, **ROWS)
    return [ids(b) for b in StreamingDataLoader(ds, **loader)]


def test_state_dict_is_one_opaque_entry_and_resumes_a_fresh_loader(multi_table: Any) -> None:
    expected = whole(multi_table, batch_size=7)
    ds = StreamingDataset(multi_table, **ROWS)
    loader = StreamingDataLoader(ds, batch_size=7)
    it = iter(loader)
    head = [ids(next(it)) for _ in range(13)]
    state = loader.state_dict()
    assert list(state) == ["elastic_loader"] and isinstance(state["elastic_loader"], str)
    body = json.loads(state["elastic_loader"])
    assert body["format"] == 1 and body["epoch_finished"] is False
    assert body["dataset"] == ds.state_dict()  # the dataset's own state, whole
    it.close()
    resumed = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7)
    resumed.load_state_dict(json.loads(json.dumps(state)))  # survives a JSON round trip
    assert head + [ids(b) for b in resumed] == expected
    # a dataset's own state_dict() is accepted too
    other = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7)
    other.load_state_dict(ds.state_dict())
    assert [ids(b) for b in other] == expected[13:]


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ([1, 2], TypeError, "must be a dict"),
        ({"elastic_loader": "{", "x": 1}, ValueError, "split into several entries"),
        ({"elastic_loader": 3}, ValueError, "JSON string"),
        ({"elastic_loader": "{"}, ValueError, "not valid JSON"),
        ({"elastic_loader": '{"format": 99}'}, ValueError, "unknown StreamingDataLoader state format 99"),
        ({"elastic_loader": '{"format": 1, "dataset": {}}'}, ValueError, "'epoch_finished' flag"),
    ],
)
def test_malformed_loader_states_are_refused(
    multi_table: Any, state: Any, error: type[Exception], match: str
) -> None:
    loader = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7)
    before = loader.state_dict()
    with pytest.raises(error, match=match):
        loader.load_state_dict(state)
    assert loader.state_dict() == before


def test_a_dataset_refuses_a_loader_state_and_says_where_it_goes(multi_table: Any) -> None:
    loader = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7)
    with pytest.raises(ValueError, match=r"StreamingDataLoader\.load_state_dict"):
        StreamingDataset(multi_table, **ROWS).load_state_dict(loader.state_dict())


def test_a_refused_state_leaves_the_epoch_alone(multi_table: Any) -> None:
    source = StreamingDataLoader(StreamingDataset(multi_table, num_splits=2, columns=["id"], epoch=3))
    loader = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7)
    with pytest.raises(ValueError, match="num_splits"):
        loader.load_state_dict(source.state_dict())
    assert loader.streaming_dataset.epoch == 0


def test_len_stop_like_lightning_then_the_next_epoch(multi_table: Any) -> None:
    """Lightning stops after len(loader) batches without asking for StopIteration and keeps the
    iterator; the next iter() starts the next epoch, and a checkpoint taken there resumes into it."""
    epoch0, epoch1 = whole(multi_table, 0, batch_size=7), whole(multi_table, 1, batch_size=7)
    assert epoch0 != epoch1
    loader = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7)
    assert len(loader) == len(epoch0) == 29
    it = iter(loader)
    got = [ids(b) for b in itertools.islice(it, len(loader))]
    assert got == epoch0
    assert loader.epoch_finished()
    end = loader.state_dict()
    assert json.loads(end["elastic_loader"])["epoch_finished"] is True
    second = iter(loader)  # closes `it`, whose lease would block the dataset
    with pytest.raises(RuntimeError, match="closed by a newer iter"):
        next(it)
    assert [ids(b) for b in second] == epoch1
    assert loader.streaming_dataset.epoch == 1
    resumed = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7)
    resumed.load_state_dict(end)
    assert [ids(b) for b in resumed] == epoch1
    assert resumed.streaming_dataset.epoch == 1


def test_a_checkpoint_of_a_later_epoch_loads_into_a_loader_built_at_epoch_0(multi_table: Any) -> None:
    epoch2 = whole(multi_table, 2, batch_size=7)
    ds = StreamingDataset(multi_table, epoch=2, **ROWS)
    loader = StreamingDataLoader(ds, batch_size=7)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    fresh = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7)
    fresh.load_state_dict(state)
    assert fresh.streaming_dataset.epoch == 2
    assert [ids(b) for b in fresh] == epoch2[5:]


def test_set_epoch_closes_the_open_iterator_and_chooses_the_epoch(multi_table: Any) -> None:
    loader = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7)
    it = iter(loader)
    next(it)
    loader.set_epoch(4)
    with pytest.raises(RuntimeError, match="set_epoch"):
        next(it)
    assert [ids(b) for b in loader] == whole(multi_table, 4, batch_size=7)
    with pytest.raises(ValueError):
        loader.set_epoch(-1)


def test_an_unfinished_epoch_continues_on_reiteration(multi_table: Any) -> None:
    expected = whole(multi_table, batch_size=7)
    loader = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7)
    head = [ids(b) for b in itertools.islice(iter(loader), 4)]
    assert not loader.epoch_finished()
    assert head + [ids(b) for b in loader] == expected  # the same epoch, not the next
    assert loader.streaming_dataset.epoch == 0


@pytest.mark.parametrize("batch_size", [3, 7, 50])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_without_workers(multi_table: Any, batch_size: int, drop_last: bool) -> None:
    got = whole(multi_table, batch_size=batch_size, drop_last=drop_last)
    rounding = math.floor if drop_last else math.ceil
    assert len(got) == rounding(200 / batch_size)
    loader = StreamingDataLoader(
        StreamingDataset(multi_table, **ROWS), batch_size=batch_size, drop_last=drop_last
    )
    assert len(loader) == len(got)
    assert all(len(b) == batch_size for b in got) or not drop_last
    assert [r for b in got for r in b] == [r for b in whole(multi_table, batch_size=200) for r in b][
        : sum(map(len, got))
    ]


def test_two_workers_len_and_drop_last_per_worker(multi_table: Any) -> None:
    """Each worker batches its own 100 items: ceil(100/7) = 15 batches each, so len is 30 (not
    ceil(200/7) = 29); with drop_last each worker drops its own short batch of 2 rows."""
    full = whole(multi_table, batch_size=7, num_workers=2)
    assert (
        len(full)
        == 30
        == len(StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7, num_workers=2))
    )
    assert sorted(r for b in full for r in b) == list(range(200))
    dropped = whole(multi_table, batch_size=7, num_workers=2, drop_last=True)
    loader = StreamingDataLoader(
        StreamingDataset(multi_table, **ROWS), batch_size=7, num_workers=2, drop_last=True
    )
    assert len(dropped) == len(loader) == 28
    assert all(len(b) == 7 for b in dropped)
    short = [b for b in full if len(b) < 7]
    assert len(short) == 2 and all(len(b) == 2 for b in short)
    assert dropped == [b for b in full if len(b) == 7]  # the same batches, the short ones left out


def test_drop_last_epoch_is_finished_and_resumes_into_the_next(multi_table: Any) -> None:
    loader = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7, drop_last=True)
    assert len([ids(b) for b in itertools.islice(iter(loader), len(loader))]) == 28
    assert loader.epoch_finished()  # 4 rows are left, fewer than a batch: nothing more to deliver
    resumed = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), batch_size=7, drop_last=True)
    resumed.load_state_dict(loader.state_dict())
    assert [ids(b) for b in resumed] == whole(multi_table, 1, batch_size=7, drop_last=True)


def test_persistent_workers_follow_the_parent(multi_table: Any) -> None:
    """Workers kept between iterations read what the parent says: the next epoch, a set_epoch, a
    loaded checkpoint (each compared with a fresh non-persistent loader of that epoch)."""
    opts = dict(batch_size=7, num_workers=2)
    epochs = [whole(multi_table, e, **opts) for e in range(3)]
    loader = StreamingDataLoader(StreamingDataset(multi_table, **ROWS), persistent_workers=True, **opts)
    assert [ids(b) for b in loader] == epochs[0]
    it = iter(loader)  # epoch 1, the same worker processes
    workers = it._inner._workers
    head = [ids(next(it)) for _ in range(5)]
    state = loader.state_dict()
    assert head == epochs[1][:5]
    loader.set_epoch(2)
    assert [ids(b) for b in loader] == epochs[2]
    loader.load_state_dict(state)
    it = iter(loader)
    assert it._inner._workers == workers  # still the persistent processes
    assert [ids(b) for b in it] == epochs[1][5:]
    assert loader.streaming_dataset.epoch == 1


_SCRIPT = """
import lancedb
from elastic_loader import StreamingDataLoader, StreamingDataset


def loader():
    table = lancedb.connect(DB).create_table("t", [{"id": i} for i in range(8)], mode="overwrite")
    return StreamingDataLoader(StreamingDataset(table, num_splits=2), batch_size=2, num_workers=1)
"""


def test_missing_main_guard_is_named(tmp_path: Path) -> None:
    """A script that iterates a worker loader at its top level is stopped before any worker starts,
    with the line and the fix; the same script with the guard runs."""
    head = f"DB = {str(tmp_path / 'db')!r}\n" + _SCRIPT
    script = tmp_path / "train.py"
    script.write_text(head + "\nfor batch in loader():\n    print('BATCH', batch['id'].tolist())\n")
    line = len(head.splitlines()) + 2
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert f"line {line} iterates a StreamingDataLoader" in run.stderr, run.stderr
    assert 'if __name__ == "__main__":' in run.stderr and "BATCH" not in run.stdout
    guarded = "\nif __name__ == '__main__':\n    for batch in loader():\n"
    guarded += "        print('BATCH', batch['id'].tolist())\n"
    script.write_text(head + guarded)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("BATCH") == 4


class OpensOnlyHere:
    """A connection factory that works in the process that made it and fails in any other (a
    worker without the credentials or network route the parent has)."""

    def __init__(self, uri: str) -> None:
        self.uri, self.pid = uri, os.getpid()

    def __call__(self, name: str) -> Any:
        if os.getpid() != self.pid:
            raise PermissionError(f"worker {os.getpid()} may not read {self.uri}")
        return lancedb.connect(self.uri).open_table(name)


def test_a_worker_that_cannot_open_its_table_shows_why(tmp_path: Path) -> None:
    uri = str(tmp_path / "db")
    lancedb.connect(uri).create_table("t", pa.table({"id": pa.array(range(40), pa.int64())}))
    factory = OpensOnlyHere(uri)
    ds = StreamingDataset(factory("t"), num_splits=2, columns=["id"], connection_factory=factory)
    assert len([r for r in ds]) == 40  # the parent reads it
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=1)
    with pytest.raises(RuntimeError, match=r"could not open its table: PermissionError\('worker \d+ may not"):
        next(iter(loader))


def test_a_dataset_state_mixed_key_by_key_names_the_cause(multi_table: Any) -> None:
    """DCP saving two ranks' datasets keeps one rank's value per key: the mixture is refused with a
    message that names that cause and the fix (save the loader), whichever check catches it."""
    states = []
    for rank, taken in ((0, 3), (1, 9)):
        ds = StreamingDataset(multi_table, world_size=2, rank=rank, **ROWS)
        it = iter(StreamingDataLoader(ds, batch_size=2))
        for _ in range(taken):
            next(it)
        states.append(ds.state_dict())
        it.close()
    for key in ("samples_consumed_per_split", "elastic_loader"):
        mixed = {**states[0], key: states[1][key]}
        with pytest.raises(ValueError, match="key by key from several ranks") as err:
            StreamingDataset(multi_table, world_size=2, rank=0, **ROWS).load_state_dict(mixed)
        assert "save the StreamingDataLoader instead" in str(err.value)
