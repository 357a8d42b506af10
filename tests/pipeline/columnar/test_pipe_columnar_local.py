"""Columnar batches over the computed and local permutations: the spec's rows, row mode's checkpoints.

Expected batches come from the executable spec: ``spec.local.local_splits`` /
``spec.computed.computed_splits`` give each split's storage positions, mapped to ``id`` values by a
scan of the table in storage order (``multi_table`` has 5 fragments), then ``run_loader`` gives the
batches; never the module under test. Checkpoints are compared with row mode's (which the spec pins
in tests/pipeline/reading/test_pipe_positions.py), and a columnar checkpoint taken mid-epoch resumes
columnar and row mode with the rest of the epoch.
"""

from __future__ import annotations

from typing import Any

import pytest
from columnar_harness import run

from elastic_loader import LocalShuffle, StreamingDataLoader, StreamingDataset
from elastic_loader.spec import (
    Faults,
    RowState,
    RunConfig,
    Topology,
    computed as spec_computed,
    local as spec_local,
)
from elastic_loader.spec.loader import run_loader

KINDS: list[Any] = ["local", LocalShuffle(clump=4, window=7), LocalShuffle(clump=2, window=3), "computed"]


def spec_batches(
    table: Any, kind: Any, num_splits: int, batch_size: int, world: int = 1, rank: int = 0
) -> list[list[int]]:
    """The spec's batches of ``id`` values for one rank."""
    ids = [int(v) for v in table.to_lance().to_table(columns=["id"]).column("id").to_pylist()]
    if kind == "computed":
        positions = spec_computed.computed_splits(
            spec_computed.ComputedPermutation(len(ids), num_splits, 0, 0)
        )
    else:
        shape = LocalShuffle() if kind == "local" else kind
        model = spec_local.LocalPermutation(len(ids), num_splits, 0, 0, shape.clump, shape.window)
        positions = spec_local.local_splits(model)
    perm = tuple(tuple(ids[p] for p in split) for split in positions)
    config = RunConfig(num_splits=num_splits, shuffle_seed=0, epoch=0)
    start = RowState((0,) * num_splits, (0,) * num_splits)
    out = run_loader(config, perm, Faults(), Topology(world, rank, 0, 0), start, batch_size=batch_size)
    return [[y.row_id for y in d.items] for d in out.deliveries]


@pytest.mark.parametrize("kind", KINDS, ids=repr)
@pytest.mark.parametrize(
    ("splits", "world", "rank", "batch_size"), [(4, 1, 0, 6), (3, 1, 0, 64), (8, 4, 1, 5)]
)
@pytest.mark.parametrize("batch_format", ["arrow", "numpy"])
def test_batches_are_the_specs_and_checkpoints_row_modes(
    multi_table: Any, kind: Any, splits: int, world: int, rank: int, batch_size: int, batch_format: str
) -> None:
    kwargs: dict[str, Any] = {"num_splits": splits, "world_size": world, "rank": rank, "permutation": kind}
    columnar = StreamingDataLoader(
        StreamingDataset(multi_table, **kwargs), batch_size=batch_size, batch_format=batch_format
    )
    got, states = run(columnar)
    assert got == spec_batches(multi_table, kind, splits, batch_size, world, rank)
    rows = StreamingDataLoader(
        StreamingDataset(multi_table, **kwargs), batch_size=batch_size, collate_fn=list
    )
    expected, expected_states = run(rows)
    assert got == expected
    assert states == expected_states


@pytest.mark.parametrize("kind", KINDS[:2], ids=repr)
@pytest.mark.parametrize("stop", [1, 4, 9])
def test_a_columnar_checkpoint_resumes_both_modes(multi_table: Any, kind: Any, stop: int) -> None:
    kwargs: dict[str, Any] = {"num_splits": 4, "permutation": kind}
    whole = spec_batches(multi_table, kind, 4, 7)
    first = StreamingDataLoader(StreamingDataset(multi_table, **kwargs), batch_size=7, batch_format="arrow")
    head, states = run(first, stop)
    assert head == whole[:stop]
    again = StreamingDataLoader(
        StreamingDataset(multi_table, columns=["id"], **kwargs), batch_size=7, batch_format="torch"
    )
    again.load_state_dict(states[-1])
    assert run(again)[0] == whole[stop:]
    rows = StreamingDataLoader(StreamingDataset(multi_table, **kwargs), batch_size=7, collate_fn=list)
    rows.load_state_dict(states[-1])
    assert run(rows)[0] == whole[stop:]


def test_workers_deliver_the_specs_batches_and_resume(multi_table: Any) -> None:
    """Two real DataLoader workers over a local permutation: the spec's batches, row mode's
    checkpoints, and a resume from a mid-epoch columnar checkpoint (one worker run each)."""
    kind = LocalShuffle(clump=4, window=7)
    kwargs: dict[str, Any] = {"num_splits": 4, "columns": ["id"], "permutation": kind}
    columnar = StreamingDataLoader(
        StreamingDataset(multi_table, **kwargs), batch_size=7, num_workers=2, batch_format="arrow"
    )
    got, states = run(columnar)
    rows = StreamingDataLoader(
        StreamingDataset(multi_table, **kwargs), batch_size=7, num_workers=2, collate_fn=list
    )
    expected, expected_states = run(rows)
    assert got == expected and states == expected_states
    assert sorted(i for b in got for i in b) == list(range(200))
    resumed = StreamingDataLoader(
        StreamingDataset(multi_table, **kwargs), batch_size=7, num_workers=2, batch_format="arrow"
    )
    resumed.load_state_dict(states[4])
    assert run(resumed)[0] == got[5:]
