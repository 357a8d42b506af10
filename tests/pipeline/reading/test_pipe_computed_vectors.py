"""The pipeline's computed and local permutations reproduce ``spec/vectors/computed_order.json``.

Every committed case is replayed through ``_pipeline._computed`` / ``_pipeline._local`` (the
numpy implementations the dataset reads with): the same storage positions at every position (or
at the sampled slots of the 10**9-row tables), the same fingerprint, and an error where the spec
gives one. The vectors are the spec's own outputs, so this compares two implementations.
"""

from __future__ import annotations

from typing import Any

import pytest

from elastic_loader._pipeline._computed import ComputedPermutation
from elastic_loader._pipeline._local import LocalPermutation
from elastic_loader.testing.vectors import load_vectors
from elastic_loader.testing.vectors.codec import as_int, as_ints, as_list, as_object

CASES = load_vectors("computed_order")


def _build(given: dict[str, Any]) -> ComputedPermutation | LocalPermutation:
    args = [as_int(given[k]) for k in ("num_rows", "num_splits", "shuffle_seed", "epoch")]
    kind = given["permutation"]
    if kind == "computed":
        return ComputedPermutation(*args)
    local = as_object(kind)
    return LocalPermutation(*args, as_int(local["clump"]), as_int(local["window"]))


def test_the_family_covers_both_kinds_and_the_large_tables() -> None:
    assert {c["input"]["permutation"] == "computed" for c in CASES} == {True, False}
    assert sum(c["input"]["slots"] is not None for c in CASES) >= 3


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_pipeline_reads_the_vector_positions(case: dict[str, Any]) -> None:
    given, expected = case["input"], case["output"]
    if "error" in expected:
        with pytest.raises(ValueError):
            _build(given)
        return
    perm = _build(given)
    assert perm.fingerprint == expected["fingerprint"]
    m = as_int(expected["split_len"])
    assert perm.split_len == m
    if given["slots"] is None:
        got = [[int(y) for y in perm.positions(s, 0, m)] for s in range(perm.num_splits)]
        assert got == [list(as_ints(split)) for split in as_list(expected["positions"])]
    else:
        slots = [as_ints(slot) for slot in as_list(given["slots"])]
        got = [int(perm.positions(s, p, 1)[0]) for s, p in slots]
        assert got == list(as_ints(expected["sampled"]))
