"""The ``computed_order`` family: the storage positions the computed and local permutations read.

The model is :mod:`~elastic_loader.spec.computed` (``permutation="computed"``) and
:mod:`~elastic_loader.spec.local` (``LocalShuffle(clump, window)``): for a table of ``num_rows``
rows cut into ``num_splits`` splits, with a seed and an epoch, the storage position every split
reads at every position (small tables) or at the sampled slots (large ones), the epoch's round
keys and the fingerprint a checkpoint must match, so another implementation can check its
Feistel and clump-window arithmetic bit for bit. Every computed case is checked against
``ComputedBijectionInv``; every local one against ``LocalBijectionInv``, ``LocalLocalityInv``
(small tables: every window; sampled: the sampled slots' windows) and, with ``clump = window =
1``, ``LocalDegeneracyInv``.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ....spec.computed import (
    ComputedPermutation,
    computed_fingerprint,
    computed_positions,
    round_keys,
)
from ....spec.local import LocalPermutation, local_fingerprint, local_index, local_positions
from ..codec import Json, as_int, as_ints, as_list, as_object, encode_int, encode_ints
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case

Slot = tuple[int, int]
"""``(split, position)``."""


@dataclass(frozen=True)
class OrderInput:
    """A table size, a split count, a seed, an epoch, the kind, and the slots asked (None: every one)."""

    num_rows: int
    num_splits: int
    shuffle_seed: int
    epoch: int
    local: tuple[int, int] | None
    """``(clump, window)`` of a local permutation; ``None``: the computed one."""
    slots: tuple[Slot, ...] | None


def _encode(x: OrderInput) -> JsonObject:
    kind: Json = (
        "computed"
        if x.local is None
        else {"kind": "local", "clump": encode_int(x.local[0]), "window": encode_int(x.local[1])}
    )
    return {
        "num_rows": encode_int(x.num_rows),
        "num_splits": encode_int(x.num_splits),
        "shuffle_seed": encode_int(x.shuffle_seed),
        "epoch": encode_int(x.epoch),
        "permutation": kind,
        "slots": None if x.slots is None else [encode_ints(slot) for slot in x.slots],
    }


def _decode(j: JsonObject) -> OrderInput:
    kind = j["permutation"]
    local = None
    if kind != "computed":
        spec = as_object(kind)
        local = (as_int(spec["clump"]), as_int(spec["window"]))
    raw = j["slots"]
    slots = None if raw is None else tuple(_slot(as_ints(s)) for s in as_list(raw))
    return OrderInput(
        as_int(j["num_rows"]),
        as_int(j["num_splits"]),
        as_int(j["shuffle_seed"]),
        as_int(j["epoch"]),
        local,
        slots,
    )


def _slot(values: tuple[int, ...]) -> Slot:
    if len(values) != 2:
        raise ValueError(f"a slot is [split, position], got {list(values)}")
    return values[0], values[1]


def _run(x: OrderInput) -> JsonObject:
    if x.local is None:
        return _run_computed(x)
    return _run_local(x, *x.local)


def _run_computed(x: OrderInput) -> JsonObject:
    perm = attempt(lambda: ComputedPermutation(x.num_rows, x.num_splits, x.shuffle_seed, x.epoch))
    if isinstance(perm, SpecError):
        return error_json(perm)
    m = perm.split_len
    if x.slots is None:
        inv.ComputedBijectionInv(perm)
        read: Json = [encode_ints(computed_positions(perm, s, 0, m)) for s in range(perm.num_splits)]
    else:
        inv.ComputedBijectionInv(perm, [s * m + p for s, p in x.slots])
        read = encode_ints([computed_positions(perm, s, p, 1)[0] for s, p in x.slots])
    return _output(perm.num_splits, m, x, read, computed_fingerprint(perm))


def _run_local(x: OrderInput, clump: int, window: int) -> JsonObject:
    perm = attempt(lambda: LocalPermutation(x.num_rows, x.num_splits, x.shuffle_seed, x.epoch, clump, window))
    if isinstance(perm, SpecError):
        return error_json(perm)
    m = perm.split_len
    if x.slots is None:
        inv.LocalBijectionInv(perm)
        inv.LocalLocalityInv(perm)
        read: Json = [encode_ints(local_positions(perm, s, 0, m)) for s in range(perm.num_splits)]
    else:
        inv.LocalBijectionInv(perm, x.slots)
        inv.LocalLocalityInv(perm, sorted({(s, p // window) for s, p in x.slots}))
        read = encode_ints([local_index(perm, s, p) for s, p in x.slots])
    if clump == window == 1:
        inv.LocalDegeneracyInv(x.num_rows, x.num_splits, x.shuffle_seed, x.epoch, x.slots)
    return _output(perm.num_splits, m, x, read, local_fingerprint(perm))


def _output(num_splits: int, m: int, x: OrderInput, read: Json, fingerprint: str) -> JsonObject:
    return {
        "split_len": encode_int(m),
        "round_keys": encode_ints(round_keys(x.shuffle_seed, x.epoch)),
        "positions" if x.slots is None else "sampled": read,
        "dropped": encode_int(x.num_rows - num_splits * m),
        "fingerprint": fingerprint,
    }


CODEC = Codec(_encode, _decode, _run)


def _case(
    name: str,
    description: str,
    rows: int,
    splits: int,
    seed: int = 0,
    epoch: int = 0,
    local: tuple[int, int] | None = None,
    sampled: bool = False,
) -> CaseDef:
    """A case of this family; ``sampled``: read at the slots :func:`_sampled` picks, else everywhere."""
    slots = _sampled(rows, splits) if sampled else None
    value = OrderInput(rows, splits, seed, epoch, local, slots)
    return make_case("computed_order", CODEC, name, description, value)


def _sampled(rows: int, splits: int) -> tuple[Slot, ...]:
    """Slots at the ends and spread over every split of a large table (deterministic)."""
    m = rows // splits
    picks = {0, 1, m // 3, m // 2, m - 2, m - 1}
    return tuple((s, p) for s in sorted({0, splits // 2, splits - 1}) for p in sorted(picks))


def cases() -> list[CaseDef]:
    """Storage positions of every split of the computed and local permutations (or of sampled slots)."""
    out = [
        _case("computed_one_row", "N = 1: the only row", 1, 1),
        _case("computed_two_rows", "the smallest network (h = 1, domain 4)", 2, 1, seed=5),
        _case("computed_four_rows", "N = 4**1: no cycle-walking", 4, 2, seed=1),
        _case("computed_five_rows", "N = 4 + 1: the domain grows to 16", 5, 1, seed=1),
        _case("computed_fifteen_rows", "N = 16 - 1", 15, 3, seed=9),
        _case("computed_sixteen_rows", "N = 4**2", 16, 4, seed=9),
        _case("computed_seventeen_rows", "N = 16 + 1, four splits: one row dropped", 17, 4, seed=9),
        _case(
            "computed_63_rows_5_splits", "N = 64 - 1, not divisible: three dropped", 63, 5, seed=2, epoch=1
        ),
        _case("computed_64_rows", "N = 4**3", 64, 8, seed=3),
        _case("computed_65_rows_2_splits", "N = 64 + 1", 65, 2, seed=3, epoch=2),
        _case("computed_255_rows_7_splits", "N = 4**4 - 1", 255, 7, seed=42),
        _case("computed_epoch_changes_the_order", "epoch 1 of the 64-row case", 64, 8, seed=3, epoch=1),
        _case("computed_large_seed", "a seed near 2**64", 30, 3, seed=2**64 - 1 - 100003, epoch=1),
        _case(
            "computed_billion_rows_sampled",
            "N = 10**9 in 8 splits, sampled slots",
            10**9,
            8,
            seed=7,
            sampled=True,
        ),
        _case(
            "computed_4pow15_plus_1_sampled",
            "N = 4**15 + 1: the domain grows to 4**16",
            4**15 + 1,
            3,
            seed=11,
            sampled=True,
        ),
        _case("local_degenerate", "clump = window = 1 reads the computed order", 17, 4, seed=9, local=(1, 1)),
        _case("local_one_row", "N = 1", 1, 1, local=(4, 16)),
        _case("local_short_clump", "C = 4 does not divide N = 30", 30, 3, seed=5, local=(4, 6)),
        _case("local_window_longer_than_split", "W = 64 > m = 10", 30, 3, seed=5, local=(4, 64)),
        _case("local_clump_of_every_row", "C = N: one clump", 20, 2, seed=5, local=(20, 4)),
        _case("local_64_rows", "N = 4**3, C = 4, W = 16", 64, 4, seed=3, local=(4, 16)),
        _case("local_65_rows_3_splits", "N = 4**3 + 1, C = 8, W = 5", 65, 3, seed=3, epoch=1, local=(8, 5)),
        _case(
            "local_billion_rows_sampled",
            "N = 10**9, C = 64, W = 256 (the default)",
            10**9,
            8,
            seed=7,
            local=(64, 256),
            sampled=True,
        ),
        _case(
            "local_billion_rows_short_clump_sampled",
            "N = 10**9 + 7, C = 1000 (a short clump), W = 3000",
            10**9 + 7,
            5,
            seed=13,
            local=(1000, 3000),
            sampled=True,
        ),
        _case("error_no_rows", "N = 0 has no permutation", 0, 1),
        _case("error_fewer_rows_than_splits", "3 rows cannot fill 4 splits", 3, 4),
        _case("error_local_clump_zero", "a clump must be >= 1", 10, 2, local=(0, 4)),
    ]
    return out


FAMILY = family("computed_order", cases, CODEC)
