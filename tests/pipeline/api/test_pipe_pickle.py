"""Pickling (D14, B16, B19): plain pickle works, no credentials leave, workers map the row ids;
a computed permutation travels as its parameters, a 10**9-row table's as small as a 64-row one's."""

from __future__ import annotations

import copy
import functools
import itertools
import json
import multiprocessing.context
import os
import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any, ClassVar

import lance
import lancedb
import numpy as np
import pyarrow as pa
from lance.fragment import FragmentMetadata

from elastic_loader import StreamingDataset
from elastic_loader._pipeline._lance import describe

SECRETS = {
    "aws_secret_access_key": "SECRET-1",
    "aws_access_key_id": "SECRET-2",
    "aws_session_token": "SECRET-3",
    "azure_storage_sas_token": "SECRET-4",
    "password": "SECRET-5",
    "google_service_account_key": "SECRET-6",
}
PUBLIC = {"region": "eu-west-3", "endpoint": "http://localhost:9000", "allow_http": "true"}


class _FakeConnection:
    uri = "s3://bucket/db"
    storage_options: ClassVar[dict[str, str]] = {**SECRETS, **PUBLIC}


class _FakeLance:
    uri = "s3://bucket/db/t.lance"


class FakeTable:
    """Enough of a LanceDB table on object storage for ``describe``."""

    name = "t"
    _conn = _FakeConnection()

    def to_lance(self) -> _FakeLance:
        return _FakeLance()


class _ChildFd:
    """A file descriptor handed to the (pretend) child: here, a duplicate in this process."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def detach(self) -> int:
        return self.fd


class _Popen:
    """Stands for the process being started while the dataset is pickled for it."""

    DupFd = _ChildFd

    def duplicate_for_child(self, fd: int) -> int:
        return os.dup(fd)


def spawn_pickle(obj: object) -> bytes:
    """Pickle ``obj`` the way multiprocessing does while it starts a worker process."""
    multiprocessing.context.set_spawning_popen(_Popen())
    try:
        return bytes(ForkingPickler.dumps(obj))
    finally:
        multiprocessing.context.set_spawning_popen(None)


# ------------------------------------------------------------------ plain pickling


def test_pickle_round_trip_iterates_identically(multi_table: Any) -> None:
    kwargs = {"num_splits": 4, "world_size": 2, "rank": 1, "read_batch_size": 5}
    ds = StreamingDataset(multi_table, **kwargs)
    copied = pickle.loads(pickle.dumps(ds))
    assert list(copied) == list(StreamingDataset(multi_table, **kwargs))
    assert copied.state_dict() != ds.state_dict()  # the copy is independent
    deep = copy.deepcopy(ds)
    assert list(deep) == list(ds)


def test_pickle_after_partial_iteration_carries_the_progress(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4)
    whole = [row["id"] for row in StreamingDataset(multi_table, num_splits=4)]
    it = iter(ds)
    list(itertools.islice(it, 13))
    it.close()
    copied = pickle.loads(pickle.dumps(ds))
    assert copied.state_dict() == ds.state_dict()
    assert [row["id"] for row in copied] == whole[13:]


def test_pickle_packed_and_memory_tables(memory_multi_table: Any) -> None:
    kwargs = {
        "num_splits": 2,
        "columns": ["tokens"],
        "pack_sequences": 4,
        "eos_id": 1,
        "pad_id": 0,
        "blocks_per_epoch": 40,
    }
    ds = StreamingDataset(memory_multi_table, **kwargs)
    expected = [b["input_ids"].tolist() for b in ds]
    ds.set_epoch(0)
    copied = pickle.loads(pickle.dumps(ds))
    assert [b["input_ids"].tolist() for b in copied] == expected


def open_table(directory: str, name: str) -> Any:
    OPENED.append(name)
    return lancedb.connect(directory).open_table(name)


OPENED: list[str] = []


def test_connection_factory_reopens_the_table(multi_table: Any, tables_dir: Path) -> None:
    factory = functools.partial(open_table, str(tables_dir))
    ds = StreamingDataset(multi_table, num_splits=4, connection_factory=factory)
    payload = pickle.dumps(ds)
    assert str(tables_dir).encode() in payload  # only through the factory's own arguments
    OPENED.clear()
    copied = pickle.loads(payload)
    assert OPENED == ["multi"]
    assert list(copied) == list(StreamingDataset(multi_table, num_splits=4))


# ------------------------------------------------------------------ credentials


def test_describe_drops_secret_storage_options() -> None:
    source = describe(FakeTable(), 7, connection_factory=None, keep_credentials=False)
    assert source.kind == "lance" and source.version == 7
    assert source.uri == "s3://bucket/db/t.lance"
    assert source.storage_options == PUBLIC
    payload = pickle.dumps(source)
    assert all(value.encode() not in payload for value in SECRETS.values())
    assert all(value.encode() in payload for value in PUBLIC.values())


def test_describe_keeps_credentials_when_asked() -> None:
    source = describe(FakeTable(), 7, connection_factory=None, keep_credentials=True)
    assert source.storage_options == {**SECRETS, **PUBLIC}
    payload = pickle.dumps(source)
    assert all(value.encode() in payload for value in SECRETS.values())


def test_describe_with_a_factory_pickles_no_connection_details() -> None:
    source = describe(FakeTable(), 7, connection_factory=functools.partial(str), keep_credentials=True)
    payload = pickle.dumps(source)
    assert b"s3://" not in payload
    assert all(value.encode() not in payload for value in SECRETS.values())


# ------------------------------------------------------------------ worker start-up payload


def test_worker_payload_does_not_embed_the_row_ids(multi_table: Any, big_table: Any) -> None:
    small = StreamingDataset(multi_table, num_splits=4)
    big = StreamingDataset(big_table, num_splits=4)
    small_payload, big_payload = spawn_pickle(small), spawn_pickle(big)
    assert abs(len(big_payload) - len(small_payload)) < 2_000
    row_ids = np.asarray(big._perm.rows)
    assert row_ids[1, :50].astype("<u8").tobytes() not in big_payload


def test_worker_payload_maps_the_shared_row_ids(big_table: Any) -> None:
    big = StreamingDataset(big_table, num_splits=4)
    assert len(pickle.dumps(big)) > 160_000  # a plain pickle is self-contained
    worker = pickle.loads(spawn_pickle(big))
    assert isinstance(worker._perm.rows, np.memmap)  # mapped from the shared file, read on demand
    assert [row["id"] for row in worker] == [row["id"] for row in big]


def test_worker_payload_of_a_rank_iterates_its_splits(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, world_size=2, rank=1, columns=["id"])
    worker = pickle.loads(spawn_pickle(ds))
    assert list(worker) == list(
        StreamingDataset(multi_table, num_splits=4, world_size=2, rank=1, columns=["id"])
    )


def _table_of(root: Path, fragments: int, rows_per_fragment: int) -> Any:
    """A Lance table ``t`` under ``root`` of ``fragments * rows_per_fragment`` rows on one data file's
    disk: every fragment is the same file of ids ``0 .. rows_per_fragment - 1`` (ids repeat)."""
    uri = str(root / "t.lance")
    one = lance.write_dataset(pa.table({"id": np.arange(rows_per_fragment, dtype=np.int64)}), uri)
    meta = one.get_fragments()[0].metadata.to_json()
    copies = [FragmentMetadata.from_json(json.dumps(dict(meta, id=i))) for i in range(fragments)]
    lance.LanceDataset.commit(uri, lance.LanceOperation.Overwrite(one.schema, copies), read_version=1)
    return lancedb.connect(str(root)).open_table("t")


def test_worker_payload_of_a_computed_permutation_stays_small_at_a_billion_rows(tmp_path: Path) -> None:
    """What a worker receives for ``permutation="computed"`` does not grow with the table: at 10**9
    rows (the builder would send 16 GB of row ids) it is the size of a 64-row table's, and the
    worker's copy reads the same rows."""
    billion = _table_of(tmp_path / "big", 1000, 10**6)
    small = _table_of(tmp_path / "few", 1, 64)
    assert billion.count_rows() == 10**9
    payloads, plains = [], []
    for table in (small, billion):
        ds = StreamingDataset(table, num_splits=8, permutation="computed", columns=["id"])
        payloads.append(spawn_pickle(ds))
        plains.append(pickle.dumps(ds))
    assert ds.split_size == 10**9 // 8
    for blobs in (payloads, plains):
        assert len(blobs[1]) < 4_000, len(blobs[1])
        assert abs(len(blobs[1]) - len(blobs[0])) < 64, [len(b) for b in blobs]  # digits of N differ
    worker = pickle.loads(payloads[1])
    assert worker.split_size == ds.split_size
    got = list(itertools.islice(iter(worker), 300))
    assert got == list(itertools.islice(iter(ds), 300))
    assert len({row["id"] for row in got}) > 250  # rows from all over the table, not one run
