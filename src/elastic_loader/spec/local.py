"""The local (clumped, windowed) permutation: contiguous reads, an order that still looks global.

Rules of this module (spec/LOCAL.md is the prose definition; this code is the normative one):

* Parameters: ``N`` rows, ``S`` splits, ``shuffle_seed``, ``epoch`` (as the
  computed permutation), a clump size ``C >= 1`` and a window size ``W >= 1``.
  Everything below is a pure function of these six integers; nothing is stored.
* Clumps: storage positions ``[0, N)`` are cut into ``M = ceil(N / C)`` clumps
  of ``C`` contiguous positions; clump ``M - 1`` holds the last
  ``r = N - (M - 1) * C`` positions (``1 <= r <= C``, short when ``C`` does not
  divide ``N``).
* Clump order: ``g``, the computed bijection of ``[0, M)`` keyed by the epoch's
  round keys (:func:`~.computed.round_keys`, the row-level permutation's own
  keys, so ``C = 1`` gives back ``f``). The clumped sequence ``Q`` of ``N``
  storage positions is clump ``g(0)``, then clump ``g(1)``, ..., each in storage
  order (:func:`clumped_index`); the short clump sits at ``t = g^-1(M - 1)``.
* Splits: ``m = N // S``; split ``s`` is ``Q[s*m : (s+1)*m]``; the last
  ``N mod S`` positions of ``Q`` are never read.
* Windows: split ``s`` is cut into windows of ``W`` positions (the last one
  ``w = m - q*W`` long when ``W`` does not divide ``m``); position ``o`` of window
  ``q`` reads split position ``q*W + sigma_{s,q}(o)`` where ``sigma_{s,q}`` is the
  Feistel network of :mod:`.computed` cycle-walked into ``[0, w)``, keyed by
  :func:`window_keys` (a key stream separated from the epoch's round keys by
  ``WINDOW_TAG``).
* Invariants: ``LocalBijectionInv`` (a bijection, ``S*m`` distinct positions
  read), ``LocalLocalityInv`` (a window of ``w >= 2`` positions reads at most
  ``2 + (w-2) // C`` runs of contiguous storage positions, one more in the
  cases :func:`local_run_bound` names when ``C`` does not divide ``N``; never
  more than ``ceil(W/C) + 2``), ``LocalDegeneracyInv`` (``C = W = 1`` is exactly the
  computed permutation). Proofs in ``proofs/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .computed import (
    GAMMA,
    MASK64,
    MAX_ROWS,
    ROUNDS,
    ComputedPermutation,
    computed_index,
    computed_inverse,
    feistel_decrypt,
    feistel_encrypt,
    half_width,
    mix64,
)
from .errors import require
from .params import perm_seed
from .topology import Permutation

ALGORITHM = "clump-window-v1+feistel8-splitmix64-v1"
"""Names the local algorithm (and the network it builds on); part of every fingerprint."""
WINDOW_TAG = 0x6C6F63616C77696E
"""Separates the window key stream from the epoch's round keys (the ASCII bytes of ``localwin``)."""

Run = tuple[int, int]
"""``(first storage position, length)`` of a run of contiguous storage positions."""


def _is_size(value: object) -> bool:
    """An int (not a bool) in ``[1, 2**64]``."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ROWS


@dataclass(frozen=True)
class LocalPermutation:
    """The local permutation of ``num_rows`` storage positions into ``num_splits`` splits.

    Raises ``SpecValueError`` on construction for ``clump`` or ``window``
    outside ``[1, 2**64]`` and for everything :class:`~.computed.ComputedPermutation`
    rejects (rows outside ``[1, 2**64]``, no split, fewer rows than splits, a
    seed out of range).
    """

    num_rows: int
    num_splits: int
    shuffle_seed: int
    epoch: int
    clump: int
    window: int
    clumps: ComputedPermutation = field(init=False, repr=False, compare=False)
    short_at: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        require(
            _is_size(self.clump),
            "local_clump_out_of_range",
            f"clump must be in [1, 2**64], got {self.clump!r}",
        )
        require(
            _is_size(self.window),
            "local_window_out_of_range",
            f"window must be in [1, 2**64], got {self.window!r}",
        )
        ComputedPermutation(self.num_rows, self.num_splits, self.shuffle_seed, self.epoch)  # the checks
        order = ComputedPermutation(self.clump_count, 1, self.shuffle_seed, self.epoch)
        object.__setattr__(self, "clumps", order)
        object.__setattr__(self, "short_at", computed_inverse(order, self.clump_count - 1))

    @property
    def split_len(self) -> int:
        """``m = N // S``."""
        return self.num_rows // self.num_splits

    @property
    def clump_count(self) -> int:
        """``M = ceil(N / C)``."""
        return -(-self.num_rows // self.clump)

    @property
    def short_len(self) -> int:
        """``r``, the length of the last clump in storage (``C`` when ``C`` divides ``N``)."""
        return self.num_rows - (self.clump_count - 1) * self.clump

    @property
    def window_count(self) -> int:
        """Windows per split: ``ceil(m / W)``."""
        return -(-self.split_len // self.window)

    @property
    def epoch_seed(self) -> int:
        """``shuffle_seed + epoch * 100003``."""
        return perm_seed(self.shuffle_seed, self.epoch)


# ---------------------------------------------------------------- the clumped sequence Q


def clumped_index(perm: LocalPermutation, i: int) -> int:
    """``Q[i]`` for ``i`` in ``[0, N)``: clumps in the order ``g(0), g(1), ...``, each in storage order."""
    require(0 <= i < perm.num_rows, "local_index_out_of_range", f"index {i} outside [0, {perm.num_rows})")
    c, t, r = perm.clump, perm.short_at, perm.short_len
    if i < t * c:
        k, off = divmod(i, c)
    elif i < t * c + r:
        return (perm.clump_count - 1) * c + (i - t * c)
    else:
        k, off = divmod(i - r + c, c)
    return computed_index(perm.clumps, k) * c + off


def clumped_inverse(perm: LocalPermutation, y: int) -> int:
    """``Q^-1(y)``: the index of ``Q`` holding storage position ``y``."""
    require(0 <= y < perm.num_rows, "local_index_out_of_range", f"position {y} outside [0, {perm.num_rows})")
    c, t = perm.clump, perm.short_at
    clump, off = divmod(y, c)
    k = computed_inverse(perm.clumps, clump)
    if k <= t:
        return k * c + off
    return k * c + off - c + perm.short_len


# ---------------------------------------------------------------- windows


def window_size(perm: LocalPermutation, q: int) -> int:
    """The length of window ``q`` of every split: ``min(W, m - q*W)``."""
    require(
        0 <= q < perm.window_count,
        "local_window_index_out_of_range",
        f"window {q} outside [0, {perm.window_count})",
    )
    return min(perm.window, perm.split_len - q * perm.window)


def window_keys(perm: LocalPermutation, split: int, q: int) -> tuple[int, ...]:
    """The ``ROUNDS`` keys of ``sigma_{split,q}``: ``mix64(z + (i + 1) * GAMMA)`` with
    ``z = mix64(mix64(mix64(e XOR WINDOW_TAG) + split) + q)``, ``e`` the epoch seed."""
    z = mix64(perm.epoch_seed ^ WINDOW_TAG)
    z = mix64((z + split) & MASK64)
    z = mix64((z + q) & MASK64)
    return tuple(mix64((z + (i + 1) * GAMMA) & MASK64) for i in range(ROUNDS))


def _walk(keys: tuple[int, ...], size: int, x: int, inverse: bool) -> int:
    half = half_width(size)
    step = feistel_decrypt if inverse else feistel_encrypt
    y = step(keys, half, x)
    while y >= size:
        y = step(keys, half, y)
    return y


def window_offset(perm: LocalPermutation, split: int, q: int, o: int) -> int:
    """``sigma_{split,q}(o)``: the offset inside window ``q`` that its position ``o`` reads."""
    size = window_size(perm, q)
    require(0 <= o < size, "local_index_out_of_range", f"offset {o} outside [0, {size})")
    return _walk(window_keys(perm, split, q), size, o, inverse=False)


def window_offset_inverse(perm: LocalPermutation, split: int, q: int, o: int) -> int:
    """``sigma_{split,q}^-1(o)``."""
    size = window_size(perm, q)
    require(0 <= o < size, "local_index_out_of_range", f"offset {o} outside [0, {size})")
    return _walk(window_keys(perm, split, q), size, o, inverse=True)


# ---------------------------------------------------------------- splits


def _check_split(perm: LocalPermutation, split: int) -> None:
    require(
        0 <= split < perm.num_splits,
        "local_split_out_of_range",
        f"split {split} outside [0, {perm.num_splits})",
    )


def local_index(perm: LocalPermutation, split: int, position: int) -> int:
    """The storage position ``split`` reads at ``position``: ``Q[split*m + q*W + sigma(o)]``."""
    _check_split(perm, split)
    m = perm.split_len
    require(
        0 <= position < m, "local_range_out_of_range", f"position {position} outside the split length {m}"
    )
    q, o = divmod(position, perm.window)
    return clumped_index(perm, split * m + q * perm.window + window_offset(perm, split, q, o))


def local_positions(perm: LocalPermutation, split: int, first: int, count: int) -> tuple[int, ...]:
    """Storage positions of ``split`` at positions ``first .. first+count-1``."""
    _check_split(perm, split)
    m = perm.split_len
    require(
        first >= 0 and count >= 0 and first + count <= m,
        "local_range_out_of_range",
        f"positions [{first}, {first + count}) outside the split length {m}",
    )
    return tuple(local_index(perm, split, p) for p in range(first, first + count))


def local_locate(perm: LocalPermutation, position: int) -> tuple[int, int] | None:
    """Which ``(split, position)`` reads storage ``position``; ``None`` for the dropped ``N mod S``."""
    i = clumped_inverse(perm, position)
    m = perm.split_len
    if i >= perm.num_splits * m:
        return None
    split, j = divmod(i, m)
    q, o = divmod(j, perm.window)
    return split, q * perm.window + window_offset_inverse(perm, split, q, o)


def local_splits(perm: LocalPermutation) -> Permutation:
    """The permutation as the rest of the model takes it: split ``s`` = storage positions in read order."""
    return tuple(local_positions(perm, s, 0, perm.split_len) for s in range(perm.num_splits))


def local_runs(perm: LocalPermutation, split: int, q: int) -> tuple[Run, ...]:
    """The runs of contiguous storage positions window ``q`` of ``split`` reads, ascending and merged.

    The window reads ``Q[split*m + q*W : split*m + q*W + w]`` (``sigma`` only
    reorders it), a contiguous stretch of ``Q`` that crosses clump boundaries a
    few times; adjacent pieces that happen to be contiguous in storage merge.
    """
    _check_split(perm, split)
    start = perm.split_len * split + q * perm.window
    end = start + window_size(perm, q)
    pieces: list[Run] = []
    i = start
    while i < end:
        y = clumped_index(perm, i)
        clump_end = min((y // perm.clump + 1) * perm.clump, perm.num_rows)
        length = min(end - i, clump_end - y)
        pieces.append((y, length))
        i += length
    merged: list[Run] = []
    for first, length in sorted(pieces):
        if merged and merged[-1][0] + merged[-1][1] == first:
            merged[-1] = (merged[-1][0], merged[-1][1] + length)
        else:
            merged.append((first, length))
    return tuple(merged)


def local_run_bound(perm: LocalPermutation, q: int) -> int:
    """The most runs window ``q`` can read, ``w`` its size and ``r`` the short clump's length.

    ``1`` when ``w = 1``; else ``2 + (w - 2) // C`` (a stretch of ``w`` positions of ``Q``
    touches its two end clumps and at most ``(w - 2) // C`` whole clumps between them), plus
    one when ``C`` does not divide ``N``, ``w >= r + 2`` and ``(w - 2) mod C >= r`` (the short
    clump fits between the ends beside as many whole clumps). At most ``ceil(W / C) + 2``.
    """
    w, c, r = window_size(perm, q), perm.clump, perm.short_len
    if w == 1:
        return 1
    short = r < c and w >= r + 2 and (w - 2) % c >= r
    return 2 + (w - 2) // c + (1 if short else 0)


def local_fingerprint(perm: LocalPermutation) -> str:
    """Identifies ``(ALGORITHM, N, S, shuffle_seed, epoch, C, W)``: what a checkpoint must match."""
    return (
        f"{ALGORITHM}:rows={perm.num_rows}:splits={perm.num_splits}"
        f":seed={perm.shuffle_seed}:epoch={perm.epoch}:clump={perm.clump}:window={perm.window}"
    )
