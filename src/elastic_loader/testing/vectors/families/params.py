"""The ``params`` family: constructor validation of ``StreamingDataset`` keywords.

Each case is one fault (or none) against a valid base parameter set; the case
checks that its base is valid and that it changes exactly the keyword it
names. Case names are derived from the keyword and the value (:func:`value_label`).

Rules of this module (the same for every family module): the input is a frozen
dataclass with a JSON codec (``_encode``/``_decode``) and a model run
(``_run``) that checks the invariants of the result; :func:`cases` builds the
cases, deterministically, in the order the vector file lists them, and the
first line of its docstring is the family's summary in that file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from ....spec import params as spec_params
from ....spec.errors import SpecError
from ....spec.params import CALLABLE, ColumnKind, Params, TableFacts, validate_params
from ..codec import (
    JsonObject,
    VectorFormatError,
    WorkerInfo,
    as_int,
    as_object,
    as_str,
    decode_value,
    encode_int,
    encode_value,
    error_json,
)
from ..plumbing import CaseDef, Codec, attempt, family, make_case


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


def _encode(x: ParamsInput) -> JsonObject:
    return {
        "params": {name: encode_value(getattr(x.params, name)) for name in sorted(_PARAM_NAMES)},
        "table": {
            "columns": {name: kind for name, kind in sorted(x.table.columns.items())},
            "rows": encode_int(x.table.rows),
        },
        "fault": x.fault,
    }


def _decode(j: JsonObject) -> ParamsInput:
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


def _run(x: ParamsInput) -> JsonObject:
    resolved = attempt(lambda: validate_params(x.params, x.table))
    if isinstance(resolved, SpecError):
        return error_json(resolved)
    return {
        "num_splits": encode_int(resolved.num_splits),
        "io_queue_depth": encode_int(resolved.io_queue_depth),
        "draws_seed": resolved.draws_seed,
        "warnings": list(resolved.warnings),
    }


CODEC = Codec(_encode, _decode, _run)

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


def cases() -> list[CaseDef]:
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

        cases.append(make_case("params", CODEC, name, description, ParamsInput(params, table, fault), check))

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


FAMILY = family("params", cases, CODEC)
