"""The ``blocks_per_epoch="auto"`` budget of a packed epoch, estimated from a sample.

Rules: every split samples the same number of its positions, seeded by the shuffle seed, so every
rank and worker computes the same budget from the same permutation; the sample is read once, when
the epoch is built (``_epoch``), ``AUTO_TAKE_ROWS`` rows per ``take``.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pyarrow.compute as pc

from ._documents import NULL_TOKENS
from ._lance import Reader

AUTO_SAMPLE_CAP = 100_000
"""Documents the ``blocks_per_epoch="auto"`` estimate reads at most (over all splits)."""
AUTO_TAKE_ROWS = 16384
"""Sampled documents read per ``take``."""


def estimate_blocks(reader: Reader, column: str, rows: np.ndarray, length: int, seed: int) -> int:
    """The ``blocks_per_epoch="auto"`` budget: tokens (EOS included) of a seeded ~1% sample.

    ``rows`` holds every split's row ids (``splits x split length``). Each split
    samples the same number of positions, ``min(ceil(m / 100), 100000 / splits)``
    and at least one; the token count is scaled to the epoch, cut into blocks of
    ``length`` and rounded down to a multiple of the split count (at least one
    block per split).

    Raises:
        ValueError: a sampled document has null tokens.
    """
    s, m = int(rows.shape[0]), int(rows.shape[1])
    cap = max(1, AUTO_SAMPLE_CAP // s)
    rng = random.Random(seed)
    per_split = min(m, max(1, min(math.ceil(m / 100), cap)))
    picks = [sorted(rng.sample(range(m), per_split)) for _ in range(s)]
    ids = np.concatenate([rows[split, offsets] for split, offsets in enumerate(picks)])
    sampled_tokens = 0
    for start in range(0, len(ids), AUTO_TAKE_ROWS):
        tokens = reader.take(ids[start : start + AUTO_TAKE_ROWS], [column]).column(0)
        if tokens.null_count or pc.list_flatten(tokens).null_count:
            raise ValueError(NULL_TOKENS)
        sampled_tokens += int(pc.sum(pc.list_value_length(tokens)).as_py() or 0)
    sampled = per_split * s
    estimated = (sampled_tokens + sampled) * (m * s) // sampled
    blocks = estimated // length
    return max(s, blocks - blocks % s)
