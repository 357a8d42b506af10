"""The computed permutation: a keyed bijection of storage positions, cut into splits by arithmetic.

Rules of this module (spec/COMPUTED.md is the prose definition; this code is the normative one):

* Every value is an unsigned 64-bit integer and every operation is taken
  modulo ``2**64`` (``& MASK64`` after each addition or multiplication), so an
  implementation in any language with 64-bit unsigned arithmetic reproduces the
  permutation bit for bit.
* The permutation of ``N`` rows is ``f = walk(E)`` where ``E`` is a balanced
  Feistel network of ``ROUNDS`` rounds over the domain ``[0, 4**h)``,
  ``h = half_width(N)`` (the smallest ``h >= 1`` with ``4**h >= N``), and
  ``walk`` applies ``E`` again until the value lands in ``[0, N)``
  (cycle-walking). ``f`` is a bijection of ``[0, N)`` (``ComputedBijectionInv``).
* Round keys depend only on the epoch seed ``perm_seed(shuffle_seed, epoch)``
  (the same rule as the builder's shuffle, so the same collisions, D13 and
  spec/COMPUTED.md): key ``i`` is ``mix64(epoch_seed + (i + 1) * GAMMA)``.
* Split ``s`` position ``p`` holds storage position ``f(s*m + p)`` with
  ``m = N // S``; the last ``N mod S`` values of the permuted order are never
  read, as the builder drops them.
* Nothing is materialised: construction, memory and the cost of one position
  do not depend on ``N`` (a walk has at most ``4**h - N + 1`` network
  applications, ``4**h / N < 4`` on average over ``[0, N)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import require
from .params import SEED_LIMIT, perm_seed
from .topology import Permutation

ALGORITHM = "feistel8-splitmix64-v1"
"""Names the algorithm and its constants; part of every fingerprint."""
ROUNDS = 8
"""Feistel rounds (see spec/COMPUTED.md for the choice)."""
MASK64 = 2**64 - 1
GAMMA = 0x9E3779B97F4A7C15
"""The key-schedule increment (splitmix64's golden-ratio step)."""
MIX_MUL1 = 0xBF58476D1CE4E5B9
MIX_MUL2 = 0x94D049BB133111EB
MAX_ROWS = 2**64
"""The largest table: the domain ``4**32 = 2**64`` holds every uint64."""


def mix64(z: int) -> int:
    """The splitmix64 finaliser, a bijection of ``[0, 2**64)``."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * MIX_MUL1) & MASK64
    z = ((z ^ (z >> 27)) * MIX_MUL2) & MASK64
    return z ^ (z >> 31)


def round_keys(shuffle_seed: int, epoch: int) -> tuple[int, ...]:
    """The ``ROUNDS`` round keys of an epoch: ``mix64(epoch_seed + (i + 1) * GAMMA)`` for ``i < ROUNDS``.

    Raises ``SpecValueError`` when the seed or epoch is negative or the epoch
    seed is not below ``2**64`` (the constructor's own checks).
    """
    require(shuffle_seed >= 0, "shuffle_seed_out_of_range", "shuffle_seed must be >= 0")
    require(epoch >= 0, "epoch_out_of_range", "epoch must be >= 0")
    seed = perm_seed(shuffle_seed, epoch)
    require(seed < SEED_LIMIT, "shuffle_seed_out_of_range", "shuffle_seed + epoch * 100003 must be < 2**64")
    return tuple(mix64(seed + (i + 1) * GAMMA) for i in range(ROUNDS))


def half_width(num_rows: int) -> int:
    """The smallest ``h >= 1`` with ``4**h >= num_rows``: the network works on ``2h``-bit values."""
    require(
        1 <= num_rows <= MAX_ROWS,
        "computed_rows_out_of_range",
        f"a computed permutation needs 1 <= num_rows <= 2**64, got {num_rows}",
    )
    bits = max(2, (num_rows - 1).bit_length())
    return (bits + 1) // 2


def round_output(key: int, half: int, right: int) -> int:
    """The round function ``F(key, right) = mix64(right XOR key) mod 2**half``."""
    return mix64(right ^ key) & ((1 << half) - 1)


def feistel_encrypt(keys: tuple[int, ...], half: int, x: int) -> int:
    """``E(x)`` on ``[0, 4**half)``: split ``x`` into ``(x >> half, x mod 2**half)``, apply every round
    ``(L, R) -> (R, L XOR F(k, R))`` in key order, join ``(L << half) | R``."""
    left, right = x >> half, x & ((1 << half) - 1)
    for key in keys:
        left, right = right, left ^ round_output(key, half, right)
    return (left << half) | right


def feistel_decrypt(keys: tuple[int, ...], half: int, y: int) -> int:
    """``E^-1(y)``: the rounds undone in reverse key order, ``(L, R) -> (R XOR F(k, L), L)``."""
    left, right = y >> half, y & ((1 << half) - 1)
    for key in reversed(keys):
        left, right = right ^ round_output(key, half, left), left
    return (left << half) | right


@dataclass(frozen=True)
class ComputedPermutation:
    """The computed permutation of ``num_rows`` storage positions into ``num_splits`` splits.

    Raises ``SpecValueError`` on construction for ``num_rows`` outside
    ``[1, 2**64]``, ``num_splits < 1``, fewer rows than splits, or a seed the
    constructor would reject.
    """

    num_rows: int
    num_splits: int
    shuffle_seed: int
    epoch: int
    keys: tuple[int, ...] = field(init=False, repr=False, compare=False)
    half: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "half", half_width(self.num_rows))
        require(self.num_splits > 0, "num_splits_not_positive", "num_splits must be > 0")
        require(
            self.num_rows >= self.num_splits,
            "fewer_rows_than_splits",
            f"{self.num_rows} rows cannot fill {self.num_splits} splits",
        )
        object.__setattr__(self, "keys", round_keys(self.shuffle_seed, self.epoch))

    @property
    def split_len(self) -> int:
        """``m = N // S``, the common length of every split (``>= 1``)."""
        return self.num_rows // self.num_splits

    @property
    def domain(self) -> int:
        """``4**half``, the size of the network's domain."""
        return 1 << (2 * self.half)


def cycle_walk(perm: ComputedPermutation, network: Callable[[tuple[int, ...], int, int], int], x: int) -> int:
    """Apply ``network`` (the Feistel network or its inverse) to ``x`` in ``[0, N)`` until the value
    lies in ``[0, N)`` again: a bijection of ``[0, 4**half)`` walked this way is one of ``[0, N)``."""
    require(0 <= x < perm.num_rows, "computed_index_out_of_range", f"index {x} outside [0, {perm.num_rows})")
    y = network(perm.keys, perm.half, x)
    while y >= perm.num_rows:
        y = network(perm.keys, perm.half, y)
    return y


def computed_index(perm: ComputedPermutation, i: int) -> int:
    """``f(i)``: apply the network to ``i`` until the value lies in ``[0, N)`` (cycle-walking)."""
    return cycle_walk(perm, feistel_encrypt, i)


def computed_inverse(perm: ComputedPermutation, y: int) -> int:
    """``f^-1(y)``: apply the inverse network until the value lies in ``[0, N)``."""
    return cycle_walk(perm, feistel_decrypt, y)


def computed_positions(perm: ComputedPermutation, split: int, first: int, count: int) -> tuple[int, ...]:
    """Storage positions of ``split`` at positions ``first .. first+count-1``: ``f(split*m + p)``."""
    m = perm.split_len
    require(
        0 <= split < perm.num_splits,
        "computed_split_out_of_range",
        f"split {split} outside [0, {perm.num_splits})",
    )
    require(
        first >= 0 and count >= 0 and first + count <= m,
        "computed_range_out_of_range",
        f"positions [{first}, {first + count}) outside the split length {m}",
    )
    base = split * m
    return tuple(computed_index(perm, base + p) for p in range(first, first + count))


def computed_locate(perm: ComputedPermutation, position: int) -> tuple[int, int] | None:
    """Which ``(split, position)`` reads storage ``position``; ``None`` for the dropped ``N mod S``."""
    i = computed_inverse(perm, position)
    m = perm.split_len
    return (i // m, i % m) if i < perm.num_splits * m else None


def computed_order(perm: ComputedPermutation) -> tuple[int, ...]:
    """``f(0), ..., f(N-1)``: the whole permuted order (for small tables: it is ``N`` values)."""
    return tuple(computed_index(perm, i) for i in range(perm.num_rows))


def computed_splits(perm: ComputedPermutation) -> Permutation:
    """The permutation as the rest of the model takes it: split ``s`` = storage positions in read order."""
    return tuple(computed_positions(perm, s, 0, perm.split_len) for s in range(perm.num_splits))


def computed_fingerprint(perm: ComputedPermutation) -> str:
    """Identifies ``(ALGORITHM, N, S, shuffle_seed, epoch)``: what a checkpoint must match."""
    return (
        f"{ALGORITHM}:rows={perm.num_rows}:splits={perm.num_splits}"
        f":seed={perm.shuffle_seed}:epoch={perm.epoch}"
    )
