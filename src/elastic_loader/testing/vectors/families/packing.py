"""The ``packing`` family: the blocks one packed iterator emits and the state after each.

Input: a permutation, a corpus, faults, the owned splits, a packing
configuration and a start state. Every case is checked against the packing
invariants that apply to one run (:func:`check_packed_run`).

Rules of this module (the same for every family module): the input is a frozen
dataclass with a JSON codec (``_encode``/``_decode``) and a model run
(``_run``) that checks the invariants of the result; :func:`cases` builds the
cases, deterministically, in the order the vector file lists them, and the
first line of its docstring is the family's summary in that file.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ....spec import invariants as inv
from ....spec.errors import SpecError
from ....spec.packing import PackedRun, PackedState, initial_packed_state, iterate_packed
from ....spec.rows import Exhausted, Faults
from ....spec.topology import PackingConfig, Permutation
from ..codec import (
    Corpus,
    JsonObject,
    as_ints,
    corpus_map,
    dec_corpus,
    dec_faults,
    dec_packed_state,
    dec_packing,
    dec_permutation,
    enc_block,
    enc_corpus,
    enc_end,
    enc_faults,
    enc_packed_state,
    enc_packing,
    enc_permutation,
    error_json,
)
from ..plumbing import (
    NO_FAULTS,
    CaseDef,
    Codec,
    attempt,
    family,
    faults_of,
    make_case,
    random_corpus,
    random_faults,
    random_perm,
    seq_perm,
)


@dataclass(frozen=True)
class PackingInput:
    permutation: Permutation
    corpus: Corpus
    faults: Faults
    owned: tuple[int, ...]
    config: PackingConfig
    start: PackedState


def _encode(x: PackingInput) -> JsonObject:
    return {
        "permutation": enc_permutation(x.permutation),
        "corpus": enc_corpus(x.corpus),
        "faults": enc_faults(x.faults),
        "owned": list(x.owned),
        "config": enc_packing(x.config),
        "start": enc_packed_state(x.start),
    }


def _decode(j: JsonObject) -> PackingInput:
    return PackingInput(
        dec_permutation(j["permutation"]),
        dec_corpus(j["corpus"]),
        dec_faults(j["faults"]),
        as_ints(j["owned"]),
        dec_packing(j["config"]),
        dec_packed_state(j["start"]),
    )


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


def cases() -> list[CaseDef]:
    """Blocks, ``doc_ids`` and packed progress of one iterator, including padding and resumes."""

    def case(
        name: str,
        description: str,
        perm: Permutation,
        corpus: Corpus,
        faults: Faults,
        owned: Sequence[int],
        config: PackingConfig,
        start: PackedState | None = None,
    ) -> CaseDef:
        state = initial_packed_state(len(perm)) if start is None else start
        value = PackingInput(perm, corpus, faults, tuple(owned), config, state)
        return make_case("packing", CODEC, name, description, value)

    def after(
        perm: Permutation, corpus: Corpus, faults: Faults, owned: Sequence[int], config: PackingConfig, n: int
    ) -> PackedState:
        run = iterate_packed(perm, corpus_map(corpus), faults, owned, config, initial_packed_state(len(perm)))
        return run.state_after(n)

    eos, pad = 1, 0
    one = seq_perm(1, 4)
    fit = ((10, 11, 12), (20, 21, 22), (30, 31, 32), (40, 41, 42))
    long_doc = ((10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), (30,), (40, 41), (50,))
    p3 = random_perm(random.Random(31), 3, 4)
    c3 = random_corpus(random.Random(32), 12, 5)
    all3 = (0, 1, 2)
    cfg3 = PackingConfig(5, eos, pad, 9)
    p4 = random_perm(random.Random(41), 4, 3)
    c4 = random_corpus(random.Random(42), 12, 4)
    all4 = (0, 1, 2, 3)
    cfg4 = PackingConfig(4, eos, pad, 12)
    cases = [
        case(
            "documents_fill_blocks_exactly",
            "each document plus EOS is exactly one block",
            one,
            fit,
            NO_FAULTS,
            (0,),
            PackingConfig(4, eos, pad, 4),
        ),
        case(
            "document_spans_blocks",
            "a document longer than L continues in the next blocks",
            one,
            long_doc,
            NO_FAULTS,
            (0,),
            PackingConfig(4, eos, pad, 4),
        ),
        case(
            "empty_documents_are_just_eos",
            "an empty document contributes only its EOS",
            one,
            ((), (10,), (), ()),
            NO_FAULTS,
            (0,),
            PackingConfig(3, eos, pad, 2),
        ),
        case(
            "exhaustion_pads_then_all_padding_blocks",
            "a split that runs out pads one partial block, then emits all-padding blocks",
            one,
            fit,
            NO_FAULTS,
            (0,),
            PackingConfig(5, eos, pad, 6),
        ),
        case(
            "budget_leaves_tokens_undelivered",
            "tokens left when the budget is met stay in the buffer",
            one,
            long_doc,
            NO_FAULTS,
            (0,),
            PackingConfig(3, eos, pad, 2),
        ),
        case(
            "three_splits_fill_then_emit",
            "a cycle fills every owned split before emitting: states show later splits' buffers",
            p3,
            c3,
            NO_FAULTS,
            all3,
            cfg3,
        ),
        case(
            "resume_from_buffers_at_step_boundary",
            "resume all splits from a state with buffers",
            p3,
            c3,
            NO_FAULTS,
            all3,
            cfg3,
            after(p3, c3, NO_FAULTS, all3, cfg3, 3),
        ),
        case(
            "resume_two_steps_in",
            "resume all splits after two cycles",
            p3,
            c3,
            NO_FAULTS,
            all3,
            cfg3,
            after(p3, c3, NO_FAULTS, all3, cfg3, 6),
        ),
        case(
            "worker_resumes_its_splits_from_buffers",
            "a worker over splits 2 and 3 resumes from a one-rank checkpoint; other buffers are kept",
            p4,
            c4,
            NO_FAULTS,
            (2, 3),
            cfg4,
            after(p4, c4, NO_FAULTS, all4, cfg4, 4),
        ),
        case("worker_owns_one_split", "an iterator over split 1 of 4", p4, c4, NO_FAULTS, (1,), cfg4),
        case(
            "skipped_documents_are_dropped",
            "skipped documents contribute no tokens but advance consumed",
            p3,
            c3,
            faults_of(skipped=[p3[0][0], p3[1][2], p3[2][1]]),
            all3,
            cfg3,
        ),
        case(
            "raising_document_ends_run",
            "the fill phase reaches a raising document",
            p3,
            c3,
            faults_of(raising=[p3[1][2]]),
            all3,
            cfg3,
        ),
        case(
            "raising_document_in_first_fill",
            "the very first document raises: nothing is emitted",
            p3,
            c3,
            faults_of(raising=[p3[0][0]]),
            all3,
            cfg3,
        ),
        case(
            "already_at_budget",
            "every owned split emitted its budget: nothing is yielded",
            p3,
            c3,
            NO_FAULTS,
            all3,
            cfg3,
            PackedState((4, 4, 4), (3, 3, 3), {}),
        ),
        case(
            "eos_equal_to_pad",
            "eos_id and pad_id may be equal",
            one,
            fit,
            NO_FAULTS,
            (0,),
            PackingConfig(5, 0, 0, 5),
        ),
        case(
            "eos_and_pad_at_int64_limits",
            "token ids at the int64 limits survive exactly",
            one,
            fit,
            NO_FAULTS,
            (0,),
            PackingConfig(4, 2**63 - 1, -(2**63), 5),
        ),
        case(
            "single_token_blocks",
            "L = 1: every token is its own block",
            one,
            ((10,), (), (11, 12), ()),
            NO_FAULTS,
            (0,),
            PackingConfig(1, eos, pad, 8),
        ),
        case("no_owned_splits", "an iterator that owns nothing yields nothing", p3, c3, NO_FAULTS, (), cfg3),
        case(
            "error_misaligned_emitted_counts",
            "owned splits that emitted different block counts",
            p3,
            c3,
            NO_FAULTS,
            all3,
            cfg3,
            PackedState((2, 1, 1), (1, 0, 0), {}),
        ),
        case(
            "error_budget_not_divisible",
            "blocks_per_epoch must be divisible by the split count",
            p3,
            c3,
            NO_FAULTS,
            all3,
            PackingConfig(5, eos, pad, 10),
        ),
    ]
    for seed in range(8):
        rng = random.Random(2000 + seed)
        s = rng.choice((1, 2, 4))
        perm = random_perm(rng, s, rng.randint(1, 5))
        corpus = random_corpus(rng, s * len(perm[0]), rng.randint(1, 9))
        faults = random_faults(rng, len(corpus), rng.choice((0.0, 0.2)), rng.choice((0.0, 0.04)))
        config = PackingConfig(rng.randint(2, 7), eos, pad, s * rng.randint(1, 4))
        owned = tuple(range(s))
        prior = iterate_packed(perm, corpus_map(corpus), faults, owned, config, initial_packed_state(s))
        start = prior.state_after(s * rng.randint(0, max(0, len(prior.blocks) // s - 1)))
        cases.append(
            case(
                f"random_{seed:02d}",
                f"random(seed={2000 + seed}): {s} splits, L={config.pack_sequences}",
                perm,
                corpus,
                faults,
                owned,
                config,
                start,
            )
        )
    return cases


FAMILY = family("packing", cases, CODEC)
