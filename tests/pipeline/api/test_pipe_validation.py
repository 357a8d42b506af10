"""Constructor validation (D3, D4, D20, B3, B4, B22): every bad parameter fails at construction.

Each case names the exception class spec/REFERENCE.md or spec/DEVIATIONS.md documents; the spec's
``validate_params`` must agree on the class, and the real constructor must raise
it without iterating.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from elastic_loader import StreamingDataset
from elastic_loader.spec import params as spec_params
from elastic_loader.spec.errors import SpecError

COLUMN_KINDS: dict[str, spec_params.ColumnKind] = {"id": "scalar", "name": "scalar", "tokens": "int_list"}
PACK = {"pack_sequences": 8, "eos_id": 1, "pad_id": 0, "blocks_per_epoch": 8, "columns": ["tokens"]}


def spec_error(table: Any, kwargs: dict[str, Any]) -> type[Exception] | None:
    """The builtin exception class the spec's validator raises for ``kwargs`` (None: accepted)."""
    flt = kwargs.get("filter")
    rows = int(table.count_rows(flt) if isinstance(flt, str) else table.count_rows())
    facts = spec_params.TableFacts(COLUMN_KINDS, rows)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec_params.validate_params(spec_params.Params(**kwargs), facts)
    except SpecError as exc:
        return TypeError if isinstance(exc, TypeError) else ValueError
    return None


BAD = [
    # (kwargs, documented class)
    ({"read_batch_size": 0}, ValueError),  # B3: the reference hangs
    ({"read_batch_size": -4}, ValueError),
    ({"world_size": 2, "rank": 2}, ValueError),  # B4
    ({"world_size": 2, "rank": 7}, ValueError),
    ({"rank": -1}, ValueError),
    ({"world_size": 0}, ValueError),
    ({"num_splits": 0}, ValueError),
    ({"num_splits": -2}, ValueError),
    ({"num_splits": 201}, ValueError),  # more splits than the 200 rows
    ({"num_splits": 10, "filter": "id < 9"}, ValueError),  # more splits than filtered rows
    ({"num_splits": 3, "world_size": 2}, ValueError),
    ({"epoch": -1}, ValueError),
    ({"rank": True}, TypeError),  # bools are not ints
    ({"num_splits": True}, TypeError),
    ({"read_batch_size": False}, TypeError),
    ({"world_size": 2.0}, TypeError),
    ({"shuffle_seed": "7"}, TypeError),
    ({"io_queue_depth": 0}, ValueError),
    ({"transform_parallelism": 0}, ValueError),
    ({"transform_queue_depth": 0}, ValueError),
    ({"shuffle_clump_size": 0}, ValueError),
    ({"shuffle": 1}, TypeError),
    ({"filter": 3}, TypeError),
    ({"transform": "to_pylist"}, TypeError),
    ({"columns": "id"}, TypeError),
    ({"columns": ["id", 3]}, TypeError),
    ({"columns": []}, ValueError),
    ({"columns": ["id", "id"]}, ValueError),
    ({"columns": ["id", "nope"]}, ValueError),  # the reference fails only when iterating
    ({"on_transform_error": "ignore"}, ValueError),
    ({"worker_info_override": object()}, TypeError),
    ({"shuffle_seed": None, "world_size": 2, "num_splits": 2}, ValueError),  # D4
    ({"shuffle_seed": -1}, ValueError),
    ({"shuffle_seed": 2**64}, ValueError),
    ({"shuffle_seed": 2**64 - 100003, "epoch": 1}, ValueError),  # seed + epoch * prime overflows
    ({"blocks_per_epoch": 8}, ValueError),  # without packing
    ({**PACK, "pack_sequences": True}, TypeError),  # B22: the reference treats True as 1
    ({**PACK, "pack_sequences": 0}, ValueError),
    ({**PACK, "eos_id": 2**63}, ValueError),
    ({**PACK, "pad_id": -(2**63) - 1}, ValueError),
    ({**PACK, "eos_id": 1.0}, TypeError),
    ({**PACK, "eos_id": None}, ValueError),
    ({**PACK, "pad_id": None}, ValueError),
    ({**PACK, "blocks_per_epoch": None}, ValueError),
    ({**PACK, "blocks_per_epoch": 2.0}, ValueError),
    ({**PACK, "blocks_per_epoch": "AUTO"}, ValueError),
    ({**PACK, "blocks_per_epoch": True}, ValueError),
    ({**PACK, "blocks_per_epoch": 0}, ValueError),
    ({**PACK, "num_splits": 3, "blocks_per_epoch": 8}, ValueError),
    ({**PACK, "transform": list}, ValueError),
    ({**PACK, "columns": ["tokens", "id"]}, ValueError),
    ({**PACK, "columns": None}, ValueError),
    ({**PACK, "columns": ["missing"]}, ValueError),  # the reference raises KeyError
    ({**PACK, "columns": ["id"]}, ValueError),
    ({**PACK, "columns": ["name"]}, ValueError),
    ({"prefetch_batches": 0}, ValueError),  # overrides io_queue_depth=4
    ({"prefetch_batches": True}, TypeError),
    # types are checked before values
    ({"read_batch_size": 0, "rank": True}, TypeError),
    ({"num_splits": 0, "columns": "id"}, TypeError),
]


@pytest.mark.parametrize(("kwargs", "error"), BAD, ids=[repr(k) for k, _ in BAD])
def test_bad_parameter_fails_at_construction(
    multi_table: Any, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    assert spec_error(multi_table, kwargs) is error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(error):
            StreamingDataset(multi_table, **kwargs)


GOOD = [
    {"num_splits": 200},
    {"num_splits": 9, "filter": "id < 9"},
    {"world_size": 4, "rank": 3},
    {**PACK, "eos_id": 2**63 - 1, "pad_id": -(2**63)},
    {**PACK, "blocks_per_epoch": 8, "num_splits": 4},
    {"shuffle_seed": 2**64 - 1},
    {"shuffle_seed": 2**64 - 1 - 100003, "epoch": 1},
    {"columns": ("id",)},
]


@pytest.mark.parametrize("kwargs", GOOD, ids=[repr(k) for k in GOOD])
def test_boundary_values_are_accepted(multi_table: Any, kwargs: dict[str, Any]) -> None:
    assert spec_error(multi_table, kwargs) is None
    StreamingDataset(multi_table, **kwargs)


def test_prefetch_batches_warns_and_overrides_io_queue_depth(multi_table: Any) -> None:
    with pytest.warns(DeprecationWarning, match="prefetch_batches"):
        # io_queue_depth=0 alone is rejected; prefetch_batches replaces it
        ds = StreamingDataset(multi_table, num_splits=2, prefetch_batches=2, io_queue_depth=0)
    assert [row["id"] for row in ds] == [row["id"] for row in StreamingDataset(multi_table, num_splits=2)]
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="io_queue_depth"):
        StreamingDataset(multi_table, prefetch_batches=0, io_queue_depth=4)


def test_no_deprecation_warning_without_prefetch_batches(multi_table: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        StreamingDataset(multi_table, num_splits=2, io_queue_depth=3)


def test_shuffle_seed_none_draws_one_seed_on_one_rank(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=2, shuffle_seed=None)
    seed = ds.state_dict()["shuffle_seed"]
    assert isinstance(seed, int) and 0 <= seed < 2**32
    assert seed == ds.shuffle_seed
    again = StreamingDataset(multi_table, num_splits=2, shuffle_seed=seed)
    assert list(again) == list(ds)


def test_split_strategy_with_wrong_split_ids_is_rejected(multi_table: Any) -> None:
    with pytest.raises(ValueError, match="split"):
        StreamingDataset(multi_table, num_splits=4, split_strategy=lambda b: b.split_random(fixed=3, seed=1))
    with pytest.raises(ValueError, match="unequal"):
        StreamingDataset(
            multi_table,
            num_splits=3,
            split_strategy=lambda b: b.split_random(ratios=[0.5, 0.25, 0.25], seed=1),
        )
