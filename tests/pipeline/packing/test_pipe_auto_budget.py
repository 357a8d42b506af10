"""``blocks_per_epoch="auto"`` on splits of 101 to 199 rows: two sampled documents per split.

Origin: issue 13, item 7 ("the ``"auto"`` budget on splits of 101-199 rows"): the estimate
samples ``ceil(m / 100)`` documents of each split of ``m`` rows, and every other auto test has
splits of at most 100 rows or exactly 200, where ``m // 100`` and ``round(m / 100)`` agree with
it; so a sample size rounded down or to the nearest passed the whole suite. Expected budgets come
from the executable spec (``estimate_blocks_per_epoch``) over LanceDB's permutation read directly
and the table's own token lists, for epochs 0 and 2 (the permutation changes, the sampling seed
does not), and the epoch then emits exactly that many blocks.
"""

from __future__ import annotations

from typing import Any

import lancedb
import pyarrow as pa
import pytest

from elastic_loader import StreamingDataset
from elastic_loader.spec.packing import estimate_blocks_per_epoch

ROWS = 600
PACK = {"columns": ["tokens"], "pack_sequences": 3, "eos_id": -1, "pad_id": -2, "blocks_per_epoch": "auto"}


@pytest.fixture(scope="module")
def table(tables_dir: Any, tokens_of: Any) -> Any:
    """600 rows whose tokens are ``document_tokens`` (0 to 5 tokens each), in 3 fragments."""

    def chunk(lo: int, hi: int) -> pa.Table:
        tokens = pa.array([tokens_of(i) for i in range(lo, hi)], pa.list_(pa.int64()))
        return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "tokens": tokens})

    out = lancedb.connect(str(tables_dir)).create_table("auto_budget", chunk(0, 250), mode="overwrite")
    out.add(chunk(250, 450))
    out.add(chunk(450, ROWS))
    return out


@pytest.mark.parametrize(
    ("num_splits", "rows", "seed", "epoch"),
    [(1, 101, 0, 0), (4, 120, 5, 0), (3, 149, 2, 2), (4, 150, 7, 2), (3, 199, 1, 0), (5, 120, 9, 0)],
)
def test_auto_budget_on_splits_of_101_to_199_rows(
    table: Any, perm_of: Any, tokens_of: Any, num_splits: int, rows: int, seed: int, epoch: int
) -> None:
    flt = f"id < {num_splits * rows}"
    with pytest.warns(UserWarning, match="approximate token-count sample"):
        ds = StreamingDataset(
            table, num_splits=num_splits, shuffle_seed=seed, epoch=epoch, filter=flt, **PACK
        )
    assert ds.split_size == rows
    splits = perm_of(table, num_splits=num_splits, shuffle_seed=seed, epoch=epoch, filter=flt)
    lengths = [[len(tokens_of(i)) for i in split] for split in splits]
    expected = estimate_blocks_per_epoch(lengths, seed, PACK["pack_sequences"])
    assert ds.blocks_per_epoch == expected
    assert ds.state_dict()["blocks_per_epoch"] == expected
    assert sum(1 for _ in ds) == expected
