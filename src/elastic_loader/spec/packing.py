"""Sequence packing: blocks, ``doc_ids``, the per-split budget and packed progress (item 3).

Rules: every split packs its own documents into blocks of ``L`` tokens, each
document followed by ``eos_id``. An iterator whose owned splits start at
different block counts first *catches up*: lagging splits emit one block at a
time in ``(emitted, split id)`` order (each filling just before it emits) until
all have emitted as many as the most advanced one. Then a cycle first *fills*
every owned split (pull whole documents while the buffer is shorter than
``L``), then *emits* one block per owned split in owned order; a split that
ran out pads its block with ``pad_id``. Every split emits exactly ``b =
blocks_per_epoch / num_splits`` blocks per epoch, however many documents it
has. ``doc_ids[k]`` counts the document starts ``s`` with ``0 < s <= k``
inside the block. A split's blocks depend only on its own documents and
buffer, so catch-up changes the order of blocks across splits, never their
contents.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from .errors import SpecValueError, require
from .rows import End, Exhausted, Faults, Prefixes, Raised, peek
from .topology import PackingConfig, Permutation, check_permutation


@dataclass(frozen=True)
class PackBuffer:
    """Tokens pulled into a split but not yet emitted, and where documents start in them."""

    tokens: tuple[int, ...] = ()
    starts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        require(
            all(0 <= a < b for a, b in zip(self.starts, self.starts[1:])),
            "buffer_starts_unsorted",
            "document starts must be strictly increasing",
        )
        require(
            all(0 <= s < len(self.tokens) for s in self.starts),
            "buffer_start_out_of_range",
            "document starts must index the buffer",
        )


EMPTY_BUFFER = PackBuffer()


@dataclass(frozen=True)
class PackedState:
    """Per-split packed progress; ``buffers`` holds only non-empty buffers (canonical form)."""

    consumed: tuple[int, ...]
    """One past the permutation position of the last document pulled into the buffer."""
    emitted: tuple[int, ...]
    """Blocks yielded so far this epoch."""
    buffers: Mapping[int, PackBuffer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(
            len(self.consumed) == len(self.emitted), "list_length", "consumed and emitted differ in length"
        )
        require(
            all(0 <= s < len(self.consumed) and b.tokens for s, b in self.buffers.items()),
            "buffer_key_out_of_range",
            "buffers are keyed by split id and never empty",
        )

    def buffer(self, split: int) -> PackBuffer:
        """The buffer of ``split`` (empty when absent)."""
        return self.buffers.get(split, EMPTY_BUFFER)


def initial_packed_state(num_splits: int) -> PackedState:
    """The packed state of an epoch before any document is read."""
    zeros = (0,) * num_splits
    return PackedState(zeros, zeros, {})


@dataclass(frozen=True)
class Block:
    """One emitted block: ``real`` leading tokens are data, the rest is padding."""

    split: int
    input_ids: tuple[int, ...]
    doc_ids: tuple[int, ...]
    real: int


@dataclass(frozen=True)
class PackedRun(Prefixes[PackedState]):
    """Everything one packed iterator yields; ``states[i]`` is the checkpoint right after ``blocks[i]``."""

    start: PackedState
    blocks: tuple[Block, ...]
    states: tuple[PackedState, ...]
    end: End
    ITEMS: ClassVar[str] = "blocks"


def doc_ids_of(starts: Sequence[int], length: int) -> tuple[int, ...]:
    """``doc_ids[k]`` = number of starts ``s`` with ``0 < s <= k``, for ``k`` in ``[0, length)``."""
    return tuple(sum(1 for s in starts if 0 < s <= k) for k in range(length))


@dataclass
class _Packer:
    """The working state of one packed iterator (the arguments of :func:`iterate_packed`, ``start``
    being its ``state``): progress, and the owned splits' buffers."""

    perm: Permutation
    corpus: Mapping[int, Sequence[int]]
    faults: Faults
    owned: Sequence[int]
    config: PackingConfig
    start: PackedState
    blocks: list[Block] = field(default_factory=list)
    states: list[PackedState] = field(default_factory=list)

    def __post_init__(self) -> None:
        start, owned = self.start, self.owned
        self.consumed, self.emitted = list(start.consumed), list(start.emitted)
        self.tokens = {s: list(start.buffer(s).tokens) for s in owned}
        self.starts = {s: list(start.buffer(s).starts) for s in owned}

    def snapshot(self) -> PackedState:
        """The checkpoint now: unowned buffers as they started, owned ones as they are."""
        buffers = dict(self.start.buffers)
        for s in self.owned:
            buffers.pop(s, None)
            if self.tokens[s]:
                buffers[s] = PackBuffer(tuple(self.tokens[s]), tuple(self.starts[s]))
        return PackedState(tuple(self.consumed), tuple(self.emitted), buffers)

    def fill(self, s: int) -> Raised | None:
        """Pull whole documents into split ``s`` while its buffer is shorter than ``L``."""
        tokens, length = self.tokens[s], self.config.pack_sequences
        while len(tokens) < length:
            nxt = peek(self.perm[s], self.consumed[s], self.faults)
            if nxt.kind is Exhausted:
                return None
            row = self.perm[s][nxt.position]
            if nxt.kind is Raised:
                return Raised(s, nxt.position, row)
            self.starts[s].append(len(tokens))
            tokens.extend(self.corpus[row])
            tokens.append(self.config.eos_id)
            self.consumed[s] = nxt.position + 1
        return None

    def emit(self, s: int) -> None:
        """Cut split ``s``'s next block (padded when the split ran out) and record the checkpoint."""
        length, tokens = self.config.pack_sequences, self.tokens[s]
        real = min(length, len(tokens))
        ids = tuple(tokens[:length]) + (self.config.pad_id,) * (length - real)
        self.blocks.append(Block(s, ids, doc_ids_of(self.starts[s], length), real))
        del tokens[:length]
        self.starts[s] = [x - length for x in self.starts[s] if x >= length]
        self.emitted[s] += 1
        self.states.append(self.snapshot())

    def run(self, end: End) -> PackedRun:
        """What the iterator yielded, ending with ``end``."""
        return PackedRun(self.start, tuple(self.blocks), tuple(self.states), end)


def iterate_packed(
    perm: Permutation,
    corpus: Mapping[int, Sequence[int]],
    faults: Faults,
    owned: Sequence[int],
    config: PackingConfig,
    state: PackedState,
) -> PackedRun:
    """Run one packed iterator over ``owned`` splits from ``state`` to its end (catch-up, then cycles)."""
    check_permutation(perm)
    budget = config.blocks_per_split(len(perm))
    require(len(state.emitted) == len(perm), "list_length", "state must have one entry per split")
    if not owned:
        return PackedRun(state, (), (), Exhausted())
    packer = _Packer(perm, corpus, faults, owned, config, state)
    top = max(state.emitted[s] for s in owned)
    lagging = [(state.emitted[s], s) for s in owned if state.emitted[s] < top]
    heapq.heapify(lagging)
    while lagging:
        count, s = heapq.heappop(lagging)
        error = packer.fill(s)
        if error is not None:
            return packer.run(error)
        packer.emit(s)
        if count + 1 < top:
            heapq.heappush(lagging, (count + 1, s))
    while packer.emitted[owned[0]] < budget:
        for s in owned:
            error = packer.fill(s)
            if error is not None:
                return packer.run(error)
        for s in owned:
            packer.emit(s)
    return packer.run(Exhausted())


def estimate_blocks_per_epoch(
    doc_lengths: Sequence[Sequence[int | None]],
    shuffle_seed: int,
    pack_sequences: int,
) -> int:
    """The ``blocks_per_epoch="auto"`` estimate from ~1% of each split's documents.

    ``doc_lengths[s][p]`` is the token count of the document at position ``p``
    of split ``s`` (``None`` for a null list or a list holding a null). One
    ``random.Random(shuffle_seed)`` samples ``min(n, max(1, min(ceil(n/100),
    cap)))`` positions of each split in split order, ``cap = max(1,
    100000 // S)``; each document counts its tokens plus one EOS. The result is
    rounded down to a multiple of ``S``, and is at least ``S``.
    """
    num_splits = len(doc_lengths)
    require(num_splits > 0, "num_splits_not_positive", "need at least one split")
    cap = max(1, 100_000 // num_splits)
    rng = random.Random(shuffle_seed)
    sampled_tokens = sampled_docs = total_docs = 0
    for lengths in doc_lengths:
        n = len(lengths)
        require(n > 0, "auto_budget_empty", "blocks_per_epoch='auto' cannot estimate an empty split")
        k = min(n, max(1, min((n + 99) // 100, cap)))
        for offset in sorted(rng.sample(range(n), k)):
            value = lengths[offset]
            if value is None:
                raise SpecValueError("null_tokens", "pack_sequences does not support null token lists")
            sampled_tokens += value
        sampled_docs += k
        total_docs += n
    estimated_tokens = (sampled_tokens + sampled_docs) * total_docs // sampled_docs
    blocks = estimated_tokens // pack_sequences
    return max(num_splits, blocks - blocks % num_splits)
