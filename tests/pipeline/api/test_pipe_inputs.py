"""Typed errors for every input (issue 13, D42, D43): no constructor value reaches an OverflowError,
MemoryError or AttributeError, and the pipeline's validator agrees with the spec's on every one.

Each value below once escaped validation: it failed later with an untyped error, was silently
truncated, or (``pickle_storage_credentials="false"``) was taken for true.
"""

from __future__ import annotations

import math
import pickle
import warnings
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from elastic_loader import StreamingDataLoader, StreamingDataset
from elastic_loader.spec import params as spec_params
from elastic_loader.spec.errors import SpecError

COLUMN_KINDS: dict[str, spec_params.ColumnKind] = {"id": "scalar", "name": "scalar", "tokens": "int_list"}
PACK = {"pack_sequences": 8, "eos_id": 1, "pad_id": 0, "blocks_per_epoch": 8, "columns": ["tokens"]}


@dataclass(frozen=True)
class Info:
    id: object
    num_workers: object


def ids(batch: pa.RecordBatch) -> list[int]:
    return batch.column("id").to_pylist()


def spec_class(rows: int, kwargs: dict[str, Any]) -> type[Exception] | None:
    """The builtin class the spec's ``validate_params`` raises (``None``: accepted)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            facts = spec_params.TableFacts(COLUMN_KINDS, rows)
            spec_params.validate_params(spec_params.Params(**kwargs), facts)
    except SpecError as exc:
        return TypeError if isinstance(exc, TypeError) else ValueError
    return None


EDGES: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"shuffle_clump_size": 2**64}, ValueError),  # LanceDB: OverflowError
    ({"shuffle_clump_size": 2**63}, ValueError),
    ({**PACK, "pack_sequences": 2**63}, ValueError),  # NumPy: OverflowError
    ({**PACK, "pack_sequences": 2**31}, ValueError),  # a 16 GiB block per split: MemoryError
    ({**PACK, "pack_sequences": 2**24 + 1}, ValueError),  # just over the default budget
    ({**PACK, "read_ahead_bytes": 127}, ValueError),  # a block of 8 tokens takes 128 bytes
    ({**PACK, "blocks_per_epoch": 2**63}, ValueError),
    ({"read_batch_size": 2**63, "transform": ids}, ValueError),  # Arrow: OverflowError
    ({"transform_queue_depth": 2**63}, ValueError),
    ({"io_queue_depth": 1025}, ValueError),  # threads
    ({"io_queue_depth": 2**63}, ValueError),
    ({"prefetch_batches": 2**40}, ValueError),
    ({"transform_parallelism": 1025}, ValueError),
    ({"world_size": 2**63, "num_splits": None}, ValueError),
    ({"epoch": 2**64}, ValueError),
    ({"read_ahead_bytes": 0}, ValueError),
    ({"read_ahead_bytes": 2**63}, ValueError),
    ({"read_ahead_bytes": 1.5}, TypeError),
    ({"read_ahead_bytes": True}, TypeError),
    ({"read_timeout": 0}, ValueError),
    ({"read_timeout": -1}, ValueError),
    ({"read_timeout": math.nan}, ValueError),
    ({"read_timeout": 10**10}, ValueError),
    ({"read_timeout": True}, TypeError),
    ({"read_timeout": "30"}, TypeError),
    ({"worker_info_override": Info(1.5, 2)}, TypeError),  # was truncated to worker 1
    ({"worker_info_override": Info(0, 2.0)}, TypeError),
    ({"worker_info_override": Info(True, 2)}, TypeError),
    ({"worker_info_override": Info(2, 2)}, ValueError),
    ({"worker_info_override": Info(-1, 2)}, ValueError),
    ({"worker_info_override": Info(0, 0)}, ValueError),
    ({"pickle_storage_credentials": "false"}, TypeError),  # was pickled: any truthy value counted
    ({"pickle_storage_credentials": "no"}, TypeError),
    ({"pickle_storage_credentials": "0"}, TypeError),
    ({"pickle_storage_credentials": 0}, TypeError),
    ({"pickle_storage_credentials": 1}, TypeError),
]


# one edge passes the old name prefetch_batches, which warns that it is deprecated
@pytest.mark.filterwarnings("ignore:prefetch_batches is deprecated:DeprecationWarning")
@pytest.mark.parametrize(("kwargs", "expected"), EDGES, ids=[repr(k) for k, _ in EDGES])
def test_edge_values_fail_at_construction_with_the_spec_class(
    multi_table: Any, kwargs: dict[str, Any], expected: type[Exception]
) -> None:
    kwargs = {"num_splits": 4, **kwargs}
    assert spec_class(200, kwargs) is expected
    with pytest.raises(expected) as info:
        StreamingDataset(multi_table, **kwargs)
    assert type(info.value) is expected  # not a subclass such as OverflowError


BOUNDARIES: list[dict[str, Any]] = [
    {"shuffle_clump_size": 2**63 - 1},
    {"read_batch_size": 2**63 - 1, "transform": ids},
    {"transform_queue_depth": 2**63 - 1},
    {"io_queue_depth": 1024},
    {"transform_parallelism": 1024},
    {"read_ahead_bytes": 1},
    {"read_ahead_bytes": 2**63 - 1},
    {"read_timeout": 10**9},
    {"read_timeout": math.inf},
    {"read_timeout": 0.5},
    {**PACK, "read_ahead_bytes": 128},
    {"worker_info_override": Info(1, 2)},
    {"pickle_storage_credentials": True},
    {"pickle_storage_credentials": False},
]


@pytest.mark.parametrize("kwargs", BOUNDARIES, ids=[repr(k) for k in BOUNDARIES])
def test_boundary_values_are_accepted_and_iterate(multi_table: Any, kwargs: dict[str, Any]) -> None:
    kwargs = {"num_splits": 4, **kwargs}
    assert spec_class(200, kwargs) is None
    ds = StreamingDataset(multi_table, **kwargs)
    expected = len(ds) // (2 if "worker_info_override" in kwargs else 1)
    if "pack_sequences" not in kwargs:
        assert sum(1 for _ in ds) == expected


def test_a_pyarrow_table_is_not_a_table(multi_table: Any) -> None:
    arrow = multi_table.to_arrow()
    with pytest.raises(TypeError, match="LanceDB table"):
        StreamingDataset(arrow, num_splits=4)
    with pytest.raises(TypeError, match="LanceDB table"):
        StreamingDataset(None, num_splits=4)


@pytest.mark.parametrize("result", [1, "builder", object()])
def test_split_strategy_returning_a_non_builder_is_a_type_error(multi_table: Any, result: object) -> None:
    with pytest.raises(TypeError, match="permutation builder"):
        StreamingDataset(multi_table, num_splits=4, split_strategy=lambda builder: result)


@pytest.mark.parametrize("value", [1, 0, "yes", 1.0, object()])
def test_sync_epoch_end_must_be_a_bool_or_a_group(multi_table: Any, value: object) -> None:
    ds = StreamingDataset(multi_table, num_splits=4)
    with pytest.raises(TypeError, match="sync_epoch_end"):
        StreamingDataLoader(ds, batch_size=4, sync_epoch_end=value)
    for fine in (True, False, None):
        StreamingDataLoader(ds, batch_size=4, sync_epoch_end=fine)


def test_only_true_pickles_storage_credentials(monkeypatch: pytest.MonkeyPatch, multi_table: Any) -> None:
    """``pickle_storage_credentials=True`` keeps secret storage options; False and None drop them."""
    secret = "aws-secret-elastic-loader-hardening"
    conn = multi_table._conn
    options = {"aws_secret_access_key": secret, "region": "x"}
    monkeypatch.setattr(conn, "storage_options", options, raising=False)
    kept = pickle.dumps(StreamingDataset(multi_table, num_splits=4, pickle_storage_credentials=True))
    assert secret.encode() in kept
    for value in (False, None):
        dropped = pickle.dumps(StreamingDataset(multi_table, num_splits=4, pickle_storage_credentials=value))
        assert secret.encode() not in dropped and b"region" in dropped


def test_every_fuzzed_kwarg_set_agrees_with_the_spec_class(multi_table: Any) -> None:
    """A sweep of hostile values for every keyword: the same class as the spec, never another one."""
    hostile: tuple[object, ...] = (
        -1,
        0,
        2**31,
        2**63,
        2**64,
        1.5,
        math.inf,
        math.nan,
        "1",
        True,
        None,
        [],
        object(),
    )
    names = [f.name for f in spec_params.Params.__dataclass_fields__.values()]
    for name in names:
        for value in hostile:
            for base in ({}, PACK):
                kwargs = {"num_splits": 4, **base, name: value}
                expected = spec_class(200, kwargs)
                if expected is None:
                    continue  # accepted: iteration of accepted sets is the fuzz suite's (tests/fuzz)
                with pytest.raises(expected) as info, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    StreamingDataset(multi_table, **kwargs)
                assert type(info.value) is expected, (name, value, info.value)
