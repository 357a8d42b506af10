"""The names every family module uses, imported once here so a family module imports them in one line.

Rules of this module: re-exports only (no code); a name belongs here when every
family module, or nearly every one, uses it.
"""

from __future__ import annotations

from ....spec import invariants as inv
from ....spec.errors import SpecError
from ..codec import JsonObject, error_json
from ..plumbing import CaseDef, Codec, attempt, family, make_case

__all__ = [
    "CaseDef",
    "Codec",
    "JsonObject",
    "SpecError",
    "attempt",
    "error_json",
    "family",
    "inv",
    "make_case",
]
