"""Old home of the vector cases, kept only because ``spec/VECTORS.md`` names it.

The cases now live in :mod:`elastic_loader.testing.vectors` (one module per
family under ``vectors/families/``); use that package. This module re-exports
the names the document and older callers use and holds nothing else; remove
it once no document names ``elastic_loader.testing.vector_cases``.
"""

from __future__ import annotations

from .vectors import (
    FAMILIES,
    FORMAT_VERSION,
    CaseDef,
    Family,
    Json,
    JsonObject,
    Vector,
    VectorFormatError,
    WorkerInfo,
    all_cases,
    decode_value,
    encode_value,
    replay,
)

__all__ = [
    "FAMILIES",
    "FORMAT_VERSION",
    "CaseDef",
    "Family",
    "Json",
    "JsonObject",
    "Vector",
    "VectorFormatError",
    "WorkerInfo",
    "all_cases",
    "decode_value",
    "encode_value",
    "replay",
]
