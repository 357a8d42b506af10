"""``filter`` together with ``split_strategy``: the strategy splits the filtered rows only.

Origin: issue 13, item 7 ("``filter`` together with ``split_strategy``"): the filter tests use
the default shuffle and the strategy tests no filter, so a permutation that dropped the filter
when a strategy is given (or applied it after the strategy) passed the whole suite. Expected rows
come from LanceDB's permutation builder read directly (``perm_of``: filter first, then the
strategy), in the round-robin order of the spec (cycle ``k`` is row ``k`` of every owned split).
"""

from __future__ import annotations

from typing import Any

import pytest

from elastic_loader import StreamingDataLoader, StreamingDataset

FILTER = "id % 5 != 0"  # 160 of multi_table's 200 rows, in every fragment
KEPT = [i for i in range(200) if i % 5 != 0]


class Strategy:
    """A picklable ``split_strategy``: random (seeded) or sequential splits of ``fixed`` rows each."""

    def __init__(self, kind: str, fixed: int = 4, seed: int = 13) -> None:
        self.kind, self.fixed, self.seed = kind, fixed, seed

    def __call__(self, builder: Any) -> Any:
        if self.kind == "random":
            return builder.split_random(fixed=self.fixed, seed=self.seed)
        return builder.split_sequential(fixed=self.fixed)


def round_robin(splits: list[list[int]], owned: range) -> list[int]:
    return [splits[s][k] for k in range(len(splits[owned[0]])) for s in owned]


def ids(dataset: Any) -> list[int]:
    return [row["id"] for row in dataset]


@pytest.mark.parametrize("kind", ["random", "sequential"])
@pytest.mark.parametrize(("world_size", "rank"), [(1, 0), (2, 1)])
def test_the_strategy_splits_the_filtered_rows(
    multi_table: Any, perm_of: Any, kind: str, world_size: int, rank: int
) -> None:
    strategy = Strategy(kind)
    ds = StreamingDataset(
        multi_table, num_splits=4, filter=FILTER, split_strategy=strategy, rank=rank, world_size=world_size
    )
    splits = perm_of(multi_table, num_splits=4, filter=FILTER, strategy=strategy)
    assert sorted(i for split in splits for i in split) == KEPT
    owned = range(rank * 4 // world_size, (rank + 1) * 4 // world_size)
    assert ds.split_size == 40
    assert ids(ds) == round_robin(splits, owned)


def test_a_resume_continues_the_filtered_strategy_and_other_permutations_refuse_it(
    multi_table: Any, perm_of: Any
) -> None:
    kwargs: dict[str, Any] = {"num_splits": 4, "filter": FILTER, "split_strategy": Strategy("random")}
    expected = round_robin(
        perm_of(multi_table, num_splits=4, filter=FILTER, strategy=Strategy("random")), range(4)
    )
    ds = StreamingDataset(multi_table, **kwargs)
    iterator = iter(ds)
    head = [next(iterator)["id"] for _ in range(37)]
    state = ds.state_dict()
    iterator.close()  # type: ignore[attr-defined]
    resumed = StreamingDataset(multi_table, **kwargs)
    resumed.load_state_dict(state)
    assert head + ids(resumed) == expected
    # The same strategy without the filter (or another filter) is another permutation: refused.
    for other in ({"filter": None}, {"filter": "id % 5 != 1"}):
        with pytest.raises(ValueError, match="perm_fingerprint"):
            StreamingDataset(multi_table, **{**kwargs, **other}).load_state_dict(state)


def test_workers_read_the_filtered_strategy(multi_table: Any, perm_of: Any) -> None:
    """Workers receive the parent's row ids: the filter is not applied a second time."""
    strategy = Strategy("random")
    splits = perm_of(multi_table, num_splits=4, filter=FILTER, strategy=strategy)
    ds = StreamingDataset(multi_table, num_splits=4, filter=FILTER, split_strategy=strategy, columns=["id"])
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2)
    batches = [batch["id"].tolist() for batch in loader]
    per_worker = [round_robin(splits, range(0, 2)), round_robin(splits, range(2, 4))]
    cut = [[rows[i : i + 8] for i in range(0, len(rows), 8)] for rows in per_worker]
    assert batches == [b for pair in zip(*cut) for b in pair]  # torch's order: worker 0, 1, 0, ...
    assert ds.state_dict()["samples_consumed_per_split"] == [40] * 4
