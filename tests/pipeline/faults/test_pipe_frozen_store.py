"""A frozen object store (deviation D41, issue 13): reads time out with an error naming the table.

A ``moto`` S3 server runs as a separate process on loopback (fake credentials), so it can be
frozen with SIGSTOP: its socket still accepts connections, but nothing answers, which is what
a hung object store looks like to the client. The table is built while it runs; then the server
is stopped and the iteration must raise ``TimeoutError`` within ``read_timeout`` (plus
scheduling slack: the assertion is on the error, the time bound only guards against a hang).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from elastic_loader import StreamingDataLoader, StreamingDataset

pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")
lancedb = pytest.importorskip("lancedb")

BUCKET = "elastic-loader-frozen"
KEY_ID = "AKIAELASTICLOADERFROZEN"
SECRET = "fake-secret-elastic-loader-frozen-0123"
TIMEOUT_S = 3.0
GUARD_S = 120.0  # far above TIMEOUT_S: only a hang exceeds it


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if process.poll() is not None:
            raise RuntimeError("moto server exited")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("moto server did not start")


@pytest.fixture()
def s3_server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A moto server process and its endpoint; always resumed and ended afterwards."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, process)
        yield process, f"http://127.0.0.1:{port}"
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture()
def frozen_table(s3_server: tuple[subprocess.Popen[bytes], str], monkeypatch: pytest.MonkeyPatch) -> Any:
    process, endpoint = s3_server
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    # explicit storage options: a fork server started by an earlier test does not have this
    # environment, so the worker gets them pickled (pickle_storage_credentials=True)
    options = {
        "aws_endpoint": endpoint,
        "aws_region": "us-east-1",
        "allow_http": "true",
        "aws_access_key_id": KEY_ID,
        "aws_secret_access_key": SECRET,
    }
    db = lancedb.connect(f"s3://{BUCKET}/db", storage_options=options)
    return db.create_table("rows", [{"id": i, "text": f"{i:04d}" + "x" * 2000} for i in range(64)]), process


def test_a_frozen_store_times_out_naming_the_table(frozen_table: Any) -> None:
    table, server = frozen_table
    ds = StreamingDataset(table, num_splits=4, shuffle_seed=0, read_timeout=TIMEOUT_S)
    assert sorted(r["id"] for r in ds) == list(range(64))  # reads work while the store answers
    ds.set_epoch(1)
    os.kill(server.pid, signal.SIGSTOP)
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=f"s3://{BUCKET}/db.*read_timeout") as info:
        next(iter(ds))
    assert time.monotonic() - began < GUARD_S
    assert f"{TIMEOUT_S:g} s" in str(info.value)


def test_a_frozen_store_times_out_in_a_worker(frozen_table: Any) -> None:
    table, server = frozen_table
    # a budget of a few rows: the worker cannot have read the whole table ahead when the store freezes
    ds = StreamingDataset(
        table,
        num_splits=4,
        shuffle_seed=0,
        read_timeout=TIMEOUT_S,
        read_ahead_bytes=8192,
        pickle_storage_credentials=True,
    )
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=1, timeout=GUARD_S)
    it = iter(loader)
    assert len(next(it)["id"]) == 4  # the worker has opened the table and read
    os.kill(server.pid, signal.SIGSTOP)
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=f"s3://{BUCKET}/db"):
        for _ in it:
            pass
    assert time.monotonic() - began < GUARD_S
