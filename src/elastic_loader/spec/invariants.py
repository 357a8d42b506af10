"""One predicate per named invariant of ``spec/INVARIANTS.md``.

Rules: a predicate is named exactly like the invariant (``FooInv`` for a
property of one state, ``FooProp`` for a property of a run), returns ``None``
when it holds and raises :class:`InvariantViolation` (an ``AssertionError``)
with a counterexample description when it does not. Predicates re-derive what
they check from first principles (streams, counts, sets) rather than calling
the function they judge, except where the invariant *is* a relation between
model functions (for example, merge against a single-rank run).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from .checkpoint import (
    HEAD_KEYS,
    PACKED_PROGRESS_KEYS,
    PACKING_KEYS,
    ROW_KEYS,
    join_packed,
    join_row,
    load_packed,
    load_row,
    snapshot_packed,
    snapshot_row,
)
from .computed import (
    ComputedPermutation,
    computed_index,
    computed_inverse,
    computed_locate,
    computed_positions,
)
from .errors import InvariantViolation, check as _check

# The local-permutation, mixture, packing and save-protocol predicates live in their own modules and join
# this namespace here, so every invariant has one home and one import path.
from .invariants_local import (
    LocalBijectionInv as LocalBijectionInv,
    LocalDegeneracyInv as LocalDegeneracyInv,
    LocalLocalityInv as LocalLocalityInv,
)
from .invariants_mixture import (
    MixtureElasticDeterminismProp as MixtureElasticDeterminismProp,
    MixtureExactlyOnceProp as MixtureExactlyOnceProp,
    MixtureLockstepInv as MixtureLockstepInv,
    MixtureProportionInv as MixtureProportionInv,
)
from .invariants_packing import (
    AutoBudgetInv as AutoBudgetInv,
    DocIdsInv as DocIdsInv,
    PackingBudgetProp as PackingBudgetProp,
    PackingConservationInv as PackingConservationInv,
)
from .invariants_saved import (
    LockstepInferenceInv as LockstepInferenceInv,
    MergeReportedInv as MergeReportedInv,
    PartialStateRefusedInv as PartialStateRefusedInv,
    ProtocolChainProp as ProtocolChainProp,
    ReachableLoadInv as ReachableLoadInv,
    SameTopologyResumeProp as SameTopologyResumeProp,
    TableVersionPinInv as TableVersionPinInv,
)
from .loader import LoaderRun, global_steps, topology_steps
from .packing import PackedRun, PackedState, iterate_packed
from .rows import Faults, Raised, RowRun, RowState, Yielded, iterate_rows
from .saved import exact, merge_state_dicts, snapshot_saved
from .topology import (
    PackingConfig,
    Permutation,
    RunConfig,
    Topology,
    owned_splits,
    worker_blocks,
)

INVARIANT_NAMES = (
    "PartitionInv",
    "SplitSizeInv",
    "ComputedBijectionInv",
    "ProgressBoundsInv",
    "SkipAccountingInv",
    "HonestProgressInv",
    "CatchUpInv",
    "MergeLatticeInv",
    "CheckpointRoundTripInv",
    "PackingConservationInv",  # packing: predicates in invariants_packing.py
    "DocIdsInv",
    "AutoBudgetInv",
    "CanonicalOrderProp",
    "ElasticDeterminismProp",
    "ResumeEquivalenceProp",
    "ExactlyOnceProp",
    "MergeExactProp",
    "ConsumerCommitProp",
    "PackingBudgetProp",
    "RaisePositionProp",
    # save protocols (predicates in invariants_saved.py, re-exported above)
    "LockstepInferenceInv",
    "MergeReportedInv",
    "PartialStateRefusedInv",
    "ReachableLoadInv",
    "TableVersionPinInv",
    "ProtocolChainProp",
    "SameTopologyResumeProp",
    # the local permutation (predicates in invariants_local.py, re-exported above)
    "LocalBijectionInv",
    "LocalLocalityInv",
    "LocalDegeneracyInv",
    # mixtures (predicates in invariants_mixture.py, re-exported above)
    "MixtureProportionInv",
    "MixtureLockstepInv",
    "MixtureElasticDeterminismProp",
    "MixtureExactlyOnceProp",
)


def yieldable(split: Sequence[int], faults: Faults, start: int = 0) -> list[int]:
    """Positions ``>= start`` a row iterator can yield: not skipped, before the first raising row."""
    out: list[int] = []
    for p in range(start, len(split)):
        if split[p] in faults.raising:
            break
        if split[p] not in faults.skipped:
            out.append(p)
    return out


# ---------------------------------------------------------------- topology


def PartitionInv(num_splits: int, world_size: int, num_workers: int) -> None:
    """The (rank, worker) blocks are contiguous, equally sized and partition ``0..S-1`` in order."""
    blocks = worker_blocks(num_splits, world_size, num_workers)
    flat = [s for block in blocks for s in block]
    _check(
        flat == list(range(num_splits)),
        "PartitionInv",
        f"blocks {blocks} do not partition 0..{num_splits - 1}",
    )
    _check(len({len(b) for b in blocks}) == 1, "PartitionInv", f"blocks {blocks} differ in size")


def SplitSizeInv(order: Sequence[int], num_splits: int, perm: Permutation) -> None:
    """Splits have equal length ``m = N // S >= 1``, cover ``order[:S*m]`` in order, drop ``< S`` rows."""
    m = len(order) // num_splits
    _check(len(perm) == num_splits, "SplitSizeInv", f"{len(perm)} splits, expected {num_splits}")
    _check(all(len(s) == m for s in perm), "SplitSizeInv", f"split lengths {[len(s) for s in perm]} != {m}")
    _check(m >= 1, "SplitSizeInv", "a split is empty")
    _check(
        [r for s in perm for r in s] == list(order[: num_splits * m]), "SplitSizeInv", "splits reorder rows"
    )
    _check(len(order) - num_splits * m < num_splits, "SplitSizeInv", "more than S-1 rows dropped")


def _slot(perm: ComputedPermutation, i: int) -> tuple[int, int] | None:
    """The ``(split, position)`` reading index ``i`` of the permuted order; ``None`` past ``S*m``."""
    m = perm.split_len
    return (i // m, i % m) if i < perm.num_splits * m else None


def _computed_point(perm: ComputedPermutation, i: int) -> None:
    """Index ``i``: ``f(i)`` in range, inverted by ``f^-1``, located at and read by its split slot."""
    y = computed_index(perm, i)
    _check(0 <= y < perm.num_rows, "ComputedBijectionInv", f"f({i}) = {y} outside [0, {perm.num_rows})")
    _check(computed_inverse(perm, y) == i, "ComputedBijectionInv", f"f^-1(f({i})) != {i}")
    slot = _slot(perm, i)
    _check(computed_locate(perm, y) == slot, "ComputedBijectionInv", f"position {y} is not read by {slot}")
    if slot is not None:
        got = computed_positions(perm, slot[0], slot[1], 1)
        _check(got == (y,), "ComputedBijectionInv", f"split {slot[0]} position {slot[1]} reads {got}")


def ComputedBijectionInv(perm: ComputedPermutation, indices: Sequence[int] | None = None) -> None:
    """``f`` is a bijection of ``[0, N)``, ``f^-1`` its inverse, and the cut reads ``S * (N // S)`` positions.

    Without ``indices`` every index is checked: the values ``f(0..N-1)`` are
    exactly ``0..N-1``, ``f^-1`` inverts each, every position is located at
    the split slot that reads it, and the ``S`` splits of ``m`` rows read
    ``f(0..S*m-1)`` in order, so ``S*m`` distinct positions. With ``indices``
    (tables too large to enumerate) only those indices are checked, which
    still rules out a collision among them (``f^-1`` is a left inverse).
    """
    n, s_, m = perm.num_rows, perm.num_splits, perm.split_len
    _check(m == n // s_ and m >= 1, "ComputedBijectionInv", f"split length {m} for {n} rows in {s_} splits")
    if indices is not None:
        for i in indices:
            _computed_point(perm, i)
        return
    order = [computed_index(perm, i) for i in range(n)]
    _check(
        sorted(order) == list(range(n)), "ComputedBijectionInv", lambda: f"f is not onto [0, {n}): {order}"
    )
    for i, y in enumerate(order):
        _check(computed_inverse(perm, y) == i, "ComputedBijectionInv", f"f^-1(f({i})) != {i}")
        _check(computed_locate(perm, y) == _slot(perm, i), "ComputedBijectionInv", f"position {y} misplaced")
    splits = [computed_positions(perm, s, 0, m) for s in range(s_)]
    _check(all(len(split) == m for split in splits), "ComputedBijectionInv", "a split has the wrong length")
    flat = [y for split in splits for y in split]
    _check(flat == order[: s_ * m], "ComputedBijectionInv", "the splits do not read f(0..S*m-1) in order")
    _check(len(set(flat)) == s_ * m, "ComputedBijectionInv", "the splits read a position twice")


# ---------------------------------------------------------------- row progress


def ProgressBoundsInv(state: RowState, split_len: int) -> None:
    """For every split, ``0 <= samples <= positions <= split length``."""
    for s, (c, p) in enumerate(zip(state.samples, state.positions)):
        _check(
            0 <= c <= p <= split_len,
            "ProgressBoundsInv",
            f"split {s}: samples={c} positions={p} len={split_len}",
        )


def SkipAccountingInv(perm: Permutation, faults: Faults, state: RowState) -> None:
    """``positions[s] - samples[s]`` is the number of skipped rows before ``positions[s]``."""
    for s, (c, p) in enumerate(zip(state.samples, state.positions)):
        skipped = sum(1 for row in perm[s][:p] if row in faults.skipped)
        _check(
            p - c == skipped,
            "SkipAccountingInv",
            f"split {s}: positions {p} - samples {c} != {skipped} skipped",
        )


def HonestProgressInv(start: RowState, run: RowRun, owned: Sequence[int]) -> None:
    """An iterator never changes the progress of splits it does not own."""
    for i, state in enumerate(run.states):
        for s in range(len(state.samples)):
            if s in owned:
                continue
            _check(
                (state.samples[s], state.positions[s]) == (start.samples[s], start.positions[s]),
                "HonestProgressInv",
                f"after row {i}, unowned split {s} moved from {start.samples[s]} to {state.samples[s]}",
            )


def CatchUpInv(start: RowState, run: RowRun, owned: Sequence[int]) -> None:
    """After ``sum(M - samples[s])`` rows (``M`` = owned maximum), all owned splits are at ``M``."""
    if not owned:
        return
    target = max(start.samples[s] for s in owned)
    deficit = sum(target - start.samples[s] for s in owned)
    if len(run.rows) < deficit:
        return
    after = run.state_after(deficit)
    counts = [after.samples[s] for s in owned]
    _check(
        counts == [target] * len(owned), "CatchUpInv", f"after catch-up of {deficit} rows counts are {counts}"
    )


def CanonicalOrderProp(perm: Permutation, faults: Faults, owned: Sequence[int], run: RowRun) -> None:
    """Rows come in ``(sample index, split id)`` order, each split's rows are its next yieldable
    rows, and the run ends only where that order is blocked: the next lagging split during
    catch-up, or some owned split at a cycle boundary, has no yieldable row left."""
    start = run.start
    keys = []
    taken: dict[int, int] = {s: 0 for s in owned}
    expected = {s: yieldable(perm[s], faults, start.positions[s]) for s in owned}
    for y in run.rows:
        _check(y.split in taken, "CanonicalOrderProp", f"row from unowned split {y.split}")
        i = taken[y.split]
        _check(
            i < len(expected[y.split]) and expected[y.split][i] == y.position,
            "CanonicalOrderProp",
            f"split {y.split} yielded position {y.position}, expected the next yieldable one",
        )
        _check(
            perm[y.split][y.position] == y.row_id,
            "CanonicalOrderProp",
            "row id does not match the permutation",
        )
        keys.append((start.samples[y.split] + i, y.split))
        taken[y.split] = i + 1
    _check(keys == sorted(keys), "CanonicalOrderProp", f"keys not in (sample, split) order: {keys}")
    # The run stops only where the order is blocked. While some owned split lags behind the
    # others (catch-up), the next lagging split by (samples, split) must be unable to give its next
    # row; at a cycle boundary some owned split must be (a cycle starts only if all of them can).
    blocked = [s for s in owned if taken[s] >= len(expected[s])]
    counts = sorted((start.samples[s] + taken[s], s) for s in owned)
    lagging = [s for c, s in counts if c < counts[-1][0]] if counts else []
    if lagging:
        _check(
            lagging[0] in blocked,
            "CanonicalOrderProp",
            f"the run ended before split {lagging[0]}'s next row, which is yieldable",
        )
    else:
        _check(
            bool(blocked) or not owned,
            "CanonicalOrderProp",
            "the run ended although every owned split has rows left",
        )


def RaisePositionProp(perm: Permutation, faults: Faults, owned: Sequence[int], run: RowRun) -> None:
    """A raising row ends the run after every row before its cycle, and is not counted."""
    end = run.end
    if not isinstance(end, Raised):
        return
    _check(
        perm[end.split][end.position] in faults.raising,
        "RaisePositionProp",
        "raised on a row that does not raise",
    )
    _check(end.split in owned, "RaisePositionProp", "raised on an unowned split")
    last = run.states[-1] if run.states else run.start
    nxt = yieldable(perm[end.split], faults, last.positions[end.split])
    first_bad = next(
        (
            p
            for p in range(last.positions[end.split], len(perm[end.split]))
            if perm[end.split][p] not in faults.skipped
        ),
        None,
    )
    _check(
        first_bad == end.position,
        "RaisePositionProp",
        f"raised at {end.position}, next unskipped is {first_bad}",
    )
    _check(not nxt, "RaisePositionProp", "rows remained yieldable before the raising row")
    _check(
        last.positions[end.split] <= end.position,
        "RaisePositionProp",
        "the raising row was counted as consumed",
    )
    # Cycle boundary: once catch-up is over, no split of the raising cycle was yielded.
    counts = [last.samples[s] for s in owned]
    start_max = max(run.start.samples[s] for s in owned)
    if min(counts) >= start_max:
        _check(len(set(counts)) == 1, "RaisePositionProp", f"error raised mid-cycle, counts {counts}")


# ---------------------------------------------------------------- checkpoints and merge


def MergeLatticeInv(a: RowState | PackedState, b: RowState | PackedState, c: RowState | PackedState) -> None:
    """The join is commutative, associative and idempotent (packed: on states of one run)."""
    join: Callable[[object, object], object] = join_row if isinstance(a, RowState) else join_packed  # type: ignore[assignment]
    _check(join(a, b) == join(b, a), "MergeLatticeInv", f"not commutative on {a} and {b}")
    _check(join(join(a, b), c) == join(a, join(b, c)), "MergeLatticeInv", "not associative")
    _check(join(a, a) == a, "MergeLatticeInv", f"not idempotent on {a}")


def CheckpointRoundTripInv(config: RunConfig, state: RowState | PackedState, split_len: int) -> None:
    """Save then load is the identity, also through JSON; keys come in the reference's order."""
    if isinstance(state, RowState):
        snap = snapshot_row(config, state)
        keys = [*HEAD_KEYS, *ROW_KEYS]
        back: object = load_row(config, json.loads(json.dumps(snap)), split_len)
        again: object = load_row(config, snap, split_len)
    else:
        snap = snapshot_packed(config, state)
        keys = [*HEAD_KEYS, *PACKING_KEYS, *PACKED_PROGRESS_KEYS]
        back = load_packed(config, json.loads(json.dumps(snap)), split_len)
        again = load_packed(config, snap, split_len)
    if config.perm_fingerprint is None:
        keys.remove("perm_fingerprint")
    _check(list(snap) == keys, "CheckpointRoundTripInv", f"keys {list(snap)} != {keys}")
    _check(again == state, "CheckpointRoundTripInv", "load(snapshot(state)) != state")
    _check(back == state, "CheckpointRoundTripInv", "load(json(snapshot(state))) != state")


def MergeExactProp(
    config: RunConfig,
    per_rank: Sequence[RowState | PackedState],
    single: RowState | PackedState,
) -> None:
    """Merging every rank's checkpoint at one global step gives the single-rank checkpoint there."""
    if isinstance(single, RowState):
        snaps = [snapshot_row(config, s) for s in per_rank if isinstance(s, RowState)]
    else:
        snaps = [snapshot_packed(config, s) for s in per_rank if isinstance(s, PackedState)]
    expected = snapshot_saved(exact(config, single))
    _check(len(snaps) == len(per_rank), "MergeExactProp", "ranks mix row and packed states")
    merged = merge_state_dicts(snaps)
    _check(merged == expected, "MergeExactProp", lambda: f"merged {merged} != single-rank {expected}")


# ---------------------------------------------------------------- runs across topologies


def _first_difference(a: Sequence[object], b: Sequence[object]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def ElasticDeterminismProp(
    config: RunConfig,
    perm: Permutation,
    faults: Faults,
    world_size: int,
    num_workers: int,
    cycles_per_step: int,
) -> None:
    """Every global step holds the same rows whatever ``world_size`` and ``num_workers`` are."""
    expected = global_steps(perm, faults, cycles_per_step)
    got = topology_steps(config, perm, faults, world_size, num_workers, cycles_per_step)
    _check(
        got == expected,
        "ElasticDeterminismProp",
        lambda: (
            f"W={world_size} nw={num_workers}: {len(got)} steps vs {len(expected)}; first difference at "
            f"step {_first_difference(got, expected)}"
        ),
    )


def ResumeEquivalenceProp(
    perm: Permutation,
    faults: Faults,
    uninterrupted: RowRun | PackedRun,
    n: int,
    topology: Topology,
    corpus: Mapping[int, Sequence[int]] | None = None,
    packing: PackingConfig | None = None,
) -> None:
    """Resuming the checkpoint after ``n`` items on ``topology`` yields the uninterrupted rest.

    ``uninterrupted`` is one iterator over all splits. Each new iterator yields
    the rest restricted to its splits. Always: the two agree on their common
    length. Without faults: they are equal. With faults, once the checkpoint
    lies past the uninterrupted run's catch-up (``n`` at least its deficit):
    the rest is a prefix of what is resumed (a split outside the new iterator
    may have ended the uninterrupted run early). Before that point a fault can
    end the new iterator's first cycle where the uninterrupted catch-up, which
    yields split by split, went on (spec/INVARIANTS.md gives the example).
    Packed checkpoints may be taken after any block (a mid-cycle resume catches up).
    """
    owned = owned_splits(len(perm), topology)
    keep = set(owned)
    expected: list[object]
    got: list[object]
    if isinstance(uninterrupted, RowRun):
        resumed_rows = iterate_rows(perm, faults, owned, uninterrupted.state_after(n))
        expected = [y for y in uninterrupted.rows[n:] if y.split in keep]
        got = list(resumed_rows.rows)
    else:
        assert corpus is not None and packing is not None
        resumed = iterate_packed(perm, corpus, faults, owned, packing, uninterrupted.state_after(n))
        expected = [b for b in uninterrupted.blocks[n:] if b.split in keep]
        got = list(resumed.blocks)
    common = min(len(got), len(expected))
    _check(
        got[:common] == expected[:common], "ResumeEquivalenceProp", f"resumed items on splits {owned} diverge"
    )
    if not faults.skipped and not faults.raising:
        _check(
            len(got) == len(expected),
            "ResumeEquivalenceProp",
            f"resumed {len(got)} items, expected {len(expected)}",
        )
    elif n >= _catch_up_deficit(uninterrupted):
        _check(
            len(got) >= len(expected),
            "ResumeEquivalenceProp",
            f"resumed only {len(got)} of the {len(expected)} items the uninterrupted run still had",
        )


def _catch_up_deficit(run: RowRun | PackedRun) -> int:
    """Rows the catch-up of ``run`` (over all splits) yields before its first cycle; 0 when packed."""
    if not isinstance(run, RowRun):
        return 0
    counts = run.start.samples
    return sum(max(counts) - c for c in counts)


def ExactlyOnceProp(perm: Permutation, faults: Faults, delivered: Sequence[Yielded], finished: bool) -> None:
    """No row is delivered twice; each split's deliveries are a prefix of its yieldable rows;
    once a fault-free epoch is finished every row was delivered."""
    seen: set[tuple[int, int]] = set()
    per_split: dict[int, set[int]] = {}
    for y in delivered:
        key = (y.split, y.position)
        _check(
            key not in seen,
            "ExactlyOnceProp",
            f"row {y.row_id} (split {y.split}, position {y.position}) twice",
        )
        seen.add(key)
        per_split.setdefault(y.split, set()).add(y.position)
    for s, positions in per_split.items():
        allowed = yieldable(perm[s], faults)
        _check(
            sorted(positions) == allowed[: len(positions)],
            "ExactlyOnceProp",
            f"split {s} delivered {sorted(positions)}, not a prefix of {allowed}",
        )
    if finished and not faults.skipped and not faults.raising:
        total = sum(len(s) for s in perm)
        _check(
            len(seen) == total,
            "ExactlyOnceProp",
            f"epoch finished with {len(seen)} of {total} rows delivered",
        )


def ConsumerCommitProp(perm: Permutation, faults: Faults, run: LoaderRun, n: int) -> None:
    """After ``n`` delivered batches, the parent's checkpoint counts exactly the delivered rows."""
    start = run.start
    _check(isinstance(start, RowState), "ConsumerCommitProp", "row-mode check given a packed run")
    assert isinstance(start, RowState)
    state = run.state_after(n)
    assert isinstance(state, RowState)
    delivered = [item for d in run.deliveries[:n] for item in d.items if isinstance(item, Yielded)]
    for s in range(len(perm)):
        mine = [y for y in delivered if y.split == s]
        want_samples = start.samples[s] + len(mine)
        want_position = mine[-1].position + 1 if mine else start.positions[s]
        _check(
            (state.samples[s], state.positions[s]) == (want_samples, want_position),
            "ConsumerCommitProp",
            f"after {n} batches split {s} is at {(state.samples[s], state.positions[s])}, "
            f"delivered rows give {(want_samples, want_position)}",
        )


__all__ = [*INVARIANT_NAMES, "INVARIANT_NAMES", "InvariantViolation", "yieldable"]
