"""The ``table_pin`` family: which table version a resumed epoch reads.

The model is :func:`~elastic_loader.spec.saved.pinned_permutation`: the permutation of the version
the checkpoint recorded (the latest without a pin or for an unversioned table), and an error when
that version was cleaned up. Every case with a versioned pin is checked against
``TableVersionPinInv``.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ....spec.saved import TablePin, pinned_permutation
from ....spec.topology import Permutation
from ..codec import as_int, as_list, as_object, dec_permutation, dec_table, enc_permutation, enc_table
from ..plumbing import random_perm
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case


@dataclass(frozen=True)
class TablePinInput:
    """The table versions still stored (each with its permutation), a checkpoint's pin, the latest version."""

    history: tuple[tuple[int, Permutation], ...]
    pin: TablePin | None
    latest: int


def _encode(x: TablePinInput) -> JsonObject:
    return {
        "history": [{"version": v, "permutation": enc_permutation(p)} for v, p in x.history],
        "pin": enc_table(x.pin),
        "latest": x.latest,
    }


def _decode(j: JsonObject) -> TablePinInput:
    history = tuple(
        (as_int(as_object(h)["version"]), dec_permutation(as_object(h)["permutation"]))
        for h in as_list(j["history"])
    )
    return TablePinInput(history, dec_table(j["pin"]), as_int(j["latest"]))


def _run(x: TablePinInput) -> JsonObject:
    history = dict(x.history)
    perm = attempt(lambda: pinned_permutation(history, x.pin, x.latest))
    if x.pin is not None and x.pin.version is not None:
        inv.TableVersionPinInv(history, x.pin, x.latest, history.get(x.pin.version, ()))
    if isinstance(perm, SpecError):
        return error_json(perm)
    return {"permutation": enc_permutation(perm)}


CODEC = Codec(_encode, _decode, _run)

_V1 = random_perm(random.Random(71), 2, 3)
_V2 = random_perm(random.Random(72), 2, 4)
_V5 = random_perm(random.Random(73), 2, 5)


def _case(
    name: str,
    description: str,
    history: tuple[tuple[int, Permutation], ...],
    pin: TablePin | None,
    latest: int,
) -> CaseDef:
    return make_case("table_pin", CODEC, name, description, TablePinInput(history, pin, latest))


def cases() -> list[CaseDef]:
    """The permutation a resumed epoch reads: the pinned table version's, or an error when it is gone."""
    every = ((1, _V1), (2, _V2), (5, _V5))
    return [
        _case(
            "pinned_to_an_older_version",
            "rows were added since version 1: the epoch reads version 1",
            every,
            TablePin(1, 6),
            5,
        ),
        _case("pinned_to_the_latest_version", "nothing changed since", every, TablePin(5, 10), 5),
        _case(
            "no_pin_reads_the_latest",
            "a checkpoint without a pin (the reference's) reads the latest version",
            every,
            None,
            5,
        ),
        _case("unversioned_table", "a pin without a version reads the latest", every, TablePin(None, 10), 5),
        _case(
            "error_version_cleaned_up",
            "version 2 was cleaned up after the checkpoint was written",
            ((1, _V1), (5, _V5)),
            TablePin(2, 8),
            5,
        ),
    ]


FAMILY = family("table_pin", cases, CODEC)
