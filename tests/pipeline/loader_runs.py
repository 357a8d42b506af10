"""What the tests of whole-batch loader modes share (columnar batches, packed batches): random
topologies, and datasets resumed from the state of a plain iteration after some items.

Importable from every test below tests/pipeline (pytest puts this conftest's folder on the path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from elastic_loader import StreamingDataset


@st.composite
def loader_runs(
    draw: st.DrawFn, *, max_batch: int, max_skip: int, blocks_per_split: int | None = None
) -> tuple[dict[str, Any], int, bool, int]:
    """(dataset keywords, batch size, ``drop_last``, items a plain iteration takes first): 1, 2 or 4
    ranks of 1-3 splits each, any rank, seeds 0-3, read batches of 1, 5 or 64 rows, shuffled or
    not, with or without a filter; ``blocks_per_split``: a packed budget of 1 to that many blocks
    per split."""
    world = draw(st.sampled_from([1, 2, 4]))
    splits = world * draw(st.integers(1, 3))
    kwargs: dict[str, Any] = {
        "num_splits": splits,
        "world_size": world,
        "rank": draw(st.integers(0, world - 1)),
        "shuffle_seed": draw(st.integers(0, 3)),
        "read_batch_size": draw(st.sampled_from([1, 5, 64])),
        "shuffle": draw(st.booleans()),
    }
    if blocks_per_split is not None:
        kwargs["blocks_per_epoch"] = splits * draw(st.integers(1, blocks_per_split))
    if draw(st.booleans()):
        kwargs["filter"] = "id % 4 != 1"
    return kwargs, draw(st.integers(1, max_batch)), draw(st.booleans()), draw(st.integers(0, max_skip))


def resumed_pair(
    make: Callable[[], StreamingDataset], skip: int
) -> tuple[StreamingDataset, StreamingDataset]:
    """Two datasets from ``make``, both loaded with the state of a third after a plain iteration of
    ``skip`` items (fewer when its epoch ends first): any state, mid-chunk or with lagging splits."""
    plain = make()
    it = iter(plain)
    for _ in range(skip):
        if next(it, None) is None:
            break
    start = plain.state_dict()
    it.close()
    first, second = make(), make()
    first.load_state_dict(start)
    second.load_state_dict(start)
    return first, second
