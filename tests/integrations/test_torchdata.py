"""torchdata 0.11 ``StatefulDataLoader(StreamingDataset)``: exact resume with 0 and 2 workers; a
state saved with 2 workers is refused, with a message that says why and what to do, when the loader
resumes with 3 (torchdata restores each worker from its own snapshot and asserts the same
num_workers; the refusal comes from the worker-level load, before torchdata's bare assertion).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import lancedb
import pyarrow as pa
import pytest

pytest.importorskip("torchdata")

from torchdata.stateful_dataloader import StatefulDataLoader

from elastic_loader import StreamingDataset

ROWS = 96
OPTS: dict[str, Any] = {"num_splits": 6, "columns": ["id"]}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    data = pa.table({"id": pa.array(range(ROWS), pa.int64())})
    return lancedb.connect(str(tmp_path_factory.mktemp("torchdata"))).create_table("t", data)


def loader(table: Any, num_workers: int) -> StatefulDataLoader:
    context = "forkserver" if num_workers else None
    dataset = StreamingDataset(table, **OPTS)
    return StatefulDataLoader(dataset, batch_size=5, num_workers=num_workers, multiprocessing_context=context)


def ids(batch: Any) -> list[int]:
    return [int(v) for v in batch["id"].tolist()]


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_is_exact(table: Any, num_workers: int) -> None:
    whole = [ids(b) for b in loader(table, num_workers)]
    assert sorted(r for b in whole for r in b) == list(range(ROWS))
    first = loader(table, num_workers)
    it = iter(first)
    head = [ids(next(it)) for _ in range(7)]
    state = first.state_dict()
    del it
    _shut_down_workers(first)
    resumed = loader(table, num_workers)
    resumed.load_state_dict(state)
    assert head + [ids(b) for b in resumed] == whole
    if num_workers:  # one worker's own snapshot holds its splits only: refused elsewhere
        snapshot = state["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
        with pytest.raises(ValueError, match="cannot resume the main process"):
            StreamingDataset(table, **OPTS).load_state_dict(snapshot)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_two_workers_to_three_is_refused_clearly(table: Any) -> None:
    first = loader(table, 2)
    it = iter(first)
    for _ in range(7):
        next(it)
    state = first.state_dict()
    del it
    resumed = loader(table, 3)
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match=r"DataLoader worker \d of 2 .* cannot resume worker \d of 3") as err:
        next(iter(resumed))
    assert "num_workers=2" in str(err.value) and "StreamingDataLoader" in str(err.value)
    _shut_down_workers_of_the_failed_iterator(err.tb)
    _shut_down_workers(first)


def _shut_down_workers_of_the_failed_iterator(tb: TracebackType | None) -> None:
    """torchdata raises the worker's error from the iterator's ``__init__``, so only the traceback
    holds the half-built iterator; shut its workers down here, not in a later garbage collection."""
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("self")
        if hasattr(candidate, "_shutdown_workers"):
            candidate._shutdown_workers()
            return
        tb = tb.tb_next
    raise AssertionError("the failed iterator was not found in the traceback")


def _shut_down_workers(loader: StatefulDataLoader) -> None:
    """Stop the workers of a loader left mid-epoch (the loader keeps its iterator). Left to the
    garbage collector, its ``__del__`` waited on them for 10-20 s inside whichever later test
    triggered the collection (measured: ``tests/meta/test_bench_quality.py``, 25 s instead of 0.1 s)."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
