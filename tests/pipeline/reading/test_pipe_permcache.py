"""The builder permutation's on-disk cache (``ELASTIC_LOADER_PERM_CACHE``): exact hits, misses on any
other key, atomic and damage-tolerant files.

Expected orders come from LanceDB's permutation builder read directly (``perm_of``) or from an
uncached dataset; builds are counted by wrapping the builder the epoch calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from elastic_loader import StreamingDataset
from elastic_loader._pipeline import _epoch


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """Turn the cache on in a fresh directory; count the permutation builds."""
    monkeypatch.setenv("ELASTIC_LOADER_PERM_CACHE", str(tmp_path / "cache"))
    count: list[int] = []
    real = _epoch.build_permutation

    def counting(*args: Any, **kwargs: Any) -> Any:
        count.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_epoch, "build_permutation", counting)
    return count


def ids(ds: StreamingDataset) -> list[int]:
    return [int(row["id"]) for row in ds]


def test_a_hit_is_bit_identical_and_skips_the_build(
    multi_table: Any, builds: list[int], perm_of: Any
) -> None:
    first = StreamingDataset(multi_table, num_splits=4, shuffle_seed=3, columns=["id"])
    assert len(builds) == 1
    again = StreamingDataset(multi_table, num_splits=4, shuffle_seed=3, columns=["id"])
    assert len(builds) == 1  # read from the cache
    assert np.array_equal(np.asarray(again._perm.rows), np.asarray(first._perm.rows))
    assert again._perm.base_version == first._perm.base_version
    assert again.state_dict() == first.state_dict()
    expected = perm_of(multi_table, num_splits=4, shuffle_seed=3)
    assert ids(again) == ids(first) == [r for cycle in zip(*expected) for r in cycle]


@pytest.mark.parametrize(
    "change",
    [
        {"shuffle_seed": 4},
        {"epoch": 1},
        {"num_splits": 2},
        {"filter": "id > 10"},
        {"shuffle": False},
        {"shuffle_clump_size": 4},
    ],
    ids=str,
)
def test_any_other_key_misses(
    multi_table: Any, builds: list[int], perm_of: Any, change: dict[str, Any]
) -> None:
    base: dict[str, Any] = {"num_splits": 4, "shuffle_seed": 3, "columns": ["id"]}
    StreamingDataset(multi_table, **base)
    other = StreamingDataset(multi_table, **{**base, **change})
    assert len(builds) == 2
    uncached = {k: v for k, v in {**base, **change}.items() if k != "shuffle_clump_size"}
    if "shuffle_clump_size" not in change:
        split_args = {
            k: v
            for k, v in uncached.items()
            if k in ("num_splits", "shuffle_seed", "epoch", "shuffle", "filter")
        }
        expected = perm_of(multi_table, **split_args)
        assert ids(other) == [r for cycle in zip(*expected) for r in cycle]
    StreamingDataset(multi_table, **{**base, **change})
    assert len(builds) == 2  # and that key hits next time


def test_set_epoch_and_a_resume_read_the_cache(multi_table: Any, builds: list[int]) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    ds.set_epoch(1)
    it = iter(ds)
    head = [int(next(it)["id"]) for _ in range(9)]
    state = ds.state_dict()
    it.close()
    assert len(builds) == 2
    resumed = StreamingDataset(multi_table, num_splits=4, columns=["id"], epoch=1)
    resumed.load_state_dict(state)
    assert len(builds) == 2
    fresh = StreamingDataset(multi_table, num_splits=4, columns=["id"], epoch=1)
    assert head + ids(resumed) == ids(fresh)


def test_a_new_table_version_or_a_recreated_table_misses(tmp_path: Path, builds: list[int]) -> None:
    db = lancedb.connect(str(tmp_path / "db"))
    table = db.create_table("t", pa.table({"id": pa.array(range(40), pa.int64())}))
    before = ids(StreamingDataset(table, num_splits=2))
    table.add(pa.table({"id": pa.array(range(40, 60), pa.int64())}))
    grown = StreamingDataset(table, num_splits=2)
    assert len(builds) == 2 and grown.split_size == 30
    # dropped and re-created at the same path: the same version number, other rows
    db.drop_table("t")
    again = db.create_table("t", pa.table({"id": pa.array(range(100, 140), pa.int64())}))
    recreated = ids(StreamingDataset(again, num_splits=2))
    assert len(builds) == 3
    assert sorted(recreated) == list(range(100, 140)) and sorted(before) == list(range(40))


def test_a_damaged_file_is_rebuilt(multi_table: Any, builds: list[int], tmp_path: Path) -> None:
    first = ids(StreamingDataset(multi_table, num_splits=4, columns=["id"]))
    (path,) = (tmp_path / "cache").glob("*.npy")
    path.write_bytes(path.read_bytes()[:100])  # truncated
    assert ids(StreamingDataset(multi_table, num_splits=4, columns=["id"])) == first
    assert len(builds) == 2
    np.save(path, np.zeros((3, 5), dtype=np.uint64))  # the wrong shape
    assert ids(StreamingDataset(multi_table, num_splits=4, columns=["id"])) == first
    assert len(builds) == 3
    assert not list((tmp_path / "cache").glob("*.tmp"))  # atomic writes leave no temporary file


def test_no_cache_without_the_variable_or_for_a_strategy(
    multi_table: Any, builds: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    StreamingDataset(multi_table, num_splits=2, split_strategy=lambda b: b.split_random(fixed=2, seed=1))
    StreamingDataset(multi_table, num_splits=2, split_strategy=lambda b: b.split_random(fixed=2, seed=2))
    assert len(builds) == 2 and not list((tmp_path / "cache").glob("*.npy"))
    monkeypatch.delenv("ELASTIC_LOADER_PERM_CACHE")
    StreamingDataset(multi_table, num_splits=2)
    StreamingDataset(multi_table, num_splits=2)
    assert len(builds) == 4


def test_a_memory_table_is_not_cached(memory_table: Any, builds: list[int], tmp_path: Path) -> None:
    StreamingDataset(memory_table, num_splits=2)
    StreamingDataset(memory_table, num_splits=2)
    assert len(builds) == 2 and not (tmp_path / "cache").exists()
