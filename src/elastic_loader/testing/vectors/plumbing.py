"""How a case becomes a vector: the case and family types, and the helpers cases share.

Rules of this module:

* A *family* is a function returning :class:`CaseDef` values, and a
  :class:`Codec` that says how its typed input becomes JSON, comes back, and
  runs through the model. :func:`family` pairs them; its summary is the first
  line of the case function's docstring (it is written into the vector file).
* ``build`` (made by :func:`case`) checks that the JSON form of the input
  decodes back to the same input, runs the model, checks every named
  invariant that applies to the result (a failed check raises
  :class:`~elastic_loader.spec.invariants.InvariantViolation`) and returns the
  vector: the input and the expected output, both as JSON values.
* Inputs are deterministic: fixed literals or ``random.Random(n)`` with a fixed
  ``n``. Nothing depends on time, hashing order or the environment.
* Only :class:`~elastic_loader.spec.errors.SpecError` becomes an ``error``
  output (:func:`attempt`); any other exception is a bug in the model or in a
  case and propagates.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ...spec.errors import SpecError
from ...spec.rows import Faults, RowState, initial_row_state, iterate_rows
from ...spec.topology import Permutation, cut_splits
from .codec import Corpus, JsonObject

T = TypeVar("T")


@dataclass(frozen=True)
class Vector:
    """One vector: the JSON input and the output the model computes from it."""

    input: JsonObject
    output: JsonObject


@dataclass(frozen=True)
class CaseDef:
    """One named case of a family; ``build()`` runs the model, checks invariants, returns the vector."""

    family: str
    name: str
    description: str
    build: Callable[[], Vector]


@dataclass(frozen=True)
class Codec(Generic[T]):
    """How a family's typed input becomes JSON, comes back, and is run through the model."""

    encode: Callable[[T], JsonObject]
    decode: Callable[[JsonObject], T]
    run: Callable[[T], JsonObject]
    """Runs the model, checks the invariants of the result, returns the JSON output."""


def make_case(
    family: str,
    codec: Codec[T],
    name: str,
    description: str,
    value: T,
    check: Callable[[], None] | None = None,
) -> CaseDef:
    """The case ``name`` of ``family`` with input ``value``; ``check`` runs after the model, if given."""

    def build() -> Vector:
        encoded = codec.encode(value)
        decoded = codec.decode(json.loads(json.dumps(encoded)))
        # Python's == equates True with 1; the JSON text does not.
        if decoded != value or json.dumps(codec.encode(decoded)) != json.dumps(encoded):
            raise AssertionError(f"{family}/{name}: the JSON input decodes to {decoded!r}, not {value!r}")
        output = codec.run(value)
        if check is not None:
            check()
        return Vector(encoded, output)

    return CaseDef(family, name, description, build)


@dataclass(frozen=True)
class Family:
    """A family of vectors: its cases and how its output is computed from the JSON input."""

    name: str
    summary: str
    cases: Callable[[], list[CaseDef]]
    replay: Callable[[JsonObject], JsonObject]


def family(name: str, cases: Callable[[], list[CaseDef]], codec: Codec[T]) -> Family:
    """The family ``name``: ``cases`` and a replay that decodes a JSON input and runs the model."""

    def replay(vector_input: JsonObject) -> JsonObject:
        return codec.run(codec.decode(vector_input))

    summary = (cases.__doc__ or "").strip().splitlines()[0]
    return Family(name, summary, cases, replay)


# ---------------------------------------------------------------- helpers of the case definitions


def attempt(compute: Callable[[], T]) -> T | SpecError:
    """``compute()``, or the spec error it raised."""
    try:
        return compute()
    except SpecError as error:
        return error


def random_perm(rng: random.Random, num_splits: int, split_len: int) -> Permutation:
    """A shuffled permutation of ``num_splits * split_len`` row ids."""
    order = list(range(num_splits * split_len))
    rng.shuffle(order)
    return cut_splits(order, num_splits)


def random_faults(rng: random.Random, rows: int, skip: float, raise_: float) -> Faults:
    """Each of ``rows`` row ids skipped with probability ``skip``, else raising with ``raise_``."""
    skipped: set[int] = set()
    raising: set[int] = set()
    for row in range(rows):
        x = rng.random()
        if x < skip:
            skipped.add(row)
        elif x < skip + raise_:
            raising.add(row)
    return Faults(frozenset(skipped), frozenset(raising))


def random_corpus(rng: random.Random, rows: int, max_len: int) -> Corpus:
    """``rows`` documents of 0 to ``max_len`` tokens in ``[10, 99]``."""
    return tuple(tuple(rng.randint(10, 99) for _ in range(rng.randint(0, max_len))) for _ in range(rows))


def seq_perm(num_splits: int, split_len: int) -> Permutation:
    """The unshuffled permutation: row ids in order, cut into ``num_splits`` splits."""
    return cut_splits(range(num_splits * split_len), num_splits)


def faults_of(skipped: Sequence[int] = (), raising: Sequence[int] = ()) -> Faults:
    """The faults of these row ids."""
    return Faults(frozenset(skipped), frozenset(raising))


NO_FAULTS = Faults()


def rows_after(perm: Permutation, faults: Faults, owned: Sequence[int], n: int) -> RowState:
    """The state after ``n`` rows of a fresh iterator over ``owned``."""
    return iterate_rows(perm, faults, owned, initial_row_state(len(perm))).state_after(n)
