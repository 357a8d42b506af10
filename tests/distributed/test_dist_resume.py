"""Real process groups: stop or SIGKILL a 4-process job, resume it on 2 and 3 processes.

After every scenario the effective history (the steps the last checkpoint
kept, then the resumed steps; see ``docs/DISTRIBUTED.md``) must equal the
uninterrupted single-process run step by step, with zero lost and zero
duplicated samples, and the final model must equal the single-process model.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from dist_harness import (
    EPOCHS,
    NUM_SPLITS,
    STEPS_PER_EPOCH,
    Database,
    Job,
    epoch_samples,
    expected_loader_state,
    record_trial,
    redone_steps,
    soak_trials,
)

from elastic_loader.examples import demo

TOTAL = EPOCHS * STEPS_PER_EPOCH
SOAK = soak_trials(0) > 0


def check_checkpoint(job: Job, database: Database, step: int) -> None:
    """The checkpoint on disk is exactly global step ``step`` of the uninterrupted run."""
    checkpoint = job.checkpoint()
    assert checkpoint is not None and checkpoint["step"] == step
    epoch = (step - 1) // STEPS_PER_EPOCH
    samples, positions = expected_loader_state(database.table, epoch, step - epoch * STEPS_PER_EPOCH)
    loader = checkpoint["loader"]
    assert (loader["epoch"], loader["num_splits"]) == (epoch, NUM_SPLITS)
    assert loader["samples_consumed_per_split"] == samples
    assert loader["positions_consumed_per_split"] == positions


def check_history(job: Job, database: Database) -> tuple[demo.Accounting, int]:
    """Compare the effective history with the reference; return the accounting and the steps redone."""
    attempts = job.attempts()
    history = demo.effective_steps(attempts)
    for g, (got, want) in enumerate(zip(history, database.steps), 1):
        assert got == want, f"global step {g} differs from the uninterrupted run"
    assert len(history) == len(database.steps)
    counts = demo.account(history, epoch_samples(database.steps))
    assert (counts.lost, counts.duplicated, counts.unexpected) == (0, 0, 0), counts
    last = attempts[-1]
    assert last.end == TOTAL
    reports = job.rank_reports(last)
    assert len(reports) == last.world_size
    assert {r["last_step"] for r in reports} == {TOTAL}
    for report in reports:
        np.testing.assert_allclose(report["weights"], database.weights, rtol=0, atol=1e-9)
    check_checkpoint(job, database, TOTAL)
    return counts, redone_steps(attempts)


def test_clean_stops_resume_on_2_then_3_processes(job: Job, database: Database) -> None:
    rng = random.Random(11)
    first = rng.randrange(1, STEPS_PER_EPOCH)  # inside epoch 0
    second = rng.randrange(STEPS_PER_EPOCH, TOTAL)  # epoch 1 (or exactly at the end of epoch 0)
    job.run(4, 1, "--stop-after", str(first))
    check_checkpoint(job, database, first)
    job.run(2, 0, "--stop-after", str(second))
    check_checkpoint(job, database, second)
    job.run(3, 1)
    counts, redone = check_history(job, database)
    assert redone == 0  # clean stops lose no step
    record_trial("clean stops 4 -> 2 -> 3", 11, job, counts, redone)


@pytest.mark.parametrize("trial", range(soak_trials(2)))
def test_sigkill_at_random_moments(job: Job, database: Database, trial: int) -> None:
    """A 4-process job SIGKILLed at a random moment, resumed on 2 or 3 processes (maybe killed again).

    The kill lands after a random step plus a random delay (any phase of a step: compute,
    collectives, log, checkpoint write), or, in one trial of five, during start-up.
    """
    seed = 1000 + trial
    rng = random.Random(seed)
    resumes = rng.randint(1, 2) if SOAK else 1  # CI: one kill per trial; soak: one or two
    worlds = [4] + [rng.choice([2, 3]) for _ in range(resumes)]
    for i, world in enumerate(worlds):
        workers = rng.choice([0, 1])
        if i == len(worlds) - 1:
            job.run(world, workers)
            break
        process, launch = job.start(world, workers)
        mode = rng.choice(["job", "job", "rank"])
        during_startup = i == 0 and trial % 5 == 1  # one trial in five: before any step (CI: trial 1)
        step = None if during_startup else rng.randint(launch.checkpoint_step, TOTAL - 1)
        job.kill_at(process, launch, rng, mode=mode, step=step)
    counts, redone = check_history(job, database)
    record_trial("sigkill", seed, job, counts, redone)


@pytest.mark.parametrize("workers", [2, 0] if SOAK else [2])  # workers=0: the in-process pipeline tests
def test_rank0_alone_saves_and_the_job_resumes_exactly_on_other_world_sizes(
    job: Job, database: Database, workers: int
) -> None:
    """Issue rows 1-2 with real gloo groups: rank 0 writes its own ``state_dict()`` (no merge, no
    collective, as Lightning does), the job resumes from it on other world sizes (2 -> 3, then
    3 -> 2 across the epoch boundary; the same world size: tests/integrations/test_lightning.py)
    and saves from rank 0 again: the history equals the uninterrupted run, nothing lost or repeated."""
    job.run(2, workers, "--save", "rank0", "--stop-after", "3")
    check_checkpoint(job, database, 3)
    job.run(3, workers, "--save", "rank0", "--stop-after", str(STEPS_PER_EPOCH + 2))
    check_checkpoint(job, database, STEPS_PER_EPOCH + 2)
    job.run(2, workers, "--save", "rank0")
    counts, redone = check_history(job, database)
    assert redone == 0
    record_trial(f"rank 0 saves alone, 2 -> 3 -> 2, {workers} workers", 0, job, counts, redone)
