"""Fixtures of the distributed tests (the harness is ``dist_harness.py``)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from dist_harness import ATOMIC_KILLS, TRIALS, Database, Job, make_database


@pytest.fixture(scope="session")
def database(tmp_path_factory: pytest.TempPathFactory) -> Database:
    """The session's table and its uninterrupted single-process run."""
    return make_database(tmp_path_factory.mktemp("distributed"))


@pytest.fixture
def job(database: Database, tmp_path: Path) -> Job:
    """A fresh checkpoint directory for launches of the training job."""
    return Job(database, tmp_path / "job")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print (and with ``ELASTIC_LOADER_SOAK_REPORT``, save) the totals of the kill/resume trials."""
    if not TRIALS and not ATOMIC_KILLS:
        return
    kills = [launch for trial in TRIALS for launch in trial.launches if launch["killed"]]
    summary = {
        "trials": len(TRIALS),
        "launches": sum(len(t.launches) for t in TRIALS),
        "kills": len(kills),
        "kills_whole_job": sum(1 for k in kills if k["killed"] == "job"),
        "kills_one_rank": sum(1 for k in kills if k["killed"] == "rank"),
        "kills_before_any_new_step": sum(1 for k in kills if (k["kill_step"] or 0) <= k["checkpoint_step"]),
        "samples_trained": sum(t.trained for t in TRIALS),
        "lost": sum(t.lost for t in TRIALS),
        "duplicated": sum(t.duplicated for t in TRIALS),
        "unexpected": sum(t.unexpected for t in TRIALS),
        "steps_redone_after_kills": sum(t.redone_steps for t in TRIALS),
        "save_checkpoint_sigkills": sum(a["kills"] for a in ATOMIC_KILLS),
        "save_checkpoint_sigkills_mid_write": sum(a["mid_write"] for a in ATOMIC_KILLS),
        "save_checkpoint_torn": sum(a["torn"] for a in ATOMIC_KILLS),
    }
    terminalreporter.write_sep("-", "distributed kill/resume trials")
    terminalreporter.write_line(json.dumps(summary))
    report = os.environ.get("ELASTIC_LOADER_SOAK_REPORT")
    if report:
        Path(report).write_text(
            json.dumps(
                {"summary": summary, "trials": [asdict(t) for t in TRIALS], "save_checkpoint": ATOMIC_KILLS},
                indent=1,
                default=str,
            )
        )
