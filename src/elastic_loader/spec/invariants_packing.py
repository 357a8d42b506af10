"""The predicates of the packing invariants (``spec/INVARIANTS.md``, packing rows).

Rules: the same as ``invariants.py``, which re-exports every name here: a predicate is named
like its invariant, returns ``None`` when it holds and raises :class:`InvariantViolation` with a
counterexample otherwise, and re-derives what it checks (token streams, document starts, block
counts) from the permutation and corpus instead of calling the packer it judges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .errors import check as _check
from .packing import PackedRun, PackedState
from .rows import Exhausted, Faults
from .topology import PackingConfig, Permutation


def _stream(
    perm: Permutation,
    corpus: Mapping[int, Sequence[int]],
    faults: Faults,
    config: PackingConfig,
    start: PackedState,
    split: int,
    end_consumed: int,
) -> tuple[list[int], list[int]]:
    """The token stream of a split from ``start`` and the document starts in it."""
    buffer = start.buffer(split)
    tokens, starts = list(buffer.tokens), list(buffer.starts)
    for p in range(start.consumed[split], end_consumed):
        row = perm[split][p]
        if row in faults.skipped:
            continue
        starts.append(len(tokens))
        tokens.extend(corpus[row])
        tokens.append(config.eos_id)
    return tokens, starts


def PackingConservationInv(
    perm: Permutation,
    corpus: Mapping[int, Sequence[int]],
    faults: Faults,
    config: PackingConfig,
    run: PackedRun,
) -> None:
    """Delivered tokens then buffered tokens of a split are exactly its pulled documents, each
    followed by EOS, in order: nothing lost, nothing repeated, nothing invented."""
    start = run.start
    for n in range(len(run.blocks) + 1):
        state = run.state_after(n)
        for s in {b.split for b in run.blocks}:
            delivered = [t for b in run.blocks[:n] if b.split == s for t in b.input_ids[: b.real]]
            stream, _ = _stream(perm, corpus, faults, config, start, s, state.consumed[s])
            _check(
                delivered + list(state.buffer(s).tokens) == stream,
                "PackingConservationInv",
                f"split {s} after {n} blocks: delivered+buffer differs from the document stream",
            )
            padded = [b for b in run.blocks[:n] if b.split == s and b.real < config.pack_sequences]
            _check(
                all(t == config.pad_id for b in padded for t in b.input_ids[b.real :]),
                "PackingConservationInv",
                f"split {s}: padding is not pad_id",
            )


def DocIdsInv(
    perm: Permutation,
    corpus: Mapping[int, Sequence[int]],
    faults: Faults,
    config: PackingConfig,
    run: PackedRun,
) -> None:
    """``doc_ids[k]`` counts the documents that start inside the block at offsets ``1..k``."""
    length = config.pack_sequences
    end = run.states[-1] if run.states else run.start
    for s in {b.split for b in run.blocks}:
        _, starts = _stream(perm, corpus, faults, config, run.start, s, end.consumed[s])
        for j, block in enumerate(b for b in run.blocks if b.split == s):
            base = j * length
            want = tuple(sum(1 for x in starts if base < x <= base + k) for k in range(length))
            _check(
                block.doc_ids == want, "DocIdsInv", f"split {s} block {j}: doc_ids {block.doc_ids} != {want}"
            )


def PackingBudgetProp(config: PackingConfig, num_splits: int, runs: Sequence[PackedRun]) -> None:
    """Over a whole epoch every split emits exactly ``blocks_per_epoch / S`` blocks of ``L`` tokens."""
    budget = config.blocks_per_split(num_splits)
    counts = [0] * num_splits
    for run in runs:
        _check(isinstance(run.end, Exhausted), "PackingBudgetProp", f"a run ended with {run.end}")
        for block in run.blocks:
            counts[block.split] += 1
            _check(
                len(block.input_ids) == config.pack_sequences, "PackingBudgetProp", "block of wrong length"
            )
            _check(
                len(block.doc_ids) == config.pack_sequences, "PackingBudgetProp", "doc_ids of wrong length"
            )
    start_emitted = [0] * num_splits
    for run in runs:
        for s in range(num_splits):
            start_emitted[s] = max(start_emitted[s], run.start.emitted[s])
    totals = [a + b for a, b in zip(counts, start_emitted)]
    _check(totals == [budget] * num_splits, "PackingBudgetProp", f"blocks per split {totals} != {budget}")


def AutoBudgetInv(blocks_per_epoch: int, num_splits: int) -> None:
    """The ``"auto"`` estimate is a positive multiple of ``num_splits``."""
    _check(
        blocks_per_epoch >= num_splits and blocks_per_epoch % num_splits == 0,
        "AutoBudgetInv",
        f"auto budget {blocks_per_epoch} is not a positive multiple of {num_splits}",
    )
