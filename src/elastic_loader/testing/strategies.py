"""Hypothesis strategies for the inputs of the executable spec.

These are the building blocks of every property test and state machine that
checks :mod:`elastic_loader.spec` (ours and other implementations'). Names are
part of the conformance suite's interface: keep them stable.

Sizes are small on purpose. Counterexamples of the loader's invariants need
few splits and few rows; small sizes keep each example fast and make shrunk
failures readable. The defaults are at most :data:`MAX_SPLITS` splits of at
most :data:`MAX_SPLIT_LEN` rows, documents of at most :data:`MAX_DOC_TOKENS`
tokens and at most :data:`MAX_BLOCKS_PER_SPLIT` blocks per split.

Everything *reachable* is produced by running the model itself from the
initial state (:func:`row_progress`, :func:`packed_progress`): a strategy never
invents a progress state that no sequence of iterations, checkpoints and merges
could produce.

This module imports Hypothesis but not pytest, so an outside implementation
can reuse it from any test runner. It is longer than 600 lines on purpose: it
is one flat catalogue whose names outside test suites import, and which
``spec/DEFINITIONS.md`` links to by file; splitting it would put those names
behind re-exports.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from hypothesis import strategies as st

from elastic_loader.spec import (
    Block,
    Faults,
    PackedRun,
    PackedState,
    PackingConfig,
    Permutation,
    RowRun,
    RowState,
    RunConfig,
    Topology,
    Yielded,
    cut_splits,
    initial_packed_state,
    initial_row_state,
    iterate_packed,
    iterate_rows,
    join_packed,
    join_row,
    owned_splits,
)

MAX_SPLITS = 12
"""Default upper bound of ``num_splits``."""
MAX_SPLIT_LEN = 8
"""Default upper bound of the rows per split (``N // S``)."""
MAX_DOC_TOKENS = 6
"""Default upper bound of the tokens of one document (before its EOS)."""
MAX_BLOCKS_PER_SPLIT = 4
"""Default upper bound of the per-split block budget ``blocks_per_epoch / S``."""
MAX_PACK_LEN = 6
"""Default upper bound of ``pack_sequences``."""
MAX_SESSIONS = 3
"""Default upper bound of the checkpoint/resume sessions of a reachable row state."""
MAX_PACKED_SESSIONS = 2
"""Default upper bound of the sessions of a reachable packed state (budgets are short)."""
ROW_ID_LIMIT = 1000
"""Row ids are drawn from ``[0, ROW_ID_LIMIT)``, so they differ from positions."""

Corpus = Mapping[int, tuple[int, ...]]
"""Row id -> the token list of that document (packing mode)."""

StateT = TypeVar("StateT")
ItemT = TypeVar("ItemT")


# ---------------------------------------------------------------- sizes and topology


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n`` in ascending order."""
    return [d for d in range(1, n + 1) if n % d == 0]


def split_counts(max_splits: int = MAX_SPLITS) -> st.SearchStrategy[int]:
    """``num_splits`` values in ``[1, max_splits]``, about uniformly; shrinks towards one split."""
    return st.sampled_from(range(1, max_splits + 1))


def _sessions(max_sessions: int) -> st.SearchStrategy[int]:
    """A session count in ``[1, max_sessions]`` (0 only when that is the maximum).

    Zero sessions would give the initial state, which zero-length prefixes
    already produce; starting at one keeps most draws interesting.
    """
    return st.sampled_from(range(min(1, max_sessions), max_sessions + 1))


def _upto(limit: int) -> st.SearchStrategy[int]:
    """An int in ``[0, limit]``, about uniformly (``st.integers`` favours the bounds)."""
    return st.sampled_from(range(limit + 1))


@st.composite
def job_shapes(draw: st.DrawFn, num_splits: int) -> tuple[int, int]:
    """A valid ``(world_size, num_workers)`` pair for ``num_splits`` splits.

    ``world_size`` divides ``num_splits``; ``num_workers`` is 0 (iteration in
    the rank's own process) or divides the splits per rank ``num_splits /
    world_size``. Every such pair is drawn with positive probability.
    """
    world_size = draw(st.sampled_from(divisors(num_splits)))
    per_rank = num_splits // world_size
    num_workers = draw(st.sampled_from([0, *divisors(per_rank)]))
    return world_size, num_workers


@st.composite
def topologies(draw: st.DrawFn, num_splits: int) -> Topology:
    """One iterator's place in a valid job for ``num_splits`` splits.

    The shape comes from :func:`job_shapes`; ``rank`` and ``worker_id`` are
    drawn inside it (``worker_id`` is 0 when ``num_workers`` is 0).
    """
    world_size, num_workers = draw(job_shapes(num_splits))
    rank = draw(_upto(world_size - 1))
    worker = draw(_upto(max(1, num_workers) - 1))
    return Topology(world_size, rank, num_workers, worker)


def job_iterators(num_splits: int, world_size: int, num_workers: int) -> list[tuple[int, ...]]:
    """The owned splits of every iterator of a job, rank-major then worker."""
    return [
        owned_splits(num_splits, Topology(world_size, r, num_workers, w))
        for r in range(world_size)
        for w in range(max(1, num_workers))
    ]


# ---------------------------------------------------------------- permutations


@dataclass(frozen=True)
class PermutationCase:
    """A shuffled row order and the permutation ``cut_splits(order, num_splits)``."""

    order: tuple[int, ...]
    """Row ids in shuffled order, including the up to ``S - 1`` dropped tail rows."""
    num_splits: int
    perm: Permutation

    @property
    def split_len(self) -> int:
        """Rows per split, ``len(order) // num_splits``."""
        return len(self.perm[0])

    @property
    def row_ids(self) -> tuple[int, ...]:
        """Every distinct row id that appears in the permutation, ascending."""
        return tuple(sorted({row for split in self.perm for row in split}))


@st.composite
def permutation_cases(
    draw: st.DrawFn,
    num_splits: int | None = None,
    *,
    max_splits: int = MAX_SPLITS,
    max_split_len: int = MAX_SPLIT_LEN,
    duplicates: bool = False,
) -> PermutationCase:
    """A shuffled order of ``S * m + extra`` row ids (``extra < S``) and its permutation.

    Args:
        num_splits: fixed ``S``; drawn from :func:`split_counts` when None.
        max_splits: upper bound of a drawn ``S``.
        max_split_len: upper bound of the split length ``m >= 1``.
        duplicates: allow a row id to appear more than once, as a
            ``split_strategy`` sampling with replacement (``bootstrap_sample``)
            produces. Faults are keyed by row id, so every copy of a faulty row
            is faulty.
    """
    s = num_splits if num_splits is not None else draw(split_counts(max_splits))
    m = draw(st.sampled_from(range(1, max_split_len + 1)))
    n = s * m + draw(_upto(s - 1))
    ids = st.integers(0, ROW_ID_LIMIT - 1)
    if duplicates:
        pool = draw(st.lists(ids, min_size=1, max_size=n, unique=True))
        order = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    else:
        order = draw(st.lists(ids, min_size=n, max_size=n, unique=True))
    return PermutationCase(tuple(order), s, cut_splits(order, s))


def permutations(
    num_splits: int | None = None,
    *,
    max_splits: int = MAX_SPLITS,
    max_split_len: int = MAX_SPLIT_LEN,
    duplicates: bool = False,
) -> st.SearchStrategy[Permutation]:
    """The permutation of :func:`permutation_cases` alone (same arguments)."""
    return permutation_cases(
        num_splits, max_splits=max_splits, max_split_len=max_split_len, duplicates=duplicates
    ).map(lambda case: case.perm)


# ---------------------------------------------------------------- faults


def permutation_rows(perm: Permutation) -> list[int]:
    """The distinct row ids of ``perm``, ascending."""
    return sorted({row for split in perm for row in split})


@st.composite
def fault_sets(
    draw: st.DrawFn,
    perm: Permutation,
    *,
    allow_skip: bool = True,
    allow_raise: bool = True,
    max_skipped: int | None = None,
    max_raising: int = 2,
) -> Faults:
    """Disjoint sets of ``perm``'s row ids whose transform is skipped or raises.

    Args:
        perm: the permutation whose rows may fail.
        allow_skip: draw a (possibly empty) set of skipped rows.
        allow_raise: draw a (possibly empty) set of raising rows, disjoint from
            the skipped ones.
        max_skipped: at most this many skipped rows; default half the rows.
        max_raising: at most this many raising rows (a raising row ends an
            iteration, so more than a few only shortens runs).
    """
    rows = permutation_rows(perm)
    skipped: frozenset[int] = frozenset()
    raising: frozenset[int] = frozenset()
    if allow_skip:
        limit = len(rows) // 2 if max_skipped is None else max_skipped
        skipped = frozenset(draw(st.sets(st.sampled_from(rows), max_size=limit)))
    rest = [r for r in rows if r not in skipped]
    if allow_raise and rest:
        raising = frozenset(draw(st.sets(st.sampled_from(rest), max_size=max_raising)))
    return Faults(skipped, raising)


# ---------------------------------------------------------------- reachable states (session histories)


@dataclass(frozen=True)
class SessionHistory(Generic[StateT, ItemT]):
    """A reachable state and every item the consumer received on the way there."""

    state: StateT
    """The merged checkpoint after the last session."""
    delivered: tuple[ItemT, ...]
    """Items received across all sessions (per iterator in order; iterators one after another)."""
    sessions: int
    """How many sessions (iterate, checkpoint, merge) produced ``state``."""


@dataclass(frozen=True)
class RowHistory(SessionHistory[RowState, Yielded]):
    """A generated row-mode session history: a reachable state and the rows delivered on the way."""


@dataclass(frozen=True)
class PackedHistory(SessionHistory[PackedState, Block]):
    """A generated packed session history: a reachable state and the blocks delivered on the way."""


Steps = tuple[Sequence[ItemT], Callable[[int], StateT]]
"""One iterator's run as the session loop needs it: its items, and the state after the first ``n``."""


def _draw_sessions(
    draw: st.DrawFn,
    num_splits: int,
    initial: StateT,
    iterate: Callable[[tuple[int, ...], StateT], Steps[ItemT, StateT]],
    join: Callable[[StateT, StateT], StateT],
    aligned: Callable[[int, int], bool],
    max_sessions: int,
) -> tuple[StateT, tuple[ItemT, ...], int]:
    """The session loop of :func:`row_progress` and :func:`packed_progress`.

    Each session draws a job shape, runs every iterator of the job from the
    current state and joins their states after drawn cuts: session ``i`` of
    ``n`` stops every iterator after the same number of whole cycles when
    ``aligned(i, n)``, else each after its own number of items.
    """
    state = initial
    delivered: list[ItemT] = []
    sessions = draw(_sessions(max_sessions))
    for i in range(sessions):
        world_size, num_workers = draw(job_shapes(num_splits))
        iterators = job_iterators(num_splits, world_size, num_workers)
        runs = [iterate(owned, state) for owned in iterators]
        if aligned(i, sessions):
            cycles = draw(_upto(min(len(items) // len(o) for (items, _), o in zip(runs, iterators))))
            cuts = [cycles * len(owned) for owned in iterators]
        else:
            cuts = [draw(_upto(len(items))) for items, _ in runs]
        state = functools.reduce(join, [after(k) for (_, after), k in zip(runs, cuts)])
        for (items, _), k in zip(runs, cuts):
            delivered.extend(items[:k])
    return state, tuple(delivered), sessions


@st.composite
def row_progress(
    draw: st.DrawFn,
    perm: Permutation,
    faults: Faults,
    *,
    aligned: bool = False,
    max_sessions: int = MAX_SESSIONS,
) -> RowHistory:
    """Run the model from the initial state through up to ``max_sessions`` sessions.

    A session draws a job shape (:func:`job_shapes`), runs every iterator of
    the job (each rank, each worker) from the current state, stops each one
    after a drawn number of rows, and merges their checkpoints (element-wise
    maximum, as ``merge_state_dicts`` does). Iterators stop at different
    prefixes, so ranks are out of step and states are mid-cycle.

    Args:
        perm: the permutation.
        faults: the rows that skip or raise.
        aligned: stop every iterator after the same number of whole cycles,
            so the state sits at a global step boundary (every split has the
            same sample count), as a multi-worker ``StreamingDataLoader``
            needs to start.
        max_sessions: upper bound of the drawn session count (0 gives the
            initial state).
    """

    def iterate(owned: tuple[int, ...], start: RowState) -> Steps[Yielded, RowState]:
        run = iterate_rows(perm, faults, owned, start)
        return run.rows, run.state_after

    state, delivered, sessions = _draw_sessions(
        draw, len(perm), initial_row_state(len(perm)), iterate, join_row, lambda i, n: aligned, max_sessions
    )
    return RowHistory(state, delivered, sessions)


def reachable_row_states(
    perm: Permutation,
    faults: Faults,
    *,
    aligned: bool = False,
    max_sessions: int = MAX_SESSIONS,
) -> st.SearchStrategy[RowState]:
    """The ``state`` of :func:`row_progress` (same arguments)."""
    return row_progress(perm, faults, aligned=aligned, max_sessions=max_sessions).map(lambda p: p.state)


@dataclass(frozen=True)
class RowCase:
    """One row-mode iterator run to its end: its inputs and its :class:`RowRun`."""

    perm: Permutation
    faults: Faults
    topology: Topology
    owned: tuple[int, ...]
    """The splits the iterator reads, ``owned_splits(len(perm), topology)``."""
    run: RowRun
    """``iterate_rows(perm, faults, owned, run.start)``; ``run.start`` is reachable."""

    @property
    def split_len(self) -> int:
        """Rows per split."""
        return len(self.perm[0])


@st.composite
def row_cases(
    draw: st.DrawFn,
    *,
    aligned: bool = False,
    allow_skip: bool = True,
    allow_raise: bool = True,
    duplicates: bool = False,
    max_splits: int = MAX_SPLITS,
    max_split_len: int = MAX_SPLIT_LEN,
) -> RowCase:
    """A permutation, faults, a topology and one iterator run from a reachable state.

    Args:
        aligned: start from a global step boundary (see :func:`row_progress`).
        allow_skip: let some rows be skipped.
        allow_raise: let some rows raise.
        duplicates: let row ids repeat (see :func:`permutation_cases`).
        max_splits: upper bound of ``num_splits``.
        max_split_len: upper bound of the rows per split.
    """
    perm = draw(permutations(max_splits=max_splits, max_split_len=max_split_len, duplicates=duplicates))
    faults = draw(fault_sets(perm, allow_skip=allow_skip, allow_raise=allow_raise))
    topology = draw(topologies(len(perm)))
    start = draw(reachable_row_states(perm, faults, aligned=aligned))
    owned = owned_splits(len(perm), topology)
    return RowCase(perm, faults, topology, owned, iterate_rows(perm, faults, owned, start))


# ---------------------------------------------------------------- packing


@st.composite
def packing_configs(
    draw: st.DrawFn,
    num_splits: int,
    *,
    max_pack_len: int = MAX_PACK_LEN,
    max_blocks_per_split: int = MAX_BLOCKS_PER_SPLIT,
) -> PackingConfig:
    """A packing configuration valid for ``num_splits`` splits.

    ``eos_id`` and ``pad_id`` are small and may coincide with each other or
    with document tokens (the reference allows both), so no check may rely on
    token values to find documents or padding.
    """
    return PackingConfig(
        pack_sequences=draw(st.sampled_from(range(1, max_pack_len + 1))),
        eos_id=draw(st.integers(-2, 9)),
        pad_id=draw(st.integers(-2, 9)),
        blocks_per_epoch=num_splits * draw(st.sampled_from(range(1, max_blocks_per_split + 1))),
    )


def token_lists(max_tokens: int = MAX_DOC_TOKENS) -> st.SearchStrategy[tuple[int, ...]]:
    """One document's tokens: 0 to ``max_tokens`` small non-negative ints."""
    return st.lists(st.integers(0, 9), max_size=max_tokens).map(tuple)


def corpora(perm: Permutation, *, max_tokens: int = MAX_DOC_TOKENS) -> st.SearchStrategy[Corpus]:
    """A document (token list, possibly empty) for every row id of ``perm``."""
    return st.fixed_dictionaries({row: token_lists(max_tokens) for row in permutation_rows(perm)})


@st.composite
def packed_progress(
    draw: st.DrawFn,
    perm: Permutation,
    corpus: Corpus,
    faults: Faults,
    config: PackingConfig,
    *,
    aligned: bool = True,
    max_sessions: int = MAX_PACKED_SESSIONS,
) -> PackedHistory:
    """Run the packed model from the initial state through up to ``max_sessions`` sessions.

    Each session draws a job shape, runs every iterator from the current
    state, stops all of them after the same drawn number of cycles (a global
    step boundary: every split has emitted the same number of blocks) and
    merges their states (``join_packed``, as ``merge_state_dicts`` does).

    Args:
        perm: the permutation.
        corpus: the document of every row id.
        faults: the rows that skip or raise.
        config: the packing configuration.
        aligned: when False, the *last* session stops every iterator after an
            arbitrary number of blocks instead, so the state may be mid-cycle
            and ranks out of step: such a state is a valid snapshot but cannot
            be resumed or merged with ``merge_state_dicts``.
        max_sessions: upper bound of the drawn session count.
    """

    def iterate(owned: tuple[int, ...], start: PackedState) -> Steps[Block, PackedState]:
        run = iterate_packed(perm, corpus, faults, owned, config, start)
        return run.blocks, run.state_after

    state, delivered, sessions = _draw_sessions(
        draw,
        len(perm),
        initial_packed_state(len(perm)),
        iterate,
        join_packed,
        lambda i, n: aligned or i != n - 1,
        max_sessions,
    )
    return PackedHistory(state, delivered, sessions)


def reachable_packed_states(
    perm: Permutation,
    corpus: Corpus,
    faults: Faults,
    config: PackingConfig,
    *,
    aligned: bool = True,
    max_sessions: int = MAX_PACKED_SESSIONS,
) -> st.SearchStrategy[PackedState]:
    """The ``state`` of :func:`packed_progress` (same arguments)."""
    return packed_progress(perm, corpus, faults, config, aligned=aligned, max_sessions=max_sessions).map(
        lambda p: p.state
    )


@dataclass(frozen=True)
class PackedCase:
    """Everything a packed iterator needs, drawn together."""

    perm: Permutation
    corpus: Corpus
    faults: Faults
    config: PackingConfig


@st.composite
def packed_cases(
    draw: st.DrawFn,
    *,
    max_splits: int = MAX_SPLITS,
    max_split_len: int = MAX_SPLIT_LEN,
    allow_skip: bool = True,
    allow_raise: bool = True,
) -> PackedCase:
    """A permutation, its corpus, faults and a packing configuration.

    Raising rows are drawn in about a third of the cases only: a fill pulls
    documents ahead of the blocks, so a raising row usually ends a packed run
    before its first block, and most draws should reach the interesting parts.
    """
    perm = draw(permutations(max_splits=max_splits, max_split_len=max_split_len))
    raising = allow_raise and draw(st.sampled_from([False, False, True]))
    return PackedCase(
        perm,
        draw(corpora(perm)),
        draw(fault_sets(perm, allow_skip=allow_skip, allow_raise=raising)),
        draw(packing_configs(len(perm))),
    )


@dataclass(frozen=True)
class PackedRunCase:
    """One packed iterator run to its end: its inputs and its :class:`PackedRun`."""

    case: PackedCase
    topology: Topology
    owned: tuple[int, ...]
    run: PackedRun
    """``iterate_packed(...)`` from ``run.start``, a reachable global step boundary."""


@st.composite
def packed_run_cases(
    draw: st.DrawFn,
    *,
    allow_skip: bool = True,
    allow_raise: bool = True,
    max_splits: int = MAX_SPLITS,
    max_split_len: int = MAX_SPLIT_LEN,
) -> PackedRunCase:
    """A :func:`packed_cases` draw, a topology and one packed iterator run from a reachable state."""
    case = draw(
        packed_cases(
            max_splits=max_splits,
            max_split_len=max_split_len,
            allow_skip=allow_skip,
            allow_raise=allow_raise,
        )
    )
    topology = draw(topologies(len(case.perm)))
    start = draw(reachable_packed_states(case.perm, case.corpus, case.faults, case.config))
    owned = owned_splits(len(case.perm), topology)
    run = iterate_packed(case.perm, case.corpus, case.faults, owned, case.config, start)
    return PackedRunCase(case, topology, owned, run)


# ---------------------------------------------------------------- configurations


def fingerprints() -> st.SearchStrategy[str | None]:
    """``None`` (no ``split_strategy``) or a 64-digit hex permutation fingerprint."""
    return st.none() | st.binary(min_size=32, max_size=32).map(bytes.hex)


@st.composite
def run_configs(
    draw: st.DrawFn,
    num_splits: int,
    packing: PackingConfig | None = None,
) -> RunConfig:
    """The pinned configuration of a run with ``num_splits`` splits (and ``packing``, if given)."""
    return RunConfig(
        num_splits=num_splits,
        shuffle_seed=draw(st.integers(0, 2**32 - 1)),
        epoch=draw(st.integers(0, 3)),
        perm_fingerprint=draw(fingerprints()),
        packing=packing,
    )


@st.composite
def doc_length_tables(
    draw: st.DrawFn,
    *,
    max_splits: int = 4,
    max_docs: int = 400,
    max_tokens: int = 50,
) -> list[list[int | None]]:
    """Token counts of every document of every split, for the ``"auto"`` estimate.

    Splits hold 1 to ``max_docs`` documents (more than 100 makes the estimate
    sample several per split). Lengths come from a drawn seed rather than
    element by element, which keeps large tables cheap to generate.
    """
    num_splits = draw(st.integers(1, max_splits))
    docs = draw(st.integers(1, max_docs))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    return [[rng.randint(0, max_tokens) for _ in range(docs)] for _ in range(num_splits)]


__all__ = [
    "MAX_BLOCKS_PER_SPLIT",
    "MAX_DOC_TOKENS",
    "MAX_PACKED_SESSIONS",
    "MAX_PACK_LEN",
    "MAX_SESSIONS",
    "MAX_SPLITS",
    "MAX_SPLIT_LEN",
    "ROW_ID_LIMIT",
    "Corpus",
    "PackedCase",
    "PackedHistory",
    "PackedRunCase",
    "PermutationCase",
    "RowCase",
    "RowHistory",
    "SessionHistory",
    "corpora",
    "divisors",
    "doc_length_tables",
    "fault_sets",
    "fingerprints",
    "job_iterators",
    "job_shapes",
    "packed_cases",
    "packed_progress",
    "packed_run_cases",
    "packing_configs",
    "permutation_cases",
    "permutation_rows",
    "permutations",
    "reachable_packed_states",
    "reachable_row_states",
    "row_progress",
    "row_cases",
    "run_configs",
    "split_counts",
    "token_lists",
    "topologies",
]
