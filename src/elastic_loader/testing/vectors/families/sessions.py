"""Jobs and sessions of the model whose checkpoints the save-protocol cases start from.

Rules of this module: data and pure helpers only (no case is built here). A *job* is a run
configuration with its permutation, faults and corpus; :func:`session` runs every rank of one
shape through :func:`~elastic_loader.spec.protocols.run_session`, so every checkpoint the cases
use is one a session of the model writes (hand-edited checkpoints come from :mod:`.fixtures`).
Results are cached: the families build the same sessions many times.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ....spec.loader import LoaderRun
from ....spec.packing import initial_packed_state
from ....spec.protocols import Protocol, RankResult, Shape, lockstep_batches, next_starts, run_session
from ....spec.rows import Faults, RowState
from ....spec.saved import Saved, TablePin, exact
from ....spec.topology import PackingConfig, Permutation, RunConfig, Topology, owned_splits
from ..codec import Corpus, corpus_map
from ..plumbing import NO_FAULTS, faults_of, random_corpus, random_perm


@dataclass(frozen=True)
class Job:
    """What a chain of sessions reads: configuration, permutation, faults, corpus (packed only)."""

    config: RunConfig
    perm: Permutation
    faults: Faults = NO_FAULTS
    corpus: Corpus | None = None
    skipping: bool = False
    """The transform errors may skip rows (``on_transform_error`` other than ``"raise"``)."""

    @property
    def split_len(self) -> int:
        """Rows per split."""
        return len(self.perm[0])

    @property
    def docs(self) -> Mapping[int, Sequence[int]] | None:
        """The corpus as the model takes it."""
        return None if self.corpus is None else corpus_map(self.corpus)

    def start(self, table: TablePin | None = None) -> Saved:
        """The checkpoint-free start of the epoch: every split reported, nothing read."""
        n = self.config.num_splits
        state = RowState((0,) * n, (0,) * n) if self.config.packing is None else initial_packed_state(n)
        return exact(self.config, state, table)


_PERM = random_perm(random.Random(61), 4, 5)
ROW_JOB = Job(RunConfig(4, 42, 1), _PERM)
"""Four splits of five rows, no faults."""
SKIP_JOB = Job(RunConfig(4, 42, 1), _PERM, faults_of(skipped=[_PERM[2][1], _PERM[3][0]]), skipping=True)
"""The same rows with two skipped ones and a skipping transform."""
PACKED_JOB = Job(
    RunConfig(4, 7, 0, None, PackingConfig(4, 1, 0, 16)),
    _PERM,
    corpus=random_corpus(random.Random(62), 20, 5),
)
"""Four splits of five documents of up to five tokens, blocks of four, four blocks per split."""
PIN = TablePin(3, 20)
"""The table version the permutation of the save-protocol jobs was built from (20 rows)."""


def session(
    job: Job,
    shape: Shape,
    batches: int | Sequence[int],
    starts: Sequence[Saved] | None = None,
    pinned: bool = False,
) -> tuple[RankResult, ...]:
    """Every rank of ``shape`` from ``starts`` (default: the epoch start, pinned to :data:`PIN`
    when ``pinned``).

    ``batches``: an int is a lockstep session (every rank takes that many, at most what the rank
    that delivers the fewest can); a sequence gives each rank's own number.
    """
    wanted = batches if isinstance(batches, int) else tuple(batches)
    if starts is None:
        return _first_session(job, shape, wanted, pinned)
    return _run(job, shape, wanted, tuple(starts))


@functools.cache
def _first_session(
    job: Job, shape: Shape, batches: int | tuple[int, ...], pinned: bool
) -> tuple[RankResult, ...]:
    return _run(job, shape, batches, (job.start(PIN if pinned else None),) * shape.world_size)


def _run(
    job: Job, shape: Shape, batches: int | tuple[int, ...], starts: tuple[Saved, ...]
) -> tuple[RankResult, ...]:
    if isinstance(batches, int):
        n = lockstep_batches(job.config, job.perm, job.faults, job.docs, starts, shape, batches)
        batches = (n,) * shape.world_size
    return run_session(
        job.config, job.perm, job.faults, job.docs, starts, shape, batches, job.split_len, job.skipping
    )


def resumed(
    job: Job, results: Sequence[RankResult], protocol: Protocol, shape: Shape, saver: int = 0
) -> tuple[Saved, ...]:
    """The next session's starts: ``results``' checkpoints through ``protocol`` on ``shape``."""
    return next_starts(job.config, results, protocol, shape, job.split_len, saver)


def touched(job: Job, shape: Shape, rank: int, run: LoaderRun, taken: int) -> frozenset[int]:
    """The splits of the iterators that delivered one of the first ``taken`` batches of ``run``."""
    nw = shape.num_workers
    out: set[int] = set()
    for delivery in run.deliveries[:taken]:
        role = (delivery.worker + run.rotation) % max(1, nw)
        out.update(owned_splits(job.config.num_splits, Topology(shape.world_size, rank, nw, role)))
    return frozenset(out)
