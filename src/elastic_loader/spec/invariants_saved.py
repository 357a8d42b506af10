"""Predicates of the save-protocol invariants (``spec/INVARIANTS.md``, section "Save protocols").

Rules: as in :mod:`.invariants` (one predicate per name, ``None`` when it holds,
:class:`~.errors.InvariantViolation` otherwise). These judge *sessions*
(:mod:`.protocols`): every rank of a topology resuming, delivering and checkpointing, and chains of
them joined by a save protocol. :mod:`.invariants` re-exports every name, so all predicates live
in one namespace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import combinations

from .errors import InvariantViolation, SpecError, SpecValueError, check
from .loader import Item
from .packing import Block, PackedState, initial_packed_state, iterate_packed
from .protocols import Protocol, RankResult, Shape, lockstep_batches, next_starts, run_session
from .rows import Faults, RowState, Yielded
from .saved import (
    Saved,
    TablePin,
    exact,
    load_for_rank,
    load_saved,
    merge_state_dicts,
    pinned_permutation,
    resolve,
    snapshot_saved,
)
from .topology import PackingConfig, Permutation, RunConfig, rank_splits

Corpus = Mapping[int, Sequence[int]] | None


def _value(state: RowState | PackedState, s: int) -> tuple[object, ...]:
    if isinstance(state, RowState):
        return state.samples[s], state.positions[s]
    return state.consumed[s], state.emitted[s], state.buffer(s)


def _future(
    perm: Permutation,
    faults: Faults,
    corpus: Corpus,
    packing: PackingConfig | None,
    state: RowState | PackedState,
    s: int,
) -> tuple[object, ...]:
    """What a resume of split ``s`` from ``state`` goes on with: its row progress, or its blocks
    count and the blocks it still emits (two packed values that differ only by a fill that has
    not been emitted yet resume alike)."""
    if isinstance(state, RowState):
        return state.samples[s], state.positions[s]
    assert packing is not None and corpus is not None
    return state.emitted[s], iterate_packed(perm, corpus, faults, (s,), packing, state).blocks


def _owner_states(
    perm: Permutation, faults: Faults, corpus: Corpus, results: Sequence[RankResult]
) -> dict[int, RowState | PackedState]:
    """Per split, the resolved state of the checkpoint of the rank that owned it."""
    world_size, n = len(results), len(perm)
    out: dict[int, RowState | PackedState] = {}
    for r in results:
        block = rank_splits(n, world_size, r.rank)
        state = resolve(r.checkpoint, perm, faults, block, corpus)
        out.update((s, state) for s in block)
    return out


def LockstepInferenceInv(
    perm: Permutation, faults: Faults, corpus: Corpus, results: Sequence[RankResult], skipping: bool
) -> None:
    """In a lockstep session, every rank's checkpoint gives every split the progress its owner
    reports (packed projections resolved), or marks it unknown (row mode, skipping transforms);
    its cursor gives every rank whose splits it knows the role that rank's loader comes to next."""
    takes = {r.taken for r in results}
    check(len(takes) == 1, "LockstepInferenceInv", f"not a lockstep session: ranks took {sorted(takes)}")
    packing = results[0].checkpoint.config.packing
    owners = _owner_states(perm, faults, corpus, results)
    truth = {s: _future(perm, faults, corpus, packing, st, s) for s, st in owners.items()}
    for r in results:
        saved = r.checkpoint
        for s in sorted(saved.unknown):
            check(
                skipping and isinstance(saved.state, RowState),
                "LockstepInferenceInv",
                f"rank {r.rank} marks split {s} unknown without skipping transforms",
            )
        known = [s for s in range(len(perm)) if s not in saved.unknown]
        state = resolve(saved, perm, faults, known, corpus)
        for s in known:
            check(
                _future(perm, faults, corpus, packing, state, s) == truth[s],
                "LockstepInferenceInv",
                f"rank {r.rank} infers split {s} at {_value(state, s)}, which does not resume as its owner",
            )
        cursor = saved.cursor
        if cursor is not None and cursor.world_size == len(results):  # a cursor of this session
            n = len(perm)
            for o in results:  # the ranks whose progress this checkpoint knows
                if o.checkpoint.cursor is None or saved.unknown & set(rank_splits(n, len(results), o.rank)):
                    continue
                want = o.checkpoint.cursor.next_roles[o.rank]
                check(
                    cursor.next_roles[o.rank] == want,
                    "LockstepInferenceInv",
                    f"rank {r.rank} infers rank {o.rank}'s next role {cursor.next_roles[o.rank]}, not {want}",
                )


def MergeReportedInv(
    perm: Permutation, faults: Faults, corpus: Corpus, results: Sequence[RankResult]
) -> None:
    """Merging every rank's checkpoint of a session (lockstep or not) gives every split exactly the
    value its owner reports; a merge that leaves out a rank raises ``merge_missing_rank``."""
    config = results[0].checkpoint.config
    wire = [snapshot_saved(r.checkpoint) for r in results]
    merged = load_saved(config, merge_state_dicts(wire), None)
    owners = _owner_states(perm, faults, corpus, results)
    truth = {s: _value(st, s) for s, st in owners.items()}
    state = resolve(merged, perm, faults, range(len(perm)), corpus)
    for s in range(len(perm)):
        check(
            _value(state, s) == truth[s],
            "MergeReportedInv",
            f"split {s} merges to {_value(state, s)}, its owner reports {truth[s]}",
        )
    for size in range(1, len(wire)):
        for subset in combinations(range(len(wire)), size):
            try:
                merge_state_dicts([wire[i] for i in subset])
            except SpecValueError as exc:
                check(exc.code == "merge_missing_rank", "MergeReportedInv", f"{subset} raised {exc.code}")
            else:
                raise InvariantViolation("MergeReportedInv", f"merging only ranks {subset} was accepted")


def ProtocolChainProp(
    perm: Permutation,
    faults: Faults,
    corpus: Corpus,
    packing: PackingConfig | None,
    delivered: Sequence[Item],
    finished: bool,
) -> None:
    """Across a chain of sessions joined by any save protocol, on any topologies, the trainer
    receives every split's own sequence exactly once, in order, from its start: rows are a prefix of
    the split's yieldable rows (all of them once a fault-free epoch is finished), blocks a prefix of
    the split's uninterrupted blocks (all of them once an epoch without raising documents is)."""
    n = len(perm)
    if packing is None:
        rows = [y for y in delivered if isinstance(y, Yielded)]
        check(len(rows) == len(delivered), "ProtocolChainProp", "a row chain delivered blocks")
        seen: set[tuple[int, int]] = set()
        for y in rows:
            check((y.split, y.position) not in seen, "ProtocolChainProp", f"row {y.row_id} delivered twice")
            seen.add((y.split, y.position))
        for s, split in enumerate(perm):
            mine = [y.position for y in rows if y.split == s]
            allowed = [p for p, row in enumerate(split) if row not in faults.skipped]
            if faults.raising:
                first = next((i for i, p in enumerate(allowed) if split[p] in faults.raising), len(allowed))
                allowed = allowed[:first]
            check(
                mine == allowed[: len(mine)], "ProtocolChainProp", f"split {s} delivered {mine} of {allowed}"
            )
            complete = finished and not faults.skipped and not faults.raising
            check(not complete or mine == allowed, "ProtocolChainProp", f"split {s} is missing rows")
        return
    assert corpus is not None
    blocks = [b for b in delivered if isinstance(b, Block)]
    check(len(blocks) == len(delivered), "ProtocolChainProp", "a packed chain delivered rows")
    for s in range(n):
        own_blocks = [b for b in blocks if b.split == s]
        ref = list(iterate_packed(perm, corpus, faults, (s,), packing, initial_packed_state(n)).blocks)
        check(own_blocks == ref[: len(own_blocks)], "ProtocolChainProp", f"split {s}: blocks out of sequence")
        complete = finished and not faults.raising
        check(
            not complete or own_blocks == ref,
            "ProtocolChainProp",
            f"split {s}: {len(own_blocks)} of {len(ref)} blocks",
        )


def SameTopologyResumeProp(
    config: RunConfig,
    perm: Permutation,
    faults: Faults,
    corpus: Corpus,
    starts: Sequence[RankResult] | None,
    shape: Shape,
    taken: int,
    protocol: Protocol,
    split_len: int,
    skipping: bool,
    saver: int = 0,
) -> None:
    """A lockstep session's checkpoints after any number of batches, resumed on the same
    ``world_size``, ``num_workers`` and ``batch_size`` under any protocol, continue every rank's
    batch sequence exactly where the uninterrupted session would have gone on.

    ``starts`` are the results of the session the first one resumed from (``None``: the epoch start).
    """
    begin = _starts(config, starts, shape, split_len)
    whole = run_session(
        config, perm, faults, corpus, begin, shape, [10**9] * shape.world_size, split_len, skipping
    )
    n = lockstep_batches(config, perm, faults, corpus, begin, shape, taken)
    cut = run_session(config, perm, faults, corpus, begin, shape, [n] * shape.world_size, split_len, skipping)
    try:
        again = next_starts(config, cut, protocol, shape, split_len, saver)
    except SpecValueError as exc:
        check(
            exc.code == "progress_unknown" and skipping and config.packing is None,
            "SameTopologyResumeProp",
            f"the checkpoint was refused ({exc.code})",
        )
        return
    rest = run_session(
        config, perm, faults, corpus, again, shape, [10**9] * shape.world_size, split_len, skipping
    )
    for before, after in zip(whole, rest):
        want = [d.items for d in before.run.deliveries[n:]]
        got = [d.items for d in after.run.deliveries]
        check(got == want, "SameTopologyResumeProp", f"rank {before.rank} resumed a different batch sequence")


def _starts(
    config: RunConfig, starts: Sequence[RankResult] | None, shape: Shape, split_len: int
) -> list[Saved]:
    if starts is None:
        n = config.num_splits
        state: RowState | PackedState = (
            RowState((0,) * n, (0,) * n) if config.packing is None else initial_packed_state(n)
        )
        return [exact(config, state)] * shape.world_size
    return list(next_starts(config, starts, Protocol.MERGE_ALL, shape, split_len))


def PartialStateRefusedInv(results: Sequence[RankResult], split_len: int) -> None:
    """No checkpoint that lacks a loading rank's progress loads silently: a rank refuses a
    checkpoint that marks one of its splits unknown; a packed checkpoint without the provenance key
    whose splits emitted different block counts (one rank's state) is refused."""
    config = results[0].checkpoint.config
    world_size = len(results)
    for r in results:
        wire = snapshot_saved(r.checkpoint)
        for rank in range(world_size):
            mine = set(rank_splits(config.num_splits, world_size, rank))
            try:
                load_for_rank(config, wire, split_len, world_size, rank)
            except SpecValueError as exc:
                check(
                    exc.code == "progress_unknown" and bool(mine & r.checkpoint.unknown),
                    "PartialStateRefusedInv",
                    f"rank {rank} refused rank {r.rank}'s checkpoint with {exc.code}",
                )
            else:
                check(
                    not mine & r.checkpoint.unknown,
                    "PartialStateRefusedInv",
                    f"rank {rank} loaded rank {r.rank}'s checkpoint although it does not know its splits",
                )
        legacy = {k: v for k, v in wire.items() if k != "elastic_loader"}
        state = r.checkpoint.state
        if isinstance(state, PackedState) and len(set(state.emitted)) > 1:
            try:
                load_saved(config, legacy, split_len)
            except SpecValueError as exc:
                check(exc.code == "packed_partial_state", "PartialStateRefusedInv", f"raised {exc.code}")
            else:
                raise InvariantViolation("PartialStateRefusedInv", "a partial legacy packed state loaded")


def TableVersionPinInv(
    history: Mapping[int, Permutation], pin: TablePin, latest: int, resumed: Permutation
) -> None:
    """A resumed epoch reads the permutation of the table version its checkpoint recorded, whatever
    the table became since; a version that no longer exists is refused."""
    check(pin.version is not None, "TableVersionPinInv", "a versioned table's checkpoint records its version")
    assert pin.version is not None
    if pin.version not in history:
        try:
            pinned_permutation(history, pin, latest)
        except SpecValueError as exc:
            check(exc.code == "table_version_missing", "TableVersionPinInv", f"raised {exc.code}")
            return
        raise InvariantViolation("TableVersionPinInv", f"resumed although version {pin.version} is gone")
    check(
        resumed == history[pin.version],
        "TableVersionPinInv",
        f"resumed on another permutation than the one of version {pin.version}",
    )
    check(
        sum(len(s) for s in resumed) <= pin.rows,
        "TableVersionPinInv",
        f"the pinned permutation has more rows than the {pin.rows} recorded",
    )


def ReachableLoadInv(saved_checkpoint: object, split_len: int) -> None:
    """Every checkpoint the model writes loads back to itself (also through JSON), and any change
    to one of its progress values is refused (the digest)."""
    assert isinstance(saved_checkpoint, Saved)
    config = saved_checkpoint.config
    wire = snapshot_saved(saved_checkpoint)
    for label, copy in (("direct", wire), ("json", json.loads(json.dumps(wire)))):
        back = load_saved(config, copy, split_len)
        check(back == saved_checkpoint, "ReachableLoadInv", f"{label}: load(snapshot(state)) != state")
    for key in ("samples_consumed_per_split", "positions_consumed_per_split", "blocks_emitted_per_split"):
        values = wire.get(key)
        if not isinstance(values, list):
            continue
        for i in range(len(values)):
            edited = dict(wire, **{key: [v + (1 if j == i else 0) for j, v in enumerate(values)]})
            try:
                load_saved(config, edited, None)
            except SpecError:
                continue
            raise InvariantViolation("ReachableLoadInv", f"an edited {key}[{i}] was accepted")
