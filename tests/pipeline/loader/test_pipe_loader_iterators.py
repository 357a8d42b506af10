"""A second iterator started before a loader's first batch, and while its workers run.

Origin: issue 13, item 7 ("a second iterator started before the first batch of a loader, and
while its workers run"): the one-iterator tests start the second iterator after a batch of a
loader without workers. Here ``iter(loader)`` has returned (its workers started, or not) and no
batch was taken yet, or two workers are producing: any other iterator over the dataset (another
loader, a plain iteration) and ``set_epoch`` / ``load_state_dict`` are refused while the dataset
keeps what was delivered; the same loader's ``iter()`` closes the first iterator (its ``next``
raises) and goes on from the delivered batches, so the batches of both iterators are an
uninterrupted epoch's. Expected batches come from LanceDB's permutation read directly (``perm_of``):
worker ``w`` of 2 owns splits ``2w, 2w+1`` (round robin), torch takes batches worker 0, 1, 0, ...
"""

from __future__ import annotations

from typing import Any

import pytest

from elastic_loader import StreamingDataLoader, StreamingDataset

BATCH = 4
START = {"samples_consumed_per_split": [0] * 4, "positions_consumed_per_split": [0] * 4}


def expected_batches(perm_of: Any, table: Any, num_workers: int) -> list[list[int]]:
    splits = perm_of(table, num_splits=4)
    roles = max(1, num_workers)
    per_role = [range(r * 4 // roles, (r + 1) * 4 // roles) for r in range(roles)]
    rows = [[splits[s][k] for k in range(len(splits[0])) for s in owned] for owned in per_role]
    cut = [[r[i : i + BATCH] for i in range(0, len(r), BATCH)] for r in rows]
    return [b for group in zip(*cut) for b in group]


def as_ids(batch: Any) -> list[int]:
    return [int(v) for v in batch["id"]]


def refuse_others(ds: StreamingDataset) -> None:
    """Everything that would start a second iteration or move the epoch raises."""
    with pytest.raises(RuntimeError, match="does not support concurrent iteration"):
        iter(StreamingDataLoader(ds, batch_size=BATCH))
    with pytest.raises(RuntimeError):
        next(iter(ds))
    with pytest.raises(RuntimeError):
        ds.set_epoch(1)
    with pytest.raises(RuntimeError):
        ds.load_state_dict(ds.state_dict())


def progress(ds: StreamingDataset) -> dict[str, Any]:
    state = ds.state_dict()
    return {k: state[k] for k in START}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_before_the_first_batch(multi_table: Any, perm_of: Any, num_workers: int) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    loader = StreamingDataLoader(ds, batch_size=BATCH, num_workers=num_workers)
    expected = expected_batches(perm_of, multi_table, num_workers)
    first = iter(loader)
    refuse_others(ds)
    assert progress(ds) == START  # nothing delivered, whatever the workers read ahead
    second = iter(loader)  # the same loader: closes the first iterator
    with pytest.raises(RuntimeError, match="closed by a newer"):
        next(first)
    assert [as_ids(b) for b in second] == expected  # the whole epoch, from its start
    assert ds.state_dict()["samples_consumed_per_split"] == [50] * 4


def test_while_the_workers_run(multi_table: Any, perm_of: Any) -> None:
    ds = StreamingDataset(multi_table, num_splits=4, columns=["id"])
    loader = StreamingDataLoader(ds, batch_size=BATCH, num_workers=2, prefetch_factor=4)
    expected = expected_batches(perm_of, multi_table, 2)
    first = iter(loader)
    taken = [as_ids(next(first)) for _ in range(7)]  # worker 0 delivered 4 batches, worker 1 three
    refuse_others(ds)
    delivered = [
        sum(1 for b in taken for i in b if i in split) for split in perm_of(multi_table, num_splits=4)
    ]
    assert progress(ds)["samples_consumed_per_split"] == delivered == [8, 8, 6, 6]
    second = iter(loader)
    with pytest.raises(RuntimeError, match="closed by a newer"):
        next(first)
    rest = [as_ids(b) for b in second]
    assert taken + rest == expected  # the round robin of workers goes on where it stood
    assert ds.state_dict()["samples_consumed_per_split"] == [50] * 4
