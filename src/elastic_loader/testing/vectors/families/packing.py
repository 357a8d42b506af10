"""The ``packing`` family: the blocks one packed iterator emits and the state after each.

Input: a permutation, a corpus, faults, the owned splits, a packing
configuration and a start state (any state a run leaves behind: owned splits
that emitted different block counts catch up first). Every case is checked against the packing
invariants that apply to one run (:func:`check_packed_run`).

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ....spec.packing import PackedRun, PackedState, initial_packed_state, iterate_packed
from ....spec.rows import Exhausted, Faults
from ....spec.topology import PackingConfig, Permutation
from ..codec import (
    CORPUS,
    FAULTS,
    INTS,
    PACKED_STATE,
    PACKING,
    PERMUTATION,
    Corpus,
    corpus_map,
    enc_block,
    enc_end,
    enc_packed_state,
    record,
)
from ..plumbing import NO_FAULTS, faults_of, random_corpus, random_faults, random_perm, seq_perm
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case


@dataclass(frozen=True)
class PackingInput:
    """One packed iterator: permutation, corpus, faults, owned splits, configuration and start."""

    permutation: Permutation
    corpus: Corpus
    faults: Faults
    owned: tuple[int, ...]
    config: PackingConfig
    start: PackedState


_encode, _decode = record(PackingInput, PERMUTATION, CORPUS, FAULTS, INTS, PACKING, PACKED_STATE)


def check_packed_run(
    perm: Permutation,
    corpus: Corpus,
    faults: Faults,
    owned: Sequence[int],
    config: PackingConfig,
    run: PackedRun,
) -> None:
    """Every packing invariant that applies to one iterator run."""
    docs = corpus_map(corpus)
    inv.PackingConservationInv(perm, docs, faults, config, run)
    inv.DocIdsInv(perm, docs, faults, config, run)
    for block in run.blocks:
        if len(block.input_ids) != config.pack_sequences or len(block.doc_ids) != config.pack_sequences:
            raise AssertionError(f"block of split {block.split} does not have {config.pack_sequences} tokens")
    if set(owned) == set(range(len(perm))) and isinstance(run.end, Exhausted):
        inv.PackingBudgetProp(config, len(perm), [run])


def _run(x: PackingInput) -> JsonObject:
    run = attempt(
        lambda: iterate_packed(x.permutation, corpus_map(x.corpus), x.faults, x.owned, x.config, x.start)
    )
    if isinstance(run, SpecError):
        return error_json(run)
    check_packed_run(x.permutation, x.corpus, x.faults, x.owned, x.config, run)
    return {
        "blocks": [enc_block(b) for b in run.blocks],
        "states": [enc_packed_state(s) for s in run.states],
        "end": enc_end(run.end),
    }


CODEC = Codec(_encode, _decode, _run)


_EOS, _PAD = 1, 0
_ONE = seq_perm(1, 4)
_FIT = ((10, 11, 12), (20, 21, 22), (30, 31, 32), (40, 41, 42))
_LONG_DOC = ((10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), (30,), (40, 41), (50,))
_P3 = random_perm(random.Random(31), 3, 4)
_C3 = random_corpus(random.Random(32), 12, 5)
_ALL3 = (0, 1, 2)
_CFG3 = PackingConfig(5, _EOS, _PAD, 9)
_P4 = random_perm(random.Random(41), 4, 3)
_C4 = random_corpus(random.Random(42), 12, 4)
_ALL4 = (0, 1, 2, 3)
_CFG4 = PackingConfig(4, _EOS, _PAD, 12)


def _case(
    name: str,
    description: str,
    perm: Permutation,
    corpus: Corpus,
    faults: Faults,
    owned: Sequence[int],
    config: PackingConfig,
    start: PackedState | None = None,
) -> CaseDef:
    """A case of this family; ``start`` defaults to the initial state."""
    state = initial_packed_state(len(perm)) if start is None else start
    value = PackingInput(perm, corpus, faults, tuple(owned), config, state)
    return make_case("packing", CODEC, name, description, value)


def _after(
    perm: Permutation, corpus: Corpus, faults: Faults, owned: Sequence[int], config: PackingConfig, n: int
) -> PackedState:
    """The state after ``n`` blocks of a fresh iterator over ``owned``."""
    run = iterate_packed(perm, corpus_map(corpus), faults, owned, config, initial_packed_state(len(perm)))
    return run.state_after(n)


def cases() -> list[CaseDef]:
    """Blocks, ``doc_ids`` and packed progress of one iterator, including padding and resumes."""
    return [
        *_one_split_cases(),
        *_split_cases(),
        *_fault_cases(),
        *_edge_cases(),
        *_catch_up_cases(),
        *_error_cases(),
        *_random_cases(),
        *_random_mid_step_cases(),
    ]


def _one_split_cases() -> list[CaseDef]:
    """One split: blocks filled exactly, documents spanning blocks, padding, the budget."""
    return [
        _case(
            "documents_fill_blocks_exactly",
            "each document plus EOS is exactly one block",
            _ONE,
            _FIT,
            NO_FAULTS,
            (0,),
            PackingConfig(4, _EOS, _PAD, 4),
        ),
        _case(
            "document_spans_blocks",
            "a document longer than L continues in the next blocks",
            _ONE,
            _LONG_DOC,
            NO_FAULTS,
            (0,),
            PackingConfig(4, _EOS, _PAD, 4),
        ),
        _case(
            "empty_documents_are_just_eos",
            "an empty document contributes only its EOS",
            _ONE,
            ((), (10,), (), ()),
            NO_FAULTS,
            (0,),
            PackingConfig(3, _EOS, _PAD, 2),
        ),
        _case(
            "exhaustion_pads_then_all_padding_blocks",
            "a split that runs out pads one partial block, then emits all-padding blocks",
            _ONE,
            _FIT,
            NO_FAULTS,
            (0,),
            PackingConfig(5, _EOS, _PAD, 6),
        ),
        _case(
            "budget_leaves_tokens_undelivered",
            "tokens left when the budget is met stay in the buffer",
            _ONE,
            _LONG_DOC,
            NO_FAULTS,
            (0,),
            PackingConfig(3, _EOS, _PAD, 2),
        ),
    ]


def _split_cases() -> list[CaseDef]:
    """Several splits: fill before emit, resumes from buffers, a worker's share."""
    return [
        _case(
            "three_splits_fill_then_emit",
            "a cycle fills every owned split before emitting: states show later splits' buffers",
            _P3,
            _C3,
            NO_FAULTS,
            _ALL3,
            _CFG3,
        ),
        _case(
            "resume_from_buffers_at_step_boundary",
            "resume all splits from a state with buffers",
            _P3,
            _C3,
            NO_FAULTS,
            _ALL3,
            _CFG3,
            _after(_P3, _C3, NO_FAULTS, _ALL3, _CFG3, 3),
        ),
        _case(
            "resume_two_steps_in",
            "resume all splits after two cycles",
            _P3,
            _C3,
            NO_FAULTS,
            _ALL3,
            _CFG3,
            _after(_P3, _C3, NO_FAULTS, _ALL3, _CFG3, 6),
        ),
        _case(
            "worker_resumes_its_splits_from_buffers",
            "a worker over splits 2 and 3 resumes from a one-rank checkpoint; other buffers are kept",
            _P4,
            _C4,
            NO_FAULTS,
            (2, 3),
            _CFG4,
            _after(_P4, _C4, NO_FAULTS, _ALL4, _CFG4, 4),
        ),
        _case("worker_owns_one_split", "an iterator over split 1 of 4", _P4, _C4, NO_FAULTS, (1,), _CFG4),
    ]


def _fault_cases() -> list[CaseDef]:
    """Skipped and raising documents."""
    return [
        _case(
            "skipped_documents_are_dropped",
            "skipped documents contribute no tokens but advance consumed",
            _P3,
            _C3,
            faults_of(skipped=[_P3[0][0], _P3[1][2], _P3[2][1]]),
            _ALL3,
            _CFG3,
        ),
        _case(
            "raising_document_ends_run",
            "the fill phase reaches a raising document",
            _P3,
            _C3,
            faults_of(raising=[_P3[1][2]]),
            _ALL3,
            _CFG3,
        ),
        _case(
            "raising_document_in_first_fill",
            "the very first document raises: nothing is emitted",
            _P3,
            _C3,
            faults_of(raising=[_P3[0][0]]),
            _ALL3,
            _CFG3,
        ),
    ]


def _edge_cases() -> list[CaseDef]:
    """Nothing left to emit, special token ids, L = 1, nothing owned."""
    return [
        _case(
            "already_at_budget",
            "every owned split emitted its budget: nothing is yielded",
            _P3,
            _C3,
            NO_FAULTS,
            _ALL3,
            _CFG3,
            PackedState((4, 4, 4), (3, 3, 3), {}),
        ),
        _case(
            "eos_equal_to_pad",
            "eos_id and pad_id may be equal",
            _ONE,
            _FIT,
            NO_FAULTS,
            (0,),
            PackingConfig(5, 0, 0, 5),
        ),
        _case(
            "eos_and_pad_at_int64_limits",
            "token ids at the int64 limits survive exactly",
            _ONE,
            _FIT,
            NO_FAULTS,
            (0,),
            PackingConfig(4, 2**63 - 1, -(2**63), 5),
        ),
        _case(
            "single_token_blocks",
            "L = 1: every token is its own block",
            _ONE,
            ((10,), (), (11, 12), ()),
            NO_FAULTS,
            (0,),
            PackingConfig(1, _EOS, _PAD, 8),
        ),
        _case(
            "no_owned_splits", "an iterator that owns nothing yields nothing", _P3, _C3, NO_FAULTS, (), _CFG3
        ),
    ]


def _catch_up_cases() -> list[CaseDef]:
    """Owned splits that emitted different block counts: the lagging ones catch up first (D23)."""
    return [
        _case(
            "catch_up_lagging_splits",
            "splits 1 and 2 emit one block each, in (emitted, split) order, before cycles resume",
            _P3,
            _C3,
            NO_FAULTS,
            _ALL3,
            _CFG3,
            _after(_P3, _C3, NO_FAULTS, _ALL3, _CFG3, 1),
        ),
        _case(
            "catch_up_from_mid_cycle_buffers",
            "after 4 blocks split 0 is ahead; splits 1 and 2 catch up from the buffers the cycle filled",
            _P3,
            _C3,
            NO_FAULTS,
            _ALL3,
            _CFG3,
            _after(_P3, _C3, NO_FAULTS, _ALL3, _CFG3, 4),
        ),
        _case(
            "catch_up_by_several_blocks",
            "split 0 emitted 3 blocks by itself; splits 1 and 2 catch up by 3 blocks each",
            _P3,
            _C3,
            NO_FAULTS,
            _ALL3,
            _CFG3,
            _after(_P3, _C3, NO_FAULTS, (0,), _CFG3, 3),
        ),
        _case(
            "catch_up_of_a_worker_sub_block",
            "a worker over splits 2 and 3 of a rank whose checkpoint is mid-cycle",
            _P4,
            _C4,
            NO_FAULTS,
            (2, 3),
            _CFG4,
            _after(_P4, _C4, NO_FAULTS, _ALL4, _CFG4, 3),
        ),
        _case(
            "catch_up_meets_a_raising_document",
            "a lagging split meets a raising document while it catches up",
            _P3,
            _C3,
            faults_of(raising=[_P3[2][1]]),
            _ALL3,
            _CFG3,
            _after(_P3, _C3, NO_FAULTS, (0,), _CFG3, 2),
        ),
    ]


def _error_cases() -> list[CaseDef]:
    """Inputs the model rejects."""
    return [
        _case(
            "error_budget_not_divisible",
            "blocks_per_epoch must be divisible by the split count",
            _P3,
            _C3,
            NO_FAULTS,
            _ALL3,
            PackingConfig(5, _EOS, _PAD, 10),
        ),
    ]


def _random_job(
    seed: int, splits: tuple[int, ...], shortest: int, raising: bool, budget: tuple[int, int]
) -> tuple[random.Random, Permutation, Corpus, Faults, tuple[int, ...], PackingConfig, PackedRun]:
    """A seeded random job over one iterator that owns every split, and its run from the epoch start:
    splits of ``shortest``..5 rows, raising rows only if ``raising``, ``budget`` blocks per split."""
    rng = random.Random(seed)
    s = rng.choice(splits)
    perm = random_perm(rng, s, rng.randint(shortest, 5))
    corpus = random_corpus(rng, s * len(perm[0]), rng.randint(1, 9))
    skip_rate = rng.choice((0.0, 0.2))
    faults = random_faults(rng, len(corpus), skip_rate, rng.choice((0.0, 0.04)) if raising else 0.0)
    config = PackingConfig(rng.randint(2, 7), _EOS, _PAD, s * rng.randint(*budget))
    owned = tuple(range(s))
    prior = iterate_packed(perm, corpus_map(corpus), faults, owned, config, initial_packed_state(s))
    return rng, perm, corpus, faults, owned, config, prior


def _random_cases() -> list[CaseDef]:
    """Seeded random permutations, corpora, faults and configurations, resumed at a step boundary."""
    cases: list[CaseDef] = []
    for seed in range(8):
        rng, perm, corpus, faults, owned, config, prior = _random_job(2000 + seed, (1, 2, 4), 1, True, (1, 4))
        s = len(owned)
        start = prior.state_after(s * rng.randint(0, max(0, len(prior.blocks) // s - 1)))
        description = f"random(seed={2000 + seed}): {s} splits, L={config.pack_sequences}"
        cases.append(_case(f"random_{seed:02d}", description, perm, corpus, faults, owned, config, start))
    return cases


def _random_mid_step_cases() -> list[CaseDef]:
    """Seeded random jobs resumed after any number of blocks (mid-cycle starts catch up)."""
    cases: list[CaseDef] = []
    for seed in range(4):
        rng, perm, corpus, faults, owned, config, prior = _random_job(
            2100 + seed, (2, 3, 4), 2, False, (2, 4)
        )
        start = prior.state_after(rng.randint(1, max(1, len(prior.blocks) - 1)))
        description = (
            f"random(seed={2100 + seed}): {len(owned)} splits, L={config.pack_sequences}, mid-cycle start"
        )
        cases.append(
            _case(f"random_mid_step_{seed:02d}", description, perm, corpus, faults, owned, config, start)
        )
    return cases


FAMILY = family("packing", cases, CODEC)
