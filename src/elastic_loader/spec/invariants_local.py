"""Predicates of the local-permutation invariants (``spec/INVARIANTS.md``, section "Local permutation").

Rules: as in :mod:`.invariants` (one predicate per name, ``None`` when it holds,
:class:`~.errors.InvariantViolation` otherwise). The predicates re-derive what
they judge from the definition's pieces (the clumped sequence ``Q``, the window
offsets ``sigma``, sets and counts) rather than trusting the function under
judgement alone. :mod:`.invariants` re-exports every name.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from .computed import ComputedPermutation, computed_positions
from .errors import check
from .local import (
    LocalPermutation,
    clumped_index,
    clumped_inverse,
    local_index,
    local_locate,
    local_positions,
    local_run_bound,
    local_runs,
    window_offset,
    window_offset_inverse,
    window_size,
)


def _local_point(perm: LocalPermutation, split: int, position: int) -> None:
    """One slot: its storage position is in range and locates back to the slot."""
    y = local_index(perm, split, position)
    check(0 <= y < perm.num_rows, "LocalBijectionInv", f"slot ({split}, {position}) reads {y}")
    check(
        local_locate(perm, y) == (split, position),
        "LocalBijectionInv",
        f"slot ({split}, {position}) reads {y}, located at {local_locate(perm, y)}",
    )


def LocalBijectionInv(perm: LocalPermutation, slots: Sequence[tuple[int, int]] | None = None) -> None:
    """``Q`` is a bijection of ``[0, N)``, every ``sigma`` a bijection of its window, and the ``S`` splits of
    ``m`` positions read ``S*m`` distinct storage positions, each located back at its slot.

    With ``slots`` (tables too large to enumerate) only those ``(split, position)`` slots are
    checked: each reads a position in range that ``local_locate`` maps back to it, which rules
    out a collision among them.
    """
    n, m = perm.num_rows, perm.split_len
    check(m == n // perm.num_splits and m >= 1, "LocalBijectionInv", f"split length {m}")
    if slots is not None:
        for split, position in slots:
            _local_point(perm, split, position)
        return
    sequence = [clumped_index(perm, i) for i in range(n)]
    check(
        sorted(sequence) == list(range(n)), "LocalBijectionInv", lambda: f"Q is not onto [0, {n}): {sequence}"
    )
    check(
        all(clumped_inverse(perm, y) == i for i, y in enumerate(sequence)),
        "LocalBijectionInv",
        "Q^-1 does not invert Q",
    )
    for split in range(perm.num_splits):
        _check_windows(perm, split)
        read = local_positions(perm, split, 0, m)
        expected = [sequence[split * m + _offset(perm, split, p)] for p in range(m)]
        check(list(read) == expected, "LocalBijectionInv", f"split {split} does not read Q through sigma")
        for p, y in enumerate(read):
            check(local_locate(perm, y) == (split, p), "LocalBijectionInv", f"position {y} misplaced")
    dropped = sequence[perm.num_splits * m :]
    check(
        all(local_locate(perm, y) is None for y in dropped), "LocalBijectionInv", "a dropped row is located"
    )


def _offset(perm: LocalPermutation, split: int, p: int) -> int:
    q, o = divmod(p, perm.window)
    return q * perm.window + window_offset(perm, split, q, o)


def _check_windows(perm: LocalPermutation, split: int) -> None:
    """Every window's ``sigma`` is a bijection of ``[0, w)`` inverted by ``sigma^-1``; sizes sum to ``m``."""
    sizes = [window_size(perm, q) for q in range(perm.window_count)]
    check(sum(sizes) == perm.split_len, "LocalBijectionInv", f"window sizes {sizes} do not sum to m")
    for q, w in enumerate(sizes):
        image = [window_offset(perm, split, q, o) for o in range(w)]
        check(sorted(image) == list(range(w)), "LocalBijectionInv", f"sigma of window ({split}, {q}) {image}")
        check(
            all(window_offset_inverse(perm, split, q, y) == o for o, y in enumerate(image)),
            "LocalBijectionInv",
            f"sigma^-1 of window ({split}, {q}) is not its inverse",
        )


def LocalLocalityInv(perm: LocalPermutation, windows: Sequence[tuple[int, int]] | None = None) -> None:
    """Window ``q`` of split ``s`` reads exactly the storage positions of its ``local_runs``: ascending,
    disjoint, non-adjacent runs of contiguous positions, at most ``local_run_bound`` of them.

    Without ``windows`` every window of every split is checked.
    """
    if windows is None:
        windows = [(s, q) for s in range(perm.num_splits) for q in range(perm.window_count)]
    for split, q in windows:
        runs = local_runs(perm, split, q)
        w = window_size(perm, q)
        read = sorted(local_positions(perm, split, q * perm.window, w))
        covered = [y for first, length in runs for y in range(first, first + length)]
        check(covered == read, "LocalLocalityInv", f"window ({split}, {q}) runs {runs} do not cover {read}")
        gaps = all(a[0] + a[1] < b[0] for a, b in itertools.pairwise(runs))
        check(gaps and all(length >= 1 for _, length in runs), "LocalLocalityInv", f"runs {runs} not merged")
        bound = local_run_bound(perm, q)
        check(
            len(runs) <= bound, "LocalLocalityInv", f"window ({split}, {q}) reads {len(runs)} > {bound} runs"
        )
        check(
            bound <= -(-perm.window // perm.clump) + 2,
            "LocalLocalityInv",
            f"bound {bound} above ceil(W/C) + 2",
        )


def LocalDegeneracyInv(
    num_rows: int,
    num_splits: int,
    shuffle_seed: int,
    epoch: int,
    slots: Sequence[tuple[int, int]] | None = None,
) -> None:
    """With ``clump = window = 1`` the local permutation reads, slot for slot, what the computed
    permutation of the same ``(N, S, shuffle_seed, epoch)`` reads. Without ``slots`` every slot is
    compared."""
    local = LocalPermutation(num_rows, num_splits, shuffle_seed, epoch, 1, 1)
    computed = ComputedPermutation(num_rows, num_splits, shuffle_seed, epoch)
    if slots is None:
        slots = [(s, p) for s in range(num_splits) for p in range(local.split_len)]
    for split, p in slots:
        ours = local_index(local, split, p)
        theirs = computed_positions(computed, split, p, 1)[0]
        check(ours == theirs, "LocalDegeneracyInv", f"slot ({split}, {p}): local {ours}, computed {theirs}")
