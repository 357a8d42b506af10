"""The spec's own tests, written once: run by pytest and written out as language-neutral vectors.

Layout:

* :mod:`.codec` -- the JSON codec of model values (tagged big integers,
  opaque values; ``spec/VECTORS.md`` documents the conventions), and of a
  family's input dataclass, field by field (``record``).
* :mod:`.plumbing` -- cases, families and how ``build`` turns a case into a
  vector (running the model and the invariants that apply to the result).
* :mod:`.families` -- one module per family (``topology``, ``row_order``,
  ``packing``, ``checkpoint_snapshot``, ``load``, ``merge``, ``commit``,
  ``params``, ``auto_budget``, ``loader``, ``schedule``, ``rank_checkpoint``,
  ``resolve``, ``table_pin``, ``protocols``), each with its input, codec glue
  and cases (the rules they share are stated in :mod:`.families`); the
  checkpoints they share come from :mod:`.families.fixtures` (hand-made) and
  :mod:`.families.sessions` (sessions of the model), the names every family
  imports from :mod:`.families.base`.
* :mod:`.io` -- the files: generate, check, read (``python -m
  elastic_loader.testing.vectors generate|check``).

pytest runs every ``build`` (``tests/conformance/test_vectors.py``); the generator writes
what ``build`` returns. :func:`replay` computes a family's output from the JSON
input alone, exactly what an outside implementation has to do; the model is
the reference implementation of ``replay``. An outside implementation reads
the vectors with :func:`load_vectors`, decodes opaque values with
:func:`decode_value`, and compares its outputs with :func:`run_family`.

Rules of this package: inputs are deterministic (fixed literals or seeded
``random.Random``); only :class:`~elastic_loader.spec.errors.SpecError`
becomes an ``error`` output; generation is byte-identical run to run.
"""

from __future__ import annotations

from collections.abc import Iterator

from .codec import FORMAT_VERSION, Json, JsonObject, VectorFormatError, WorkerInfo, decode_value, encode_value
from .families import FAMILIES
from .io import (
    REGENERATE,
    VectorCase,
    VectorFile,
    check,
    default_directory,
    describe_differences,
    dumps,
    generate_all,
    load_vectors,
    main,
    render_family,
    run_family,
)
from .plumbing import CaseDef, Family, Vector

__all__ = [
    "FAMILIES",
    "FORMAT_VERSION",
    "REGENERATE",
    "CaseDef",
    "Family",
    "Json",
    "JsonObject",
    "Vector",
    "VectorCase",
    "VectorFile",
    "VectorFormatError",
    "WorkerInfo",
    "all_cases",
    "check",
    "decode_value",
    "default_directory",
    "describe_differences",
    "dumps",
    "encode_value",
    "generate_all",
    "load_vectors",
    "main",
    "render_family",
    "replay",
    "run_family",
]


def all_cases() -> Iterator[CaseDef]:
    """Every case of every family, family by family."""
    for family in FAMILIES.values():
        yield from family.cases()


def replay(family: str, vector_input: JsonObject) -> JsonObject:
    """The output the model computes for one vector input of ``family`` (JSON in, JSON out)."""
    return FAMILIES[family].replay(vector_input)
