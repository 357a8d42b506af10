"""The elastic-loader demo: a 4-process training job killed with SIGKILL, resumed on 2 processes.

``python -m elastic_loader.examples.demo [--dir demo_data]`` (``make demo``):

1. builds an embedded LanceDB table under ``--dir`` (once);
2. runs the uninterrupted single-process job in this process (the reference);
3. launches ``elastic_loader.examples.train`` under ``torchrun`` with 4 processes
   (gloo, one DataLoader worker each) and, part-way through the epoch, kills the
   whole job with SIGKILL (no clean shutdown, checkpoint writes cut anywhere);
4. relaunches it with 2 processes, which resumes from the last checkpoint and
   finishes the epoch;
5. checks that the effective run (the steps the checkpoint kept, then the
   resumed steps) trained on exactly the reference's samples, step by step,
   with no sample lost or duplicated, and that the final model equals the
   reference's; prints throughput.

Exit status 0 means every check passed.

``--mixture`` runs the mixture demo instead (:func:`mixture_main`): three source tables (web, code,
books) mixed 5:3:2 by a ``StreamingMixture`` on 4 processes, killed with SIGKILL mid-epoch,
resumed on 2 processes with weights 2:3:5 (a new regime from the resumed step on); the self-check
prints the realised proportions per regime and checks that every global step holds the scheduled
sources and that no sample of any source is repeated or lost. ``--scale k`` divides the sources'
rows by ``k`` (use a fresh ``--dir``: existing tables are reused).

The job-control helpers here (:func:`launch`, :func:`kill_tree`,
:func:`read_attempts`, :func:`effective_steps`, :func:`account`) are also
used by the distributed tests; ``docs/DISTRIBUTED.md`` defines "lost" and
"duplicated".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROWS = 4800
NUM_SPLITS = 12
CYCLES = 4
SEED = 2024
JOB = "elastic_loader.examples.train"

# ------------------------------------------------------------------ process control


def _processes() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (parent pid, start time); from /proc, else from ``ps`` (macOS)."""
    table: dict[int, tuple[int, str]] = {}
    if os.path.isdir("/proc/self"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2 :].split()
            if fields[0] != "Z":  # zombies are dead already
                table[int(entry)] = (int(fields[1]), fields[19])
        return table
    out = subprocess.run(
        ["ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "lstart="], capture_output=True, text=True
    )
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) > 2:
            table[int(fields[0])] = (int(fields[1]), " ".join(fields[2:]))
    return table


def process_tree(root: int) -> dict[int, str]:
    """Every live process in the tree under ``root`` (``root`` included): pid -> start time."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    tree: dict[int, str] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in tree:
            tree[pid] = table[pid][1]
            todo.extend(children.get(pid, []))
    return tree


def signal_processes(tree: dict[int, str], sig: signal.Signals) -> None:
    """Send ``sig`` to the processes of ``tree`` (pid -> start time) that are still the same processes."""
    table = _processes()
    for pid, start in tree.items():
        if pid in table and table[pid][1] == start:  # never signal a recycled pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


def kill_tree(root: int) -> int:
    """SIGKILL ``root`` and all its descendants at once, like a machine dying; return how many.

    The tree is first frozen with SIGSTOP (repeatedly, until no new process
    appears), so no process can start or exit cleanly in between.
    """
    frozen: dict[int, str] = {}
    while True:
        tree = process_tree(root)
        new = {pid: start for pid, start in tree.items() if pid not in frozen}
        if not new:
            break
        signal_processes(new, signal.SIGSTOP)
        frozen.update(new)
    signal_processes(frozen, signal.SIGKILL)
    return len(frozen)


def launch(
    nproc: int, args: Sequence[str], output: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start the training job under ``torch.distributed.run --standalone`` (a free port per run)."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        "0",
        "-m",
        JOB,
        *args,
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    with output.open("ab") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=environment)


# ------------------------------------------------------------------ step logs


@dataclass(frozen=True)
class Attempt:
    """One launch of the job, as its step log tells it."""

    name: str
    world_size: int
    workers: int
    resumed_from: int
    started: float
    steps: dict[int, tuple[int, tuple[int, ...]]]
    """Global step -> (epoch, sorted sample ids)."""
    times: dict[int, float]
    end: int | None
    """The last step when the launch finished cleanly, else ``None``."""


def read_attempts(checkpoint_dir: Path) -> list[Attempt]:
    """Every launch's step log under ``checkpoint_dir``, in launch order (a torn last line is ignored)."""
    out = []
    for path in sorted((checkpoint_dir / "steps").glob("attempt-*.jsonl")):
        records = []
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
        if not records:
            continue
        head = records[0]
        steps = {r["step"]: (r["epoch"], tuple(r["ids"])) for r in records if "step" in r}
        times = {r["step"]: r["time"] for r in records if "step" in r}
        end = next((r["end"] for r in records if "end" in r), None)
        out.append(
            Attempt(
                head["attempt"],
                head["world_size"],
                head["workers"],
                head["resumed_from"],
                head["time"],
                steps,
                times,
                end,
            )
        )
    return out


def effective_steps(attempts: Sequence[Attempt]) -> list[tuple[int, tuple[int, ...]]]:
    """The history the final model was trained on: (epoch, sample ids) of global steps 1, 2, ...

    A launch that resumed from step ``k`` keeps steps ``1..k`` as they were
    and replaces everything after ``k`` with its own steps.

    Raises:
        ValueError: a launch resumed from a step no earlier launch logged, or
            the history has a gap.
    """
    history: dict[int, tuple[int, tuple[int, ...]]] = {}
    for attempt in attempts:
        kept = {g: v for g, v in history.items() if g <= attempt.resumed_from}
        if sorted(kept) != list(range(1, attempt.resumed_from + 1)):
            raise ValueError(
                f"{attempt.name} resumed from step {attempt.resumed_from}, which was never logged"
            )
        history = {**kept, **attempt.steps}
    if sorted(history) != list(range(1, len(history) + 1)):
        raise ValueError(f"the effective history has gaps: steps {sorted(history)}")
    return [history[g] for g in sorted(history)]


@dataclass(frozen=True)
class Accounting:
    """Samples of the effective history against the epochs' sample sets."""

    trained: int
    lost: int
    duplicated: int
    unexpected: int


def account(history: Iterable[tuple[int, Iterable[int]]], epoch_samples: dict[int, set[int]]) -> Accounting:
    """Count lost, duplicated and unexpected samples per epoch (definitions in ``docs/DISTRIBUTED.md``).

    ``lost``: samples of an epoch's set that no step of that epoch trained on.
    ``duplicated``: extra occurrences (a sample trained ``n > 1`` times in one
    epoch counts ``n - 1``). ``unexpected``: trained samples outside the set.
    """
    seen: dict[int, Counter[int]] = {epoch: Counter() for epoch in epoch_samples}
    for epoch, ids in history:
        seen.setdefault(epoch, Counter()).update(ids)
    trained = lost = duplicated = unexpected = 0
    for epoch, counts in seen.items():
        expected = epoch_samples.get(epoch, set())
        trained += sum(counts.values())
        lost += len(expected - counts.keys())
        duplicated += sum(n - 1 for n in counts.values() if n > 1)
        unexpected += len(counts.keys() - expected)
    return Accounting(trained, lost, duplicated, unexpected)


# ------------------------------------------------------------------ the demo


def _last_step(path: Path) -> int:
    """The last global step an attempt's log holds (0 when none)."""
    if not path.exists():
        return 0
    last = 0
    for line in path.read_text().splitlines():
        if line.startswith('{"step":'):
            last = int(line.split(",", 1)[0].split(":")[1])
    return last


def _follow(path: Path, total: int, desc: str, until: int | None, process: subprocess.Popen[bytes]) -> int:
    """Show a progress bar over a step log until it reaches ``until`` or the job exits; the last step."""
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True, mininterval=1.0) as bar:
        while process.poll() is None:
            done = _last_step(path)
            bar.update(done - bar.n)
            if until is not None and done >= until:
                return done
            time.sleep(0.05)
        done = _last_step(path)
        bar.update(done - bar.n)
        return done


def _rate(attempt: Attempt, samples_per_step: int) -> str:
    """Training throughput between an attempt's first and last logged steps."""
    if len(attempt.times) < 2:
        return "n/a"
    first, last = min(attempt.times), max(attempt.times)
    seconds = attempt.times[last] - attempt.times[first]
    return f"{(last - first) * samples_per_step / seconds:,.0f} samples/s" if seconds > 0 else "n/a"


@dataclass(frozen=True)
class Phase:
    """How one launch of the job ended: how many processes were SIGKILLed (0 when the job was left
    to finish), the launcher's exit status, and the seconds from the launch to the job's end."""

    killed: int
    status: int
    seconds: float


@dataclass(frozen=True)
class _KilledJob:
    """A training job launched twice: killed part-way, then resumed (both demos)."""

    job_dir: Path
    """Its checkpoint directory (step logs under ``steps/``)."""
    output: Path
    """Where the launcher's output goes."""
    total: int
    """Global steps in the epoch."""

    def phase(
        self,
        attempt: int,
        processes: int,
        options: list[str],
        desc: str,
        kill: tuple[int, float] | None = None,
    ) -> Phase:
        """Launch attempt ``attempt`` on ``processes`` and follow its step log; with ``kill=(step,
        pause)``, once ``step`` is logged, wait ``pause`` seconds and SIGKILL the whole process tree."""
        t0 = time.perf_counter()
        job = launch(processes, options, self.output)
        log = self.job_dir / "steps" / f"attempt-{attempt:04d}.jsonl"
        _follow(log, self.total, desc, None if kill is None else kill[0], job)
        killed = 0
        if kill is not None:
            time.sleep(kill[1])
            killed = kill_tree(job.pid)
        status = job.wait()
        return Phase(killed, status, time.perf_counter() - t0)

    def launches(self) -> tuple[Attempt, Attempt, list[tuple[int, tuple[int, ...]]]] | None:
        """The killed attempt, the resumed one and the effective steps; ``None`` (said on stdout)
        when the step logs do not hold exactly two launches."""
        attempts = read_attempts(self.job_dir)
        if len(attempts) != 2:
            print(
                f"demo FAILED: expected 2 launches in the step logs, found {len(attempts)} "
                f"(job output: {self.output})"
            )
            return None
        a, b = attempts
        return a, b, effective_steps(attempts)


def _resume_checks(resumed: Attempt, status: int, total: int) -> dict[str, bool]:
    """The self-checks of the resumed launch (``status``: its exit status; ``total``: steps per epoch)."""
    return {
        "phase B resumed mid-epoch on 2 processes": 0 < resumed.resumed_from < total
        and resumed.world_size == 2,
        "phase B finished the epoch cleanly": status == 0 and resumed.end == total,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 0 when every self-check passed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=Path("demo_data"))
    parser.add_argument("--seed", type=int, default=SEED, help="seed of the kill moment")
    parser.add_argument(
        "--mixture", action="store_true", help="a 3-source mixture, resumed with changed weights"
    )
    parser.add_argument("--scale", type=int, default=1, help="mixture: divide the sources' rows by this")
    args = parser.parse_args(argv)
    if args.mixture:
        return mixture_main(args.dir.resolve(), args.seed, args.scale)
    directory: Path = args.dir.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    import numpy as np

    from elastic_loader.distributed import load_checkpoint
    from elastic_loader.examples import train

    reference_dir, job_dir = directory / "reference", directory / "job"
    for old in (reference_dir, job_dir):
        shutil.rmtree(old, ignore_errors=True)
    total, per_step = ROWS // (NUM_SPLITS * CYCLES), NUM_SPLITS * CYCLES
    common = ["--db", str(directory / "db"), "--rows", str(ROWS), "--num-splits", str(NUM_SPLITS)]
    common += ["--cycles", str(CYCLES), "--seed", str(SEED)]
    options = [*common, "--checkpoint-dir", str(job_dir), "--workers", "1"]
    print(f"elastic-loader demo in {directory}")
    print(f"table: {ROWS} rows, {NUM_SPLITS} splits; a global step = {CYCLES} cycles = {per_step} samples")

    t0 = time.perf_counter()
    reference_run = train.train(train.parse_args([*common, "--checkpoint-dir", str(reference_dir)]))
    reference = read_attempts(reference_dir)[0]
    print(f"reference: uninterrupted, 1 process, {total} steps in {time.perf_counter() - t0:.1f}s")

    rng = random.Random(args.seed)
    kill_after = rng.randint(total * 3 // 10, total * 5 // 10)
    output = directory / "job.log"
    output.write_bytes(b"")
    logs = job_dir / "steps"
    job = _KilledJob(job_dir, output, total)
    phase_a = job.phase(0, 4, options, "phase A: 4 processes", (kill_after, rng.uniform(0.0, 0.1)))
    print(
        f"phase A: SIGKILL to {phase_a.killed} processes (ranks, fork servers, workers) "
        f"{phase_a.seconds:.1f}s after launch"
    )
    phase_b = job.phase(1, 2, options, "phase B: 2 processes")

    launches = job.launches()
    if launches is None:
        return 1
    a, b, history = launches
    counts = account(history, {0: set(range(ROWS))})
    ranks = [json.loads(p.read_text()) for p in sorted(logs.glob(f"{b.name}.rank-*.json"))]
    checkpoint = load_checkpoint(job_dir / train.CHECKPOINT)
    split_rows = [ROWS // NUM_SPLITS] * NUM_SPLITS
    checks = {
        **_resume_checks(b, phase_b.status, total),
        "every global step equals the uninterrupted run's": history
        == [reference.steps[g] for g in sorted(reference.steps)],
        "no sample lost, duplicated or unexpected": (counts.lost, counts.duplicated, counts.unexpected)
        == (0, 0, 0),
        "both ranks stopped at the last step": [r["last_step"] for r in ranks] == [total, total],
        "final checkpoint: step and every split complete": checkpoint is not None
        and checkpoint["step"] == total
        and checkpoint["loader"]["samples_consumed_per_split"] == split_rows,
        "final model equals the uninterrupted run's": len(ranks) == 2
        and all(np.allclose(r["weights"], reference_run.weights, rtol=0, atol=1e-9) for r in ranks),
    }
    print()
    print(f"reference, 1 process in process:  {_rate(reference, per_step):>18} while training")
    for name, attempt, seconds in (("phase A", a, phase_a.seconds), ("phase B", b, phase_b.seconds)):
        print(
            f"{name}, {attempt.world_size} processes x 1 worker: {_rate(attempt, per_step):>18} "
            f"while training; "
            f"{seconds:.1f}s wall including start-up"
        )
    redone = max(a.steps, default=0) - b.resumed_from
    print(
        f"phase A logged {max(a.steps, default=0)} steps before the kill; its last complete checkpoint was "
        f"step {b.resumed_from}; phase B redid {redone} step(s), then finished at step {b.end}"
    )
    print(
        f"samples trained: {counts.trained} of {ROWS}; lost {counts.lost}, duplicated {counts.duplicated}, "
        f"unexpected {counts.unexpected}"
    )
    return _verdict("demo", checks, output)


def _verdict(what: str, checks: dict[str, bool], output: object) -> int:
    """Print every self-check and the verdict; the exit status (1 when a check failed)."""
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    failed = [name for name, ok in checks.items() if not ok]
    print(f"{what} passed" if not failed else f"{what} FAILED: {failed} (job output: {output})")
    return 1 if failed else 0


# ------------------------------------------------------------------ the mixture demo

SOURCES = (("web", 1920), ("code", 960), ("books", 480))
WEIGHTS_A, WEIGHTS_B = (5.0, 3.0, 2.0), (2.0, 3.0, 5.0)


def _proportions(
    history: Sequence[tuple[int, tuple[int, ...]]],
    regimes: Sequence[tuple[int, dict[str, int]]],
    schedule: Sequence[str],
    per_step: int,
    cycles: int,
) -> list[tuple[int, int, dict[str, float], dict[str, float], dict[str, int]]]:
    """Per regime: its first and last global step, the realised share of every source in the
    samples trained in it, and the share its weights promise (over the scheduled cycles)."""
    from elastic_loader.examples.train import SOURCE_IDS

    names = [n for n, _ in SOURCES]
    out = []
    starts = [r[0] for r in regimes] + [len(schedule)]
    for (start, weights), end in zip(regimes, starts[1:]):
        first, last = start // cycles, -(-end // cycles)
        counted = Counter(names[i // SOURCE_IDS] for _, ids in history[first:last] for i in ids)
        total = sum(counted.values()) or 1
        share = {n: counted[n] / total for n in names}
        scheduled = Counter(schedule[start:end])
        promised = {n: scheduled[n] / max(1, end - start) for n in names}
        out.append((first + 1, last, share, promised, weights))
    return out


def mixture_main(directory: Path, seed: int, scale: int = 1) -> int:
    """The mixture demo: web, code and books with weights 5:3:2 on 4 processes, killed mid-epoch,
    resumed on 2 processes with weights 2:3:5; 0 when every self-check passed."""
    from elastic_loader import MixtureSource, StreamingMixture
    from elastic_loader.distributed import load_checkpoint
    from elastic_loader.examples import train

    directory.mkdir(parents=True, exist_ok=True)
    sources_rows = [(n, r // scale) for n, r in SOURCES]
    job_dir = directory / "mixture-job"
    shutil.rmtree(job_dir, ignore_errors=True)
    num_splits, cycles = 4, 2
    spec = ",".join(f"{n}:{r}" for n, r in sources_rows)
    common = ["--db", str(directory / "db"), "--num-splits", str(num_splits), "--cycles", str(cycles)]
    common += ["--seed", str(SEED), "--mixture", spec, "--checkpoint-dir", str(job_dir), "--workers", "1"]
    rows = sum(r for _, r in sources_rows)
    total, per_step = rows // (num_splits * cycles), num_splits * cycles
    print(f"elastic-loader mixture demo in {directory}")
    print(
        f"sources {dict(sources_rows)} (rows), {num_splits} splits; "
        f"a global step = {cycles} cycles = {per_step} samples"
    )
    output = directory / "mixture-job.log"
    output.write_bytes(b"")
    rng = random.Random(seed)
    kill_after = rng.randint(total * 3 // 10, total * 5 // 10)
    weights_a = ",".join(str(w) for w in WEIGHTS_A)
    job = _KilledJob(job_dir, output, total)
    options_a = [*common, "--weights", weights_a]
    phase_a = job.phase(
        0, 4, options_a, "phase A: 4 processes, weights 5:3:2", (kill_after, rng.uniform(0.0, 0.1))
    )
    print(f"phase A: SIGKILL to {phase_a.killed} processes")
    options_b = [*common, "--weights", ",".join(str(w) for w in WEIGHTS_B)]
    phase_b = job.phase(1, 2, options_b, "phase B: 2 processes, weights 2:3:5")

    launches = job.launches()
    if launches is None:
        return 1
    a, b, history = launches
    checkpoint = load_checkpoint(job_dir / train.CHECKPOINT)
    opener = train.TableOpener(str(directory / "db"))
    sources = {
        n: MixtureSource(opener(f"examples_{n}"), shuffle_seed=SEED + k) for k, (n, _) in enumerate(SOURCES)
    }
    mix = StreamingMixture(
        sources, list(WEIGHTS_B), num_splits=num_splits, seed=SEED, on_exhausted="renormalize"
    )
    if checkpoint is not None:
        mix.load_state_dict(checkpoint["loader"])
    schedule, regimes = mix.schedule(), mix.regimes
    per_source: dict[str, Accounting] = {}
    for k, (name, n) in enumerate(sources_rows):
        mine = [(e, [i for i in ids if i // train.SOURCE_IDS == k]) for e, ids in history]
        per_source[name] = account(mine, {0: set(range(k * train.SOURCE_IDS, k * train.SOURCE_IDS + n))})
    step_sources = [Counter(i // train.SOURCE_IDS for i in ids) for _, ids in history]
    want_sources = [
        Counter(
            [
                SOURCES_INDEX[name]
                for name in schedule[g * cycles : (g + 1) * cycles]
                for _ in range(num_splits)
            ]
        )
        for g in range(len(history))
    ]
    table = _proportions(history, regimes, schedule, per_step, cycles)
    checks = {
        **_resume_checks(b, phase_b.status, total),
        "the new weights apply from the resumed step on (a second regime)": len(regimes) == 2
        and regimes[1][0] == b.resumed_from * cycles,
        "every global step holds the scheduled sources": step_sources == want_sources,
        "no repeated or lost sample per source": all(
            (c.lost, c.duplicated, c.unexpected) == (0, 0, 0) for c in per_source.values()
        ),
    }
    print()
    print(f"phase A logged {max(a.steps, default=0)} steps; phase B resumed from step {b.resumed_from}")
    for first, last, share, promised, weights in table:
        ratio = ":".join(str(w) for w in weights.values())
        shown = ", ".join(f"{n} {share[n]:.3f} (scheduled {promised[n]:.3f})" for n in share)
        print(f"steps {first}..{last}, weights {ratio} (a drained source drops out): realised {shown}")
    for name, c in per_source.items():
        print(
            f"{name}: trained {c.trained}; lost {c.lost}, duplicated {c.duplicated}, "
            f"unexpected {c.unexpected}"
        )
    return _verdict("mixture demo", checks, output)


SOURCES_INDEX = {name: k for k, (name, _) in enumerate(SOURCES)}


if __name__ == "__main__":
    raise SystemExit(main())
