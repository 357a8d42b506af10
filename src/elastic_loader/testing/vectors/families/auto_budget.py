"""The ``auto_budget`` family: the ``blocks_per_epoch="auto"`` estimate from document lengths.

The output also lists the sampled positions, recomputed here from the
documented rule (:func:`sampled_positions`); every case is checked against
``AutoBudgetInv`` and the documented formula.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ....spec.packing import estimate_blocks_per_epoch
from ..codec import as_int, as_list, encode_int
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case


@dataclass(frozen=True)
class AutoBudgetInput:
    """Token counts of every document per split, the seed that picks the sample, and ``L``."""

    doc_lengths: tuple[tuple[int | None, ...], ...]
    shuffle_seed: int
    pack_sequences: int


def _encode(x: AutoBudgetInput) -> JsonObject:
    return {
        "doc_lengths": [[None if n is None else encode_int(n) for n in split] for split in x.doc_lengths],
        "shuffle_seed": encode_int(x.shuffle_seed),
        "pack_sequences": encode_int(x.pack_sequences),
    }


def _decode(j: JsonObject) -> AutoBudgetInput:
    return AutoBudgetInput(
        tuple(
            tuple(None if n is None else as_int(n) for n in as_list(split))
            for split in as_list(j["doc_lengths"])
        ),
        as_int(j["shuffle_seed"]),
        as_int(j["pack_sequences"]),
    )


def sampled_positions(doc_lengths: Sequence[Sequence[object]], shuffle_seed: int) -> list[list[int]]:
    """The document positions the ``"auto"`` estimate samples, per split (from the documented rule)."""
    num_splits = len(doc_lengths)
    cap = max(1, 100_000 // num_splits)
    rng = random.Random(shuffle_seed)
    out: list[list[int]] = []
    for split in doc_lengths:
        n = len(split)
        k = min(n, max(1, min(math.ceil(n / 100), cap)))
        out.append(sorted(rng.sample(range(n), k)))
    return out


def _run(x: AutoBudgetInput) -> JsonObject:
    blocks = attempt(lambda: estimate_blocks_per_epoch(x.doc_lengths, x.shuffle_seed, x.pack_sequences))
    if isinstance(blocks, SpecError):
        return error_json(blocks)
    num_splits = len(x.doc_lengths)
    inv.AutoBudgetInv(blocks, num_splits)
    positions = sampled_positions(x.doc_lengths, x.shuffle_seed)
    sampled = [x.doc_lengths[s][p] for s, ps in enumerate(positions) for p in ps]
    tokens = sum(n for n in sampled if n is not None) + len(sampled)
    estimate = tokens * sum(len(s) for s in x.doc_lengths) // len(sampled) // x.pack_sequences
    if blocks != max(num_splits, estimate - estimate % num_splits):
        raise AssertionError(f"auto budget {blocks} disagrees with the documented formula")
    return {"blocks_per_epoch": encode_int(blocks), "sampled_positions": [list(p) for p in positions]}


CODEC = Codec(_encode, _decode, _run)


def _not_sampled(lengths: Sequence[Sequence[int | None]], seed: int, split: int, position: int) -> None:
    if position in sampled_positions(lengths, seed)[split]:
        raise AssertionError(f"position {position} of split {split} is sampled; the case needs another seed")


def _case(
    name: str,
    description: str,
    lengths: Sequence[Sequence[int | None]],
    seed: int,
    length: int,
    check: Callable[[], None] | None = None,
) -> CaseDef:
    """A case of this family; ``check`` runs after the model."""
    value = AutoBudgetInput(tuple(tuple(s) for s in lengths), seed, length)
    return make_case("auto_budget", CODEC, name, description, value, check)


def _uniform(name: str, splits: int, docs: int, doc_len: int, length: int) -> CaseDef:
    """``splits`` splits of ``docs`` documents of ``doc_len`` tokens, checked against the closed form."""
    lengths = [[doc_len] * docs] * splits
    expected_blocks = (doc_len + 1) * docs * splits // length
    expected = max(splits, expected_blocks - expected_blocks % splits)

    def check() -> None:
        got = estimate_blocks_per_epoch(lengths, 0, length)
        if got != expected:
            raise AssertionError(f"uniform corpus: estimate {got}, closed form {expected}")

    description = f"{splits} splits of {docs} documents of {doc_len} tokens, L={length}: closed form"
    return _case(name, description, lengths, 0, length, check)


def _seeded_lengths() -> tuple[list[list[int]], list[list[int]]]:
    """Two splits of 250 documents, and three of 7, from one seeded generator."""
    rng = random.Random(71)
    big = [[rng.randint(0, 40) for _ in range(n)] for n in (250, 250)]
    varied = [[rng.randint(0, 30) for _ in range(n)] for n in (7, 7, 7)]
    return big, varied


_BIG, _VARIED = _seeded_lengths()


def cases() -> list[CaseDef]:
    """The ``blocks_per_epoch="auto"`` estimate from document lengths."""
    return [*_uniform_cases(), *_sampling_cases(), *_null_cases(), *_random_cases()]


def _uniform_cases() -> list[CaseDef]:
    """Corpora of equal documents, where the estimate has a closed form."""
    return [
        _uniform("uniform_one_split", 1, 10, 3, 4),
        _uniform("uniform_four_splits", 4, 20, 7, 16),
        _uniform("uniform_rounds_down_to_multiple_of_splits", 3, 10, 4, 7),
        _uniform("uniform_tiny_corpus_floors_at_num_splits", 4, 1, 0, 64),
        _uniform("uniform_empty_documents_count_eos", 2, 30, 0, 2),
    ]


def _sampling_cases() -> list[CaseDef]:
    """Which documents are sampled: per seed, per split size."""
    return [
        _case(
            "ten_documents_two_splits",
            "10 documents, 23 tokens with EOS, 2 splits, L=4: one document per split is sampled",
            [[1, 2, 1, 3, 1], [2, 1, 1, 0, 1]],
            0,
            4,
        ),
        _case("varied_lengths_seed_0", "one document per split is sampled (n <= 100)", _VARIED, 0, 8),
        _case("varied_lengths_seed_1", "another seed samples other documents", _VARIED, 1, 8),
        _case("varied_lengths_seed_12345", "another seed samples other documents", _VARIED, 12345, 8),
        _case(
            "large_splits_sample_three_each",
            "250 documents per split: ceil(250/100) = 3 samples each",
            _BIG,
            7,
            32,
        ),
        _case("large_and_small_splits", "splits of different sizes", [_BIG[0][:101], _VARIED[0]], 3, 16),
    ]


def _null_cases() -> list[CaseDef]:
    """Null token lists in and outside the sample, and an empty split."""
    return [
        _case(
            "null_outside_the_sample_is_not_seen",
            "only sampled documents are read",
            [[5, None, 5, 5, 5], [5, 5, 5, 5, 5]],
            0,
            4,
            lambda: _not_sampled([[5, None, 5, 5, 5], [5, 5, 5, 5, 5]], 0, 0, 1),
        ),
        _case("error_null_in_sample", "a sampled null token list is rejected", [[None] * 5, [5] * 5], 0, 4),
        _case("error_empty_split", "a split without documents cannot be estimated", [[3, 4], []], 0, 4),
    ]


def _random_cases() -> list[CaseDef]:
    """Seeded random document lengths, seeds and sequence lengths."""
    cases: list[CaseDef] = []
    for seed in range(6):
        r = random.Random(3000 + seed)
        s = r.choice((1, 2, 3, 4))
        lengths = [[r.randint(0, 50) for _ in range(r.randint(1, 150))] for _ in range(s)]
        description = f"random(seed={3000 + seed}): {s} splits"
        cases.append(
            _case(f"random_{seed:02d}", description, lengths, r.randint(0, 99), r.choice((8, 16, 64)))
        )
    return cases


FAMILY = family("auto_budget", cases, CODEC)
