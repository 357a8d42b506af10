"""The spec's own tests, written once: run by pytest and written out as language-neutral vectors.

Rules of this module:

* A *family* is a function returning :class:`CaseDef` values. Each case holds
  typed model inputs and a ``build`` function. ``build`` runs the model, checks
  every named invariant that applies to the result (a failed check raises
  :class:`~elastic_loader.spec.invariants.InvariantViolation`), checks that the
  JSON form of the input decodes back to the same inputs, and returns the
  vector: the input and the expected output, both as JSON values.
* pytest runs every ``build`` (``tests/test_vectors.py``); the generator
  (:mod:`elastic_loader.testing.vectors`) writes what ``build`` returns.
* :func:`replay` computes a family's output from the JSON input alone, exactly
  what an outside implementation has to do. The model is the reference
  implementation of ``replay``.
* Inputs are deterministic: fixed literals or ``random.Random(n)`` with a fixed
  ``n``. Nothing depends on time, hashing order or the environment.
* Only :class:`~elastic_loader.spec.errors.SpecError` becomes an ``error``
  output; any other exception is a bug in the model or in a case and
  propagates.

JSON value conventions (``spec/VECTORS.md`` documents them for implementers):
an integer outside ``[-(2**53 - 1), 2**53 - 1]`` is written
``{"$": "int", "decimal": "..."}`` so every JSON parser reads it exactly; inside
*opaque* values (checkpoint dicts and constructor parameters, which may be
malformed on purpose) a mapping with a non-string key is written
``{"$": "map", "entries": [[key, value], ...]}``, some callable is
``{"$": "callable"}`` and a DataLoader worker-info object is
``{"$": "worker_info", "id": i, "num_workers": n}``.
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Generic, TypeAlias, TypeVar

from ..spec import invariants as inv
from ..spec import params as spec_params
from ..spec.checkpoint import (
    commit_packed,
    commit_row,
    join_row,
    load_packed,
    load_row,
    merge_state_dicts,
    snapshot_packed,
    snapshot_row,
)
from ..spec.errors import SpecError
from ..spec.loader import LoaderRun, run_loader
from ..spec.packing import (
    Block,
    PackBuffer,
    PackedRun,
    PackedState,
    estimate_blocks_per_epoch,
    initial_packed_state,
    iterate_packed,
)
from ..spec.params import CALLABLE, ColumnKind, Params, TableFacts, validate_params
from ..spec.rows import (
    End,
    Exhausted,
    Faults,
    Raised,
    RowRun,
    RowState,
    Yielded,
    initial_row_state,
    iterate_rows,
)
from ..spec.topology import (
    PackingConfig,
    Permutation,
    RunConfig,
    Topology,
    cut_splits,
    owned_splits,
    perm_fingerprint,
    rank_splits,
    worker_blocks,
)

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"
JsonObject: TypeAlias = "dict[str, Json]"

MAX_SAFE_INT = 2**53 - 1
"""Integers beyond this magnitude are written as ``{"$": "int", "decimal": ...}``."""

FORMAT_VERSION = 1
"""Bumped whenever the JSON schema of any family changes incompatibly."""

T = TypeVar("T")


class VectorFormatError(ValueError):
    """A JSON value does not have the shape a vector field requires."""


@dataclass(frozen=True)
class WorkerInfo:
    """A stand-in for ``torch.utils.data.get_worker_info()`` in parameter vectors."""

    id: int
    num_workers: int


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


# ================================================================ JSON codec


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
        if all(isinstance(k, str) for k in value) and "$" not in value:
            return {str(k): encode_value(v) for k, v in value.items()}
        return {"$": "map", "entries": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    if isinstance(value, WorkerInfo):
        return {"$": "worker_info", "id": encode_int(value.id), "num_workers": encode_int(value.num_workers)}
    if callable(value):
        return {"$": "callable"}
    raise TypeError(f"no JSON form for {value!r}")


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


def as_str(value: Json) -> str:
    """``value`` as a string."""
    if not isinstance(value, str):
        raise VectorFormatError(f"expected a string, got {value!r}")
    return value


def _ints(values: Sequence[int]) -> list[Json]:
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
    return [_ints(split) for split in perm]


def dec_permutation(value: Json) -> Permutation:
    """Inverse of :func:`enc_permutation`."""
    return tuple(as_ints(split) for split in as_list(value))


def enc_faults(faults: Faults) -> Json:
    """Row ids whose transform is dropped or re-raised, sorted (sets)."""
    return {"skipped": _ints(sorted(faults.skipped)), "raising": _ints(sorted(faults.raising))}


def dec_faults(value: Json) -> Faults:
    """Inverse of :func:`enc_faults`."""
    obj = as_object(value)
    return Faults(frozenset(as_ints(obj["skipped"])), frozenset(as_ints(obj["raising"])))


def enc_row_state(state: RowState) -> Json:
    """Row-mode progress: ``samples`` yielded and ``positions`` scanned, per split."""
    return {"samples": _ints(state.samples), "positions": _ints(state.positions)}


def dec_row_state(value: Json) -> RowState:
    """Inverse of :func:`enc_row_state`."""
    obj = as_object(value)
    return RowState(as_ints(obj["samples"]), as_ints(obj["positions"]))


def enc_packed_state(state: PackedState) -> Json:
    """Packed progress; ``buffers`` is keyed by the decimal split id, ascending, non-empty only."""
    return {
        "consumed": _ints(state.consumed),
        "emitted": _ints(state.emitted),
        "buffers": {
            str(s): {"tokens": _ints(b.tokens), "starts": _ints(b.starts)}
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
    return [_ints(doc) for doc in corpus]


def dec_corpus(value: Json) -> Corpus:
    """Inverse of :func:`enc_corpus`."""
    return tuple(as_ints(doc) for doc in as_list(value))


def _corpus_map(corpus: Corpus) -> dict[int, tuple[int, ...]]:
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
        "input_ids": _ints(block.input_ids),
        "doc_ids": _ints(block.doc_ids),
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


# ================================================================ case plumbing


@dataclass(frozen=True)
class _Codec(Generic[T]):
    """How a family's typed input becomes JSON, comes back, and is run through the model."""

    encode: Callable[[T], JsonObject]
    decode: Callable[[JsonObject], T]
    run: Callable[[T], JsonObject]
    """Runs the model, checks the invariants of the result, returns the JSON output."""


def _case(
    family: str,
    codec: _Codec[T],
    name: str,
    description: str,
    value: T,
    check: Callable[[], None] | None = None,
) -> CaseDef:
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


def _attempt(compute: Callable[[], T]) -> T | SpecError:
    try:
        return compute()
    except SpecError as error:
        return error


def _random_perm(rng: random.Random, num_splits: int, split_len: int) -> Permutation:
    order = list(range(num_splits * split_len))
    rng.shuffle(order)
    return cut_splits(order, num_splits)


def _random_faults(rng: random.Random, rows: int, skip: float, raise_: float) -> Faults:
    skipped: set[int] = set()
    raising: set[int] = set()
    for row in range(rows):
        x = rng.random()
        if x < skip:
            skipped.add(row)
        elif x < skip + raise_:
            raising.add(row)
    return Faults(frozenset(skipped), frozenset(raising))


def _seq_perm(num_splits: int, split_len: int) -> Permutation:
    return cut_splits(range(num_splits * split_len), num_splits)


def _faults(skipped: Sequence[int] = (), raising: Sequence[int] = ()) -> Faults:
    return Faults(frozenset(skipped), frozenset(raising))


NO_FAULTS = Faults()

# ================================================================ topology


@dataclass(frozen=True)
class TopologyInput:
    num_splits: int
    world_size: int
    num_workers: int


def _topology_encode(x: TopologyInput) -> JsonObject:
    return {"num_splits": x.num_splits, "world_size": x.world_size, "num_workers": x.num_workers}


def _topology_decode(j: JsonObject) -> TopologyInput:
    return TopologyInput(as_int(j["num_splits"]), as_int(j["world_size"]), as_int(j["num_workers"]))


def _topology_run(x: TopologyInput) -> JsonObject:
    def compute() -> list[tuple[int, int, tuple[int, ...]]]:
        Topology(x.world_size, 0, x.num_workers, 0)
        return [
            (r, w, owned_splits(x.num_splits, Topology(x.world_size, r, x.num_workers, w)))
            for r in range(x.world_size)
            for w in range(max(1, x.num_workers))
        ]

    result = _attempt(compute)
    if isinstance(result, SpecError):
        return error_json(result)
    inv.PartitionInv(x.num_splits, x.world_size, x.num_workers)
    if [owned for _, _, owned in result] != list(worker_blocks(x.num_splits, x.world_size, x.num_workers)):
        raise AssertionError("owned_splits disagrees with worker_blocks")
    return {"owners": [{"rank": r, "worker": w, "splits": list(owned)} for r, w, owned in result]}


_TOPOLOGY = _Codec(_topology_encode, _topology_decode, _topology_run)


def topology_cases() -> list[CaseDef]:
    """Split ownership per (rank, worker), over a small exhaustive grid plus invalid combinations."""

    def case(name: str, description: str, s: int, w: int, nw: int) -> CaseDef:
        return _case("topology", _TOPOLOGY, name, description, TopologyInput(s, w, nw))

    cases = [
        case(
            f"grid_splits{s}_world{w}_workers{nw}",
            f"{s} splits, world_size {w}, {nw} DataLoader workers per rank",
            s,
            w,
            nw,
        )
        for s in range(1, 9)
        for w in range(1, 5)
        for nw in range(0, 5)
    ]
    cases += [
        case("one_split_one_rank_in_process", "the smallest job: one split read in the process", 1, 1, 0),
        case("one_worker_owns_the_whole_rank", "num_workers=1 behaves like in-process reading", 4, 2, 1),
        case("every_worker_owns_one_split", "12 splits, 3 ranks, 4 workers each", 12, 3, 4),
        case("large_job", "64 splits over 8 ranks with 2 workers each", 64, 8, 2),
        case("zero_splits", "num_splits must be positive", 0, 1, 0),
        case("negative_splits", "num_splits must be positive", -4, 2, 0),
        case("zero_world_size", "world_size must be at least 1", 4, 0, 0),
        case("negative_num_workers", "num_workers must be >= 0", 4, 1, -1),
        case("splits_not_divisible_by_world_size", "5 splits cannot be shared by 2 ranks", 5, 2, 0),
        case("more_ranks_than_splits", "2 splits cannot be shared by 4 ranks", 2, 4, 0),
        case(
            "rank_splits_not_divisible_by_workers", "3 splits per rank cannot be shared by 2 workers", 6, 2, 2
        ),
        case("more_workers_than_rank_splits", "1 split per rank cannot be shared by 2 workers", 4, 4, 2),
    ]
    return cases


# ================================================================ row order


@dataclass(frozen=True)
class RowOrderInput:
    permutation: Permutation
    faults: Faults
    owned: tuple[int, ...]
    start: RowState


def _row_order_encode(x: RowOrderInput) -> JsonObject:
    return {
        "permutation": enc_permutation(x.permutation),
        "faults": enc_faults(x.faults),
        "owned": list(x.owned),
        "start": enc_row_state(x.start),
    }


def _row_order_decode(j: JsonObject) -> RowOrderInput:
    return RowOrderInput(
        dec_permutation(j["permutation"]),
        dec_faults(j["faults"]),
        as_ints(j["owned"]),
        dec_row_state(j["start"]),
    )


def _skip_accounting_holds(perm: Permutation, faults: Faults, state: RowState) -> bool:
    try:
        inv.SkipAccountingInv(perm, faults, state)
    except inv.InvariantViolation:
        return False
    return True


def check_row_run(perm: Permutation, faults: Faults, owned: Sequence[int], run: RowRun) -> None:
    """Every row-mode invariant that applies to one iterator run.

    An iterator that owns no split is checked directly: it yields nothing and
    ends exhausted (the order predicates speak about owned splits only).
    """
    if not owned:
        if run.rows or not isinstance(run.end, Exhausted):
            raise AssertionError("an iterator without splits must yield nothing and end exhausted")
        return
    split_len = len(perm[0])
    for state in run.states:
        inv.ProgressBoundsInv(state, split_len)
    if _skip_accounting_holds(perm, faults, run.start):
        for state in run.states:
            inv.SkipAccountingInv(perm, faults, state)
    inv.HonestProgressInv(run.start, run, owned)
    inv.CatchUpInv(run.start, run, owned)
    inv.CanonicalOrderProp(perm, faults, owned, run)
    inv.RaisePositionProp(perm, faults, owned, run)


def _row_order_run(x: RowOrderInput) -> JsonObject:
    run = _attempt(lambda: iterate_rows(x.permutation, x.faults, x.owned, x.start))
    if isinstance(run, SpecError):
        return error_json(run)
    check_row_run(x.permutation, x.faults, x.owned, run)
    return {
        "rows": [enc_row(y) for y in run.rows],
        "states": [enc_row_state(s) for s in run.states],
        "end": enc_end(run.end),
    }


_ROW_ORDER = _Codec(_row_order_encode, _row_order_decode, _row_order_run)


def _rows_after(perm: Permutation, faults: Faults, owned: Sequence[int], n: int) -> RowState:
    """The state after ``n`` rows of a fresh iterator over ``owned``."""
    return iterate_rows(perm, faults, owned, initial_row_state(len(perm))).state_after(n)


def row_order_cases() -> list[CaseDef]:
    """Which rows one iterator yields, in which order, with which progress, and how it ends."""

    def case(
        name: str,
        description: str,
        perm: Permutation,
        faults: Faults,
        owned: Sequence[int],
        start: RowState | None = None,
    ) -> CaseDef:
        state = initial_row_state(len(perm)) if start is None else start
        return _case(
            "row_order", _ROW_ORDER, name, description, RowOrderInput(perm, faults, tuple(owned), state)
        )

    p1 = _seq_perm(1, 5)
    p3 = _random_perm(random.Random(3), 3, 4)
    p4 = _random_perm(random.Random(4), 4, 5)
    all4 = (0, 1, 2, 3)
    cases = [
        case("single_split_fresh", "one split read from the start to its end", p1, NO_FAULTS, (0,)),
        case(
            "three_splits_round_robin",
            "one row of every owned split per cycle, in split order",
            p3,
            NO_FAULTS,
            (0, 1, 2),
        ),
        case(
            "worker_owns_one_split_of_four",
            "unowned splits keep the values they were loaded with",
            p4,
            NO_FAULTS,
            (2,),
            RowState((3, 1, 0, 2), (3, 2, 0, 2)),
        ),
        case("worker_owns_two_middle_splits", "an iterator over splits 1 and 2 of 4", p4, NO_FAULTS, (1, 2)),
        case(
            "resume_at_step_boundary",
            "every owned split has the same count: no catch-up",
            p4,
            NO_FAULTS,
            all4,
            _rows_after(p4, NO_FAULTS, all4, 8),
        ),
        case(
            "catch_up_from_uneven_counts",
            "counts [2,0,1,2]: split 1, split 1, split 2, then cycles",
            p4,
            NO_FAULTS,
            all4,
            RowState((2, 0, 1, 2), (2, 0, 1, 2)),
        ),
        case(
            "catch_up_ties_go_to_lower_split_id",
            "counts [1,0,0,1]: split 1 before split 2",
            p4,
            NO_FAULTS,
            all4,
            RowState((1, 0, 0, 1), (1, 0, 0, 1)),
        ),
        case(
            "catch_up_lagging_by_several_rows",
            "one split lags three rows behind the others",
            p4,
            NO_FAULTS,
            all4,
            RowState((3, 3, 0, 3), (3, 3, 0, 3)),
        ),
        case(
            "catch_up_mid_cycle_checkpoint",
            "resume after 10 rows of a one-rank run (mid-cycle)",
            p4,
            NO_FAULTS,
            all4,
            _rows_after(p4, NO_FAULTS, all4, 10),
        ),
        case(
            "catch_up_skips_rows",
            "the lagging split skips rows while catching up",
            p4,
            _faults(skipped=[p4[1][0], p4[1][2]]),
            all4,
            RowState((2, 0, 2, 2), (2, 0, 2, 2)),
        ),
        case(
            "catch_up_hits_raising_row",
            "a lagging split's next row raises: the run ends during catch-up",
            p4,
            _faults(raising=[p4[2][1]]),
            all4,
            RowState((2, 0, 0, 2), (2, 0, 0, 2)),
        ),
        case(
            "catch_up_exhausts_lagging_split",
            "a lagging split has only skipped rows left",
            p4,
            _faults(skipped=[p4[1][3], p4[1][4]]),
            all4,
            RowState((4, 3, 4, 4), (4, 3, 4, 4)),
        ),
        case(
            "skip_first_row_counts_position",
            "a skipped row before a yielded row is counted in positions",
            p3,
            _faults(skipped=[p3[0][0]]),
            (0, 1, 2),
        ),
        case(
            "skip_trailing_rows_not_counted",
            "skipped rows after the last yielded row are not counted",
            p3,
            _faults(skipped=[p3[0][3]]),
            (0, 1, 2),
        ),
        case(
            "skips_end_epoch_early_for_other_splits",
            "a split with fewer usable rows ends the run; the others' last rows are never yielded",
            p4,
            _faults(skipped=[p4[3][0], p4[3][1]]),
            all4,
        ),
        case(
            "resume_with_skips_behind",
            "resume from positions that include skipped rows",
            p4,
            _faults(skipped=[p4[0][1], p4[2][0]]),
            all4,
            _rows_after(p4, _faults(skipped=[p4[0][1], p4[2][0]]), all4, 6),
        ),
        case(
            "raise_on_very_first_row",
            "the first row of the first split raises: nothing is yielded",
            p3,
            _faults(raising=[p3[0][0]]),
            (0, 1, 2),
        ),
        case(
            "raise_discards_the_whole_cycle",
            "a raising row in the last split stops the cycle before any of its rows",
            p3,
            _faults(raising=[p3[2][1]]),
            (0, 1, 2),
        ),
        case(
            "raise_after_skips",
            "skipped rows before a raising row are passed over",
            p3,
            _faults(skipped=[p3[1][1], p3[1][2]], raising=[p3[1][3]]),
            (0, 1, 2),
        ),
        case(
            "exhausted_split_before_raising_split",
            "the first owned split that cannot continue decides",
            p3,
            _faults(skipped=[p3[0][2], p3[0][3]], raising=[p3[1][2]]),
            (0, 1, 2),
        ),
        case(
            "raising_split_before_exhausted_split",
            "the first owned split that cannot continue decides",
            p3,
            _faults(skipped=[p3[1][2], p3[1][3]], raising=[p3[0][2]]),
            (0, 1, 2),
        ),
        case(
            "raising_row_on_unowned_split_is_never_read",
            "faults of other workers' splits do not matter",
            p4,
            _faults(raising=[p4[0][0], p4[3][0]]),
            (1, 2),
        ),
        case(
            "resume_at_epoch_end",
            "every owned split is at its end: nothing is yielded",
            p3,
            NO_FAULTS,
            (0, 1, 2),
            RowState((4, 4, 4), (4, 4, 4)),
        ),
        case(
            "all_rows_skipped",
            "every row is dropped: nothing is yielded",
            p1,
            _faults(skipped=list(p1[0])),
            (0,),
        ),
        case(
            "no_owned_splits",
            "an iterator that owns nothing ends at once and changes nothing",
            p3,
            NO_FAULTS,
            (),
            RowState((1, 0, 2), (1, 0, 3)),
        ),
        case(
            "uniform_legacy_resume",
            "a legacy uniform count resumes every split at the same row",
            p4,
            NO_FAULTS,
            all4,
            RowState((3, 3, 3, 3), (3, 3, 3, 3)),
        ),
        case(
            "error_position_beyond_split_end",
            "a position past the split end is rejected",
            p3,
            NO_FAULTS,
            (0, 1, 2),
            RowState((0, 0, 0), (0, 5, 0)),
        ),
        case(
            "error_owned_not_ascending", "owned splits must be ascending and distinct", p3, NO_FAULTS, (2, 1)
        ),
        case("error_owned_repeated", "owned splits must be ascending and distinct", p3, NO_FAULTS, (1, 1)),
        case(
            "error_state_length",
            "the state has one entry per split",
            p3,
            NO_FAULTS,
            (0, 1),
            RowState((0, 0), (0, 0)),
        ),
        case(
            "error_unequal_split_lengths",
            "every split of a permutation has the same length",
            ((0, 1, 2), (3, 4)),
            NO_FAULTS,
            (0, 1),
        ),
    ]
    for seed in range(16):
        rng = random.Random(1000 + seed)
        s = rng.choice((1, 2, 3, 4, 6))
        perm = _random_perm(rng, s, rng.randint(1, 6))
        faults = _random_faults(rng, s * len(perm[0]), rng.choice((0.0, 0.15, 0.3)), rng.choice((0.0, 0.05)))
        divisors = [d for d in range(1, s + 1) if s % d == 0]
        block = rng.choice(divisors)
        first = rng.randrange(0, s, block)
        owned = tuple(range(first, first + block))
        origin = tuple(range(s)) if rng.random() < 0.7 else owned
        prior = iterate_rows(perm, faults, origin, initial_row_state(s))
        # Resume somewhere before the prior run's end, so the case usually yields rows.
        start = prior.state_after(rng.randint(0, max(0, len(prior.rows) - 1)))
        cases.append(
            case(
                f"random_{seed:02d}",
                f"random(seed={1000 + seed}): {s} splits, owned {list(owned)}",
                perm,
                faults,
                owned,
                start,
            )
        )
    return cases


# ================================================================ packing


@dataclass(frozen=True)
class PackingInput:
    permutation: Permutation
    corpus: Corpus
    faults: Faults
    owned: tuple[int, ...]
    config: PackingConfig
    start: PackedState


def _packing_encode(x: PackingInput) -> JsonObject:
    return {
        "permutation": enc_permutation(x.permutation),
        "corpus": enc_corpus(x.corpus),
        "faults": enc_faults(x.faults),
        "owned": list(x.owned),
        "config": enc_packing(x.config),
        "start": enc_packed_state(x.start),
    }


def _packing_decode(j: JsonObject) -> PackingInput:
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
    docs = _corpus_map(corpus)
    inv.PackingConservationInv(perm, docs, faults, config, run)
    inv.DocIdsInv(perm, docs, faults, config, run)
    for block in run.blocks:
        if len(block.input_ids) != config.pack_sequences or len(block.doc_ids) != config.pack_sequences:
            raise AssertionError(f"block of split {block.split} does not have {config.pack_sequences} tokens")
    if set(owned) == set(range(len(perm))) and isinstance(run.end, Exhausted):
        inv.PackingBudgetProp(config, len(perm), [run])


def _packing_run(x: PackingInput) -> JsonObject:
    run = _attempt(
        lambda: iterate_packed(x.permutation, _corpus_map(x.corpus), x.faults, x.owned, x.config, x.start)
    )
    if isinstance(run, SpecError):
        return error_json(run)
    check_packed_run(x.permutation, x.corpus, x.faults, x.owned, x.config, run)
    return {
        "blocks": [enc_block(b) for b in run.blocks],
        "states": [enc_packed_state(s) for s in run.states],
        "end": enc_end(run.end),
    }


_PACKING = _Codec(_packing_encode, _packing_decode, _packing_run)


def _random_corpus(rng: random.Random, rows: int, max_len: int) -> Corpus:
    return tuple(tuple(rng.randint(10, 99) for _ in range(rng.randint(0, max_len))) for _ in range(rows))


def packing_cases() -> list[CaseDef]:
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
        return _case("packing", _PACKING, name, description, value)

    def after(
        perm: Permutation, corpus: Corpus, faults: Faults, owned: Sequence[int], config: PackingConfig, n: int
    ) -> PackedState:
        run = iterate_packed(
            perm, _corpus_map(corpus), faults, owned, config, initial_packed_state(len(perm))
        )
        return run.state_after(n)

    eos, pad = 1, 0
    one = _seq_perm(1, 4)
    fit = ((10, 11, 12), (20, 21, 22), (30, 31, 32), (40, 41, 42))
    long_doc = ((10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), (30,), (40, 41), (50,))
    p3 = _random_perm(random.Random(31), 3, 4)
    c3 = _random_corpus(random.Random(32), 12, 5)
    all3 = (0, 1, 2)
    cfg3 = PackingConfig(5, eos, pad, 9)
    p4 = _random_perm(random.Random(41), 4, 3)
    c4 = _random_corpus(random.Random(42), 12, 4)
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
            _faults(skipped=[p3[0][0], p3[1][2], p3[2][1]]),
            all3,
            cfg3,
        ),
        case(
            "raising_document_ends_run",
            "the fill phase reaches a raising document",
            p3,
            c3,
            _faults(raising=[p3[1][2]]),
            all3,
            cfg3,
        ),
        case(
            "raising_document_in_first_fill",
            "the very first document raises: nothing is emitted",
            p3,
            c3,
            _faults(raising=[p3[0][0]]),
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
        perm = _random_perm(rng, s, rng.randint(1, 5))
        corpus = _random_corpus(rng, s * len(perm[0]), rng.randint(1, 9))
        faults = _random_faults(rng, len(corpus), rng.choice((0.0, 0.2)), rng.choice((0.0, 0.04)))
        config = PackingConfig(rng.randint(2, 7), eos, pad, s * rng.randint(1, 4))
        owned = tuple(range(s))
        prior = iterate_packed(perm, _corpus_map(corpus), faults, owned, config, initial_packed_state(s))
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


# ================================================================ checkpoint snapshot


@dataclass(frozen=True)
class SnapshotInput:
    config: RunConfig
    mode: str
    state: RowState | PackedState


def _snapshot_encode(x: SnapshotInput) -> JsonObject:
    return {"config": enc_config(x.config), "mode": x.mode, "state": enc_state(x.state)}


def _snapshot_decode(j: JsonObject) -> SnapshotInput:
    mode = as_str(j["mode"])
    if mode not in ("row", "packed"):
        raise VectorFormatError(f"mode {mode!r}")
    state = dec_row_state(j["state"]) if mode == "row" else dec_packed_state(j["state"])
    return SnapshotInput(dec_config(j["config"]), mode, state)


def _snapshot_run(x: SnapshotInput) -> JsonObject:
    def compute() -> dict[str, object]:
        if isinstance(x.state, RowState):
            return snapshot_row(x.config, x.state)
        return snapshot_packed(x.config, x.state)

    checkpoint = _attempt(compute)
    if isinstance(checkpoint, SpecError):
        return error_json(checkpoint)
    progress = x.state.positions if isinstance(x.state, RowState) else x.state.consumed
    inv.CheckpointRoundTripInv(x.config, x.state, max(progress, default=0))
    return enc_checkpoint(checkpoint)


_SNAPSHOT = _Codec(_snapshot_encode, _snapshot_decode, _snapshot_run)

_FINGERPRINT = perm_fingerprint([5, 2, 7, 0, 3, 6, 1, 4], [0, 0, 1, 1, 2, 2, 3, 3])
_PACKING4 = PackingConfig(4, 1, 0, 8)


def checkpoint_snapshot_cases() -> list[CaseDef]:
    """The exact checkpoint dict (keys and key order) written for a config and a state."""

    def case(name: str, description: str, config: RunConfig, state: RowState | PackedState) -> CaseDef:
        mode = "row" if isinstance(state, RowState) else "packed"
        return _case("checkpoint_snapshot", _SNAPSHOT, name, description, SnapshotInput(config, mode, state))

    row = RowState((2, 2, 1, 1), (3, 2, 1, 2))
    packed = PackedState((3, 2, 2, 4), (1, 1, 1, 1), {0: PackBuffer((10, 1), (1,)), 3: PackBuffer((1,), ())})
    return [
        case("row_fresh", "row mode before any row", RunConfig(4, 0, 0), initial_row_state(4)),
        case("row_mid_epoch", "row mode with skipped rows behind", RunConfig(4, 42, 1), row),
        case(
            "row_with_fingerprint",
            "perm_fingerprint sits between num_splits and epoch",
            RunConfig(4, 42, 0, _FINGERPRINT),
            row,
        ),
        case(
            "row_seed_at_limit",
            "shuffle_seed 2**64 - 1 is written exactly",
            RunConfig(2, 2**64 - 1, 0),
            RowState((1, 0), (1, 0)),
        ),
        case(
            "packed_with_buffers",
            "packed mode; pack_buffers lists the non-empty buffers by split id",
            RunConfig(4, 7, 2, None, _PACKING4),
            packed,
        ),
        case(
            "packed_without_buffers",
            "packed mode with every buffer empty: pack_buffers is {}",
            RunConfig(4, 7, 0, None, _PACKING4),
            PackedState((2, 2, 2, 2), (1, 1, 1, 1), {}),
        ),
        case(
            "packed_with_fingerprint",
            "packed mode with a split_strategy fingerprint",
            RunConfig(4, 7, 0, _FINGERPRINT, _PACKING4),
            packed,
        ),
        case(
            "packed_fresh",
            "packed mode before any block",
            RunConfig(4, 7, 0, None, _PACKING4),
            initial_packed_state(4),
        ),
        case(
            "error_row_snapshot_of_packed_config",
            "a row state cannot be written for a packed config",
            RunConfig(4, 7, 0, None, _PACKING4),
            row,
        ),
        case(
            "error_packed_snapshot_of_row_config",
            "a packed state cannot be written for a row config",
            RunConfig(4, 7, 0),
            packed,
        ),
    ]


# ================================================================ load


@dataclass(frozen=True)
class LoadInput:
    config: RunConfig
    split_len: int
    checkpoint: object


def _load_encode(x: LoadInput) -> JsonObject:
    return {
        "config": enc_config(x.config),
        "split_len": x.split_len,
        "checkpoint": encode_value(x.checkpoint),
    }


def _load_decode(j: JsonObject) -> LoadInput:
    return LoadInput(dec_config(j["config"]), as_int(j["split_len"]), decode_value(j["checkpoint"]))


def _load_run(x: LoadInput) -> JsonObject:
    def compute() -> RowState | PackedState:
        if x.config.packing is None:
            return load_row(x.config, x.checkpoint, x.split_len)
        return load_packed(x.config, x.checkpoint, x.split_len)

    state = _attempt(compute)
    if isinstance(state, SpecError):
        return error_json(state)
    inv.CheckpointRoundTripInv(x.config, state, x.split_len)
    return {"state": enc_state(state)}


_LOAD = _Codec(_load_encode, _load_decode, _load_run)

_ROW_CONFIG = RunConfig(4, 42, 1)
_ROW_STATE = RowState((2, 2, 1, 1), (3, 2, 1, 2))
_STRATEGY_CONFIG = RunConfig(4, 42, 1, _FINGERPRINT)
_PACKED_CONFIG = RunConfig(4, 7, 0, None, _PACKING4)
_PACKED_STATE = PackedState(
    (3, 2, 2, 4), (1, 1, 1, 1), {0: PackBuffer((10, 1), (1,)), 3: PackBuffer((1,), ())}
)


def _with(checkpoint: Mapping[str, object], **changes: object) -> dict[str, object]:
    out = dict(checkpoint)
    out.update(changes)
    return out


def _without(checkpoint: Mapping[str, object], key: str) -> dict[str, object]:
    return {k: v for k, v in checkpoint.items() if k != key}


def _buffers(checkpoint: Mapping[str, object], buffers: object) -> dict[str, object]:
    return _with(checkpoint, pack_buffers=buffers)


def _checkpoint_fault_cases(
    wrap: Callable[[str, str, object], CaseDef], row: dict[str, object], packed: dict[str, object]
) -> list[CaseDef]:
    """Malformed-checkpoint cases shared by load, merge and commit (one fault each)."""
    b0 = {"tokens": [10, 1], "starts": [1]}
    return [
        wrap(
            "error_row_missing_samples",
            "samples_consumed_per_split is required",
            _without(row, "samples_consumed_per_split"),
        ),
        wrap(
            "error_row_samples_not_a_list",
            "a string is neither a list nor a legacy int",
            _with(row, samples_consumed_per_split="2"),
        ),
        wrap(
            "error_row_samples_bool_legacy",
            "true is not a legacy int",
            _with(row, samples_consumed_per_split=True),
        ),
        wrap(
            "error_row_samples_holds_string",
            "list entries are ints",
            _with(row, samples_consumed_per_split=[2, "2", 1, 1]),
        ),
        wrap(
            "error_row_samples_holds_bool",
            "bools are not ints in a checkpoint",
            _with(row, samples_consumed_per_split=[2, True, 1, 1]),
        ),
        wrap(
            "error_row_samples_holds_float",
            "floats are not ints in a checkpoint",
            _with(row, samples_consumed_per_split=[2, 2.5, 1, 1]),
        ),
        wrap(
            "error_row_positions_not_a_list",
            "positions must be a list",
            _with(row, positions_consumed_per_split=3),
        ),
        wrap(
            "error_row_samples_too_short",
            "one entry per split",
            _with(row, samples_consumed_per_split=[2, 2, 1]),
        ),
        wrap(
            "error_row_positions_too_long",
            "one entry per split",
            _with(row, positions_consumed_per_split=[3, 2, 1, 2, 0]),
        ),
        wrap(
            "error_row_negative_sample",
            "progress is never negative",
            _with(row, samples_consumed_per_split=[2, -1, 1, 1]),
        ),
        wrap(
            "error_row_negative_legacy_int",
            "a legacy count is never negative",
            _with(row, samples_consumed_per_split=-1, positions_consumed_per_split=None),
        ),
        wrap(
            "error_row_positions_below_samples",
            "every split needs samples <= positions",
            _with(row, positions_consumed_per_split=[1, 2, 1, 2]),
        ),
        wrap(
            "error_packed_missing_emitted",
            "blocks_emitted_per_split is required",
            _without(packed, "blocks_emitted_per_split"),
        ),
        wrap(
            "error_packed_emitted_holds_null",
            "list entries are ints",
            _with(packed, blocks_emitted_per_split=[1, None, 1, 1]),
        ),
        wrap(
            "error_packed_consumed_too_short",
            "one entry per split",
            _with(packed, samples_consumed_per_split=[3, 2, 2]),
        ),
        wrap(
            "error_packed_negative_emitted",
            "progress is never negative",
            _with(packed, blocks_emitted_per_split=[1, 1, -1, 1]),
        ),
        wrap("error_pack_buffers_not_a_dict", "pack_buffers is a dict", _buffers(packed, [b0])),
        wrap(
            "error_buffer_not_a_dict",
            "a buffer is a dict with tokens and starts",
            _buffers(packed, {"0": [10, 1]}),
        ),
        wrap(
            "error_buffer_without_starts",
            "a buffer needs starts",
            _buffers(packed, {"0": {"tokens": [10, 1]}}),
        ),
        wrap(
            "error_buffer_tokens_not_a_list",
            "tokens is a list",
            _buffers(packed, {"0": {"tokens": "10 1", "starts": []}}),
        ),
        wrap(
            "error_buffer_token_is_bool",
            "tokens are ints",
            _buffers(packed, {"0": {"tokens": [True], "starts": []}}),
        ),
        wrap("error_buffer_key_beyond_splits", "buffer keys are split ids", _buffers(packed, {"4": b0})),
        wrap("error_buffer_key_negative", "buffer keys are split ids", _buffers(packed, {"-1": b0})),
        wrap("error_buffer_key_not_a_number", "buffer keys are split ids", _buffers(packed, {"x": b0})),
        wrap(
            "error_buffer_key_int_beyond_splits",
            "an int key must also be a split id",
            _buffers(packed, {4: b0}),
        ),
        wrap("error_buffer_key_bool", "a bool is not a split id", _buffers(packed, {True: b0})),
        wrap("error_buffer_key_twice", "0 and '0' name the same split", _buffers(packed, {0: b0, "0": b0})),
        wrap(
            "error_buffer_starts_unsorted",
            "document starts strictly increase",
            _buffers(packed, {"0": {"tokens": [10, 1, 11, 1], "starts": [2, 0]}}),
        ),
        wrap(
            "error_buffer_starts_repeated",
            "document starts strictly increase",
            _buffers(packed, {"0": {"tokens": [10, 1, 11, 1], "starts": [2, 2]}}),
        ),
        wrap(
            "error_buffer_start_beyond_tokens",
            "a start indexes the buffer",
            _buffers(packed, {"0": {"tokens": [10, 1], "starts": [2]}}),
        ),
        wrap(
            "error_buffer_start_negative",
            "a start indexes the buffer",
            _buffers(packed, {"0": {"tokens": [10, 1], "starts": [-1]}}),
        ),
        wrap(
            "error_buffer_start_in_empty_buffer",
            "an empty buffer has no starts",
            _buffers(packed, {"0": {"tokens": [], "starts": [0]}}),
        ),
    ]


def load_cases() -> list[CaseDef]:
    """Checkpoint validation on load: the parsed progress, or the error class and code."""
    row = snapshot_row(_ROW_CONFIG, _ROW_STATE)
    strategy = snapshot_row(_STRATEGY_CONFIG, _ROW_STATE)
    packed = snapshot_packed(_PACKED_CONFIG, _PACKED_STATE)

    def case(
        name: str, description: str, config: RunConfig, checkpoint: object, split_len: int = 5
    ) -> CaseDef:
        return _case("load", _LOAD, name, description, LoadInput(config, split_len, checkpoint))

    def auto(name: str, description: str, checkpoint: object) -> CaseDef:
        config = (
            _PACKED_CONFIG
            if isinstance(checkpoint, Mapping) and "pack_buffers" in checkpoint
            else _ROW_CONFIG
        )
        return case(name, description, config, checkpoint)

    return [
        case("row_snapshot", "a row checkpoint as written (in-memory form)", _ROW_CONFIG, row),
        case(
            "row_fresh",
            "a row checkpoint before any row",
            _ROW_CONFIG,
            snapshot_row(_ROW_CONFIG, initial_row_state(4)),
        ),
        case(
            "row_at_split_end",
            "progress may reach the split end",
            _ROW_CONFIG,
            _with(row, positions_consumed_per_split=[5, 5, 5, 5], samples_consumed_per_split=[5, 4, 5, 3]),
        ),
        case(
            "row_legacy_int_samples",
            "a legacy int count is a uniform list; positions default to it",
            _ROW_CONFIG,
            _without(_with(row, samples_consumed_per_split=3), "positions_consumed_per_split"),
        ),
        case(
            "row_legacy_int_with_positions",
            "a legacy int count with a positions list",
            _ROW_CONFIG,
            _with(row, samples_consumed_per_split=1),
        ),
        case(
            "row_positions_missing",
            "without positions, positions equal samples",
            _ROW_CONFIG,
            _without(row, "positions_consumed_per_split"),
        ),
        case(
            "row_positions_null",
            "a null positions entry counts as missing",
            _ROW_CONFIG,
            _with(row, positions_consumed_per_split=None),
        ),
        case(
            "row_unknown_key_ignored",
            "keys the format does not define are ignored",
            _ROW_CONFIG,
            _with(row, note="written by another tool"),
        ),
        case(
            "row_keys_in_other_order",
            "key order does not matter on load",
            _ROW_CONFIG,
            dict(reversed(list(row.items()))),
        ),
        case(
            "row_with_fingerprint",
            "a split_strategy dataset loads its own fingerprint",
            _STRATEGY_CONFIG,
            strategy,
        ),
        case(
            "row_big_seed",
            "a shuffle_seed near 2**64 compares exactly",
            RunConfig(4, 2**64 - 2, 0),
            snapshot_row(RunConfig(4, 2**64 - 2, 0), _ROW_STATE),
        ),
        case("packed_snapshot", "a packed checkpoint as written (int buffer keys)", _PACKED_CONFIG, packed),
        case(
            "packed_string_buffer_keys",
            "JSON turns buffer keys into strings; they are accepted",
            _PACKED_CONFIG,
            _buffers(packed, {"0": {"tokens": [10, 1], "starts": [1]}, "3": {"tokens": [1], "starts": []}}),
        ),
        case(
            "packed_empty_buffer_dropped",
            "an empty buffer is the same as a missing one",
            _PACKED_CONFIG,
            _buffers(
                packed,
                {
                    "0": {"tokens": [10, 1], "starts": [1]},
                    "1": {"tokens": [], "starts": []},
                    "3": {"tokens": [1], "starts": []},
                },
            ),
        ),
        case(
            "packed_fresh",
            "a packed checkpoint before any block",
            _PACKED_CONFIG,
            snapshot_packed(_PACKED_CONFIG, initial_packed_state(4)),
        ),
        case(
            "packed_at_budget",
            "every split emitted its budget",
            _PACKED_CONFIG,
            _with(packed, blocks_emitted_per_split=[2, 2, 2, 2]),
        ),
        case("error_not_a_dict", "a checkpoint is a dict", _ROW_CONFIG, [row]),
        case("error_null", "a checkpoint is a dict", _ROW_CONFIG, None),
        case("error_string", "a checkpoint is a dict", _PACKED_CONFIG, "checkpoint"),
        case(
            "error_missing_shuffle_seed",
            "config keys are required",
            _ROW_CONFIG,
            _without(row, "shuffle_seed"),
        ),
        case(
            "error_missing_num_splits", "config keys are required", _ROW_CONFIG, _without(row, "num_splits")
        ),
        case("error_missing_epoch", "config keys are required", _ROW_CONFIG, _without(row, "epoch")),
        case(
            "error_missing_pack_sequences",
            "packing keys are required",
            _PACKED_CONFIG,
            _without(packed, "pack_sequences"),
        ),
        case("error_num_splits_differs", "num_splits must match", _ROW_CONFIG, _with(row, num_splits=8)),
        case(
            "error_shuffle_seed_differs", "shuffle_seed must match", _ROW_CONFIG, _with(row, shuffle_seed=41)
        ),
        case(
            "error_epoch_differs_row_mode", "row mode checks the epoch too", _ROW_CONFIG, _with(row, epoch=2)
        ),
        case(
            "error_epoch_differs_packed_mode",
            "packed mode checks the epoch",
            _PACKED_CONFIG,
            _with(packed, epoch=1),
        ),
        case(
            "error_num_splits_is_string",
            "a string is not the configured number",
            _ROW_CONFIG,
            _with(row, num_splits="4"),
        ),
        case(
            "error_fingerprint_differs",
            "a checkpoint of another permutation",
            _STRATEGY_CONFIG,
            _with(strategy, perm_fingerprint="0" * 64),
        ),
        case(
            "error_fingerprint_on_random_split_dataset",
            "a fingerprint where the dataset has none is a mismatch",
            _ROW_CONFIG,
            strategy,
        ),
        case(
            "error_fingerprint_missing",
            "a split_strategy dataset needs the fingerprint",
            _STRATEGY_CONFIG,
            row,
        ),
        case(
            "error_row_checkpoint_packed_dataset",
            "row and packed checkpoints do not mix",
            _PACKED_CONFIG,
            snapshot_row(replace(_PACKED_CONFIG, packing=None), RowState((0,) * 4, (0,) * 4)),
        ),
        case(
            "error_packed_checkpoint_row_dataset",
            "row and packed checkpoints do not mix",
            replace(_PACKED_CONFIG, packing=None),
            packed,
        ),
        case(
            "error_pack_sequences_differs",
            "packing keys must match",
            _PACKED_CONFIG,
            _with(packed, pack_sequences=8),
        ),
        case("error_eos_id_differs", "packing keys must match", _PACKED_CONFIG, _with(packed, eos_id=2)),
        case("error_pad_id_differs", "packing keys must match", _PACKED_CONFIG, _with(packed, pad_id=-1)),
        case(
            "error_blocks_per_epoch_differs",
            "packing keys must match",
            _PACKED_CONFIG,
            _with(packed, blocks_per_epoch=12),
        ),
        case(
            "error_blocks_per_epoch_auto",
            "a checkpoint holds the resolved budget, never 'auto'",
            _PACKED_CONFIG,
            _with(packed, blocks_per_epoch="auto"),
        ),
        case(
            "error_row_position_beyond_split_end",
            "progress beyond the split end",
            _ROW_CONFIG,
            _with(row, positions_consumed_per_split=[3, 2, 6, 2]),
        ),
        case(
            "error_row_legacy_beyond_split_end",
            "a legacy count beyond the split end",
            _ROW_CONFIG,
            _without(_with(row, samples_consumed_per_split=6), "positions_consumed_per_split"),
        ),
        case(
            "error_packed_consumed_beyond_split_end",
            "progress beyond the split end",
            _PACKED_CONFIG,
            _with(packed, samples_consumed_per_split=[3, 2, 2, 6]),
        ),
        case(
            "error_packed_emitted_beyond_budget",
            "more blocks than the per-split budget",
            _PACKED_CONFIG,
            _with(packed, blocks_emitted_per_split=[3, 3, 3, 3]),
        ),
        *_checkpoint_fault_cases(auto, row, packed),
    ]


# ================================================================ merge


@dataclass(frozen=True)
class MergeInput:
    checkpoints: tuple[object, ...]


def _merge_encode(x: MergeInput) -> JsonObject:
    return {"checkpoints": [encode_value(c) for c in x.checkpoints]}


def _merge_decode(j: JsonObject) -> MergeInput:
    return MergeInput(tuple(decode_value(c) for c in as_list(j["checkpoints"])))


def _merge_run(x: MergeInput) -> JsonObject:
    merged = _attempt(lambda: merge_state_dicts(list(x.checkpoints)))
    if isinstance(merged, SpecError):
        return error_json(merged)
    if merge_state_dicts([merged]) != merged:
        raise AssertionError("merging a merged checkpoint alone must change nothing (MergeLatticeInv)")
    if "pack_buffers" not in merged and merge_state_dicts(list(reversed(x.checkpoints))) != merged:
        raise AssertionError("row-mode merge must not depend on the order of the states (MergeLatticeInv)")
    return enc_checkpoint(merged)


_MERGE = _Codec(_merge_encode, _merge_decode, _merge_run)


def _ranks_at_step(
    config: RunConfig, perm: Permutation, world_size: int, steps: int, corpus: Corpus | None = None
) -> tuple[list[RowState | PackedState], RowState | PackedState]:
    """Every rank's state after ``steps`` global steps of one cycle each, and the one-rank state there."""
    s = config.num_splits
    k = s // world_size
    if corpus is None:
        per_rank: list[RowState | PackedState] = [
            _rows_after(perm, NO_FAULTS, rank_splits(s, world_size, r), steps * k) for r in range(world_size)
        ]
        return per_rank, _rows_after(perm, NO_FAULTS, tuple(range(s)), steps * s)
    packing = config.packing
    assert packing is not None
    docs = _corpus_map(corpus)

    def packed_after(owned: Sequence[int], n: int) -> PackedState:
        return iterate_packed(perm, docs, NO_FAULTS, owned, packing, initial_packed_state(s)).state_after(n)

    ranks: list[RowState | PackedState] = [
        packed_after(rank_splits(s, world_size, r), steps * k) for r in range(world_size)
    ]
    return ranks, packed_after(tuple(range(s)), steps * s)


def merge_cases() -> list[CaseDef]:
    """Merging every rank's checkpoint: the merged checkpoint, or the error class and code."""
    row = snapshot_row(_ROW_CONFIG, _ROW_STATE)
    packed = snapshot_packed(_PACKED_CONFIG, _PACKED_STATE)

    def case(
        name: str, description: str, checkpoints: Sequence[object], check: Callable[[], None] | None = None
    ) -> CaseDef:
        return _case("merge", _MERGE, name, description, MergeInput(tuple(checkpoints)), check)

    def with_other(name: str, description: str, bad: object) -> CaseDef:
        good = packed if isinstance(bad, Mapping) and "pack_buffers" in bad else row
        return case(name, description, [good, bad])

    perm = _random_perm(random.Random(51), 4, 6)
    corpus = _random_corpus(random.Random(52), 24, 5)
    cfg = RunConfig(4, 3, 0)
    pcfg = RunConfig(4, 3, 0, None, PackingConfig(4, 1, 0, 16))
    cases: list[CaseDef] = []
    for world, steps in ((2, 3), (4, 1), (4, 5)):
        ranks, single = _ranks_at_step(cfg, perm, world, steps)
        snaps = [snapshot_row(cfg, s) for s in ranks if isinstance(s, RowState)]
        cases.append(
            case(
                f"row_{world}_ranks_after_{steps}_steps",
                f"row mode, world_size {world}, each rank at step {steps}",
                snaps,
                functools.partial(inv.MergeExactProp, cfg, ranks, single),
            )
        )
    for world, steps in ((2, 1), (4, 3)):
        ranks, single = _ranks_at_step(pcfg, perm, world, steps, corpus)
        snaps = [snapshot_packed(pcfg, s) for s in ranks if isinstance(s, PackedState)]
        cases.append(
            case(
                f"packed_{world}_ranks_after_{steps}_steps",
                f"packed mode, world_size {world}, each rank at step {steps}",
                snaps,
                functools.partial(inv.MergeExactProp, pcfg, ranks, single),
            )
        )
    other = RowState((1, 3, 0, 2), (1, 4, 2, 2))
    cases += [
        case("row_single_state", "merging one state normalises it", [row]),
        case(
            "row_elementwise_maximum",
            "samples and positions are joined by element-wise maximum",
            [row, snapshot_row(_ROW_CONFIG, other)],
            lambda: inv.MergeLatticeInv(_ROW_STATE, other, join_row(_ROW_STATE, other)),
        ),
        case(
            "row_legacy_int_and_list",
            "a legacy int is a uniform list",
            [_without(_with(row, samples_consumed_per_split=2), "positions_consumed_per_split"), row],
        ),
        case(
            "row_positions_missing",
            "a state without positions contributes its samples",
            [_without(row, "positions_consumed_per_split"), snapshot_row(_ROW_CONFIG, other)],
        ),
        case(
            "row_unknown_keys_dropped",
            "the merged checkpoint has exactly the format's keys",
            [_with(row, note="x"), row],
        ),
        case(
            "row_with_fingerprint",
            "the fingerprint is kept",
            [snapshot_row(_STRATEGY_CONFIG, _ROW_STATE), snapshot_row(_STRATEGY_CONFIG, other)],
        ),
        case(
            "packed_tie_keeps_first_state",
            "equal (emitted, consumed): the buffer of the earlier state wins",
            [
                packed,
                _buffers(packed, {0: {"tokens": [11, 1], "starts": [1]}, 3: {"tokens": [1], "starts": []}}),
            ],
        ),
        case(
            "packed_larger_progress_wins",
            "per split, the larger (emitted, consumed) wins",
            [
                packed,
                _with(
                    packed,
                    samples_consumed_per_split=[3, 3, 2, 4],
                    pack_buffers={
                        "1": {"tokens": [1, 12], "starts": [1]},
                        "3": {"tokens": [1], "starts": []},
                    },
                ),
            ],
        ),
        case(
            "packed_string_keys",
            "string buffer keys are read as split ids; the merge writes int keys",
            [_buffers(packed, {"0": {"tokens": [10, 1], "starts": [1]}})],
        ),
        case("error_empty", "at least one state", []),
        case("error_not_a_dict", "every state is a dict", [row, [1, 2]]),
        case("error_first_not_a_dict", "every state is a dict", ["row", row]),
        case("error_mixed_modes", "packed and row states do not merge", [packed, row]),
        case("error_mixed_modes_row_first", "packed and row states do not merge", [row, packed]),
        case("error_missing_epoch", "every config key in every state", [row, _without(row, "epoch")]),
        case(
            "error_first_missing_shuffle_seed",
            "every config key in every state",
            [_without(row, "shuffle_seed"), row],
        ),
        case(
            "error_missing_eos_id", "packing keys in every packed state", [packed, _without(packed, "eos_id")]
        ),
        case("error_shuffle_seed_differs", "config keys must agree", [row, _with(row, shuffle_seed=1)]),
        case("error_num_splits_differs", "config keys must agree", [row, _with(row, num_splits=8)]),
        case("error_epoch_differs", "config keys must agree", [row, _with(row, epoch=0)]),
        case(
            "error_pack_sequences_differs",
            "packing keys must agree",
            [packed, _with(packed, pack_sequences=2)],
        ),
        case("error_eos_id_differs", "packing keys must agree", [packed, _with(packed, eos_id=3)]),
        case("error_pad_id_differs", "packing keys must agree", [packed, _with(packed, pad_id=3)]),
        case(
            "error_blocks_per_epoch_differs",
            "packing keys must agree",
            [packed, _with(packed, blocks_per_epoch=4)],
        ),
        case(
            "error_fingerprint_only_in_second",
            "the fingerprint is compared across all states",
            [row, snapshot_row(_STRATEGY_CONFIG, _ROW_STATE)],
        ),
        case(
            "error_fingerprint_only_in_first",
            "the fingerprint is compared across all states",
            [snapshot_row(_STRATEGY_CONFIG, _ROW_STATE), row],
        ),
        case(
            "error_fingerprints_differ",
            "the fingerprint is compared across all states",
            [snapshot_row(_STRATEGY_CONFIG, _ROW_STATE), _with(row, perm_fingerprint="f" * 64)],
        ),
        case("error_num_splits_not_int", "config values are ints", [_with(row, num_splits="4")] * 2),
        case("error_epoch_is_bool", "config values are ints", [_with(row, epoch=True)]),
        case(
            "error_fingerprint_not_a_string", "perm_fingerprint is a string", [_with(row, perm_fingerprint=7)]
        ),
        case(
            "error_num_splits_zero",
            "num_splits is positive",
            [_with(row, num_splits=0, samples_consumed_per_split=[], positions_consumed_per_split=[])],
        ),
        case("error_pack_sequences_zero", "pack_sequences is positive", [_with(packed, pack_sequences=0)]),
        case(
            "error_blocks_per_epoch_zero", "blocks_per_epoch is positive", [_with(packed, blocks_per_epoch=0)]
        ),
        case(
            "error_blocks_per_epoch_not_divisible",
            "blocks_per_epoch is a multiple of num_splits",
            [_with(packed, blocks_per_epoch=6)],
        ),
        case(
            "error_packed_not_every_rank",
            "packed states must cover every rank at one step",
            [snapshot_packed(_PACKED_CONFIG, replace(_PACKED_STATE, emitted=(1, 1, 0, 0), buffers={}))],
        ),
        case(
            "error_packed_ranks_at_different_steps",
            "packed states must be taken at the same global step",
            [
                snapshot_packed(_PACKED_CONFIG, replace(_PACKED_STATE, emitted=(2, 2, 0, 0), buffers={})),
                snapshot_packed(_PACKED_CONFIG, replace(_PACKED_STATE, emitted=(0, 0, 1, 1), buffers={})),
            ],
        ),
        *_checkpoint_fault_cases(with_other, row, packed),
    ]
    return cases


# ================================================================ commit


@dataclass(frozen=True)
class CommitInput:
    config: RunConfig
    parent: RowState | PackedState
    incoming: object


def _commit_encode(x: CommitInput) -> JsonObject:
    return {
        "config": enc_config(x.config),
        "parent": enc_state(x.parent),
        "incoming": encode_value(x.incoming),
    }


def _commit_decode(j: JsonObject) -> CommitInput:
    config = dec_config(j["config"])
    return CommitInput(config, dec_config_state(config, j["parent"]), decode_value(j["incoming"]))


def _commit_run(x: CommitInput) -> JsonObject:
    def compute() -> RowState | PackedState:
        if isinstance(x.parent, RowState):
            return commit_row(x.config, x.parent, x.incoming)
        return commit_packed(x.config, x.parent, x.incoming)

    state = _attempt(compute)
    if isinstance(state, SpecError):
        return error_json(state)
    if isinstance(state, RowState) and isinstance(x.parent, RowState):
        moved_back = any(
            a < b for a, b in zip(state.samples + state.positions, x.parent.samples + x.parent.positions)
        )
    elif isinstance(state, PackedState) and isinstance(x.parent, PackedState):
        moved_back = any(
            (state.emitted[s], state.consumed[s]) < (x.parent.emitted[s], x.parent.consumed[s])
            for s in range(len(state.emitted))
        )
    else:
        raise AssertionError("commit changed the mode of the state")
    if moved_back:
        raise AssertionError("a commit never moves a split's progress backwards")
    return {"state": enc_state(state)}


_COMMIT = _Codec(_commit_encode, _commit_decode, _commit_run)


def commit_cases() -> list[CaseDef]:
    """Folding the snapshot carried by one delivered batch into the parent's state."""

    def case(
        name: str, description: str, config: RunConfig, parent: RowState | PackedState, incoming: object
    ) -> CaseDef:
        return _case("commit", _COMMIT, name, description, CommitInput(config, parent, incoming))

    perm = _random_perm(random.Random(61), 4, 6)
    cfg = RunConfig(4, 9, 0)
    w0 = iterate_rows(perm, NO_FAULTS, (0, 1), initial_row_state(4))
    w1 = iterate_rows(perm, NO_FAULTS, (2, 3), initial_row_state(4))
    corpus = _random_corpus(random.Random(62), 24, 5)
    pcfg = RunConfig(4, 9, 0, None, PackingConfig(3, 1, 0, 12))
    docs = _corpus_map(corpus)
    assert pcfg.packing is not None
    pw0 = iterate_packed(perm, docs, NO_FAULTS, (0, 1), pcfg.packing, initial_packed_state(4))
    pw1 = iterate_packed(perm, docs, NO_FAULTS, (2, 3), pcfg.packing, initial_packed_state(4))
    after_w0 = commit_row(cfg, initial_row_state(4), snapshot_row(cfg, w0.state_after(4)))
    packed_after_w0 = commit_packed(pcfg, initial_packed_state(4), snapshot_packed(pcfg, pw0.state_after(2)))
    return [
        case(
            "row_first_batch_of_worker_0",
            "the parent takes worker 0's progress on its splits",
            cfg,
            initial_row_state(4),
            snapshot_row(cfg, w0.state_after(4)),
        ),
        case(
            "row_then_worker_1",
            "worker 1's snapshot does not undo worker 0's progress",
            cfg,
            after_w0,
            snapshot_row(cfg, w1.state_after(4)),
        ),
        case(
            "row_stale_snapshot_changes_nothing",
            "an older snapshot of the same worker is absorbed",
            cfg,
            commit_row(cfg, after_w0, snapshot_row(cfg, w0.state_after(6))),
            snapshot_row(cfg, w0.state_after(4)),
        ),
        case(
            "row_legacy_int_snapshot",
            "a legacy int snapshot is a uniform list",
            cfg,
            after_w0,
            {"shuffle_seed": 9, "num_splits": 4, "epoch": 0, "samples_consumed_per_split": 3},
        ),
        case(
            "packed_first_batch",
            "the parent takes worker 0's blocks and buffers",
            pcfg,
            initial_packed_state(4),
            snapshot_packed(pcfg, pw0.state_after(2)),
        ),
        case(
            "packed_then_worker_1",
            "worker 1's splits advance, worker 0's stay",
            pcfg,
            packed_after_w0,
            snapshot_packed(pcfg, pw1.state_after(2)),
        ),
        case(
            "packed_equal_progress_keeps_parent",
            "a tie keeps the parent's split state",
            pcfg,
            packed_after_w0,
            snapshot_packed(pcfg, pw0.state_after(2)),
        ),
        case(
            "error_epoch_differs",
            "the incoming snapshot is checked like a load",
            cfg,
            after_w0,
            _with(snapshot_row(cfg, w1.state_after(2)), epoch=1),
        ),
        case(
            "error_mode_differs",
            "a packed snapshot into a row parent",
            cfg,
            after_w0,
            snapshot_packed(pcfg, pw1.state_after(2)),
        ),
        case(
            "error_list_length",
            "the incoming lists have one entry per split",
            cfg,
            after_w0,
            _with(snapshot_row(cfg, w1.state_after(2)), samples_consumed_per_split=[0, 0, 1]),
        ),
        case("error_not_a_dict", "the incoming snapshot is a dict", pcfg, packed_after_w0, None),
    ]


# ================================================================ params


@dataclass(frozen=True)
class ParamsInput:
    params: Params
    table: TableFacts
    fault: str | None


_PARAM_NAMES = tuple(f.name for f in fields(Params))
_COLUMN_KINDS: dict[str, ColumnKind] = {
    "int_list": "int_list",
    "other_list": "other_list",
    "scalar": "scalar",
}


def _params_encode(x: ParamsInput) -> JsonObject:
    return {
        "params": {name: encode_value(getattr(x.params, name)) for name in sorted(_PARAM_NAMES)},
        "table": {
            "columns": {name: kind for name, kind in sorted(x.table.columns.items())},
            "rows": encode_int(x.table.rows),
        },
        "fault": x.fault,
    }


def _params_decode(j: JsonObject) -> ParamsInput:
    raw = as_object(j["params"])
    if sorted(raw) != sorted(_PARAM_NAMES):
        raise VectorFormatError(f"params must name every keyword exactly once, got {sorted(raw)}")
    params = Params(**{name: decode_value(value) for name, value in raw.items()})
    table = as_object(j["table"])
    columns: dict[str, ColumnKind] = {}
    for name, kind in as_object(table["columns"]).items():
        if kind not in _COLUMN_KINDS:
            raise VectorFormatError(f"column kind {kind!r}")
        columns[name] = _COLUMN_KINDS[as_str(kind)]
    fault = j["fault"]
    return ParamsInput(
        params, TableFacts(columns, as_int(table["rows"])), None if fault is None else as_str(fault)
    )


def _params_run(x: ParamsInput) -> JsonObject:
    resolved = _attempt(lambda: validate_params(x.params, x.table))
    if isinstance(resolved, SpecError):
        return error_json(resolved)
    return {
        "num_splits": encode_int(resolved.num_splits),
        "io_queue_depth": encode_int(resolved.io_queue_depth),
        "draws_seed": resolved.draws_seed,
        "warnings": list(resolved.warnings),
    }


_PARAMS = _Codec(_params_encode, _params_decode, _params_run)

_TABLE = TableFacts({"text": "other_list", "tokens": "int_list", "label": "scalar", "score": "scalar"}, 100)
_BASES: dict[str, Params] = {
    "row": Params(),
    "multi_rank": Params(num_splits=8, world_size=4, rank=3, shuffle_seed=42),
    "packing": Params(
        num_splits=4, pack_sequences=16, eos_id=2, pad_id=0, blocks_per_epoch=8, columns=["tokens"]
    ),
    "packing_auto": Params(
        pack_sequences=16, eos_id=2, pad_id=0, blocks_per_epoch="auto", columns=["tokens"]
    ),
}

_INT_KEYWORDS = tuple(name for name, _, _ in spec_params._INT_PARAMS)
"""Integer keywords, in the model's check order (read from the model's own table)."""
_NULLABLE_INTS = frozenset(name for name, nullable, _ in spec_params._INT_PARAMS if nullable)


def _value_label(value: object) -> str:
    """A short identifier-safe label of a parameter value, for case names."""
    if value is CALLABLE:
        return "callable"
    if isinstance(value, WorkerInfo):
        return "worker_info"
    if isinstance(value, str):
        safe = "".join(c if c.isalnum() else "_" for c in value.lower())
        return f"str_{safe}" + ("_uppercase" if value != value.lower() else "")
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        if value >= 2**62:
            return f"2pow{value.bit_length() - 1}" + ("" if value & (value - 1) == 0 else "_plus")
        if value <= -(2**62):
            return f"minus_2pow{(-value).bit_length() - 1}" + ("" if -value & (-value - 1) == 0 else "_minus")
        return f"{value}" if value >= 0 else f"minus_{-value}"
    if isinstance(value, float):
        return "float"
    if value is None:
        return "none"
    if isinstance(value, list):
        return (
            "list_" + "_".join(_value_label(v).removeprefix("str_") for v in value) if value else "empty_list"
        )
    raise TypeError(f"no label for {value!r}")


def _same(a: object, b: object) -> bool:
    """Equal and of the same type (``True == 1`` in Python, but not here)."""
    return type(a) is type(b) and a == b


def params_cases() -> list[CaseDef]:
    """Constructor validation: one fault (or none) against a valid base parameter set."""
    cases: list[CaseDef] = []
    names: set[str] = set()

    def add(
        name: str,
        description: str,
        base: str,
        fault: str | None,
        changes: Mapping[str, object],
        table: TableFacts,
    ) -> None:
        params = replace(_BASES[base], **changes)
        if name in names:
            raise AssertionError(f"duplicate params case {name}")
        names.add(name)

        def check() -> None:
            validate_params(_BASES[base], _TABLE)  # the base set alone is valid
            if fault is None:
                validate_params(params, table)  # a set without a fault is accepted
                return
            changed = [n for n in _PARAM_NAMES if not _same(getattr(params, n), getattr(_BASES[base], n))]
            changed += ["table"] if table != _TABLE else []
            if changed != [fault.split(".")[0]]:
                raise AssertionError(f"params case {name} changes {changed}, declared fault {fault}")
            try:
                validate_params(params, table)
            except SpecError:
                return
            raise AssertionError(f"params case {name}: the fault {fault} is accepted")

        cases.append(_case("params", _PARAMS, name, description, ParamsInput(params, table, fault), check))

    def case(name: str, description: str, base: str, fault: str | None, **changes: object) -> None:
        add(name, description, base, fault, changes, _TABLE)

    def bad(base: str, keyword: str, value: object, why: str) -> None:
        label = f"{base}_{keyword}_{_value_label(value)}"
        add(label, f"{keyword}={value!r}: {why}", base, keyword, {keyword: value}, _TABLE)

    for base in _BASES:
        case(f"{base}_valid", f"the valid base parameter set '{base}'", base, None)
    # Valid variants (no fault; several keywords may change).
    case(
        "row_shuffle_seed_none_one_rank",
        "shuffle_seed=None on one rank: the implementation draws a seed",
        "row",
        None,
        shuffle_seed=None,
    )
    case(
        "row_prefetch_batches_overrides_queue_depth",
        "deprecated prefetch_batches replaces io_queue_depth",
        "row",
        None,
        prefetch_batches=2,
        io_queue_depth=7,
    )
    case(
        "row_seed_at_limit",
        "shuffle_seed + epoch * 100003 may reach 2**64 - 1",
        "row",
        None,
        shuffle_seed=2**64 - 1,
    )
    case(
        "row_seed_and_epoch_at_limit",
        "shuffle_seed + 3 * 100003 == 2**64 - 1",
        "row",
        None,
        shuffle_seed=2**64 - 1 - 3 * 100003,
        epoch=3,
    )
    case(
        "row_epoch_at_seed_limit",
        "0 + epoch * 100003 just below 2**64",
        "row",
        None,
        epoch=(2**64 - 1) // 100003,
    )
    case(
        "multi_rank_num_splits_default",
        "num_splits=None means world_size",
        "multi_rank",
        None,
        num_splits=None,
    )
    case(
        "row_all_callables",
        "a callable everywhere a callable is allowed",
        "row",
        None,
        transform=CALLABLE,
        split_strategy=CALLABLE,
        connection_factory=CALLABLE,
        on_transform_error=CALLABLE,
    )
    case("row_error_mode_skip", "on_transform_error='skip'", "row", None, on_transform_error="skip")
    case("row_error_mode_warn", "on_transform_error='warn'", "row", None, on_transform_error="warn")
    case(
        "row_columns_filter_worker_info",
        "columns, a filter and a worker_info override",
        "row",
        None,
        columns=["text", "label"],
        filter="score > 0.5",
        worker_info_override=WorkerInfo(1, 2),
    )
    case(
        "row_every_optional_int_at_minimum",
        "every bounded integer at its minimum",
        "row",
        None,
        transform_parallelism=1,
        transform_queue_depth=1,
        shuffle_clump_size=1,
        read_batch_size=1,
        io_queue_depth=1,
    )
    case("row_num_splits_equals_rows", "exactly one row per split", "row", None, num_splits=100)
    case("row_shuffle_false", "sequential splits", "row", None, shuffle=False)
    case(
        "packing_ids_at_int64_limits",
        "eos_id and pad_id may sit at the int64 limits",
        "packing",
        None,
        eos_id=2**63 - 1,
        pad_id=-(2**63),
    )
    case("packing_eos_equals_pad", "eos_id == pad_id is allowed", "packing", None, pad_id=2)
    case("packing_negative_ids", "eos_id and pad_id may be negative", "packing", None, eos_id=-1, pad_id=-2)
    # Wrong types: every integer keyword (bools are not ints; None only where allowed).
    not_ints: tuple[object, ...] = ("1", 1.5, True)
    for keyword in _INT_KEYWORDS:
        base = "packing" if keyword in ("pack_sequences", "eos_id", "pad_id") else "row"
        for value in not_ints:
            bad(base, keyword, value, "an int is required")
        if keyword not in _NULLABLE_INTS:
            bad(base, keyword, None, "None is not allowed")
    # Wrong types: the other keywords.
    wrong_types: tuple[tuple[str, tuple[object, ...]], ...] = (
        ("shuffle", (1, None, "yes")),
        ("split_strategy", (1, "random")),
        ("filter", (1, ["a"])),
        ("transform", (1, "upper")),
        ("connection_factory", ("db",)),
        ("columns", ("text", [1], ["text", None])),
        ("worker_info_override", (1, "worker")),
    )
    for keyword, values in wrong_types:
        for value in values:
            bad("row", keyword, value, "wrong type")
    # Out of range or inconsistent, row base.
    row_faults: tuple[tuple[str, object], ...] = (
        ("world_size", 0),
        ("world_size", -1),
        ("rank", -1),
        ("rank", 1),
        ("num_splits", 0),
        ("epoch", -1),
        ("shuffle_seed", -1),
        ("shuffle_seed", 2**64),
        ("read_batch_size", 0),
        ("read_batch_size", -64),
        ("io_queue_depth", 0),
        ("io_queue_depth", -3),
        ("prefetch_batches", 0),
        ("prefetch_batches", -1),
        ("transform_parallelism", 0),
        ("transform_queue_depth", 0),
        ("shuffle_clump_size", 0),
        ("on_transform_error", "ignore"),
        ("on_transform_error", "RAISE"),
        ("on_transform_error", None),
        ("on_transform_error", 0),
        ("columns", []),
        ("columns", ["text", "text"]),
        ("columns", ["missing"]),
        ("num_splits", 101),
        ("blocks_per_epoch", 8),
        ("blocks_per_epoch", "auto"),
        ("pack_sequences", 0),
        ("epoch", 2**64 // 100003 + 1),
    )
    for keyword, value in row_faults:
        bad("row", keyword, value, "out of range or inconsistent")
    add(
        "row_too_few_rows",
        "the table must have at least one row per split",
        "row",
        "table.rows",
        {},
        TableFacts(_TABLE.columns, 0),
    )
    # Inconsistent across ranks, multi-rank base.
    multi_rank_faults: tuple[tuple[str, object], ...] = (
        ("rank", 4),
        ("num_splits", 6),
        ("num_splits", 2),
        ("shuffle_seed", None),
        ("world_size", 5),
        ("shuffle_seed", 2**64),
    )
    for keyword, value in multi_rank_faults:
        bad("multi_rank", keyword, value, "multi-rank requirement")
    # Packing requirements.
    packing_faults: tuple[tuple[str, object], ...] = (
        ("pack_sequences", 0),
        ("pack_sequences", -16),
        ("eos_id", None),
        ("pad_id", None),
        ("eos_id", 2**63),
        ("pad_id", -(2**63) - 1),
        ("blocks_per_epoch", None),
        ("blocks_per_epoch", "AUTO"),
        ("blocks_per_epoch", 8.5),
        ("blocks_per_epoch", True),
        ("blocks_per_epoch", 0),
        ("blocks_per_epoch", -4),
        ("blocks_per_epoch", 6),
        ("transform", CALLABLE),
        ("columns", None),
        ("columns", ["tokens", "text"]),
        ("columns", ["missing"]),
        ("columns", ["label"]),
        ("columns", ["text"]),
        ("columns", "tokens"),
        ("columns", []),
        ("num_splits", 3),
        ("on_transform_error", "fail"),
    )
    for keyword, value in packing_faults:
        bad("packing", keyword, value, "packing requirement")
    auto_faults: tuple[tuple[str, object], ...] = (
        ("columns", ["text"]),
        ("eos_id", None),
        ("transform", CALLABLE),
    )
    for keyword, value in auto_faults:
        bad("packing_auto", keyword, value, "packing requirement")
    return cases


# ================================================================ auto budget


@dataclass(frozen=True)
class AutoBudgetInput:
    doc_lengths: tuple[tuple[int | None, ...], ...]
    shuffle_seed: int
    pack_sequences: int


def _auto_encode(x: AutoBudgetInput) -> JsonObject:
    return {
        "doc_lengths": [[None if n is None else encode_int(n) for n in split] for split in x.doc_lengths],
        "shuffle_seed": encode_int(x.shuffle_seed),
        "pack_sequences": encode_int(x.pack_sequences),
    }


def _auto_decode(j: JsonObject) -> AutoBudgetInput:
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


def _auto_run(x: AutoBudgetInput) -> JsonObject:
    blocks = _attempt(lambda: estimate_blocks_per_epoch(x.doc_lengths, x.shuffle_seed, x.pack_sequences))
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


_AUTO = _Codec(_auto_encode, _auto_decode, _auto_run)


def _not_sampled(lengths: Sequence[Sequence[int | None]], seed: int, split: int, position: int) -> None:
    if position in sampled_positions(lengths, seed)[split]:
        raise AssertionError(f"position {position} of split {split} is sampled; the case needs another seed")


def auto_budget_cases() -> list[CaseDef]:
    """The ``blocks_per_epoch="auto"`` estimate from document lengths."""

    def case(
        name: str,
        description: str,
        lengths: Sequence[Sequence[int | None]],
        seed: int,
        length: int,
        check: Callable[[], None] | None = None,
    ) -> CaseDef:
        value = AutoBudgetInput(tuple(tuple(s) for s in lengths), seed, length)
        return _case("auto_budget", _AUTO, name, description, value, check)

    def uniform(name: str, splits: int, docs: int, doc_len: int, length: int) -> CaseDef:
        lengths = [[doc_len] * docs] * splits
        expected_blocks = (doc_len + 1) * docs * splits // length
        expected = max(splits, expected_blocks - expected_blocks % splits)

        def check() -> None:
            got = estimate_blocks_per_epoch(lengths, 0, length)
            if got != expected:
                raise AssertionError(f"uniform corpus: estimate {got}, closed form {expected}")

        return case(
            name,
            f"{splits} splits of {docs} documents of {doc_len} tokens, L={length}: closed form",
            lengths,
            0,
            length,
            check,
        )

    rng = random.Random(71)
    big = [[rng.randint(0, 40) for _ in range(n)] for n in (250, 250)]
    varied = [[rng.randint(0, 30) for _ in range(n)] for n in (7, 7, 7)]
    cases = [
        uniform("uniform_one_split", 1, 10, 3, 4),
        uniform("uniform_four_splits", 4, 20, 7, 16),
        uniform("uniform_rounds_down_to_multiple_of_splits", 3, 10, 4, 7),
        uniform("uniform_tiny_corpus_floors_at_num_splits", 4, 1, 0, 64),
        uniform("uniform_empty_documents_count_eos", 2, 30, 0, 2),
        case(
            "ten_documents_two_splits",
            "10 documents, 23 tokens with EOS, 2 splits, L=4: one document per split is sampled",
            [[1, 2, 1, 3, 1], [2, 1, 1, 0, 1]],
            0,
            4,
        ),
        case("varied_lengths_seed_0", "one document per split is sampled (n <= 100)", varied, 0, 8),
        case("varied_lengths_seed_1", "another seed samples other documents", varied, 1, 8),
        case("varied_lengths_seed_12345", "another seed samples other documents", varied, 12345, 8),
        case(
            "large_splits_sample_three_each",
            "250 documents per split: ceil(250/100) = 3 samples each",
            big,
            7,
            32,
        ),
        case("large_and_small_splits", "splits of different sizes", [big[0][:101], varied[0]], 3, 16),
        case(
            "null_outside_the_sample_is_not_seen",
            "only sampled documents are read",
            [[5, None, 5, 5, 5], [5, 5, 5, 5, 5]],
            0,
            4,
            lambda: _not_sampled([[5, None, 5, 5, 5], [5, 5, 5, 5, 5]], 0, 0, 1),
        ),
        case("error_null_in_sample", "a sampled null token list is rejected", [[None] * 5, [5] * 5], 0, 4),
        case("error_empty_split", "a split without documents cannot be estimated", [[3, 4], []], 0, 4),
    ]
    for seed in range(6):
        r = random.Random(3000 + seed)
        s = r.choice((1, 2, 3, 4))
        lengths = [[r.randint(0, 50) for _ in range(r.randint(1, 150))] for _ in range(s)]
        cases.append(
            case(
                f"random_{seed:02d}",
                f"random(seed={3000 + seed}): {s} splits",
                lengths,
                r.randint(0, 99),
                r.choice((8, 16, 64)),
            )
        )
    return cases


# ================================================================ loader


@dataclass(frozen=True)
class LoaderInput:
    config: RunConfig
    permutation: Permutation
    faults: Faults
    corpus: Corpus | None
    world_size: int
    rank: int
    num_workers: int
    batch_size: int
    start: RowState | PackedState


def _loader_encode(x: LoaderInput) -> JsonObject:
    return {
        "config": enc_config(x.config),
        "permutation": enc_permutation(x.permutation),
        "faults": enc_faults(x.faults),
        "corpus": None if x.corpus is None else enc_corpus(x.corpus),
        "world_size": x.world_size,
        "rank": x.rank,
        "num_workers": x.num_workers,
        "batch_size": x.batch_size,
        "start": enc_state(x.start),
    }


def _loader_decode(j: JsonObject) -> LoaderInput:
    config = dec_config(j["config"])
    corpus = j["corpus"]
    return LoaderInput(
        config,
        dec_permutation(j["permutation"]),
        dec_faults(j["faults"]),
        None if corpus is None else dec_corpus(corpus),
        as_int(j["world_size"]),
        as_int(j["rank"]),
        as_int(j["num_workers"]),
        as_int(j["batch_size"]),
        dec_config_state(config, j["start"]),
    )


def _loader_run(x: LoaderInput) -> JsonObject:
    corpus = None if x.corpus is None else _corpus_map(x.corpus)

    def compute() -> LoaderRun:
        topology = Topology(x.world_size, x.rank, x.num_workers)
        return run_loader(x.config, x.permutation, x.faults, topology, x.start, x.batch_size, corpus)

    run = _attempt(compute)
    if isinstance(run, SpecError):
        return error_json(run)
    if isinstance(run.start, RowState):
        for n in range(len(run.deliveries) + 1):
            inv.ConsumerCommitProp(x.permutation, x.faults, run, n)
        if run.start == initial_row_state(x.config.num_splits):
            rows = [y for d in run.deliveries for y in d.items if isinstance(y, Yielded)]
            inv.ExactlyOnceProp(x.permutation, x.faults, rows, x.world_size == 1 and run.error is None)
    return {
        "deliveries": [
            {
                "worker": d.worker,
                "index": d.index,
                "items": [enc_row(i) if isinstance(i, Yielded) else enc_block(i) for i in d.items],
                "committed": enc_state(d.committed),
            }
            for d in run.deliveries
        ],
        "raised": None if run.error is None else enc_raised(run.error),
    }


_LOADER = _Codec(_loader_encode, _loader_decode, _loader_run)


def loader_cases() -> list[CaseDef]:
    """``StreamingDataLoader`` delivery on one rank: batches in order, and the state after each."""

    def case(
        name: str,
        description: str,
        config: RunConfig,
        perm: Permutation,
        world_size: int,
        rank: int,
        num_workers: int,
        batch_size: int,
        faults: Faults = NO_FAULTS,
        corpus: Corpus | None = None,
        start: RowState | PackedState | None = None,
    ) -> CaseDef:
        if start is None:
            s = config.num_splits
            start = initial_row_state(s) if corpus is None else initial_packed_state(s)
        value = LoaderInput(config, perm, faults, corpus, world_size, rank, num_workers, batch_size, start)
        return _case("loader", _LOADER, name, description, value)

    perm = _random_perm(random.Random(81), 4, 5)
    cfg = RunConfig(4, 5, 0)
    corpus = _random_corpus(random.Random(82), 20, 4)
    pcfg = RunConfig(4, 5, 0, None, PackingConfig(4, 1, 0, 12))
    perm8 = _random_perm(random.Random(83), 8, 3)
    cfg8 = RunConfig(8, 5, 0)
    mid = iterate_rows(perm, NO_FAULTS, (0, 1, 2, 3), initial_row_state(4)).state_after(8)
    assert pcfg.packing is not None
    packed_mid = iterate_packed(
        perm, _corpus_map(corpus), NO_FAULTS, (0, 1, 2, 3), pcfg.packing, initial_packed_state(4)
    ).state_after(4)
    return [
        case("in_process_one_rank", "num_workers=0: one iterator, batches of 4", cfg, perm, 1, 0, 0, 4),
        case("in_process_partial_last_batch", "the last batch is shorter", cfg, perm, 1, 0, 0, 3),
        case("two_workers_round_robin", "batches arrive in order (index, worker)", cfg, perm, 1, 0, 2, 2),
        case("four_workers_one_split_each", "each worker reads one split", cfg, perm, 1, 0, 4, 2),
        case("rank_1_of_2_with_2_workers", "a rank reads only its splits", cfg8, perm8, 2, 1, 2, 3),
        case("batch_size_one", "every row is its own batch", cfg, perm, 1, 0, 2, 1),
        case(
            "worker_ends_early_drops_out",
            "a worker whose splits run out first stops delivering",
            cfg,
            perm,
            1,
            0,
            2,
            2,
            _faults(skipped=[perm[0][1], perm[1][3], perm[0][4]]),
        ),
        case(
            "worker_raises_stops_delivery",
            "a raising row turns its batch into the error; nothing after it",
            cfg,
            perm,
            1,
            0,
            2,
            2,
            _faults(raising=[perm[2][2]]),
        ),
        case(
            "in_process_raise_keeps_full_batches",
            "full batches before the error are delivered",
            cfg,
            perm,
            1,
            0,
            0,
            3,
            _faults(raising=[perm[3][3]]),
        ),
        case(
            "resume_from_step_boundary",
            "two workers resume from a one-rank checkpoint",
            cfg,
            perm,
            1,
            0,
            2,
            2,
            start=mid,
        ),
        case(
            "in_process_resume_mid_cycle",
            "one iterator may resume mid-cycle (catch-up)",
            cfg,
            perm,
            1,
            0,
            0,
            3,
            start=RowState((3, 2, 2, 2), (3, 2, 2, 2)),
        ),
        case("packed_two_workers", "packed blocks, two workers", pcfg, perm, 1, 0, 2, 2, corpus=corpus),
        case("packed_in_process", "packed blocks in the process", pcfg, perm, 1, 0, 0, 3, corpus=corpus),
        case(
            "packed_resume",
            "packed resume at a step boundary",
            pcfg,
            perm,
            1,
            0,
            2,
            1,
            corpus=corpus,
            start=packed_mid,
        ),
        case(
            "error_workers_mid_cycle_start",
            "several workers need a step boundary",
            cfg,
            perm,
            1,
            0,
            2,
            2,
            start=RowState((3, 2, 2, 2), (3, 2, 2, 2)),
        ),
        case(
            "error_packed_mid_cycle_start",
            "packing needs a step boundary",
            pcfg,
            perm,
            1,
            0,
            0,
            2,
            corpus=corpus,
            start=PackedState((1, 1, 0, 0), (1, 1, 0, 0), {}),
        ),
        case(
            "error_workers_do_not_divide_splits",
            "splits per rank must divide among workers",
            cfg,
            perm,
            1,
            0,
            3,
            2,
        ),
        case("error_batch_size_zero", "batch_size is at least 1", cfg, perm, 1, 0, 0, 0),
        case("error_rank_out_of_range", "rank < world_size", cfg, perm, 2, 2, 0, 2),
    ]


# ================================================================ registry


@dataclass(frozen=True)
class Family:
    """A family of vectors: its cases and how its output is computed from the JSON input."""

    name: str
    summary: str
    cases: Callable[[], list[CaseDef]]
    replay: Callable[[JsonObject], JsonObject]


def _family(name: str, cases: Callable[[], list[CaseDef]], codec: _Codec[T]) -> Family:
    def replay(vector_input: JsonObject) -> JsonObject:
        return codec.run(codec.decode(vector_input))

    summary = (cases.__doc__ or "").strip().splitlines()[0]
    return Family(name, summary, cases, replay)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        _family("topology", topology_cases, _TOPOLOGY),
        _family("row_order", row_order_cases, _ROW_ORDER),
        _family("packing", packing_cases, _PACKING),
        _family("checkpoint_snapshot", checkpoint_snapshot_cases, _SNAPSHOT),
        _family("load", load_cases, _LOAD),
        _family("merge", merge_cases, _MERGE),
        _family("commit", commit_cases, _COMMIT),
        _family("params", params_cases, _PARAMS),
        _family("auto_budget", auto_budget_cases, _AUTO),
        _family("loader", loader_cases, _LOADER),
    )
}
"""Every vector family, in the order they are documented."""


def all_cases() -> Iterator[CaseDef]:
    """Every case of every family, family by family."""
    for family in FAMILIES.values():
        yield from family.cases()


def replay(family: str, vector_input: JsonObject) -> JsonObject:
    """The output the model computes for one vector input of ``family`` (JSON in, JSON out)."""
    return FAMILIES[family].replay(vector_input)
