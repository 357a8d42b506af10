"""The ``params`` family: constructor validation of ``StreamingDataset`` keywords.

Each case is one fault (or none) against a valid base parameter set; the case
checks that its base is valid and that it changes exactly the keyword it
names. Case names are derived from the keyword and the value (:func:`value_label`).

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from ....spec.params import CALLABLE, ColumnKind, LocalShuffle, Params, TableFacts, validate_params
from ..codec import (
    VectorFormatError,
    WorkerInfo,
    as_int,
    as_object,
    as_str,
    decode_value,
    encode_int,
    encode_value,
)
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, make_case


@dataclass(frozen=True)
class ParamsInput:
    """Every constructor keyword, the table it runs on, and the fault the case names (if any)."""

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
        "permutation": encode_value(resolved.permutation),
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
    "computed": Params(num_splits=4, shuffle_seed=7, permutation="computed"),
    "local": Params(num_splits=4, shuffle_seed=7, permutation=LocalShuffle(clump=4, window=16)),
}


def _type_error(params: Params) -> str | None:
    """The keyword whose type ``validate_params`` refuses first, if it refuses one."""
    result = attempt(lambda: validate_params(params, _TABLE))
    if isinstance(result, SpecError) and result.code.endswith("_type"):
        return result.code.removesuffix("_type")
    return None


def _integer_keywords() -> tuple[str, ...]:
    """The integer keywords in the model's check order, as ``validate_params`` reveals them.

    With every keyword at ``1.5`` the model names the first keyword it checks; that keyword is an
    integer one when ``1`` alone passes its type check. Putting it back at its default shows the
    next, until the first keyword that refuses ``1`` (the non-integer checks follow the integer ones).
    """
    wrong = {f.name: 1.5 for f in fields(Params)}
    order: list[str] = []
    while (name := _type_error(Params(**wrong))) is not None and _type_error(Params(**{name: 1})) != name:
        order.append(name)
        del wrong[name]
    return tuple(order)


_INT_KEYWORDS = _integer_keywords()
"""Integer keywords, in the model's check order (asked of the model)."""
_NULLABLE_INTS = frozenset(name for name in _INT_KEYWORDS if _type_error(Params(**{name: None})) != name)


def _value_label(value: object) -> str:
    """A short identifier-safe label of a parameter value, for case names."""
    if value is CALLABLE:
        return "callable"
    if isinstance(value, LocalShuffle):
        return f"local_shuffle_{_int_label(value.clump)}_{_int_label(value.window)}"
    if isinstance(value, WorkerInfo):
        return f"worker_info_{_int_label(value.id)}_of_{_int_label(value.num_workers)}"
    if isinstance(value, str):
        safe = "".join(c if c.isalnum() else "_" for c in value.lower())
        return f"str_{safe}" + ("_uppercase" if value != value.lower() else "")
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return _int_label(value)
    if isinstance(value, float):
        return "float"
    if value is None:
        return "none"
    if isinstance(value, list):
        return (
            "list_" + "_".join(_value_label(v).removeprefix("str_") for v in value) if value else "empty_list"
        )
    raise TypeError(f"no label for {value!r}")


def _int_label(value: int) -> str:
    """``2pow63``, ``minus_2pow63_minus``, ``7``, ``minus_1``: powers of two near the int64 limits by name."""
    if value >= 2**62:
        return f"2pow{value.bit_length() - 1}" + ("" if value & (value - 1) == 0 else "_plus")
    if value <= -(2**62):
        return f"minus_2pow{(-value).bit_length() - 1}" + ("" if -value & (-value - 1) == 0 else "_minus")
    return f"{value}" if value >= 0 else f"minus_{-value}"


def _same(a: object, b: object) -> bool:
    """Equal and of the same type (``True == 1`` in Python, but not here)."""
    return type(a) is type(b) and a == b


def _check_fault(name: str, base: str, fault: str | None, params: Params, table: TableFacts) -> None:
    """The base set is valid; a case without a fault is accepted; a fault changes only its keyword."""
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


class _Cases:
    """The cases of this family as they are added, with unique names."""

    def __init__(self) -> None:
        self.cases: list[CaseDef] = []
        self.names: set[str] = set()

    def add(
        self,
        name: str,
        description: str,
        base: str,
        fault: str | None,
        changes: Mapping[str, object],
        table: TableFacts,
    ) -> None:
        """The case ``name``: base set ``base`` with ``changes`` over ``table``, breaking ``fault``."""
        params = replace(_BASES[base], **changes)
        if name in self.names:
            raise AssertionError(f"duplicate params case {name}")
        self.names.add(name)
        check = functools.partial(_check_fault, name, base, fault, params, table)
        self.cases.append(
            make_case("params", CODEC, name, description, ParamsInput(params, table, fault), check)
        )

    def case(self, name: str, description: str, base: str, fault: str | None, **changes: object) -> None:
        """A case over the standard table."""
        self.add(name, description, base, fault, changes, _TABLE)

    def bad(self, base: str, keyword: str, value: object, why: str) -> None:
        """The fault ``keyword=value``, named after the base, the keyword and the value."""
        label = f"{base}_{keyword}_{_value_label(value)}"
        self.add(label, f"{keyword}={value!r}: {why}", base, keyword, {keyword: value}, _TABLE)


def cases() -> list[CaseDef]:
    """Constructor validation: one fault (or none) against a valid base parameter set."""
    out = _Cases()
    for base in _BASES:
        out.case(f"{base}_valid", f"the valid base parameter set '{base}'", base, None)
    _valid_variants(out)
    _valid_keyword_variants(out)
    _wrong_types(out)
    for keyword, value in _ROW_FAULTS:
        out.bad("row", keyword, value, "out of range or inconsistent")
    out.add(
        "row_too_few_rows",
        "the table must have at least one row per split",
        "row",
        "table.rows",
        {},
        TableFacts(_TABLE.columns, 0),
    )
    for keyword, value in _MULTI_RANK_FAULTS:
        out.bad("multi_rank", keyword, value, "multi-rank requirement")
    for keyword, value in _PACKING_FAULTS:
        out.bad("packing", keyword, value, "packing requirement")
    for keyword, value in _AUTO_FAULTS:
        out.bad("packing_auto", keyword, value, "packing requirement")
    _permutations(out)
    return out.cases


def _permutations(out: _Cases) -> None:
    """``permutation`` (D46): valid kinds on every base, wrong types and names, what only the builder does."""
    for kind in ("builder", "computed", "local", LocalShuffle(1, 1), LocalShuffle(2**64, 2**64)):
        name = f"row_permutation_{_value_label(kind).removeprefix('str_')}"
        out.case(name, f"permutation={kind!r} is a valid kind", "row", None, permutation=kind)
    out.case(
        "multi_rank_permutation_computed",
        "computed on every rank",
        "multi_rank",
        None,
        permutation="computed",
    )
    out.case(
        "packing_permutation_local", "packing reads a local permutation", "packing", None, permutation="local"
    )
    out.case(
        "local_seed_none_one_rank",
        "a drawn seed keys the local permutation",
        "local",
        None,
        shuffle_seed=None,
    )
    out.case("computed_num_splits_equals_rows", "one row per split", "computed", None, num_splits=100)
    wrong: tuple[object, ...] = (None, 1, 1.5, True, ["computed"], CALLABLE)
    for value in wrong:
        out.bad("row", "permutation", value, "a kind name or a LocalShuffle is required")
    for unknown in ("Computed", "random", "", "LOCAL"):
        out.bad("row", "permutation", unknown, "not a kind name")
    out.bad("multi_rank", "permutation", "feistel", "not a kind name")
    for base in ("computed", "local"):
        for keyword, value in _ONLY_BUILDER_FAULTS:
            out.bad(base, keyword, value, "only the builder does this")
        out.bad(base, "num_splits", 101, "fewer rows than splits")
        out.bad(base, "rank", 1, "rank out of range, checked before the permutation")


_ONLY_BUILDER_FAULTS: tuple[tuple[str, object], ...] = (
    ("shuffle", False),
    ("split_strategy", CALLABLE),
    ("shuffle_clump_size", 8),
    ("filter", "score > 0.5"),
)
"""What a computed or local permutation refuses (each alone on the computed and local bases)."""


def _valid_variants(out: _Cases) -> None:
    """Valid variants of the base sets (no fault; several keywords may change): seeds and epochs."""
    out.case(
        "row_shuffle_seed_none_one_rank",
        "shuffle_seed=None on one rank: the implementation draws a seed",
        "row",
        None,
        shuffle_seed=None,
    )
    out.case(
        "row_prefetch_batches_overrides_queue_depth",
        "deprecated prefetch_batches replaces io_queue_depth",
        "row",
        None,
        prefetch_batches=2,
        io_queue_depth=7,
    )
    out.case(
        "row_seed_at_limit",
        "shuffle_seed + epoch * 100003 may reach 2**64 - 1",
        "row",
        None,
        shuffle_seed=2**64 - 1,
    )
    out.case(
        "row_seed_and_epoch_at_limit",
        "shuffle_seed + 3 * 100003 == 2**64 - 1",
        "row",
        None,
        shuffle_seed=2**64 - 1 - 3 * 100003,
        epoch=3,
    )
    out.case(
        "row_epoch_at_seed_limit",
        "0 + epoch * 100003 just below 2**64",
        "row",
        None,
        epoch=(2**64 - 1) // 100003,
    )
    out.case(
        "multi_rank_num_splits_default",
        "num_splits=None means world_size",
        "multi_rank",
        None,
        num_splits=None,
    )


def _valid_keyword_variants(out: _Cases) -> None:
    """Valid variants: callables, error modes, columns and filters, minimal integers, packing ids."""
    out.case(
        "row_all_callables",
        "a callable everywhere a callable is allowed",
        "row",
        None,
        transform=CALLABLE,
        split_strategy=CALLABLE,
        connection_factory=CALLABLE,
        on_transform_error=CALLABLE,
    )
    out.case("row_error_mode_skip", "on_transform_error='skip'", "row", None, on_transform_error="skip")
    out.case("row_error_mode_warn", "on_transform_error='warn'", "row", None, on_transform_error="warn")
    out.case(
        "row_columns_filter_worker_info",
        "columns, a filter and a worker_info override",
        "row",
        None,
        columns=["text", "label"],
        filter="score > 0.5",
        worker_info_override=WorkerInfo(1, 2),
    )
    out.case(
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
    out.case("row_num_splits_equals_rows", "exactly one row per split", "row", None, num_splits=100)
    out.case("row_shuffle_false", "sequential splits", "row", None, shuffle=False)
    out.case(
        "packing_ids_at_int64_limits",
        "eos_id and pad_id may sit at the int64 limits",
        "packing",
        None,
        eos_id=2**63 - 1,
        pad_id=-(2**63),
    )
    out.case("packing_eos_equals_pad", "eos_id == pad_id is allowed", "packing", None, pad_id=2)
    out.case(
        "packing_negative_ids", "eos_id and pad_id may be negative", "packing", None, eos_id=-1, pad_id=-2
    )


def _wrong_types(out: _Cases) -> None:
    """Wrong types: every integer keyword (bools are not ints; None only where allowed), then the others."""
    not_ints: tuple[object, ...] = ("1", 1.5, True)
    for keyword in _INT_KEYWORDS:
        base = "packing" if keyword in ("pack_sequences", "eos_id", "pad_id") else "row"
        for value in not_ints:
            out.bad(base, keyword, value, "an int is required")
        if keyword not in _NULLABLE_INTS:
            out.bad(base, keyword, None, "None is not allowed")
    for keyword, values in _WRONG_TYPES:
        for value in values:
            out.bad("row", keyword, value, "wrong type")


_WRONG_TYPES: tuple[tuple[str, tuple[object, ...]], ...] = (
    ("shuffle", (1, None, "yes")),
    ("split_strategy", (1, "random")),
    ("filter", (1, ["a"])),
    ("transform", (1, "upper")),
    ("connection_factory", ("db",)),
    ("columns", ("text", [1], ["text", None])),
    ("worker_info_override", (1, "worker")),
    ("read_timeout", ("30", True)),
    ("pickle_storage_credentials", ("false", 1)),
)
"""Keywords other than the integer ones, and values of a wrong type for each."""

_ROW_FAULTS: tuple[tuple[str, object], ...] = (
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
    ("read_ahead_bytes", 0),
    ("read_timeout", 0),
    ("read_timeout", -1.5),
    ("worker_info_override", WorkerInfo(2, 2)),
    ("worker_info_override", WorkerInfo(0, 0)),
)
"""Out-of-range or inconsistent values on the row base set."""

_MULTI_RANK_FAULTS: tuple[tuple[str, object], ...] = (
    ("rank", 4),
    ("num_splits", 6),
    ("num_splits", 2),
    ("shuffle_seed", None),
    ("world_size", 5),
    ("shuffle_seed", 2**64),
)
"""Values inconsistent across the ranks of the multi-rank base set."""

_PACKING_FAULTS: tuple[tuple[str, object], ...] = (
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
    ("blocks_per_epoch", 2**63),
    ("read_ahead_bytes", 128),
)
"""Packing requirements broken on the packing base set."""

_AUTO_FAULTS: tuple[tuple[str, object], ...] = (
    ("columns", ["text"]),
    ("eos_id", None),
    ("transform", CALLABLE),
)
"""Packing requirements broken on the ``blocks_per_epoch="auto"`` base set."""


FAMILY = family("params", cases, CODEC)
