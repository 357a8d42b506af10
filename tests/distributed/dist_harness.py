"""The distributed tests' harness: real ``torchrun`` jobs (gloo), killed and resumed.

Every job runs ``python -m elastic_loader.examples.train`` under
``torch.distributed.run --standalone`` (a free rendezvous port per launch) on one
LanceDB table built once per session. Expected steps never come from the loader
under test: they come from LanceDB's permutation builder read directly and the
executable spec's :func:`elastic_loader.spec.global_steps` (step ``g`` = cycles
``[g*c, (g+1)*c)`` of every split, skipped rows not counted).

Trial counts: the CI default is small; ``ELASTIC_LOADER_SOAK_TRIALS=N`` (``make
soak``) runs ``N`` kill trials instead. ``conftest.py`` prints a summary of all
trials at the end of the session and, when ``ELASTIC_LOADER_SOAK_REPORT`` names a
file, writes it there as JSON.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lancedb.permutation import permutation_builder

from elastic_loader.distributed import load_checkpoint
from elastic_loader.examples import demo, train
from elastic_loader.spec import Faults, global_steps

ROWS = 1200
NUM_SPLITS = 12  # divisible by every world size used (4, 3, 2, 1) times its workers
CYCLES = 2
SEED = 7
EPOCHS = 2
STEPS_PER_EPOCH = ROWS // (NUM_SPLITS * CYCLES)
LAUNCH_TIMEOUT = 240.0

Step = tuple[int, tuple[int, ...]]
"""(epoch, sorted sample ids) of one global step."""


def soak_trials(ci: int) -> int:
    """``ELASTIC_LOADER_SOAK_TRIALS`` when set (``make soak``), else the CI count ``ci``."""
    value = os.environ.get("ELASTIC_LOADER_SOAK_TRIALS", "").strip()
    return int(value) if value else ci


# ------------------------------------------------------------------ the table and the reference


def split_ids(table: Any, epoch: int) -> tuple[tuple[int, ...], ...]:
    """The ``id`` values of every split in read order, from LanceDB's permutation builder directly."""
    builder = permutation_builder(table).split_random(fixed=NUM_SPLITS, seed=SEED + epoch * 100003)
    perm = builder.execute().to_arrow()
    scan = table.search().with_row_id(True).select(["id"]).limit(None).to_arrow()
    id_of = dict(zip(scan.column("_rowid").to_pylist(), scan.column("id").to_pylist()))
    out: list[list[int]] = [[] for _ in range(NUM_SPLITS)]
    for split, row in zip(perm.column("split_id").to_pylist(), perm.column("row_id").to_pylist()):
        out[split].append(id_of[row])
    return tuple(tuple(split) for split in out)


def reference_steps(table: Any, skip_ids: frozenset[int] = frozenset(), epochs: int = EPOCHS) -> list[Step]:
    """The global steps of an uninterrupted run, from the permutation and the spec."""
    out: list[Step] = []
    for epoch in range(epochs):
        perm = split_ids(table, epoch)
        for step in global_steps(perm, Faults(skipped=skip_ids), CYCLES):
            out.append((epoch, tuple(sorted(perm[s][p] for s, p in step))))
    return out


def expected_loader_state(
    table: Any, epoch: int, steps_in_epoch: int, skip_ids: frozenset[int] = frozenset()
) -> tuple[list[int], list[int]]:
    """(samples, positions) per split after ``steps_in_epoch`` full steps of ``epoch`` (rule R4.4)."""
    samples, positions = [], []
    for split in split_ids(table, epoch):
        usable = [p for p, row in enumerate(split) if row not in skip_ids]
        n = steps_in_epoch * CYCLES
        samples.append(n)
        positions.append(usable[n - 1] + 1 if n else 0)
    return samples, positions


@dataclass(frozen=True)
class Database:
    """The session's table and its uninterrupted single-process run (in this process)."""

    uri: str
    table: Any
    steps: list[Step]
    weights: list[float]


def make_database(root: Path) -> Database:
    """Build the table under ``root`` and run the uninterrupted single-process job in this process."""
    uri = str(root / "db")
    table = train.build_table(train.TableOpener(uri), "examples", ROWS, SEED)
    config = train.Config(db=uri, checkpoint_dir=root / "reference", rows=ROWS, workers=0, epochs=EPOCHS)
    summary = train.train(config)
    steps = demo.effective_steps(demo.read_attempts(root / "reference"))
    assert steps == reference_steps(table), "the single-process run differs from the spec's global steps"
    return Database(uri, table, steps, summary.weights)


def epoch_samples(steps: Sequence[Step]) -> dict[int, set[int]]:
    """The samples each epoch of a reference run trains on."""
    out: dict[int, set[int]] = {}
    for epoch, ids in steps:
        out.setdefault(epoch, set()).update(ids)
    return out


# ------------------------------------------------------------------ jobs


@dataclass
class Launch:
    """One launch of the job and what the harness saw."""

    world_size: int
    workers: int
    checkpoint_step: int
    """The step of the checkpoint on disk when it was launched (0: none)."""
    log: Path
    """Where rank 0 writes this launch's step log (if it gets that far)."""
    killed: str | None = None
    """``None`` (ran to its end or clean stop), ``"job"`` (SIGKILL to every process) or ``"rank"``."""
    kill_step: int | None = None
    """The last step in the log when the kill was sent."""
    returncode: int | None = None


@dataclass
class Job:
    """A checkpoint directory and the launches that used it."""

    database: Database
    root: Path
    options: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / "ckpt"

    @property
    def output(self) -> Path:
        return self.root / "job.log"

    def checkpoint(self) -> Any:
        return load_checkpoint(self.checkpoint_dir / train.CHECKPOINT)

    def _checkpoint_step(self) -> int:
        checkpoint = self.checkpoint()
        return 0 if checkpoint is None else int(checkpoint["step"])

    def start(self, world_size: int, workers: int, *extra: str) -> tuple[subprocess.Popen[bytes], Launch]:
        logs = self.checkpoint_dir / "steps"
        number = len(list(logs.glob("attempt-*.jsonl"))) if logs.exists() else 0
        launch = Launch(world_size, workers, self._checkpoint_step(), logs / f"attempt-{number:04d}.jsonl")
        self.launches.append(launch)
        args = ["--db", self.database.uri, "--checkpoint-dir", str(self.checkpoint_dir), "--rows", str(ROWS)]
        args += ["--num-splits", str(NUM_SPLITS), "--cycles", str(CYCLES), "--seed", str(SEED)]
        args += ["--epochs", str(EPOCHS), "--workers", str(workers), *self.options, *extra]
        self.root.mkdir(parents=True, exist_ok=True)
        return demo.launch(world_size, args, self.output, self.env), launch

    def run(self, world_size: int, workers: int, *extra: str) -> Launch:
        """Launch and wait for the end; fail (after killing it) when it takes too long."""
        process, launch = self.start(world_size, workers, *extra)
        try:
            launch.returncode = process.wait(LAUNCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            demo.kill_tree(process.pid)
            process.wait()
            pytest.fail(f"the job hung (world size {world_size}); output:\n{self.tail()}")
        assert launch.returncode == 0, f"the job failed; output:\n{self.tail()}"
        return launch

    @staticmethod
    def last_logged_step(launch: Launch) -> int:
        """The last step in ``launch``'s log: its resume step right after start-up, -1 before."""
        if not launch.log.exists():
            return -1
        last = -1
        for line in launch.log.read_text().splitlines():
            if line.startswith('{"attempt":'):
                last = int(json.loads(line)["resumed_from"])
            elif line.startswith('{"step":'):
                last = int(line.split(",", 1)[0].split(":")[1])
        return last

    def kill_at(
        self,
        process: subprocess.Popen[bytes],
        launch: Launch,
        rng: random.Random,
        *,
        mode: str,
        step: int | None,
    ) -> None:
        """Wait until the log reaches ``step`` (``None``: a random moment of start-up), then SIGKILL."""
        deadline = time.monotonic() + LAUNCH_TIMEOUT
        if step is None:
            time.sleep(rng.uniform(0.0, 6.0))
        else:
            while process.poll() is None and self.last_logged_step(launch) < step:
                assert time.monotonic() < deadline, f"no progress to step {step}; output:\n{self.tail()}"
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.08))
        launch.kill_step = self.last_logged_step(launch)
        tree = demo.process_tree(process.pid)
        ranks = [pid for pid in tree if _parent(pid) == process.pid and _is_rank(pid)]
        launch.killed = mode if ranks else "job"
        if launch.killed == "job":
            demo.kill_tree(process.pid)
        else:
            os.kill(rng.choice(ranks), signal.SIGKILL)
            try:
                process.wait(LAUNCH_TIMEOUT)
            except subprocess.TimeoutExpired:
                demo.kill_tree(process.pid)
            demo.signal_processes(tree, signal.SIGKILL)  # orphans of the killed rank
        launch.returncode = process.wait()

    def tail(self, lines: int = 60) -> str:
        text = self.output.read_text(errors="replace") if self.output.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def attempts(self) -> list[demo.Attempt]:
        """The step logs, each checked against the launch it belongs to.

        A launch killed before rank 0 wrote its log header has no log; every
        logged launch must have resumed from the checkpoint on disk when it started.
        """
        attempts = demo.read_attempts(self.checkpoint_dir)
        pending = list(attempts)
        for launch in self.launches:
            if pending and (pending[0].world_size, pending[0].resumed_from) == (
                launch.world_size,
                launch.checkpoint_step,
            ):
                pending.pop(0)
            else:
                assert launch.killed, f"a launch that was not killed left no log: {launch}"
        assert not pending, f"logs that match no launch: {[a.name for a in pending]}"
        return attempts

    def rank_reports(self, attempt: demo.Attempt) -> list[dict[str, Any]]:
        paths = sorted((self.checkpoint_dir / "steps").glob(f"{attempt.name}.rank-*.json"))
        return [json.loads(p.read_text()) for p in paths]


def _is_rank(pid: int) -> bool:
    try:
        return train.__name__.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _parent(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[1])


# ------------------------------------------------------------------ trial records


@dataclass(frozen=True)
class TrialRecord:
    """One kill/resume trial, for the session summary."""

    test: str
    seed: int
    launches: list[dict[str, Any]]
    trained: int
    lost: int
    duplicated: int
    unexpected: int
    redone_steps: int


TRIALS: list[TrialRecord] = []
ATOMIC_KILLS: list[dict[str, int]] = []
"""Summaries of the SIGKILL-during-save_checkpoint runs."""


def redone_steps(attempts: Sequence[demo.Attempt]) -> int:
    """Steps a launch logged beyond the checkpoint the next launch resumed from (trained twice, kept once)."""
    return sum(max(a.steps, default=a.resumed_from) - b.resumed_from for a, b in itertools.pairwise(attempts))


def record_trial(test: str, seed: int, job: Job, counts: demo.Accounting, redone: int) -> None:
    TRIALS.append(
        TrialRecord(
            test,
            seed,
            [{**asdict(launch), "log": str(launch.log)} for launch in job.launches],
            counts.trained,
            counts.lost,
            counts.duplicated,
            counts.unexpected,
            redone,
        )
    )


# ------------------------------------------------------------------ a two-rank group in spawned processes


def merge_on_two_ranks(rank: int, init_file: str, uri: str, out_dir: str) -> None:
    """Rank ``rank`` of 2 (run by ``torch.multiprocessing.spawn``): merge states, then inject a failure.

    Writes ``out_dir/rank-<rank>.json`` with the merged state of the good step
    and the error both ranks must raise when rank 1 cannot checkpoint.
    """
    import lancedb
    import torch.distributed as dist

    from elastic_loader import StreamingDataset
    from elastic_loader.distributed import merged_state_dict

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    table = lancedb.connect(uri).open_table("examples")
    dataset = StreamingDataset(table, num_splits=NUM_SPLITS, shuffle_seed=SEED, rank=rank, world_size=2)
    iterator = iter(dataset)
    for _ in range(5 + rank):  # rank 0 takes 5 rows, rank 1 takes 6
        next(iterator)
    merged = merged_state_dict(dataset)
    if rank == 1:
        dataset._gate.after_failure("a failure injected by the test")  # as after a failed batch
    try:
        merged_state_dict(dataset)
        error = None
    except RuntimeError as exc:
        error = str(exc)
    iterator.close()  # type: ignore[attr-defined]
    dist.destroy_process_group()
    Path(out_dir, f"rank-{rank}.json").write_text(json.dumps({"merged": merged, "error": error}))


def two_ranks(fn: Any, args: tuple[Any, ...], tmp_path: Path, hang_guard_s: float, what: str) -> list[Any]:
    """Run ``fn(rank, *args)`` on 2 spawned processes, fail the test (killing them) when they are not done
    after ``hang_guard_s`` seconds ("a rank hung {what}"), and return what each rank wrote to
    ``tmp_path / f"rank-{r}.json"``."""
    import torch.multiprocessing as mp

    context = mp.start_processes(fn, args=args, nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + hang_guard_s
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"a rank hung {what}")
    return [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
