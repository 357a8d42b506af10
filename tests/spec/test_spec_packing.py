"""Sequence packing: token conservation, ``doc_ids``, the block budget and the ``"auto"`` estimate."""

from __future__ import annotations

from hypothesis import given, strategies as st

from elastic_loader.spec import (
    Block,
    Faults,
    PackBuffer,
    PackingConfig,
    cut_splits,
    estimate_blocks_per_epoch,
    initial_packed_state,
    iterate_packed,
)
from elastic_loader.spec.invariants import (
    AutoBudgetInv,
    DocIdsInv,
    PackingBudgetProp,
    PackingConservationInv,
)
from elastic_loader.testing.strategies import (
    PackedRunCase,
    doc_length_tables,
    job_iterators,
    job_shapes,
    packed_cases,
    packed_run_cases,
    reachable_packed_states,
)

# ---------------------------------------------------------------- PackingConservationInv


@given(packed_run_cases())
def test_PackingConservationInv(rc: PackedRunCase) -> None:
    case = rc.case
    PackingConservationInv(case.perm, case.corpus, case.faults, case.config, rc.run)


@given(packed_run_cases(max_splits=3, max_split_len=8))
def test_PackingConservationInv_few_long_splits(rc: PackedRunCase) -> None:
    case = rc.case
    PackingConservationInv(case.perm, case.corpus, case.faults, case.config, rc.run)


def test_PackingConservationInv_budget_truncates_the_epoch() -> None:
    """R6.6: tokens left once the budget is met stay in the buffer; they are not delivered."""
    perm = cut_splits([0, 1], 1)
    corpus = {0: (1, 2, 3), 1: (4,)}
    config = PackingConfig(pack_sequences=2, eos_id=9, pad_id=0, blocks_per_epoch=1)
    run = iterate_packed(perm, corpus, Faults(), (0,), config, initial_packed_state(1))
    assert [b.input_ids for b in run.blocks] == [(1, 2)]
    assert run.states[-1].consumed == (1,)
    assert run.states[-1].buffer(0) == PackBuffer((3, 9), ())
    PackingConservationInv(perm, corpus, Faults(), config, run)


# ---------------------------------------------------------------- DocIdsInv


@given(packed_run_cases())
def test_DocIdsInv(rc: PackedRunCase) -> None:
    case = rc.case
    DocIdsInv(case.perm, case.corpus, case.faults, case.config, rc.run)


def _blocks(corpus: dict[int, tuple[int, ...]], length: int, budget: int) -> tuple[Block, ...]:
    perm = cut_splits(sorted(corpus), 1)
    config = PackingConfig(pack_sequences=length, eos_id=9, pad_id=0, blocks_per_epoch=budget)
    run = iterate_packed(perm, corpus, Faults(), (0,), config, initial_packed_state(1))
    DocIdsInv(perm, corpus, Faults(), config, run)
    PackingConservationInv(perm, corpus, Faults(), config, run)
    return run.blocks


def test_DocIdsInv_reference_rules() -> None:
    """R6.5 (verified on the reference), expected values worked out by hand from the rule.

    Documents [1], [2 3], [4 5 6 7 8] with EOS 9 and L = 4 form the stream
    ``1 9 2 3 9 4 5 6 7 8 9`` with documents starting at 0, 2 and 5.
    """
    blocks = _blocks({0: (1,), 1: (2, 3), 2: (4, 5, 6, 7, 8)}, 4, 4)
    assert [(b.input_ids, b.doc_ids, b.real) for b in blocks] == [
        # EOS shares the id of the document it ends; the second document gets id 1.
        ((1, 9, 2, 3), (0, 0, 1, 1), 4),
        # Position 0 is a leftover EOS: id 0; the third document starts at 1.
        ((9, 4, 5, 6), (0, 1, 1, 1), 4),
        # A document longer than L spans blocks; its continuation starts at id 0; then padding.
        ((7, 8, 9, 0), (0, 0, 0, 0), 3),
        # An all-padding block once the split is exhausted (R6.6).
        ((0, 0, 0, 0), (0, 0, 0, 0), 0),
    ]


def test_DocIdsInv_padding_keeps_the_last_document_id() -> None:
    """R6.5: padding carries the id of the last document started in the block."""
    blocks = _blocks({0: (1,), 1: (2,)}, 6, 1)
    assert [(b.input_ids, b.doc_ids) for b in blocks] == [((1, 9, 2, 9, 0, 0), (0, 0, 1, 1, 1, 1))]


def test_DocIdsInv_fresh_document_at_position_zero() -> None:
    """R6.5: a document starting exactly at a block boundary has id 0 there."""
    blocks = _blocks({0: (1,), 1: (2,)}, 2, 2)
    assert [(b.input_ids, b.doc_ids) for b in blocks] == [((1, 9), (0, 0)), ((2, 9), (0, 0))]


def test_DocIdsInv_empty_document_is_one_eos() -> None:
    """R6.3: an empty document contributes only its EOS."""
    blocks = _blocks({0: (), 1: (5,)}, 3, 1)
    assert [(b.input_ids, b.doc_ids) for b in blocks] == [((9, 5, 9), (0, 1, 1))]


# ---------------------------------------------------------------- PackingBudgetProp


@given(st.data())
def test_PackingBudgetProp(data: st.DataObject) -> None:
    """Every iterator of a job, from one step boundary, to the end of the epoch (no raising rows)."""
    case = data.draw(packed_cases(allow_raise=False), label="case")
    num_splits = len(case.perm)
    start = data.draw(reachable_packed_states(case.perm, case.corpus, case.faults, case.config))
    world_size, num_workers = data.draw(job_shapes(num_splits), label="shape")
    runs = [
        iterate_packed(case.perm, case.corpus, case.faults, owned, case.config, start)
        for owned in job_iterators(num_splits, world_size, num_workers)
    ]
    PackingBudgetProp(case.config, num_splits, runs)


def test_PackingBudgetProp_uneven_splits_pad() -> None:
    """R6.6: a split with less data pads; both splits emit exactly b = 3 blocks."""
    perm = cut_splits([0, 1, 2, 3], 2)
    corpus = {0: (1, 1, 1, 1, 1), 1: (2,), 2: (), 3: ()}
    config = PackingConfig(pack_sequences=2, eos_id=9, pad_id=0, blocks_per_epoch=6)
    run = iterate_packed(perm, corpus, Faults(), (0, 1), config, initial_packed_state(2))
    assert [(b.split, b.input_ids) for b in run.blocks] == [
        (0, (1, 1)),
        (1, (9, 9)),
        (0, (1, 1)),
        (1, (0, 0)),
        (0, (1, 9)),
        (1, (0, 0)),
    ]
    PackingBudgetProp(config, 2, [run])


# ---------------------------------------------------------------- AutoBudgetInv


@given(doc_length_tables(), st.integers(0, 2**32 - 1), st.integers(1, 64))
def test_AutoBudgetInv(lengths: list[list[int | None]], seed: int, pack_sequences: int) -> None:
    AutoBudgetInv(estimate_blocks_per_epoch(lengths, seed, pack_sequences), len(lengths))


def test_AutoBudgetInv_reference_example() -> None:
    """R6.9 (verified): 10 documents, 23 tokens with EOS, S = 2, L = 4 give 2 blocks.

    The documents below were run through ``lancedb.streaming`` 0.40
    (``shuffle=False``, ``shuffle_seed=0``) and it resolved ``"auto"`` to 2.
    By hand: ``Random(0)`` samples offset 3 of each split (lengths 0 and 1),
    so ``(1 + 2) * 10 // 2 = 15`` tokens, 3 blocks, rounded down to 2.
    """
    lengths: list[list[int | None]] = [[2, 1, 2, 0, 1], [3, 1, 1, 1, 1]]
    assert sum(n + 1 for split in lengths for n in split if n is not None) == 23
    blocks = estimate_blocks_per_epoch(lengths, 0, 4)
    assert blocks == 2
    AutoBudgetInv(blocks, 2)


def test_AutoBudgetInv_minimum_is_num_splits() -> None:
    """R6.9: an estimate below S is raised to S."""
    assert estimate_blocks_per_epoch([[0], [0], [0]], 5, 64) == 3
