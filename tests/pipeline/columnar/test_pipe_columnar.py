"""Columnar batches (``StreamingDataLoader(batch_format=...)``): the rows and checkpoints of row mode.

Expected batches come from the spec's ``run_loader`` over LanceDB's permutation (``id`` values),
and from row mode, whose batches the spec pins elsewhere (tests/pipeline/loader/): a columnar batch
holds the rows row mode collates into the same step, and the checkpoint after ``k`` columnar
batches is the row-mode checkpoint after ``k`` row batches. Worker processes cost seconds, so the
worker test checks several things on one run per format.
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from columnar_harness import run
from hypothesis import given
from loader_runs import loader_runs, resumed_pair

from elastic_loader import LocalShuffle, StreamingDataLoader, StreamingDataset
from elastic_loader.spec import Faults, RowState, RunConfig, Topology, run_loader


def rows_loader(ds: StreamingDataset, **kwargs: Any) -> StreamingDataLoader:
    return StreamingDataLoader(ds, collate_fn=list, **kwargs)


def row_checkpoint(state: RowState, num_splits: int) -> dict[str, Any]:
    return {
        "shuffle_seed": 0,
        "num_splits": num_splits,
        "epoch": 0,
        "samples_consumed_per_split": list(state.samples),
        "positions_consumed_per_split": list(state.positions),
    }


TOPOLOGIES = [
    # (dataset keywords, batch size)
    ({"num_splits": 1}, 7),
    ({"num_splits": 4}, 1),
    ({"num_splits": 4}, 6),
    ({"num_splits": 3}, 64),
    ({"num_splits": 8, "world_size": 4, "rank": 1}, 3),
    ({"num_splits": 6, "world_size": 2, "rank": 1, "filter": "id % 3 != 0"}, 5),
    ({"num_splits": 4, "shuffle": False, "columns": ["id"]}, 9),
    ({"num_splits": 4, "read_batch_size": 1, "io_queue_depth": 1}, 11),
]


@pytest.mark.parametrize(("kwargs", "batch_size"), TOPOLOGIES)
@pytest.mark.parametrize("drop_last", [False, True])
def test_columnar_batches_and_checkpoints_are_row_modes(
    multi_table: Any, kwargs: dict[str, Any], batch_size: int, drop_last: bool, units: str
) -> None:
    rows = rows_loader(StreamingDataset(multi_table, **kwargs), batch_size=batch_size, drop_last=drop_last)
    expected, expected_states = run(rows)
    ds = StreamingDataset(multi_table, **kwargs)
    columnar = StreamingDataLoader(ds, batch_size=batch_size, drop_last=drop_last, batch_format="arrow")
    assert len(columnar) == len(rows)
    got, states = run(columnar)
    assert got == expected
    assert states == expected_states
    assert ds.statistics().rows_delivered == sum(map(len, got))
    again, _ = run(columnar)  # the epoch is finished: the next iteration is epoch 1, as in row mode
    assert again == run(rows)[0]
    assert ds.epoch == 1


def test_columnar_batches_follow_the_spec_from_a_mid_step_state(multi_table: Any, perm_of: Any) -> None:
    """A state whose splits are at different counts: the lagging splits catch up first (D23)."""
    splits = perm_of(multi_table, num_splits=4)
    start = RowState((3, 2, 3, 2), (3, 2, 3, 2))
    config = RunConfig(num_splits=4, shuffle_seed=0, epoch=0)
    perm = tuple(tuple(s) for s in splits)
    model = run_loader(config, perm, Faults(), Topology(1, 0, 0, 0), start, batch_size=3)
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id", "name"])
    ds.load_state_dict(row_checkpoint(start, 4))
    got, _ = run(StreamingDataLoader(ds, batch_size=3, batch_format="numpy"))
    assert got == [[y.row_id for y in d.items] for d in model.deliveries]


@pytest.mark.parametrize("stop", [1, 3, 10])
def test_resume_between_modes(multi_table: Any, stop: int) -> None:
    """A columnar checkpoint resumes row mode and a row-mode checkpoint resumes columnar mode."""
    kwargs: dict[str, Any] = {"num_splits": 4, "shuffle_seed": 5}
    whole, _ = run(rows_loader(StreamingDataset(multi_table, **kwargs), batch_size=6))
    first = StreamingDataLoader(
        StreamingDataset(multi_table, columns=["id"], **kwargs), batch_size=6, batch_format="torch"
    )
    head, states = run(first, stop)
    rows = rows_loader(StreamingDataset(multi_table, **kwargs), batch_size=6)
    rows.load_state_dict(states[-1])
    tail, row_states = run(rows, 2)
    assert head + tail == whole[: stop + 2]
    back = StreamingDataLoader(StreamingDataset(multi_table, **kwargs), batch_size=6, batch_format="arrow")
    back.load_state_dict(row_states[-1])
    rest, _ = run(back)
    assert head + tail + rest == whole


@pytest.mark.parametrize(
    "permutation", [{}, {"permutation": LocalShuffle(clump=4, window=7)}], ids=["builder", "local"]
)
def test_resume_from_a_plain_iteration_mid_cycle(multi_table: Any, permutation: dict[str, Any]) -> None:
    """A dataset checkpoint taken after 5 rows of 4 splits (splits at different counts): the lagging
    splits catch up first and both modes continue with the same batches, over the builder's and a
    local permutation."""
    kwargs: dict[str, Any] = {"num_splits": 4, **permutation}
    ds = StreamingDataset(multi_table, **kwargs)
    it = iter(ds)
    for _ in range(5):
        next(it)
    state = ds.state_dict()
    it.close()
    rows_ds, col_ds = StreamingDataset(multi_table, **kwargs), StreamingDataset(multi_table, **kwargs)
    rows_ds.load_state_dict(state)
    col_ds.load_state_dict(state)
    expected = run(rows_loader(rows_ds, batch_size=4))
    assert run(StreamingDataLoader(col_ds, batch_size=4, batch_format="arrow")) == expected
    assert sum(map(len, expected[0])) == 200 - 5  # every row after the first five, once


def test_formats(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=2)
    first = StreamingDataLoader(ds, batch_size=5, batch_format="arrow")
    arrow = next(iter(first))
    assert isinstance(arrow, pa.RecordBatch) and arrow.schema.names == ["id", "name", "tokens"]
    assert arrow.num_rows == 5
    ds = StreamingDataset(multi_table, num_splits=2)
    arrays = next(iter(StreamingDataLoader(ds, batch_size=5, batch_format="numpy")))
    assert sorted(arrays) == ["id", "name", "tokens"]
    assert arrays["id"].dtype == np.int64 and arrays["id"].tolist() == arrow.column("id").to_pylist()
    assert arrays["name"].tolist() == arrow.column("name").to_pylist()
    arrays["id"][0] = -1  # the trainer owns its arrays
    ds = StreamingDataset(multi_table, num_splits=2, columns=["id"])
    tensors = next(iter(StreamingDataLoader(ds, batch_size=5, batch_format="torch")))
    assert tensors["id"].dtype == torch.int64 and tensors["id"].tolist() == arrow.column("id").to_pylist()


@pytest.mark.parametrize("num_splits", [1, 3])
def test_every_format_holds_the_arrow_batches_values(tmp_path: Any, num_splits: int, units: str) -> None:
    """numpy and torch batches hold what the arrow batch of the same rows holds, also when a batch
    is joined from many reads (``units``: tiny reads) and a column has a null in only some of them
    (a fixed-size list with a null becomes an object array in every batch that holds the null)."""
    import lancedb

    n = 60
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 2, dtype=np.float32)), 2)
    vec_with_null = pa.array([None if i == 17 else [float(i), -float(i)] for i in range(n)], vec.type)
    data = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "x": pa.array(np.linspace(0, 1, n)),
            "ok": [i % 3 == 0 for i in range(n)],
            "vec": vec,
            "holes": vec_with_null,
            "s": [f"r{i}" for i in range(n)],
        }
    )
    table = lancedb.connect(str(tmp_path)).create_table("formats", data)

    def batches(batch_format: str, columns: list[str] | None = None) -> list[Any]:
        ds = StreamingDataset(table, num_splits=num_splits, read_batch_size=1, columns=columns)
        return list(StreamingDataLoader(ds, batch_size=7, batch_format=batch_format))

    arrow = batches("arrow")
    assert sum(b.num_rows for b in arrow) == n
    for batch, arrays in zip(arrow, batches("numpy"), strict=True):
        for name in ("id", "x", "ok", "s"):
            assert arrays[name].tolist() == batch.column(name).to_pylist()
            assert arrays[name].flags.owndata and arrays[name].flags.writeable
        assert arrays["vec"].shape == (batch.num_rows, 2)
        assert arrays["vec"].tolist() == batch.column("vec").to_pylist()
        holes = batch.column("holes").to_pylist()
        if None in holes:
            assert arrays["holes"].dtype == object and arrays["holes"].shape == (batch.num_rows,)
            assert [None if v is None else list(v) for v in arrays["holes"]] == holes
        else:
            assert arrays["holes"].tolist() == holes
    numeric = ["id", "x", "ok", "vec"]
    for batch, tensors in zip(arrow, batches("torch", numeric), strict=True):
        for name in numeric:
            assert tensors[name].tolist() == batch.column(name).to_pylist()


def test_torch_format_fixed_size_lists_and_refused_columns(tmp_path: Any) -> None:
    import lancedb

    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(40, dtype=np.float32)), 4)
    data = pa.table({"id": pa.array(range(10), pa.int64()), "vec": vec, "ok": [True] * 10, "s": ["a"] * 10})
    table = lancedb.connect(str(tmp_path)).create_table("vec", data)
    ds = StreamingDataset(table, num_splits=1, shuffle=False, columns=["id", "vec", "ok"])
    batch = next(iter(StreamingDataLoader(ds, batch_size=3, batch_format="torch")))
    assert batch["vec"].shape == (3, 4) and batch["vec"][1].tolist() == [4.0, 5.0, 6.0, 7.0]
    assert batch["ok"].dtype == torch.bool
    ds = StreamingDataset(table, num_splits=1, shuffle=False)
    with pytest.raises(TypeError, match="'s'"):  # refused when the loader is built
        StreamingDataLoader(ds, batch_size=3, batch_format="torch")
    with_nulls = pa.table({"id": pa.array([0, None, 2], pa.int64())})
    nulls = lancedb.connect(str(tmp_path)).create_table("nulls", with_nulls)
    ds = StreamingDataset(nulls, num_splits=1, shuffle=False)
    loader = StreamingDataLoader(ds, batch_size=3, batch_format="torch")
    with pytest.raises(TypeError, match="nulls"):  # a null is seen in its batch
        next(iter(loader))
    with pytest.raises(RuntimeError, match="batch failed"):  # the failed batch closed the gate
        ds.state_dict()


def test_collate_fn_receives_the_columnar_batch(multi_table: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=2)
    loader = StreamingDataLoader(ds, batch_size=4, batch_format="arrow", collate_fn=lambda b: b.num_rows)
    assert sum(loader) == 200


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"batch_format": "json"}, ValueError, "one of"),
        ({"batch_format": 1}, TypeError, "batch_format"),
        ({"batch_format": "arrow", "batch_size": None}, ValueError, "needs a batch_size"),
        ({"batch_format": "arrow", "batch_size": 0}, ValueError, ">= 1"),
        ({"batch_format": "arrow", "batch_size": 2.0}, TypeError, "int"),
        ({"batch_format": "arrow", "batch_size": True}, TypeError, "int"),
    ],
)
def test_bad_options(multi_table: Any, options: dict[str, Any], error: type, match: str) -> None:
    ds = StreamingDataset(multi_table, num_splits=2)
    with pytest.raises(error, match=match):
        StreamingDataLoader(ds, **options)


def test_datasets_that_do_not_yield_plain_rows_are_refused(multi_table: Any) -> None:
    packed = StreamingDataset(
        multi_table,
        num_splits=2,
        columns=["tokens"],
        pack_sequences=4,
        eos_id=1,
        pad_id=0,
        blocks_per_epoch=4,
    )
    with pytest.raises(ValueError, match="pack_sequences"):  # packed batches: torch or numpy
        StreamingDataLoader(packed, batch_size=2, batch_format="arrow")
    transformed = StreamingDataset(multi_table, num_splits=2, transform=lambda b: b.to_pylist())
    with pytest.raises(ValueError, match="collate_fn"):
        StreamingDataLoader(transformed, batch_size=2, batch_format="arrow")


@pytest.mark.parametrize(("batch_format", "num_splits"), [("arrow", 4), ("torch", 4), ("arrow", 2)])
def test_workers_deliver_row_modes_batches_and_checkpoints(
    multi_table: Any, batch_format: str, num_splits: int
) -> None:
    """Two real DataLoader workers: the same batches in the same order, the same checkpoint after
    each, and a resume mid-epoch from the columnar checkpoint into row mode (one worker run each);
    with two splits each worker owns one (its batches are copied out of its reads' slices)."""
    kwargs: dict[str, Any] = {"num_splits": num_splits, "columns": ["id"]}
    rows = rows_loader(StreamingDataset(multi_table, **kwargs), batch_size=7, num_workers=2)
    expected, expected_states = run(rows)
    columnar = StreamingDataLoader(
        StreamingDataset(multi_table, **kwargs), batch_size=7, num_workers=2, batch_format=batch_format
    )
    got, states = run(columnar)
    assert got == expected and states == expected_states
    resumed = rows_loader(StreamingDataset(multi_table, **kwargs), batch_size=7, num_workers=2)
    resumed.load_state_dict(states[4])
    assert run(resumed)[0] == expected[5:]


@given(loader_runs(max_batch=40, max_skip=30))
def test_random_runs_match_row_mode(multi_table: Any, run_: tuple[dict[str, Any], int, bool, int]) -> None:
    """Random topologies, batch sizes, ``drop_last`` and a resume after a plain iteration of ``skip``
    rows (any state: mid-cycle, lagging splits): the same batches and checkpoints in both modes."""
    kwargs, batch_size, drop_last, skip = run_
    row_ds, col_ds = resumed_pair(lambda: StreamingDataset(multi_table, **kwargs), skip)
    rows = rows_loader(row_ds, batch_size=batch_size, drop_last=drop_last)
    columnar = StreamingDataLoader(col_ds, batch_size=batch_size, drop_last=drop_last, batch_format="numpy")
    assert len(columnar) == len(rows)
    assert run(columnar) == run(rows)


@pytest.mark.parametrize(
    ("skip", "batch_size", "num_splits"), [(0, 2, 4), (2, 1, 4), (0, 2, 1), (0, 3000, 1)]
)
def test_arrow_batches_own_their_buffers(big_table: Any, skip: int, batch_size: int, num_splits: int) -> None:
    """A batch is pickled to the parent from a worker: it must not carry the rows around it (a slice
    of a gathered chunk or of a read unit pickles its whole buffer). Catch-up rows too (``skip``);
    one split (no interleaving ``take``: its batches are copied out of the read's slices), batches
    spanning chunks too (3000 rows)."""
    ds = StreamingDataset(big_table, num_splits=num_splits, read_batch_size=1024)
    it = iter(ds)
    for _ in range(skip):
        next(it)
    state = ds.state_dict()
    it.close()
    ds.load_state_dict(state)
    loader = StreamingDataLoader(ds, batch_size=batch_size, batch_format="arrow")
    for batch in itertools.islice(loader, 6):
        assert batch.num_rows == batch_size
        # an int64 id or two and the schema (3000 rows: their ids), not thousands of rows around them
        assert len(pickle.dumps(batch)) < (2_000 if batch_size <= 2 else 2_000 + 8 * batch_size)
