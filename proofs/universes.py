"""Finite universes the bounded checks enumerate exhaustively.

Conventions: split ``s`` of a permutation with splits of length ``m`` holds
row ids ``s*m .. s*m+m-1`` (row ids are arbitrary labels; only fault
membership and identity matter to the model). A fault assignment gives every
row one of three kinds: ``o`` (ok), ``s`` (skipped), ``r`` (raising).
Documents of the packing universe carry tokens ``1000*(row+1) + i``, distinct
from one another and from ``EOS = -1`` and ``PAD = -2``, so a misplaced,
repeated or invented token is visible.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from elastic_loader.spec import (
    Faults,
    PackedState,
    PackingConfig,
    Permutation,
    RowState,
    Topology,
    owned_splits,
)

EOS = -1
PAD = -2


def permutation(num_splits: int, split_len: int) -> Permutation:
    """Splits of ``split_len`` consecutive row ids."""
    return tuple(tuple(range(s * split_len, (s + 1) * split_len)) for s in range(num_splits))


def fault_sets(rows: Sequence[int], kinds: str) -> Iterator[Faults]:
    """Every assignment of a kind in ``kinds`` (letters ``o``, ``s``, ``r``) to each row of ``rows``."""
    for choice in itertools.product(kinds, repeat=len(rows)):
        skipped = frozenset(row for row, kind in zip(rows, choice) if kind == "s")
        raising = frozenset(row for row, kind in zip(rows, choice) if kind == "r")
        yield Faults(skipped, raising)


def describe_faults(faults: Faults) -> str:
    """A short, replayable description of a fault set."""
    return f"Faults(skipped={sorted(faults.skipped)}, raising={sorted(faults.raising)})"


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n`` in increasing order."""
    return [d for d in range(1, n + 1) if n % d == 0]


def topologies(num_splits: int) -> Iterator[tuple[int, int]]:
    """Every valid ``(world_size, num_workers)``: ``W | S`` and ``num_workers`` 0 or dividing ``S/W``."""
    for world in divisors(num_splits):
        per_rank = num_splits // world
        for workers in range(per_rank + 1):
            if workers == 0 or per_rank % workers == 0:
                yield world, workers


@dataclass(frozen=True)
class Slot:
    """One iterator of a job (a rank, or one DataLoader worker of a rank) and its owned splits."""

    rank: int
    worker: int
    owned: tuple[int, ...]


def iterators(num_splits: int, world_size: int, num_workers: int) -> list[Slot]:
    """Every iterator of a ``world_size`` x ``num_workers`` job, rank-major."""
    return [
        Slot(r, w, owned_splits(num_splits, Topology(world_size, r, num_workers, w)))
        for r in range(world_size)
        for w in range(max(1, num_workers))
    ]


def progress_pairs(split_len: int) -> list[tuple[int, int]]:
    """Every ``(samples, positions)`` with ``0 <= samples <= positions <= split_len``."""
    return [(c, p) for p in range(split_len + 1) for c in range(p + 1)]


def row_state(pairs: Sequence[tuple[int, int]]) -> RowState:
    """A row state from per-split ``(samples, positions)``."""
    return RowState(tuple(c for c, _ in pairs), tuple(p for _, p in pairs))


def all_row_states(num_splits: int, split_len: int) -> Iterator[RowState]:
    """Every valid row state of ``num_splits`` splits of ``split_len`` rows."""
    for pairs in itertools.product(progress_pairs(split_len), repeat=num_splits):
        yield row_state(pairs)


def skipped_before(split: Sequence[int], faults: Faults, position: int) -> int:
    """Skipped rows at positions ``< position``."""
    return sum(1 for row in split[:position] if row in faults.skipped)


def accounted_states(
    perm: Permutation, faults: Faults, splits: Sequence[int], rest: RowState
) -> Iterator[RowState]:
    """Every state with ``samples = positions - skipped before`` on ``splits``; others as in ``rest``."""
    size = len(perm[0])
    for positions in itertools.product(range(size + 1), repeat=len(splits)):
        samples, pos = list(rest.samples), list(rest.positions)
        for s, p in zip(splits, positions):
            pos[s] = p
            samples[s] = p - skipped_before(perm[s], faults, p)
        yield RowState(tuple(samples), tuple(pos))


def owned_subsets(num_splits: int) -> Iterator[tuple[int, ...]]:
    """Every non-empty ascending subset of ``range(num_splits)``."""
    for size in range(1, num_splits + 1):
        yield from itertools.combinations(range(num_splits), size)


# ---------------------------------------------------------------- packing


def corpus_of(lengths: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """Documents of row ``i`` with ``lengths[i]`` distinct tokens."""
    return {row: tuple(1000 * (row + 1) + i for i in range(n)) for row, n in enumerate(lengths)}


@dataclass(frozen=True)
class PackingInstance:
    """One packing problem: permutation, documents, faults and packing parameters."""

    perm: Permutation
    corpus: Mapping[int, tuple[int, ...]]
    faults: Faults
    config: PackingConfig

    def describe(self) -> str:
        """Replayable description."""
        lengths = [len(self.corpus[row]) for split in self.perm for row in split]
        return (
            f"splits={len(self.perm)}x{len(self.perm[0])} doc_lengths={lengths} "
            f"{describe_faults(self.faults)} "
            f"L={self.config.pack_sequences} blocks_per_epoch={self.config.blocks_per_epoch}"
        )


def packing_instances(
    max_splits: int,
    max_rows: int,
    max_doc_len: int,
    fault_kinds: str,
    max_block_len: int,
    max_budget: int,
    fixed_lengths: bool = False,
) -> Iterator[PackingInstance]:
    """Every packing instance within the bounds.

    Splits ``S <= max_splits`` of ``m`` rows with ``S*m <= max_rows``; every
    document length in ``0..max_doc_len`` (or, with ``fixed_lengths``, the
    pattern ``row % (max_doc_len + 1)``); every fault assignment over
    ``fault_kinds``; block length ``L <= max_block_len``; per-split budget
    ``b <= max_budget``.
    """
    for num_splits in range(1, max_splits + 1):
        for split_len in range(1, max_rows // num_splits + 1):
            perm = permutation(num_splits, split_len)
            rows = [row for split in perm for row in split]
            if fixed_lengths:
                length_choices: Iterator[tuple[int, ...]] = iter([tuple(r % (max_doc_len + 1) for r in rows)])
            else:
                length_choices = itertools.product(range(max_doc_len + 1), repeat=len(rows))
            for lengths in length_choices:
                corpus = corpus_of(lengths)
                for faults in fault_sets(rows, fault_kinds):
                    for block_len in range(1, max_block_len + 1):
                        for budget in range(1, max_budget + 1):
                            config = PackingConfig(block_len, EOS, PAD, budget * num_splits)
                            yield PackingInstance(perm, corpus, faults, config)


def packed_key(state: PackedState) -> tuple[object, ...]:
    """A hashable identity of a packed state (its buffers mapping is a dict)."""
    return state.consumed, state.emitted, tuple(sorted(state.buffers.items()))
