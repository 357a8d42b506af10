"""The computed permutation, vectorised (opt-in; spec/COMPUTED.md defines it).

Rules: storage positions are numpy uint64 and every operation wraps modulo
2**64, exactly as the definition says, so results are bit-identical to the
executable spec (a differential test compares them). Nothing here grows with
the table: an instance holds its four parameters and eight round keys, and
pickles as the four parameters. Cycle-walking re-applies the network only to
the elements still outside [0, N). Reading by storage position uses Lance's
``take``, whose indices count the live rows of a pinned dataset version in
fragment order (tests/pipeline/reading/test_pipe_computed.py checks this, deletions
included). This module never imports the spec.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Self

import numpy as np
import pyarrow as pa

from ._lance import EPOCH_PRIME

ALGORITHM = "feistel8-splitmix64-v1"
ROUNDS = 8
MAX_ROWS = 2**64
_MASK64 = 2**64 - 1
_GAMMA = 0x9E3779B97F4A7C15
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _mix_scalar(z: int) -> int:
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _mix_into(z: np.ndarray, tmp: np.ndarray) -> None:
    """splitmix64's finaliser applied to ``z`` in place (``tmp``: scratch of the same shape)."""
    np.right_shift(z, _S30, out=tmp)
    z ^= tmp
    z *= _MUL1
    np.right_shift(z, _S27, out=tmp)
    z ^= tmp
    z *= _MUL2
    np.right_shift(z, _S31, out=tmp)
    z ^= tmp


GAMMA = _GAMMA
"""The key-schedule increment, shared with ``_local.py`` (which builds its window keys the same way)."""
mix_scalar = _mix_scalar
"""splitmix64's finaliser of one Python int, shared with ``_local.py``."""
mix_into = _mix_into
"""splitmix64's finaliser of a uint64 array in place, shared with ``_local.py``."""


def round_keys(shuffle_seed: int, epoch: int) -> tuple[int, ...]:
    """The round keys of an epoch: ``mix64(seed + epoch * 100003 + (i + 1) * GAMMA)``."""
    if shuffle_seed < 0 or epoch < 0:
        raise ValueError(f"shuffle_seed and epoch must be >= 0, got {shuffle_seed} and {epoch}")
    seed = shuffle_seed + epoch * EPOCH_PRIME
    if seed >= 2**64:
        raise ValueError("shuffle_seed + epoch * 100003 must be < 2**64")
    return tuple(_mix_scalar(seed + (i + 1) * _GAMMA) for i in range(ROUNDS))


def half_width(num_rows: int) -> int:
    """The smallest ``h >= 1`` with ``4**h >= num_rows``."""
    if not 1 <= num_rows <= MAX_ROWS:
        raise ValueError(f"a computed permutation needs 1 <= num_rows <= 2**64, got {num_rows}")
    return (max(2, (num_rows - 1).bit_length()) + 1) // 2


RoundFunction = Callable[[int, np.ndarray, np.ndarray], object]
"""``f(i, half_in, out)`` writes round ``i``'s function of the half ``half_in`` to ``out``."""


def _network(x: np.ndarray, half: int, rounds: int, inverse: bool, function: RoundFunction) -> np.ndarray:
    """The Feistel network over ``[0, 4**half)`` with round function ``function`` (``inverse``: its
    inverse, the rounds backwards): split ``x`` into halves, then per round XOR the function of one
    half into the other and swap them."""
    shift = np.uint64(half)
    left, right = x >> shift, x & np.uint64((1 << half) - 1)
    f = np.empty_like(x)
    for i in reversed(range(rounds)) if inverse else range(rounds):
        function(i, left if inverse else right, f)
        if inverse:
            right ^= f
        else:
            left ^= f
        left, right = right, left
    left <<= shift
    left |= right
    return left


def feistel(keys: Sequence[Any] | np.ndarray, half: int, x: np.ndarray, inverse: bool) -> np.ndarray:
    """The Feistel network over ``[0, 4**half)`` (``inverse``: its inverse), one round per key:
    round ``i``'s function is ``mix64(half XOR keys[i])`` masked to ``half`` bits.

    ``keys[i]`` is round ``i``'s key: one uint64 for every element, or an array
    with one key per element of ``x`` (the local permutation's windows).
    """
    mask, tmp = np.uint64((1 << half) - 1), np.empty_like(x)

    def mixed(i: int, half_in: np.ndarray, out: np.ndarray) -> None:
        np.bitwise_xor(half_in, keys[i], out=out)
        _mix_into(out, tmp)
        out &= mask

    return _network(x, half, len(keys), inverse, mixed)


TABLE_MAX_HALF = 16
"""Networks over at most ``2 * TABLE_MAX_HALF`` bits may read each round's function from a table."""


LOOKUP_BLOCK = 16_384
"""Elements :func:`feistel_lookup` maps at a time."""


def round_tables(keys: np.ndarray, half: int) -> np.ndarray:
    """Each round's function of :func:`feistel` as a lookup table, for several key sets at once.

    ``keys`` is ``(rounds, sets)``: column ``w`` holds key set ``w``'s round keys. Row ``i`` of the
    result maps ``w << half | r`` to ``mix64(r ^ keys[i, w]) & (2**half - 1)`` for every half ``r``.
    """
    half_values = np.arange(1 << half, dtype=np.uint64)
    tables = keys[:, :, None] ^ half_values
    _mix_into(tables, np.empty_like(tables))
    tables &= np.uint64((1 << half) - 1)
    return tables.reshape(keys.shape[0], -1)


def feistel_lookup(
    tables: np.ndarray, half: int, x: np.ndarray, sets: np.ndarray | None, inverse: bool
) -> np.ndarray:
    """:func:`feistel` with round ``i``'s function read from ``tables[i]`` (:func:`round_tables`):
    element ``k`` uses key set ``sets[k]`` (``None``: set 0 for every element). The same values,
    with a table lookup in place of the eight-step mix: a table of ``2**half`` entries per key set
    is far smaller than the ``4**half`` values the network covers."""
    if x.size > LOOKUP_BLOCK:  # working arrays that stay in a core's cache (2.6x as fast, timed once)
        out = np.empty_like(x)
        for a in range(0, x.size, LOOKUP_BLOCK):
            b = a + LOOKUP_BLOCK
            out[a:b] = feistel_lookup(tables, half, x[a:b], None if sets is None else sets[a:b], inverse)
        return out
    at = np.empty_like(x)
    base = None if sets is None else sets << np.uint64(half)

    def looked_up(i: int, half_in: np.ndarray, out: np.ndarray) -> None:
        if base is not None:
            half_in = np.bitwise_or(base, half_in, out=at)
        np.take(tables[i], half_in.view(np.int64), out=out, mode="clip")  # every index is in range

    return _network(x, half, len(tables), inverse, looked_up)


def cycle_walk(
    step: Callable[[np.ndarray, Any], np.ndarray], x: np.ndarray, size: int, full: bool
) -> np.ndarray:
    """``step`` applied to ``x``, then again to the elements still ``>= size`` until none is.

    ``step(values, where)`` maps ``values``, the elements of ``x`` at ``where``
    (``slice(None)`` the first time, then an index array), so a step with
    per-element keys can pick the keys of those elements. ``full``: the network
    covers exactly ``[0, size)`` and one step is enough.
    """
    y = step(x, slice(None))
    if full:
        return y
    limit = np.uint64(size)
    todo = np.flatnonzero(y >= limit)
    while todo.size:
        again = step(y[todo], todo)
        y[todo] = again
        todo = todo[again >= limit]
    return y


def check_split_range(split: int, first: int, count: int, num_splits: int, split_len: int) -> None:
    """Raise ``ValueError`` unless ``split`` exists and ``[first, first + count)`` lies inside it."""
    if not 0 <= split < num_splits:
        raise ValueError(f"split {split} outside [0, {num_splits})")
    if first < 0 or count < 0 or first + count > split_len:
        raise ValueError(f"positions [{first}, {first + count}) outside the split length {split_len}")


def check_split_offsets(split: int, offsets: np.ndarray, num_splits: int, split_len: int) -> np.ndarray:
    """``offsets`` as uint64; raise ``ValueError`` unless ``split`` exists and every offset lies inside it."""
    j = np.asarray(offsets, dtype=np.uint64)
    if not 0 <= split < num_splits:
        raise ValueError(f"split {split} outside [0, {num_splits})")
    if j.size and int(j.max()) >= split_len:
        raise ValueError(f"position {int(j.max())} outside the split length {split_len}")
    return j


def ascending(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(positions in ascending order, index into them of each position as given)``: a read in
    ascending order (faster in Lance), then ``take(back)``, returns the rows in the order asked for."""
    order = np.argsort(positions, kind="stable")
    back = np.empty_like(order)
    back[order] = np.arange(order.size)
    return positions[order], back


class Parameterized:
    """A permutation that pickles and prints as the parameters it is built from: ``PARAMETERS``,
    the constructor's arguments in order, each an attribute of the instance."""

    __slots__ = ()
    PARAMETERS: ClassVar[tuple[str, ...]] = ()

    def __reduce__(self) -> tuple[type[Self], tuple[int, ...]]:
        return (type(self), tuple(getattr(self, name) for name in self.PARAMETERS))

    def __repr__(self) -> str:
        arguments = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.PARAMETERS)
        return f"{type(self).__name__}({arguments})"


class _Network:
    """The Feistel network of one epoch over ``[0, 4**half)``, on uint64 arrays (a step of
    :func:`cycle_walk`: the keys are the same for every element)."""

    def __init__(self, keys: tuple[int, ...], half: int) -> None:
        self.keys = tuple(np.uint64(k) for k in keys)
        self.half = half
        self._tables: np.ndarray | None = None

    def _run(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        # the tables (8 * 2**half values) pay for themselves once a call maps as many elements;
        # built on the first such call and kept (at most 4 MiB)
        if self.half <= TABLE_MAX_HALF and x.size >= 1 << self.half:
            if self._tables is None:
                self._tables = round_tables(np.array(self.keys, dtype=np.uint64)[:, None], self.half)
            return feistel_lookup(self._tables, self.half, x, None, inverse)
        return feistel(self.keys, self.half, x, inverse)

    def encrypt(self, x: np.ndarray, _where: object = None) -> np.ndarray:
        return self._run(x, inverse=False)

    def decrypt(self, y: np.ndarray, _where: object = None) -> np.ndarray:
        return self._run(y, inverse=True)


class ComputedPermutation(Parameterized):
    """Split ``s`` position ``p`` reads storage position ``f(s * m + p)``, ``m = num_rows // num_splits``.

    Construction costs the same at every table size; ``positions`` costs
    about ``4**h / N < 4`` network applications per position on average.
    """

    __slots__ = ("_network", "epoch", "full", "num_rows", "num_splits", "shuffle_seed", "split_len")

    def __init__(self, num_rows: int, num_splits: int, shuffle_seed: int, epoch: int) -> None:
        half = half_width(num_rows)
        if num_splits < 1:
            raise ValueError(f"num_splits must be >= 1, got {num_splits}")
        if num_rows < num_splits:
            raise ValueError(f"{num_rows} rows cannot fill {num_splits} splits of at least one row")
        self.num_rows, self.num_splits = num_rows, num_splits
        self.shuffle_seed, self.epoch = shuffle_seed, epoch
        self.split_len = num_rows // num_splits
        self.full = num_rows == 1 << (2 * half)
        self._network = _Network(round_keys(shuffle_seed, epoch), half)

    PARAMETERS = ("num_rows", "num_splits", "shuffle_seed", "epoch")

    @property
    def fingerprint(self) -> str:
        """Identifies the algorithm, ``num_rows``, ``num_splits``, ``shuffle_seed`` and ``epoch``."""
        return (
            f"{ALGORITHM}:rows={self.num_rows}:splits={self.num_splits}"
            f":seed={self.shuffle_seed}:epoch={self.epoch}"
        )

    def apply(self, indices: np.ndarray) -> np.ndarray:
        """``f`` of every element of ``indices`` (uint64, each in ``[0, num_rows)``)."""
        return cycle_walk(self._network.encrypt, self._checked(indices), self.num_rows, self.full)

    def invert(self, positions: np.ndarray) -> np.ndarray:
        """``f^-1`` of every element of ``positions`` (uint64, each in ``[0, num_rows)``)."""
        return cycle_walk(self._network.decrypt, self._checked(positions), self.num_rows, self.full)

    def positions(self, split: int, first: int, count: int) -> np.ndarray:
        """Storage positions (uint64) of ``split`` at positions ``first .. first + count - 1``."""
        check_split_range(split, first, count, self.num_splits, self.split_len)
        indices = np.arange(count, dtype=np.uint64)
        indices += np.uint64(split * self.split_len + first)
        return cycle_walk(self._network.encrypt, indices, self.num_rows, self.full)

    def at(self, split: int, offsets: np.ndarray) -> np.ndarray:
        """Storage positions (uint64) of ``split`` at the split positions ``offsets`` (any order)."""
        j = check_split_offsets(split, offsets, self.num_splits, self.split_len)
        return cycle_walk(
            self._network.encrypt, j + np.uint64(split * self.split_len), self.num_rows, self.full
        )

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(split, position)`` reading each storage position; split ``num_splits`` marks a dropped row."""
        index = self.invert(positions)
        m = np.uint64(self.split_len)
        split = np.minimum(index // m, np.uint64(self.num_splits))
        return split, np.where(split < self.num_splits, index % m, np.uint64(0))

    def _checked(self, values: np.ndarray) -> np.ndarray:
        array = np.array(values, dtype=np.uint64, copy=True)
        if self.num_rows < MAX_ROWS and array.size and int(array.max()) >= self.num_rows:
            raise ValueError(f"value {int(array.max())} outside [0, {self.num_rows})")
        return array


def read_positions(dataset: Any, positions: np.ndarray, columns: list[str] | None = None) -> pa.Table:
    """The rows at ``positions`` of a Lance dataset, in the order given.

    ``dataset`` is a ``lance.LanceDataset`` pinned to one version (for a
    LanceDB table, ``table.to_lance()`` at the permutation's version). A
    position counts the live rows in fragment order: after a deletion every
    later row moves down by one, so positions are valid only for the version
    their ``num_rows`` was counted at. Reads are issued in ascending position
    order (faster in Lance) and put back in the order asked for.
    """
    wanted = np.asarray(positions, dtype=np.uint64)
    if wanted.size == 0:
        return dataset.take(np.empty(0, dtype=np.int64), columns=columns)
    sorted_positions, back = ascending(wanted)
    got = dataset.take(sorted_positions.astype(np.int64), columns=columns)
    return got.take(pa.array(back))
