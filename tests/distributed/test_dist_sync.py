"""Lockstep at epoch end (``StreamingDataLoader(sync_epoch_end=True)``) with real gloo groups.

Rows whose transform fails are skipped (``on_transform_error="skip"``), so the
splits holding them run out early and so does the rank owning them. Split 0
(owned by rank 0 whatever the world size) loses ``2 * CYCLES`` rows, splits 5
and 11 lose fewer: rank 0 runs dry first, after ``(split_len - 2 * CYCLES) /
CYCLES`` steps, while the other ranks still hold batches. With the lockstep every
rank stops at that step, the batches held back are never committed, the
checkpoints stay exact, and the steps equal the spec's topology-free global
steps, across a clean stop and a resume on another world size. (Without it, the
rank that ran dry leaves the training loop and the others wait forever in their
next collective; ``docs/DISTRIBUTED.md`` records that run.)
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from dist_harness import (
    CYCLES,
    NUM_SPLITS,
    ROWS,
    Database,
    Job,
    epoch_samples,
    expected_loader_state,
    record_trial,
    reference_steps,
    split_ids,
)

from elastic_loader.examples import demo, train

SPLIT_LEN = ROWS // NUM_SPLITS


@pytest.fixture(scope="module")
def skips(database: Database) -> frozenset[int]:
    """Ids to skip: ``2 * CYCLES`` rows of split 0, one of split 5, two of split 11 (epoch 0)."""
    rng = random.Random(5)
    perm = split_ids(database.table, 0)
    chosen = [perm[0][p] for p in rng.sample(range(SPLIT_LEN), 2 * CYCLES)]
    chosen += [perm[5][rng.randrange(SPLIT_LEN)]] + [perm[11][p] for p in rng.sample(range(SPLIT_LEN), 2)]
    return frozenset(chosen)


def test_ranks_stop_together_when_one_runs_dry(job: Job, database: Database, skips: frozenset[int]) -> None:
    expected = reference_steps(database.table, skips, epochs=1)
    total = len(expected)
    assert total == (SPLIT_LEN - 2 * CYCLES) // CYCLES  # rank 0's last full batch ends the epoch
    skip_option = ["--skip-ids", ",".join(map(str, sorted(skips))), "--epochs", "1"]
    job.options = skip_option
    stop = random.Random(3).randrange(1, total)

    job.run(4, 1, "--stop-after", str(stop))
    samples, positions = expected_loader_state(database.table, 0, stop, skips)
    checkpoint = job.checkpoint()
    assert checkpoint["loader"]["samples_consumed_per_split"] == samples
    assert checkpoint["loader"]["positions_consumed_per_split"] == positions

    job.run(3, 0)
    attempts = job.attempts()
    reports = job.rank_reports(attempts[-1])
    assert len(reports) == 3
    assert [r["last_step"] for r in reports] == [total] * 3, "ranks stopped at different steps"
    assert [r["epoch_end_steps"] for r in reports] == [[total]] * 3
    history = demo.effective_steps(attempts)
    assert history == expected
    counts = demo.account(history, epoch_samples(expected))
    assert (counts.lost, counts.duplicated, counts.unexpected) == (0, 0, 0)
    samples, positions = expected_loader_state(database.table, 0, total, skips)
    checkpoint = job.checkpoint()
    assert checkpoint["step"] == total
    assert checkpoint["loader"]["samples_consumed_per_split"] == samples  # held-back batches not committed
    assert checkpoint["loader"]["positions_consumed_per_split"] == positions

    # The same job uninterrupted in this process (one process, so no lockstep needed) ends with
    # the same model.
    alone = train.train(
        train.Config(
            db=database.uri,
            checkpoint_dir=job.root / "alone",
            rows=ROWS,
            workers=0,
            epochs=1,
            skip_ids=skips,
        )
    )
    for report in reports:
        np.testing.assert_allclose(report["weights"], alone.weights, rtol=0, atol=1e-9)

    # Resuming after the end: rank 0 is dry at once, so every rank stops at once.
    job.run(2, 0)
    reports = job.rank_reports(job.attempts()[-1])
    assert [r["last_step"] for r in reports] == [total, total]
    assert job.checkpoint()["step"] == total
    record_trial("lockstep with skips 4 -> 3 -> 2", 3, job, counts, 0)
