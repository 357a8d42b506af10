"""One epoch of a dataset: its permutation, a reader pinned to its table version, its block budget.

Rules:
* Construction and ``set_epoch`` build a new :class:`Epoch`; nothing in it
  changes afterwards. The permutation seed is ``shuffle_seed + epoch *
  EPOCH_PRIME`` (``_lance``), so every rank builds the same one.
* The permutation is the builder's (``SplitRows``: row ids, materialised) or,
  with ``permutation="computed"``/local, a ``_positions.PositionPerm`` (a few
  parameters; its splits are views computing storage positions on demand).
  :func:`split_rows`, :func:`pickled` and :func:`unpickled` are the only places
  the dataset's code tells the two apart: the builder's row ids travel to
  workers once (``_rowfile``), a computed permutation pickles as itself.
* With ``ELASTIC_LOADER_PERM_CACHE`` set, the builder's permutation (without
  ``split_strategy``) is read from and written to that cache (``_permcache``).
* ``blocks_per_epoch="auto"`` is estimated once per epoch from a seeded ~1%
  sample (``_budget.estimate_blocks``), with a ``UserWarning`` attributed to
  the caller of the constructor or of ``set_epoch``.
* Progress starts at the beginning of every split (:func:`start_progress`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from ._budget import estimate_blocks
from ._checkpoint import PackedState, RowState, State
from ._lance import BuilderArgs, Reader, SplitRows, build_permutation, reader_for
from ._permcache import cache_dir, cache_key, cached
from ._positions import PositionPerm, build_positions
from ._rowfile import Payload, RowFile, rows_of
from ._settings import Settings

Perm = SplitRows | PositionPerm
"""An epoch's permutation: the builder's row ids, or a computed one."""


@dataclass(frozen=True)
class Epoch:
    """What one epoch reads."""

    perm: Perm
    reader: Reader
    blocks_per_epoch: int | None
    """The packing budget (resolved when ``"auto"`` was requested); ``None`` in row mode."""


def build_epoch(table: Any, settings: Settings, epoch: int) -> Epoch:
    """Build epoch ``epoch`` of ``table`` (called by a dataset method; see the warning's stack level)."""
    perm: Perm
    if settings.by_position:
        perm, reader = build_positions(
            table,
            settings.permutation,
            num_splits=settings.num_splits,
            shuffle_seed=settings.shuffle_seed,
            epoch=epoch,
        )
        return Epoch(perm, reader, _blocks(settings, reader, perm))

    args = BuilderArgs(
        num_splits=settings.num_splits,
        shuffle=settings.shuffle,
        shuffle_seed=settings.shuffle_seed,
        epoch=epoch,
        clump_size=settings.shuffle_clump_size,
        filter=settings.filter,
    )

    def build() -> SplitRows:
        return build_permutation(
            table, args, split_strategy=settings.split_strategy, rows_hint=settings.rows_hint
        )

    key = None
    if settings.split_strategy is None and cache_dir() is not None:
        key = cache_key(table, args)
    perm, _ = cached(key, settings.num_splits, build)
    reader = reader_for(table, perm.base_version)
    return Epoch(perm, reader, _blocks(settings, reader, perm))


def _blocks(settings: Settings, reader: Reader, perm: Perm) -> int | None:
    """The epoch's block budget (``"auto"``: estimated, with its warning); ``None`` in row mode."""
    if settings.pack_sequences is not None and settings.blocks_per_epoch == "auto":
        warnings.warn(
            "blocks_per_epoch='auto' uses an approximate token-count sample: it estimates the tokens "
            "from ~1% of the rows; pass an int for an exact epoch size",
            UserWarning,
            stacklevel=5,  # _blocks < build_epoch < _build_epoch < __init__ or set_epoch < caller
        )
        assert settings.columns is not None
        rows = cast(np.ndarray, perm.rows)  # a PositionSplits answers .shape and [split, offsets] alike
        column, length = settings.columns[0], settings.pack_sequences
        return estimate_blocks(reader, column, rows, length, settings.shuffle_seed)
    if settings.pack_sequences is not None:
        return cast(int, settings.blocks_per_epoch)
    return None


def split_rows(perm: Perm, owned: list[int]) -> list[Any]:
    """What each owned split reads, in order: row ids (an array) or storage positions (a view)."""
    rows = perm.rows
    if isinstance(perm, PositionPerm):
        return [rows[s] for s in owned]
    return [np.asarray(rows[s]) for s in owned]


def pickled(perm: Perm, row_file: RowFile) -> tuple[Perm, Payload | None]:
    """``perm`` as a pickle carries it: the builder's row ids apart, once (``_rowfile``)."""
    if isinstance(perm, PositionPerm):
        return perm, None
    return replace(perm, rows=_NO_ROWS), row_file.payload(perm.rows)


def unpickled(perm: Perm, payload: Payload | None) -> Perm:
    """The permutation :func:`pickled` sent."""
    if payload is None:
        return perm
    assert isinstance(perm, SplitRows)
    return SplitRows(rows_of(payload), perm.fingerprint, perm.base_version)


_NO_ROWS = np.zeros((0, 0), dtype=np.uint64)


def start_progress(settings: Settings) -> State:
    """The progress at the beginning of an epoch: nothing read in any split."""
    s = settings.num_splits
    return PackedState([0] * s, [0] * s, {}) if settings.packed else RowState([0] * s, [0] * s)
