"""The permutations that are computed, not built: which one a dataset uses, and its splits as views.

Rules:
* ``permutation="builder"`` (the default) is LanceDB's permutation builder (``_lance``), sample-
  identical to ``lancedb.streaming``; nothing here touches it. ``"computed"`` is the keyed
  bijection of storage positions (``_computed``, spec/COMPUTED.md), ``"local"`` or a
  :class:`LocalShuffle` the clumped, windowed one (``_local``, spec/LOCAL.md).
* A computed or local permutation is never materialised: :class:`PositionPerm` holds its few
  parameters and the table version it counts positions at; each split is a
  :class:`SplitPositions` view whose slices compute their storage positions on demand, so
  construction, memory, pickling and resume cost the same at every table size.
* Positions count the live rows of the pinned version in fragment order, so such a permutation
  needs a table stored as a Lance dataset and reads it by position (``_lance.position_reader``);
  it shuffles all the table's rows: ``shuffle=False``, ``split_strategy``, ``shuffle_clump_size``
  and ``filter`` are refused with it (``_validate``), never silently ignored.
* The fingerprint names the algorithm and every parameter (rows, splits, seed, epoch; clump and
  window), so a checkpoint of another permutation is refused at load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._exports import public
from ._computed import ComputedPermutation
from ._lance import Reader, position_reader
from ._local import LocalPermutation

BUILDER: Literal["builder"] = "builder"
COMPUTED: Literal["computed"] = "computed"
LOCAL = "local"
KINDS = (BUILDER, COMPUTED, LOCAL)
MAX_SIZE = 2**64
DEFAULT_CLUMP = 64
"""Rows per clump of ``permutation="local"`` (|corr(position, id)| <= 0.01 up to 64, spec/LOCAL.md)."""
DEFAULT_WINDOW = 256
"""Positions per shuffled window of ``permutation="local"`` (``4 * DEFAULT_CLUMP``, spec/LOCAL.md)."""


@public
@dataclass(frozen=True)
class LocalShuffle:
    """``StreamingDataset(permutation=LocalShuffle(clump=C, window=W))``: the locality-aware shuffle.

    The table's storage positions are cut into clumps of ``clump`` contiguous rows, the clumps
    are put in the order of the computed permutation, and every split shuffles each window of
    ``window`` of its positions on its own (spec/LOCAL.md). Reads then take contiguous runs of
    ``clump`` rows; the order looks global for small clumps and large windows.
    ``permutation="local"`` is ``LocalShuffle()``.

    Raises:
        TypeError: ``clump`` or ``window`` is not an int.
        ValueError: ``clump`` or ``window`` is outside ``[1, 2**64]``.
    """

    clump: int = DEFAULT_CLUMP
    window: int = DEFAULT_WINDOW

    def __post_init__(self) -> None:
        for name in ("clump", "window"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"LocalShuffle.{name} must be an int, got {value!r}")
            if not 1 <= value <= MAX_SIZE:
                raise ValueError(f"LocalShuffle.{name} must be in [1, 2**64], got {value}")


Kind = Literal["builder", "computed"] | LocalShuffle
"""A validated ``permutation`` argument."""


def resolve_kind(value: object) -> Kind:
    """The ``permutation`` argument as a :data:`Kind` (``"local"`` becomes ``LocalShuffle()``).

    Raises:
        TypeError: ``value`` is neither a str nor a :class:`LocalShuffle`.
        ValueError: ``value`` is a str other than ``"builder"``, ``"computed"`` or ``"local"``.
    """
    if isinstance(value, LocalShuffle):
        return value
    if not isinstance(value, str):
        raise TypeError(
            f"permutation must be 'builder', 'computed', 'local' or a LocalShuffle(clump=, window=), "
            f"got {value!r}"
        )
    if value not in KINDS:
        raise ValueError(f"permutation must be one of {', '.join(map(repr, KINDS))}, got {value!r}")
    if value == LOCAL:
        return LocalShuffle()
    return BUILDER if value == BUILDER else COMPUTED


def describe_kind(kind: Kind) -> str:
    """How a message names ``kind``."""
    if isinstance(kind, LocalShuffle):
        return f"permutation=LocalShuffle(clump={kind.clump}, window={kind.window})"
    return f"permutation={kind!r}"


Positions = ComputedPermutation | LocalPermutation


AHEAD = 32768
"""Positions a split view computes at once: a read asks for a few thousand, in increasing order."""


class SplitPositions:
    """Split ``split`` of a computed or local permutation as a read-only sequence of storage positions.

    ``view[a:b]`` is a uint64 array of positions ``a .. b-1`` (step 1), ``view[p]`` one position;
    nothing is computed before it is asked for. A slice computes the next ``AHEAD`` positions from
    its start at once and keeps them (one array, at most ``AHEAD`` long), so a split read in
    increasing order computes its positions in long vectorised runs; the kept array is a pure
    function of the permutation and its start (never pickled), so any slice returns the same values.
    """

    __slots__ = ("_ahead", "_ahead_at", "perm", "split")

    def __init__(self, perm: Positions, split: int) -> None:
        self.perm, self.split = perm, split
        self._ahead: np.ndarray | None = None
        self._ahead_at = 0

    def __reduce__(self) -> tuple[type[SplitPositions], tuple[Positions, int]]:
        return (type(self), (self.perm, self.split))

    def _slice(self, first: int, count: int) -> np.ndarray:
        ahead, at = self._ahead, self._ahead_at
        if ahead is None or first < at or first + count > at + len(ahead):
            if count >= AHEAD:
                return self.perm.positions(self.split, first, count)
            size = min(AHEAD, self.perm.split_len - first)
            ahead, at = self.perm.positions(self.split, first, size), first
            self._ahead, self._ahead_at = ahead, at
        out: np.ndarray = ahead[first - at : first - at + count].copy()
        return out

    def __len__(self) -> int:
        return self.perm.split_len

    @property
    def read_align(self) -> int:
        """Positions a read should end on a multiple of: a local window (its runs are contiguous
        only when it is read whole), else 1."""
        return self.perm.window_len if isinstance(self.perm, LocalPermutation) else 1

    def __getitem__(self, key: int | slice) -> Any:
        m = self.perm.split_len
        if isinstance(key, slice):
            first, stop, step = key.indices(m)
            if step != 1:
                raise ValueError("a split view takes contiguous slices only")
            return self._slice(first, max(0, stop - first))
        index = int(key) + m if int(key) < 0 else int(key)
        return self.perm.positions(self.split, index, 1)[0]


class PositionSplits:
    """Every split of a computed or local permutation: ``rows[s]`` is split ``s``'s view; ``rows[s,
    offsets]`` the positions of those split positions; ``rows.shape`` is ``(splits, split length)``."""

    __slots__ = ("perm",)

    def __init__(self, perm: Positions) -> None:
        self.perm = perm

    @property
    def shape(self) -> tuple[int, int]:
        return (self.perm.num_splits, self.perm.split_len)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            split, offsets = key
            return self.perm.at(int(split), np.asarray(offsets, dtype=np.uint64))
        return SplitPositions(self.perm, int(key))


@dataclass(frozen=True)
class PositionPerm:
    """A computed or local permutation of one epoch over the table version ``base_version``."""

    perm: Positions

    base_version: int | None

    @property
    def num_splits(self) -> int:
        return self.perm.num_splits

    @property
    def split_len(self) -> int:
        return self.perm.split_len

    @property
    def fingerprint(self) -> str:
        """The algorithm and every parameter (spec/COMPUTED.md, spec/LOCAL.md)."""
        return self.perm.fingerprint

    @property
    def rows(self) -> PositionSplits:
        """The splits, as views (the builder's ``SplitRows.rows`` is an array of row ids)."""
        return PositionSplits(self.perm)


def build_positions(
    table: Any, kind: Kind, *, num_splits: int, shuffle_seed: int, epoch: int
) -> tuple[PositionPerm, Reader]:
    """The computed or local permutation of ``epoch`` over ``table`` as it is, and its reader.

    Raises:
        ValueError: the table is not stored as a Lance dataset, or has fewer rows than splits.
    """
    reader, num_rows, version = position_reader(table, None)
    if num_rows < num_splits:
        raise ValueError(
            f"the table has {num_rows} rows, fewer than num_splits={num_splits}; every split needs a row"
        )
    perm: Positions
    if isinstance(kind, LocalShuffle):
        perm = LocalPermutation(num_rows, num_splits, shuffle_seed, epoch, kind.clump, kind.window)
    else:
        perm = ComputedPermutation(num_rows, num_splits, shuffle_seed, epoch)
    return PositionPerm(perm, version), reader
