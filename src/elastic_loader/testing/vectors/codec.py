"""The JSON codec of the vectors: typed model values to JSON values and back.

Rules of this module:

* Every ``enc_*`` has a ``dec_*`` inverse (where an input needs one), and
  ``dec(enc(x)) == x`` holds for every value a case uses; the case plumbing
  checks it for every case (:func:`~elastic_loader.testing.vectors.plumbing.case`).
* The ``as_*`` readers accept exactly one JSON shape and raise
  :class:`VectorFormatError` for anything else (a bool is never an int).
* Integers outside ``[-(2**53 - 1), 2**53 - 1]`` are written
  ``{"$": "int", "decimal": "..."}`` so every JSON parser reads them exactly.
  Inside *opaque* values (checkpoint dicts and constructor parameters, which
  may be malformed on purpose) a mapping with a non-string key is written
  ``{"$": "map", "entries": [[key, value], ...]}``, some callable is
  ``{"$": "callable"}`` and a DataLoader worker-info object is
  ``{"$": "worker_info", "id": i, "num_workers": n}`` and a
  ``LocalShuffle(clump, window)`` is ``{"$": "local_shuffle", "clump": c, "window": w}``.
  ``spec/VECTORS.md``
  documents these conventions for implementers.
* A family's input is a frozen dataclass written field by field: :func:`record`
  pairs each field, in declaration order, with a :class:`Field` (how the value
  is written and read back, by the ``enc_*`` and ``dec_*``/``as_*`` above it);
  the JSON object has the field names as keys, in that order. A field is read
  after the fields declared before it and may use them (a state is read in the
  mode of the ``config``).
* Standard library and the spec only: no Hypothesis, LanceDB or torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ...spec.errors import SpecError
from ...spec.packing import Block, PackBuffer, PackedState
from ...spec.params import CALLABLE, LocalShuffle
from ...spec.rows import End, Exhausted, Faults, Raised, RowState, Yielded
from ...spec.saved import Cursor, Saved, TablePin, load_saved, snapshot_saved
from ...spec.topology import PackingConfig, Permutation, RunConfig

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"
JsonObject: TypeAlias = "dict[str, Json]"

MAX_SAFE_INT = 2**53 - 1
"""Integers beyond this magnitude are written as ``{"$": "int", "decimal": ...}``."""

FORMAT_VERSION = 1
"""Bumped whenever the JSON schema of any family changes incompatibly."""


class VectorFormatError(ValueError):
    """A JSON value does not have the shape a vector field requires."""


@dataclass(frozen=True)
class WorkerInfo:
    """A stand-in for ``torch.utils.data.get_worker_info()`` in parameter vectors."""

    id: int
    num_workers: int


# ---------------------------------------------------------------- scalars and opaque values


def encode_int(value: int) -> Json:
    """An integer as JSON: a plain number when every parser reads it exactly, else tagged."""
    if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
        return value
    return {"$": "int", "decimal": str(value)}


def encode_value(value: object) -> Json:
    """Encode an opaque Python value (a checkpoint or a constructor argument) as JSON.

    Raises:
        TypeError: the value has no JSON form (a bug in a case definition).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return encode_int(value)
    if isinstance(value, float):
        if not math.isfinite(value) or value.is_integer():
            raise TypeError(f"float {value!r} has no unambiguous JSON form")
        return value
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    if isinstance(value, Mapping):
        return _encode_mapping(value)
    if isinstance(value, WorkerInfo):
        return {"$": "worker_info", "id": encode_int(value.id), "num_workers": encode_int(value.num_workers)}
    if isinstance(value, LocalShuffle):
        return {"$": "local_shuffle", "clump": encode_int(value.clump), "window": encode_int(value.window)}
    if callable(value):
        return {"$": "callable"}
    raise TypeError(f"no JSON form for {value!r}")


def _encode_mapping(value: Mapping[object, object]) -> Json:
    """A JSON object when every key is a string and none is the tag ``"$"``; else a tagged map."""
    if all(isinstance(k, str) for k in value) and "$" not in value:
        return {str(k): encode_value(v) for k, v in value.items()}
    return {"$": "map", "entries": [[encode_value(k), encode_value(v)] for k, v in value.items()]}


def decode_value(value: Json) -> object:
    """Decode an opaque JSON value back into the Python value it stands for (see module docstring).

    Raises:
        VectorFormatError: an unknown ``"$"`` tag or a malformed tagged value.
    """
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "$" not in value:
        return {k: decode_value(v) for k, v in value.items()}
    tag = value["$"]
    if tag == "int":
        return as_int(value)
    if tag == "callable":
        return CALLABLE
    if tag == "worker_info":
        return WorkerInfo(as_int(value.get("id")), as_int(value.get("num_workers")))
    if tag == "local_shuffle":
        return LocalShuffle(as_int(value.get("clump")), as_int(value.get("window")))
    if tag == "map":
        out: dict[object, object] = {}
        for entry in as_list(value.get("entries")):
            pair = as_list(entry)
            if len(pair) != 2:
                raise VectorFormatError(f"map entry {pair!r} is not a [key, value] pair")
            key = decode_value(pair[0])
            if isinstance(key, (list, dict)):
                raise VectorFormatError(f"map key {key!r} is not hashable")
            out[key] = decode_value(pair[1])
        return out
    raise VectorFormatError(f"unknown tag {tag!r}")


# ---------------------------------------------------------------- readers


def as_object(value: Json) -> JsonObject:
    """``value`` as a JSON object (raises :class:`VectorFormatError` otherwise)."""
    if not isinstance(value, dict):
        raise VectorFormatError(f"expected an object, got {value!r}")
    return value


def as_list(value: Json) -> list[Json]:
    """``value`` as a JSON array."""
    if not isinstance(value, list):
        raise VectorFormatError(f"expected an array, got {value!r}")
    return value


def as_int(value: Json) -> int:
    """``value`` as an integer: a JSON integer or a tagged big integer; never a bool or float."""
    if isinstance(value, dict) and value.get("$") == "int":
        decimal = value.get("decimal")
        if not isinstance(decimal, str):
            raise VectorFormatError(f"bad tagged int {value!r}")
        return int(decimal)
    if isinstance(value, bool) or not isinstance(value, int):
        raise VectorFormatError(f"expected an integer, got {value!r}")
    return value


def as_ints(value: Json) -> tuple[int, ...]:
    """``value`` as an array of integers."""
    return tuple(as_int(v) for v in as_list(value))


def as_bool(value: Json) -> bool:
    """``value`` as a boolean (never an integer)."""
    if not isinstance(value, bool):
        raise VectorFormatError(f"expected a boolean, got {value!r}")
    return value


def as_str(value: Json) -> str:
    """``value`` as a string."""
    if not isinstance(value, str):
        raise VectorFormatError(f"expected a string, got {value!r}")
    return value


def encode_ints(values: Sequence[int]) -> list[Json]:
    """A sequence of integers as a JSON array (each through :func:`encode_int`)."""
    return [encode_int(v) for v in values]


def error_json(error: SpecError) -> JsonObject:
    """The output of a case whose model call raised: the builtin class and the stable code."""
    for base in (ValueError, TypeError, RuntimeError):
        if isinstance(error, base):
            return {"error": {"class": base.__name__, "code": error.code}}
    raise TypeError(f"{error!r} derives from no builtin error class")


# ---------------------------------------------------------------- structured values


def enc_permutation(perm: Permutation) -> Json:
    """``perm[s][p]`` is the row id at position ``p`` of split ``s``."""
    return [encode_ints(split) for split in perm]


def dec_permutation(value: Json) -> Permutation:
    """Inverse of :func:`enc_permutation`."""
    return tuple(as_ints(split) for split in as_list(value))


def enc_faults(faults: Faults) -> Json:
    """Row ids whose transform is dropped or re-raised, sorted (sets)."""
    return {"skipped": encode_ints(sorted(faults.skipped)), "raising": encode_ints(sorted(faults.raising))}


def dec_faults(value: Json) -> Faults:
    """Inverse of :func:`enc_faults`."""
    obj = as_object(value)
    return Faults(frozenset(as_ints(obj["skipped"])), frozenset(as_ints(obj["raising"])))


def enc_row_state(state: RowState) -> Json:
    """Row-mode progress: ``samples`` yielded and ``positions`` scanned, per split."""
    return {"samples": encode_ints(state.samples), "positions": encode_ints(state.positions)}


def dec_row_state(value: Json) -> RowState:
    """Inverse of :func:`enc_row_state`."""
    obj = as_object(value)
    return RowState(as_ints(obj["samples"]), as_ints(obj["positions"]))


def enc_packed_state(state: PackedState) -> Json:
    """Packed progress; ``buffers`` is keyed by the decimal split id, ascending, non-empty only."""
    return {
        "consumed": encode_ints(state.consumed),
        "emitted": encode_ints(state.emitted),
        "buffers": {
            str(s): {"tokens": encode_ints(b.tokens), "starts": encode_ints(b.starts)}
            for s, b in sorted(state.buffers.items())
        },
    }


def dec_packed_state(value: Json) -> PackedState:
    """Inverse of :func:`enc_packed_state`."""
    obj = as_object(value)
    buffers = {
        int(key): PackBuffer(as_ints(as_object(b)["tokens"]), as_ints(as_object(b)["starts"]))
        for key, b in as_object(obj["buffers"]).items()
    }
    return PackedState(as_ints(obj["consumed"]), as_ints(obj["emitted"]), buffers)


def enc_state(state: RowState | PackedState) -> Json:
    """A row or packed state (the shape tells which)."""
    return enc_row_state(state) if isinstance(state, RowState) else enc_packed_state(state)


def enc_packing(config: PackingConfig) -> Json:
    """The packing parameters a packed checkpoint pins."""
    return {
        "pack_sequences": encode_int(config.pack_sequences),
        "eos_id": encode_int(config.eos_id),
        "pad_id": encode_int(config.pad_id),
        "blocks_per_epoch": encode_int(config.blocks_per_epoch),
    }


def dec_packing(value: Json) -> PackingConfig:
    """Inverse of :func:`enc_packing`."""
    obj = as_object(value)
    return PackingConfig(
        as_int(obj["pack_sequences"]),
        as_int(obj["eos_id"]),
        as_int(obj["pad_id"]),
        as_int(obj["blocks_per_epoch"]),
    )


def enc_config(config: RunConfig) -> Json:
    """What a checkpoint pins; ``packing`` is null in row mode."""
    return {
        "num_splits": encode_int(config.num_splits),
        "shuffle_seed": encode_int(config.shuffle_seed),
        "epoch": encode_int(config.epoch),
        "perm_fingerprint": config.perm_fingerprint,
        "packing": None if config.packing is None else enc_packing(config.packing),
    }


def dec_config(value: Json) -> RunConfig:
    """Inverse of :func:`enc_config`."""
    obj = as_object(value)
    fingerprint = obj["perm_fingerprint"]
    packing = obj["packing"]
    return RunConfig(
        as_int(obj["num_splits"]),
        as_int(obj["shuffle_seed"]),
        as_int(obj["epoch"]),
        None if fingerprint is None else as_str(fingerprint),
        None if packing is None else dec_packing(packing),
    )


def dec_config_state(config: RunConfig, value: Json) -> RowState | PackedState:
    """A state whose mode is the config's."""
    return dec_row_state(value) if config.packing is None else dec_packed_state(value)


Corpus = tuple[tuple[int, ...], ...]
"""Tokens of every document, indexed by row id (row ids are ``0..len-1``)."""


def enc_corpus(corpus: Corpus) -> Json:
    """``corpus[row_id]`` is the token list of that document."""
    return [encode_ints(doc) for doc in corpus]


def dec_corpus(value: Json) -> Corpus:
    """Inverse of :func:`enc_corpus`."""
    return tuple(as_ints(doc) for doc in as_list(value))


def corpus_map(corpus: Corpus) -> dict[int, tuple[int, ...]]:
    """The corpus as the model takes it: row id -> tokens."""
    return dict(enumerate(corpus))


def enc_end(end: End) -> Json:
    """How a run ended: exhausted, or raised on one row."""
    if isinstance(end, Exhausted):
        return {"kind": "exhausted"}
    return {"kind": "raised", "split": end.split, "position": end.position, "row_id": encode_int(end.row_id)}


def enc_raised(end: Raised) -> Json:
    """The row whose transform error ends a loader run."""
    return {"split": end.split, "position": end.position, "row_id": encode_int(end.row_id)}


def enc_row(row: Yielded) -> Json:
    """A yielded row as ``[split, position, row_id]``."""
    return [row.split, row.position, encode_int(row.row_id)]


def enc_block(block: Block) -> Json:
    """An emitted block; ``real`` leading tokens are data, the rest is ``pad_id``."""
    return {
        "split": block.split,
        "input_ids": encode_ints(block.input_ids),
        "doc_ids": encode_ints(block.doc_ids),
        "real": block.real,
    }


def enc_checkpoint(checkpoint: Mapping[str, object]) -> JsonObject:
    """A checkpoint dict as JSON (``pack_buffers`` keys become decimal strings) and its key order."""

    def plain(value: object) -> Json:
        if isinstance(value, Mapping):
            keys = [str(k) for k in value]
            if len(set(keys)) != len(keys):
                raise TypeError(f"keys of {value!r} collide as strings")
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, int) and not isinstance(value, bool):
            return encode_int(value)
        if value is None or isinstance(value, (bool, str)):
            return value
        raise TypeError(f"unexpected checkpoint value {value!r}")

    return {"checkpoint": plain(checkpoint), "keys": list(checkpoint)}


def enc_item(item: Yielded | Block) -> Json:
    """A delivered item: a row in row mode, a block in packed mode."""
    return enc_row(item) if isinstance(item, Yielded) else enc_block(item)


# ---------------------------------------------------------------- saved checkpoints


def enc_cursor(cursor: Cursor | None) -> Json:
    """Where each rank's round robin of workers stands (``null``: no cursor)."""
    if cursor is None:
        return None
    return {
        "world_size": cursor.world_size,
        "num_workers": cursor.num_workers,
        "next_roles": encode_ints(cursor.next_roles),
    }


def dec_cursor(value: Json) -> Cursor | None:
    """Inverse of :func:`enc_cursor`."""
    if value is None:
        return None
    obj = as_object(value)
    return Cursor(as_int(obj["world_size"]), as_int(obj["num_workers"]), as_ints(obj["next_roles"]))


def enc_table(pin: TablePin | None) -> Json:
    """The table version a permutation was built from (``null`` inside: unversioned) and its rows."""
    if pin is None:
        return None
    return {"version": None if pin.version is None else encode_int(pin.version), "rows": encode_int(pin.rows)}


def dec_table(value: Json) -> TablePin | None:
    """Inverse of :func:`enc_table`."""
    if value is None:
        return None
    obj = as_object(value)
    version = obj["version"]
    return TablePin(None if version is None else as_int(version), as_int(obj["rows"]))


def enc_provenance(saved: Saved) -> JsonObject:
    """What a checkpoint says besides its plain progress: reported, unknown and projected splits,
    the cursor and the table pin (``projected`` is keyed by the decimal split id, ascending)."""
    return {
        "reported": encode_ints(sorted(saved.reported)),
        "unknown": encode_ints(sorted(saved.unknown)),
        "projected": {str(s): encode_int(p.target) for s, p in sorted(saved.projections.items())},
        "cursor": enc_cursor(saved.cursor),
        "table": enc_table(saved.table),
    }


def enc_saved(saved: Saved) -> JsonObject:
    """A checkpoint as the model reads it: the plain progress (``state``) and its provenance."""
    return {"state": enc_state(saved.state), **enc_provenance(saved)}


# ---------------------------------------------------------------- the fields of an input


R = TypeVar("R", bound="DataclassInstance")


@dataclass(frozen=True)
class Field:
    """How one field of a family's input is written as JSON and read back.

    ``decode`` gets the JSON value and the fields decoded before it, by name (a
    state is read in the mode of the ``config`` before it).
    """

    encode: Callable[[Any], Json]
    decode: Callable[[Json, Mapping[str, Any]], Any]


def plain(encode: Callable[[Any], Json], decode: Callable[[Json], Any]) -> Field:
    """A field read without looking at the others."""
    return Field(encode, lambda value, _: decode(value))


def optional(field: Field) -> Field:
    """``field``, or ``null`` for ``None``."""
    return Field(
        lambda value: None if value is None else field.encode(value),
        lambda value, done: None if value is None else field.decode(value, done),
    )


def array(field: Field) -> Field:
    """A tuple of ``field`` values as a JSON array."""
    return Field(
        lambda values: [field.encode(v) for v in values],
        lambda value, done: tuple(field.decode(v, done) for v in as_list(value)),
    )


INT = plain(encode_int, as_int)
INTS = plain(encode_ints, as_ints)
BOOL = plain(lambda value: value, as_bool)
OPAQUE = plain(encode_value, decode_value)
"""A value that may be malformed on purpose (a checkpoint, an argument): :func:`encode_value`."""
CONFIG = plain(enc_config, dec_config)
PACKING = plain(enc_packing, dec_packing)
PERMUTATION = plain(enc_permutation, dec_permutation)
FAULTS = plain(enc_faults, dec_faults)
CORPUS = plain(enc_corpus, dec_corpus)
ROW_STATE = plain(enc_row_state, dec_row_state)
PACKED_STATE = plain(enc_packed_state, dec_packed_state)
STATE = Field(enc_state, lambda value, done: dec_config_state(done["config"], value))
"""A row or packed state, read in the mode of the input's ``config``."""
SAVED = Field(
    lambda saved: enc_checkpoint(snapshot_saved(saved))["checkpoint"],
    lambda value, done: load_saved(done["config"], decode_value(value), done["split_len"]),
)
"""A checkpoint as the model read it, written as the dict it writes; read back for the input's
``config`` and ``split_len``."""


def record(cls: type[R], *fields: Field) -> tuple[Callable[[R], JsonObject], Callable[[JsonObject], R]]:
    """The encoder and decoder of the dataclass ``cls`` whose fields, in order, are ``fields``."""
    names = [f.name for f in dataclasses.fields(cls)]
    if len(names) != len(fields):
        raise TypeError(f"{cls.__name__} has {len(names)} fields, {len(fields)} given")

    def encode(value: R) -> JsonObject:
        return {name: field.encode(getattr(value, name)) for name, field in zip(names, fields)}

    def decode(obj: JsonObject) -> R:
        done: dict[str, Any] = {}
        for name, field in zip(names, fields):
            done[name] = field.decode(obj[name], done)
        return cls(**done)

    return encode, decode


def nested(cls: type[R], *fields: Field) -> Field:
    """A dataclass inside an input, written as a JSON object by :func:`record`."""
    encode, decode = record(cls, *fields)
    return plain(encode, lambda value: decode(as_object(value)))
