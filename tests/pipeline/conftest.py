"""Fixtures of the pipeline behaviour suite: real LanceDB tables, built once per session.

Every table has an ``id`` column (int64, unique, ``0..rows-1`` in storage order),
a ``name`` string column (``"row-<id>"``) and a ``tokens`` column
(``list<int64>``, :func:`document_tokens` of the id). Tables made of several
appends have several fragments, so LanceDB row ids differ from storage offsets.

Expected values in the tests come from ``lancedb.streaming`` (the reference),
from LanceDB's permutation builder read directly (:func:`split_ids`), or from
the executable spec (``elastic_loader.spec``); never from the implementation
under test.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest
from lancedb.permutation import permutation_builder

from elastic_loader._pipeline import _columnar, _fetch, _packing, _rows
from elastic_loader.spec.packing import PackBuffer, PackedState

TOKEN_BASE = 1000
MULTI_FRAGMENTS = (50, 30, 60, 20, 40)  # rows per append: 200 rows in 5 fragments
NULL_LISTS = frozenset({7, 22, 41})  # ids whose token list is null in the null table
NULL_INSIDE = frozenset({33})  # ids whose token list holds a null value in the null table


def document_tokens(row_id: int) -> list[int]:
    """The token list of ``row_id``: 0 to 5 tokens, all ``>= TOKEN_BASE`` (empty documents occur)."""
    return [TOKEN_BASE + 8 * row_id + j for j in range((row_id * 5 + 2) % 6)]


def _chunk(
    ids: Sequence[int], tokens: Callable[[int], list[int | None] | None] = document_tokens
) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "name": pa.array([f"row-{i}" for i in ids], pa.string()),
            "tokens": pa.array([tokens(i) for i in ids], pa.list_(pa.int64())),
        }
    )


def _build(db: Any, name: str, sizes: Sequence[int], tokens: Callable[[int], Any] = document_tokens) -> Any:
    bounds = [0, *itertools.accumulate(sizes)]
    table = db.create_table(name, _chunk(range(bounds[0], bounds[1]), tokens), mode="overwrite")
    for lo, hi in itertools.pairwise(bounds[1:]):
        table.add(_chunk(range(lo, hi), tokens))
    return table


def _null_tokens(row_id: int) -> list[int | None] | None:
    if row_id in NULL_LISTS:
        return None
    tokens: list[int | None] = list(document_tokens(row_id))
    if row_id in NULL_INSIDE:
        tokens = [TOKEN_BASE, None, TOKEN_BASE + 1]
    return tokens


@pytest.fixture(scope="session")
def tables_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The LanceDB database directory of the session's tables."""
    return tmp_path_factory.mktemp("pipe_tables")


@pytest.fixture(scope="session")
def multi_table(tables_dir: Path) -> Any:
    """200 rows in 5 fragments of uneven sizes (one append each)."""
    return _build(lancedb.connect(str(tables_dir)), "multi", MULTI_FRAGMENTS)


@pytest.fixture(scope="session")
def small_table(tables_dir: Path) -> Any:
    """24 rows in 2 fragments: small enough to resume at every prefix."""
    return _build(lancedb.connect(str(tables_dir)), "small", (10, 14))


@pytest.fixture(scope="session")
def null_table(tables_dir: Path) -> Any:
    """60 rows in 2 fragments; ``NULL_LISTS`` ids have a null token list, ``NULL_INSIDE`` ids a null token."""
    return _build(lancedb.connect(str(tables_dir)), "nulls", (30, 30), _null_tokens)


@pytest.fixture(scope="session")
def memory_table() -> Any:
    """A ``memory://`` table of 90 rows in one fragment (the reference cannot read several)."""
    return _build(lancedb.connect("memory://"), "mem", (90,))


@pytest.fixture(scope="session")
def memory_multi_table() -> Any:
    """A ``memory://`` table: 120 rows in 3 appends."""
    return _build(lancedb.connect("memory://"), "mem_multi", (40, 50, 30))


@pytest.fixture(scope="session")
def big_table(tables_dir: Path) -> Any:
    """20,000 rows of one int64 ``id`` column: an embedded permutation (160 kB of row ids) would show."""
    data = pa.table({"id": pa.array(range(20_000), pa.int64())})
    return lancedb.connect(str(tables_dir)).create_table("big", data, mode="overwrite")


def split_ids(
    table: Any,
    *,
    num_splits: int,
    shuffle_seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    filter: str | None = None,
    strategy: Callable[[Any], Any] | None = None,
) -> list[list[int]]:
    """The ``id`` values of every split in read order, from LanceDB's permutation builder directly."""
    builder = permutation_builder(table)
    if filter is not None:
        builder = builder.filter(filter)
    if strategy is not None:
        builder = strategy(builder)
    elif shuffle:
        builder = builder.split_random(fixed=num_splits, seed=shuffle_seed + epoch * 100003)
    else:
        builder = builder.split_sequential(fixed=num_splits)
    perm = builder.execute().to_arrow()
    row_ids = perm.column("row_id").to_pylist()
    splits = perm.column("split_id").to_pylist()
    scan = table.search().with_row_id(True).select(["id"]).limit(None).to_arrow()
    id_of = dict(zip(scan.column("_rowid").to_pylist(), scan.column("id").to_pylist()))
    ids = [id_of[r] for r in row_ids]
    out: list[list[int]] = [[] for _ in range(num_splits)]
    for split, value in zip(splits, ids):
        out[split].append(value)
    return out


@pytest.fixture(scope="session")
def perm_of() -> Callable[..., list[list[int]]]:
    """:func:`split_ids` as a fixture (conftest modules are not imported by tests)."""
    return split_ids


@pytest.fixture(scope="session")
def tokens_of() -> Callable[[int], list[int]]:
    """:func:`document_tokens` as a fixture."""
    return document_tokens


def spec_packed_state(checkpoint: dict[str, Any]) -> PackedState:
    """A packed checkpoint as the spec's state; every buffer kept, so a stray empty one shows."""
    return PackedState(
        tuple(checkpoint["samples_consumed_per_split"]),
        tuple(checkpoint["blocks_emitted_per_split"]),
        {
            int(k): PackBuffer(tuple(v["tokens"]), tuple(v["starts"]))
            for k, v in checkpoint["pack_buffers"].items()
        },
    )


@pytest.fixture(scope="session")
def packed_state_of() -> Callable[[dict[str, Any]], PackedState]:
    """:func:`spec_packed_state` as a fixture."""
    return spec_packed_state


@pytest.fixture(params=["default", "tiny"])
def units(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``tiny``: reads of at most 8 rows and chunks of one or two cycles, so that an epoch of the
    small test tables crosses many unit and chunk boundaries (by default it is one of each)."""
    if request.param == "tiny":
        monkeypatch.setattr(_fetch, "FIRST_UNIT_ROWS", 1)
        monkeypatch.setattr(_fetch, "MAX_UNIT_ROWS", 8)
        monkeypatch.setattr(_columnar, "MAX_UNIT_ROWS", 8)
        monkeypatch.setattr(_packing, "MAX_CHUNK_CYCLES", 1)
        monkeypatch.setattr(_rows, "MAX_CHUNK_CYCLES", 2)
    return str(request.param)
