"""The distributed job with its table on S3-compatible object storage (moto, loopback only).

A ``moto`` server runs in this process on 127.0.0.1 with fake credentials. The
table lives at ``s3://<bucket>/db``; every rank and every DataLoader worker
reopens it through ``TableOpener`` (the ``connection_factory``), which takes the
endpoint and credentials from the environment, so no credential is pickled.
"""

from __future__ import annotations

import pickle
import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from dist_harness import (
    CYCLES,
    NUM_SPLITS,
    ROWS,
    SEED,
    Database,
    Job,
    epoch_samples,
    record_trial,
    redone_steps,
    reference_steps,
)

from elastic_loader import StreamingDataset
from elastic_loader.examples import demo, train

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

BUCKET = "elastic-loader-test"
KEY_ID = "AKIAELASTICLOADERFAKE"
SECRET = "fake-secret-elastic-loader-0123456789"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback with one bucket; the environment a job needs to reach it."""
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    try:
        yield env
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3_database(s3_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """The table on S3 and its uninterrupted single-process run (in this process)."""
    uri = f"s3://{BUCKET}/db"
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_env.items():
            patch.setenv(name, value)
        table = train.build_table(train.TableOpener(uri), "examples", ROWS, SEED)
        root = tmp_path_factory.mktemp("s3-reference")
        summary = train.train(train.Config(db=uri, checkpoint_dir=root, rows=ROWS, workers=0, epochs=1))
        steps = demo.effective_steps(demo.read_attempts(root))
        assert steps == reference_steps(table, epochs=1)
        yield Database(uri, table, steps, summary.weights)


def test_no_credentials_are_pickled(s3_env: dict[str, str]) -> None:
    import lancedb

    options = {
        "aws_endpoint": s3_env["AWS_ENDPOINT_URL"],
        "aws_region": "us-east-1",
        "allow_http": "true",
        "aws_access_key_id": KEY_ID,
        "aws_secret_access_key": SECRET,
    }
    db = lancedb.connect(f"s3://{BUCKET}/pickled", storage_options=options)
    table = db.create_table("t", [{"id": i} for i in range(48)], mode="overwrite")
    opener = train.TableOpener(f"s3://{BUCKET}/pickled")
    with_factory = StreamingDataset(
        table, num_splits=NUM_SPLITS, shuffle_seed=SEED, connection_factory=opener
    )
    without_factory = StreamingDataset(table, num_splits=NUM_SPLITS, shuffle_seed=SEED)
    for dataset in (with_factory, without_factory):
        data = pickle.dumps(dataset)
        assert SECRET.encode() not in data
        assert KEY_ID.encode() not in data
    assert f"s3://{BUCKET}/pickled".encode() in pickle.dumps(with_factory)
    assert sorted(row["id"] for row in with_factory) == list(range(48))


def test_killed_and_resumed_job_on_object_storage(
    s3_env: dict[str, str], s3_database: Database, tmp_path: Path
) -> None:
    job = Job(s3_database, tmp_path / "job", options=["--epochs", "1"], env=s3_env)
    total = len(s3_database.steps)
    rng = random.Random(21)
    process, launch = job.start(2, 1)
    job.kill_at(process, launch, rng, mode="job", step=rng.randrange(1, total - 1))
    job.run(3, 1)
    attempts = job.attempts()
    assert attempts[-1].world_size == 3 and 0 < attempts[-1].resumed_from < total
    history = demo.effective_steps(attempts)
    assert history == s3_database.steps
    counts = demo.account(history, epoch_samples(s3_database.steps))
    assert (counts.lost, counts.duplicated, counts.unexpected) == (0, 0, 0)
    reports = job.rank_reports(attempts[-1])
    assert [r["last_step"] for r in reports] == [total] * 3
    assert all(max(abs(a - b) for a, b in zip(r["weights"], s3_database.weights)) < 1e-9 for r in reports)
    assert job.checkpoint()["loader"]["samples_consumed_per_split"] == [total * CYCLES] * NUM_SPLITS
    record_trial("object storage 2 -> 3", 21, job, counts, redone_steps(attempts))
