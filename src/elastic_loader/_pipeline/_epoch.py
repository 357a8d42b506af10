"""One epoch of a dataset: its permutation, a reader pinned to its table version, its block budget.

Rules:
* Construction and ``set_epoch`` build a new :class:`Epoch`; nothing in it
  changes afterwards. The permutation seed is ``shuffle_seed + epoch *
  EPOCH_PRIME`` (``_lance``), so every rank builds the same one.
* ``blocks_per_epoch="auto"`` is estimated once per epoch from a seeded ~1%
  sample (``_packing.estimate_blocks``), with a ``UserWarning`` attributed to
  the caller of the constructor or of ``set_epoch``.
* Progress starts at the beginning of every split (:func:`start_progress`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, cast

from ._checkpoint import PackedState, RowState, State
from ._lance import Reader, SplitRows, build_permutation, reader_for
from ._packing import estimate_blocks
from ._settings import Settings


@dataclass(frozen=True)
class Epoch:
    """What one epoch reads."""

    perm: SplitRows
    reader: Reader
    blocks_per_epoch: int | None
    """The packing budget (resolved when ``"auto"`` was requested); ``None`` in row mode."""


def build_epoch(table: Any, settings: Settings, epoch: int) -> Epoch:
    """Build epoch ``epoch`` of ``table`` (called by a dataset method; see the warning's stack level)."""
    perm = build_permutation(
        table,
        num_splits=settings.num_splits,
        shuffle=settings.shuffle,
        shuffle_seed=settings.shuffle_seed,
        epoch=epoch,
        clump_size=settings.shuffle_clump_size,
        filter=settings.filter,
        split_strategy=settings.split_strategy,
        rows_hint=settings.rows_hint,
    )
    reader = reader_for(table, perm.base_version)
    blocks: int | None = None
    if settings.pack_sequences is not None and settings.blocks_per_epoch == "auto":
        warnings.warn(
            "blocks_per_epoch='auto' uses an approximate token-count sample: it estimates the tokens "
            "from ~1% of the rows; pass an int for an exact epoch size",
            UserWarning,
            stacklevel=4,  # build_epoch < StreamingDataset._build_epoch < __init__ or set_epoch < caller
        )
        assert settings.columns is not None
        blocks = estimate_blocks(
            reader, settings.columns[0], perm.rows, settings.pack_sequences, settings.shuffle_seed
        )
    elif settings.pack_sequences is not None:
        blocks = cast(int, settings.blocks_per_epoch)
    return Epoch(perm, reader, blocks)


def start_progress(settings: Settings) -> State:
    """The progress at the beginning of an epoch: nothing read in any split."""
    s = settings.num_splits
    return PackedState([0] * s, [0] * s, {}) if settings.packed else RowState([0] * s, [0] * s)
