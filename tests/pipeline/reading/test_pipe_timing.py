"""Seeded timing injection: the same seed gives the same delays, and no delays change the output."""

from __future__ import annotations

import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_loader import StreamingDataLoader, StreamingDataset
from elastic_loader.testing.timing import SeededDelays, inject_timing


def test_same_seed_same_delays() -> None:
    a, b = SeededDelays(3), SeededDelays(3)
    delays = [a.delay(stage, unit) for stage in ("read", "transform") for unit in range(50)]
    assert delays == [b.delay(stage, unit) for stage in ("read", "transform") for unit in range(50)]
    assert any(d > 0 for d in delays) and any(d == 0 for d in delays)
    assert delays != [SeededDelays(4).delay(s, u) for s in ("read", "transform") for u in range(50)]
    assert pickle.loads(pickle.dumps(a)) == a


def test_inject_timing_only_where_supported(multi_table: Any) -> None:
    from lancedb.streaming import StreamingDataset as Reference

    ours = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    assert inject_timing(ours, SeededDelays(1)) is True
    assert ours._timing_hook == SeededDelays(1)
    assert inject_timing(Reference(multi_table, num_splits=4, columns=["id"]), SeededDelays(1)) is False


@settings(max_examples=8)
@given(seed=st.integers(0, 2**16), take=st.integers(0, 200), depth=st.integers(1, 4))
def test_delays_never_change_rows_or_checkpoints(multi_table: Any, seed: int, take: int, depth: int) -> None:
    options: dict[str, Any] = {
        "num_splits": 4,
        "columns": ["id"],
        "io_queue_depth": depth,
        "read_batch_size": 7,
    }
    expected = [row["id"] for row in StreamingDataset(multi_table, **options)]
    shaken = StreamingDataset(multi_table, **options)
    inject_timing(shaken, SeededDelays(seed, max_delay=0.003, probability=0.7))
    iterator = iter(shaken)
    got = [next(iterator)["id"] for _ in range(take)]
    state = shaken.state_dict()
    del iterator
    assert got == expected[:take]
    resumed = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    resumed.load_state_dict(state)
    assert got + [row["id"] for row in resumed] == expected


def test_delays_reach_worker_processes(multi_table: Any) -> None:
    plain = [row["id"] for row in StreamingDataset(multi_table, num_splits=4, columns=["id"])]
    shaken = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    inject_timing(shaken, SeededDelays(11, max_delay=0.003))
    loader = StreamingDataLoader(shaken, batch_size=10, num_workers=2)
    rows = [int(x) for batch in loader for x in batch["id"]]
    assert sorted(rows) == sorted(plain) and len(rows) == len(plain)
    assert shaken.state_dict()["samples_consumed_per_split"] == [50, 50, 50, 50]
