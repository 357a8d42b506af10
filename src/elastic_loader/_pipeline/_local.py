"""The local (clumped, windowed) permutation, vectorised (opt-in; spec/LOCAL.md defines it).

Rules: storage positions are numpy uint64 and every operation wraps modulo
2**64 exactly as the definition says, so results are bit-identical to the
executable spec (tests/pipeline/reading/test_pipe_local.py compares them).
The clump order is :class:`._computed.ComputedPermutation` over the ``M``
clumps, with the epoch's own round keys; the window shuffles use the same
Feistel rounds with per-window keys, so a range that crosses windows is one
vectorised pass: one key set per window of the range and each element's window,
the rounds then reading lookup tables (``_computed.round_tables``), or a key set
per element when the elements come from anywhere (``locate``). Nothing grows
with the table: an instance holds its six parameters and a few derived
integers, and pickles as the six parameters. Arithmetic that could pass
``2**64`` (``M * C``, ``t * C + r``) is rearranged or done on Python ints. A
window is read as its runs of contiguous storage positions, in ascending
order, then put in the window's order (:func:`read_window`). This module never imports the spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from ._computed import (
    GAMMA,
    ROUNDS,
    TABLE_MAX_HALF,
    ComputedPermutation,
    Parameterized,
    ascending,
    check_split_offsets,
    check_split_range,
    cycle_walk,
    feistel,
    feistel_lookup,
    half_width,
    mix_into,
    mix_scalar,
    round_tables,
)
from ._lance import EPOCH_PRIME

ALGORITHM = "clump-window-v1+feistel8-splitmix64-v1"
WINDOW_TAG = 0x6C6F63616C77696E
MAX_SIZE = 2**64
_MASK64 = 2**64 - 1
_U64 = np.uint64


def _size(value: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SIZE:
        raise ValueError(f"{what} must be an int in [1, 2**64], got {value!r}")
    return value


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of a uint64 array, in place; returns it."""
    mix_into(z, np.empty_like(z))
    return z


def _window_keys(base: int, split: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Keys ``(ROUNDS, n)`` of ``sigma_{split[k], window[k]}``: ``mix64(z + (i+1) * GAMMA)`` with
    ``z = mix64(mix64(base + split) + window)``, ``base = mix64(epoch_seed XOR WINDOW_TAG)``."""
    z = _mix(split.astype(_U64) + _U64(base))
    z = _mix(z + window.astype(_U64))
    keys = np.empty((ROUNDS, z.size), dtype=_U64)
    for i in range(ROUNDS):
        keys[i] = z + _U64(((i + 1) * GAMMA) & _MASK64)
        _mix(keys[i])
    return keys


def _sigma(
    keys: np.ndarray, sets: np.ndarray | None, size: int, o: np.ndarray, inverse: bool = False
) -> np.ndarray:
    """The keyed bijection of ``[0, size)`` of every element, cycle-walked into ``[0, size)``:
    element ``k`` uses the round keys ``keys[:, sets[k]]`` (``sets`` ``None``: ``keys[:, k]``).
    With few key sets the rounds read lookup tables (``round_tables``; the same values)."""
    half = half_width(size)
    step: Callable[[np.ndarray, Any], np.ndarray]
    if sets is not None and half <= TABLE_MAX_HALF and keys.shape[1] << half <= o.size:
        tables, chosen = round_tables(keys, half), sets

        def step(values: np.ndarray, where: Any) -> np.ndarray:
            return feistel_lookup(tables, half, values, chosen[where], inverse)

    else:
        each = keys if sets is None else keys[:, sets]

        def step(values: np.ndarray, where: Any) -> np.ndarray:
            return feistel(each[:, where], half, values, inverse)

    return cycle_walk(step, o, size, size == 1 << (2 * half))


def _below(values: np.ndarray, bound: int) -> np.ndarray:
    """``values < bound`` for a Python-int bound that may be ``2**64``."""
    if bound >= MAX_SIZE:
        return np.ones(values.shape, dtype=bool)
    return values < _U64(bound)


class LocalPermutation(Parameterized):
    """Split ``s`` position ``q*W + o`` reads ``Q[s*m + q*W + sigma_{s,q}(o)]`` (spec/LOCAL.md).

    ``Q`` lists the ``M = ceil(N / C)`` clumps of ``C`` contiguous storage
    positions in the order of the computed permutation of ``[0, M)``.
    """

    __slots__ = (
        "_base",
        "_clumps",
        "_cut",
        "clump",
        "epoch",
        "num_rows",
        "num_splits",
        "short_at",
        "short_len",
        "shuffle_seed",
        "split_len",
        "window",
        "window_len",
    )

    def __init__(
        self, num_rows: int, num_splits: int, shuffle_seed: int, epoch: int, clump: int, window: int
    ) -> None:
        self.clump, self.window = _size(clump, "clump"), _size(window, "window")
        ComputedPermutation(num_rows, num_splits, shuffle_seed, epoch)  # its checks
        self.num_rows, self.num_splits, self.shuffle_seed, self.epoch = (
            num_rows,
            num_splits,
            shuffle_seed,
            epoch,
        )
        self.split_len = num_rows // num_splits
        count = -(-num_rows // clump)
        self._clumps = ComputedPermutation(count, 1, shuffle_seed, epoch)
        self.short_len = num_rows - (count - 1) * clump
        self.short_at = int(self._clumps.invert(np.array([count - 1], dtype=_U64))[0])
        self._cut = min(clump, num_rows)  # C >= N is one clump: the same sequence as C = N
        self.window_len = min(window, self.split_len)  # W >= m is one window per split
        self._base = mix_scalar((shuffle_seed + epoch * EPOCH_PRIME) ^ WINDOW_TAG)

    PARAMETERS = ("num_rows", "num_splits", "shuffle_seed", "epoch", "clump", "window")

    @property
    def clump_count(self) -> int:
        return self._clumps.num_rows

    @property
    def window_count(self) -> int:
        """Windows per split, ``ceil(m / W)``."""
        return -(-self.split_len // self.window_len)

    @property
    def fingerprint(self) -> str:
        """Identifies the algorithm and the six parameters."""
        return (
            f"{ALGORITHM}:rows={self.num_rows}:splits={self.num_splits}:seed={self.shuffle_seed}"
            f":epoch={self.epoch}:clump={self.clump}:window={self.window}"
        )

    def window_size(self, q: int) -> int:
        """``min(W, m - q*W)``."""
        if not 0 <= q < self.window_count:
            raise ValueError(f"window {q} outside [0, {self.window_count})")
        return min(self.window_len, self.split_len - q * self.window_len)

    # ------------------------------------------------------------ the clumped sequence

    def sequence(self, indices: np.ndarray) -> np.ndarray:
        """``Q[i]`` of every element (uint64, each in ``[0, num_rows)``)."""
        i = np.asarray(indices, dtype=_U64)
        if self.clump_count == 1:
            return i.copy()
        c, t, r = self._cut, self.short_at, self.short_len
        cut = _U64(c)
        if i.size and (int(i.max()) < t * c or int(i.min()) >= t * c + r):  # the short clump is not hit
            late = int(i.min()) >= t * c + r
            k, ordered = np.divmod(i - _U64(r) if late else i, cut)
            if late:
                k += _U64(1)
            ordered += self._clump_order(k) * cut
            return ordered
        before, short = i < _U64(t * c), _below(i, t * c + r)
        short &= ~before
        after = ~(before | short)
        out = np.empty_like(i)
        k = np.empty_like(i)
        off = np.empty_like(i)
        k[before], off[before] = i[before] // cut, i[before] % cut
        shifted = i[after] - _U64(r)
        k[after], off[after] = shifted // cut + _U64(1), shifted % cut
        full = ~short
        out[full] = self._clump_order(k[full]) * cut + off[full]
        out[short] = i[short] - _U64(t * c) + _U64((self.clump_count - 1) * c)
        return out

    def _clump_order(self, k: np.ndarray) -> np.ndarray:
        """The computed order of every clump index of ``k``: over the span ``min(k) .. max(k)`` once
        when it is no longer than ``k`` (a range of positions covers a few clumps, each ``C`` times)."""
        if k.size == 0:
            return k.copy()
        low, high = int(k.min()), int(k.max())
        if high - low + 1 >= k.size:
            return self._clumps.apply(k)
        span = self._clumps.apply(np.arange(high - low + 1, dtype=_U64) + _U64(low))
        out: np.ndarray = span.take((k - _U64(low)).view(np.int64))
        return out

    def sequence_inverse(self, positions: np.ndarray) -> np.ndarray:
        """``Q^-1(y)`` of every element."""
        y = np.asarray(positions, dtype=_U64)
        if self.clump_count == 1:
            return y.copy()
        cut = _U64(self._cut)
        k = self._clumps.invert(y // cut)
        off = y % cut
        late = k > _U64(self.short_at)
        out = k * cut + off
        out[late] = (k[late] - _U64(1)) * cut + _U64(self.short_len) + off[late]
        return out

    # ------------------------------------------------------------ windows

    def _keys(self, split: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The window keys of every element, as ``(keys, sets)`` for :func:`_sigma`: one key set per
        window of the span ``min(q) .. max(q)`` and each element's set, when every element is of one
        split and the span is short (a range of positions holds ``count / W`` windows, each ``W``
        times); otherwise one key set per element (``sets`` ``None``)."""
        if q.size < 2 or not bool(np.all(split == split[0])):
            return _window_keys(self._base, split, q), None
        low, high = int(q.min()), int(q.max())
        if 2 * (high - low + 1) > q.size:
            return _window_keys(self._base, split, q), None
        span = np.arange(high - low + 1, dtype=_U64) + _U64(low)
        return _window_keys(self._base, split[: span.size], span), q - _U64(low)

    def _offsets(self, split: np.ndarray, j: np.ndarray, inverse: bool) -> np.ndarray:
        """Split position ``j`` (window ``q``, offset ``o``) -> ``q*W + sigma^{+-1}_{split,q}(o)``."""
        width = self.window_len
        if width == 1:  # a bijection of [0, 1) is the identity: no keys, no network
            return j.copy()
        if width >= MAX_SIZE:  # one window of 2**64 positions (N = 2**64, S = 1)
            q, o = np.zeros_like(j), j.copy()
        else:
            q, o = j // _U64(width), j % _U64(width)
        keys, sets = self._keys(split, q)
        last = self.window_count - 1
        tail = self.split_len - last * width
        short = (q == _U64(last)) if tail < width else np.zeros(j.shape, dtype=bool)
        if not short.any():
            out = _sigma(keys, sets, width, o, inverse)
            if width < MAX_SIZE:
                out += q * _U64(width)
            return out
        out = np.empty_like(j)
        for mask, size in ((~short, width), (short, tail)):
            if mask.any():
                if sets is None:
                    out[mask] = _sigma(keys[:, mask], None, size, o[mask], inverse)
                else:
                    out[mask] = _sigma(keys, sets[mask], size, o[mask], inverse)
        if width < MAX_SIZE:
            out += q * _U64(width)
        return out

    def positions(self, split: int, first: int, count: int) -> np.ndarray:
        """Storage positions (uint64) of ``split`` at positions ``first .. first + count - 1``."""
        check_split_range(split, first, count, self.num_splits, self.split_len)
        j = np.arange(count, dtype=_U64) + _U64(first)
        splits = np.full(count, split, dtype=_U64)
        return self.sequence(self._offsets(splits, j, inverse=False) + _U64(split * self.split_len))

    def at(self, split: int, offsets: np.ndarray) -> np.ndarray:
        """Storage positions (uint64) of ``split`` at the split positions ``offsets`` (any order)."""
        j = check_split_offsets(split, offsets, self.num_splits, self.split_len)
        splits = np.full(j.size, split, dtype=_U64)
        return self.sequence(self._offsets(splits, j, inverse=False) + _U64(split * self.split_len))

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(split, position)`` reading each storage position; split ``num_splits`` marks a dropped row."""
        y = np.asarray(positions, dtype=_U64)
        if y.size and int(y.max()) >= self.num_rows:
            raise ValueError(f"position {int(y.max())} outside [0, {self.num_rows})")
        i = self.sequence_inverse(y)
        m = self.split_len
        if m >= MAX_SIZE:
            split, j = np.zeros_like(i), i
        else:
            split, j = np.minimum(i // _U64(m), _U64(self.num_splits)), i % _U64(m)
        read = split < _U64(self.num_splits)
        out = np.zeros_like(i)
        out[read] = self._offsets(split[read], j[read], inverse=True)
        return split, out

    def runs(self, split: int, q: int) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, lengths)`` of the runs of contiguous storage positions window ``q`` of ``split`` reads,
        ascending and merged."""
        if not 0 <= split < self.num_splits:
            raise ValueError(f"split {split} outside [0, {self.num_splits})")
        size = self.window_size(q)
        first = split * self.split_len + q * self.window_len
        read = np.sort(self.sequence(np.arange(size, dtype=_U64) + _U64(first)))
        breaks = np.flatnonzero(np.diff(read) != _U64(1)) + 1
        starts = np.concatenate(([0], breaks))
        ends = np.concatenate((breaks, [size]))
        return read[starts], (ends - starts).astype(_U64)


def window_read_order(perm: LocalPermutation, split: int, q: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ascending storage positions of window q, index into them of each position in read order)``."""
    wanted = perm.positions(split, q * perm.window_len, perm.window_size(q))
    return ascending(wanted)


def read_window(
    dataset: Any, perm: LocalPermutation, split: int, q: int, columns: list[str] | None = None
) -> pa.Table:
    """The rows window ``q`` of ``split`` reads, in its read order: one ascending ``take`` of its runs.

    ``dataset`` is a ``lance.LanceDataset`` pinned to the version ``num_rows`` was
    counted at (as for :func:`._computed.read_positions`). A reader holds one
    window per owned split: ``W`` rows each.
    """
    ascending, back = window_read_order(perm, split, q)
    got = dataset.take(ascending.astype(np.int64), columns=columns)
    return got.take(pa.array(back))
