"""``blocks_per_epoch="auto"``: the sample size per split, null tokens, empty samples, huge epochs.

Origin: issue 13, item 7 ("the ``"auto"`` budget on splits of 101-199 rows"): the estimate
samples ``ceil(m / 100)`` documents of each split of ``m`` rows, and every other auto test has
splits of at most 100 rows or exactly 200, where ``m // 100`` and ``round(m / 100)`` agree with
it; so a sample size rounded down or to the nearest passed the whole suite. Expected budgets come
from the executable spec (``estimate_blocks_per_epoch``) over LanceDB's permutation read directly
and the table's own token lists, for epochs 0 and 2 (the permutation changes, the sampling seed
does not), and the epoch then emits exactly that many blocks.

Later cases, written to kill surviving mutants of
``estimate_blocks`` (then in ``_packing``, now ``_budget``) (docs/MUTATION.md):
splits of 2 to 100 rows (one sampled document, not two), samples of empty documents only (no
token counted), null token lists and null tokens refused, and, through a reader that makes up
token counts (``Reader`` is the pipeline's one read interface), an epoch of 50,001 splits of 101
rows: the per-split cap ``100000 // splits`` decides, and the sample is read in several takes.
"""

from __future__ import annotations

from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from elastic_loader import StreamingDataset
from elastic_loader._pipeline._budget import estimate_blocks
from elastic_loader._pipeline._lance import Reader
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
    [
        (1, 101, 0, 0),
        (4, 120, 5, 0),
        (3, 149, 2, 2),
        (4, 150, 7, 2),
        (3, 199, 1, 0),
        (5, 120, 9, 0),
        (6, 100, 4, 1),  # splits of 2 to 100 rows sample one document each
        (4, 50, 3, 0),
        (8, 2, 6, 0),
    ],
)
def test_auto_budget_follows_the_spec(
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


def test_a_sample_of_empty_documents_counts_only_their_eos(multi_table: Any, tokens_of: Any) -> None:
    flt = "id % 6 = 2"  # document_tokens of these ids is empty: 33 rows, one split
    assert all(not tokens_of(i) for i in range(2, 200, 6))
    with pytest.warns(UserWarning, match="approximate token-count sample"):
        ds = StreamingDataset(multi_table, num_splits=1, filter=flt, **{**PACK, "pack_sequences": 2})
    assert ds.blocks_per_epoch == estimate_blocks_per_epoch([[0] * 33], 0, 2) == 16


@pytest.mark.parametrize("flt", ["id IN (7, 8, 9)", "id IN (32, 33, 34)"])  # a null list; a null inside
def test_null_tokens_in_the_sample_are_refused(null_table: Any, flt: str) -> None:
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="null"):
        StreamingDataset(null_table, num_splits=3, filter=flt, **PACK)  # one row per split: all sampled


class MadeUpTokens(Reader):
    """A reader whose row ``i`` holds ``length(i)`` zero tokens; counts its takes."""

    def __init__(self) -> None:
        self.takes = 0

    @staticmethod
    def length(ids: np.ndarray) -> np.ndarray:
        return np.where(ids % 7 == 0, 100, 0)

    def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:
        self.takes += 1
        offsets = np.concatenate([[0], np.cumsum(self.length(row_ids))])
        values = pa.array(np.zeros(int(offsets[-1]), dtype=np.int64))
        return pa.table({"tokens": pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)})


def test_an_epoch_of_50001_splits_samples_one_row_each() -> None:
    splits, rows = 50_001, 101  # 100000 // splits == 1: the cap, not ceil(rows / 100) == 2, decides
    ids = np.arange(splits * rows, dtype=np.uint64).reshape(splits, rows)
    reader = MadeUpTokens()
    got = estimate_blocks(reader, "tokens", ids, 1, 3)
    lengths = MadeUpTokens.length(ids.astype(np.int64)).tolist()
    assert got == estimate_blocks_per_epoch(lengths, 3, 1)
    assert reader.takes == 4  # 50,001 sampled rows, read 16,384 at a time
