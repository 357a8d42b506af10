"""Where each split's progress in a checkpoint comes from, and what a rank says about the others.

Rules:
* A checkpoint carries, besides ``lancedb.streaming``'s keys, one key ``elastic_loader``:
  ``format``; ``reported`` (the splits its rank owned; omitted: all of them); ``unknown`` (row
  splits it could not infer); ``projected`` (packed split -> inferred block count, the reference
  keys holding the split's last exact value); ``cursor`` (where each rank's round robin of
  workers stands); ``table`` (the table version and row count); ``digest`` (SHA-256 of the
  canonical JSON of everything else). The reference ignores the key; its checkpoints (and ours of
  older versions) have none and then report every split.
* A rank's checkpoint infers every split it does not own by assuming lockstep: the owner delivered
  the same batches from the same start (``_schedule``). Inferred rows are exact when the transform
  cannot skip rows and unknown otherwise; inferred packed splits are projections, which the next
  owner replays (``_replay``).
* A merge takes each split from the checkpoints that report it; a split none reports raises.
  Packed checkpoints without the key must merge to one global step.
* Loading refuses what no run produces: an edited checkpoint (digest), packed buffers that are not
  whole documents each followed by ``eos_id``, projections past the budget, and a packed
  checkpoint without the key whose splits emitted different counts.

This is the pipeline's implementation of the spec's ``saved.py``; it never imports the spec.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from . import _schedule
from ._checkpoint import (
    Identity,
    PackedState,
    RowState,
    State,
    as_dict,
    as_int,
    identity_of,
    need_keys,
    parse_for,
    snapshot,
)

KEY = "elastic_loader"
FORMAT = 1


@dataclass(frozen=True)
class Cursor:
    """Rank ``r``'s loader comes next to role ``next_roles[r]`` (recorded for >= 2 workers)."""

    world_size: int
    num_workers: int
    next_roles: tuple[int, ...]

    def rotation(self, world_size: int, rank: int, num_workers: int) -> int:
        """The role torch worker 0 plays in a loader of this shape: the cursor's, or 0 elsewhere."""
        if (world_size, num_workers) != (self.world_size, self.num_workers):
            return 0
        return self.next_roles[rank]


@dataclass(frozen=True)
class Pass:
    """One loader (or plain iteration) of a session, as far as the trainer received it."""

    num_workers: int
    batch_size: int
    batches: int
    rotation: int = 0
    next_role: int = 0


@dataclass
class Record:
    """A checkpoint as the pipeline holds it: plain progress plus its provenance."""

    state: State
    reported: frozenset[int]
    unknown: frozenset[int] = frozenset()
    projected: dict[int, int] = field(default_factory=dict)
    cursor: Cursor | None = None
    table: tuple[int | None, int] | None = None

    def count(self, split: int) -> int:
        """Rows yielded or blocks emitted by ``split``; its target when projected."""
        if split in self.projected:
            return self.projected[split]
        state = self.state
        return state.samples[split] if isinstance(state, RowState) else state.emitted[split]


def fresh(state: State, table: tuple[int | None, int] | None) -> Record:
    """The record of an epoch's start (or of a merged checkpoint): every split reported."""
    splits = len(state.samples) if isinstance(state, RowState) else len(state.emitted)
    return Record(state, frozenset(range(splits)), table=table)


# ------------------------------------------------------------------ digest and wire format


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def digest(checkpoint: Mapping[str, object]) -> str:
    """SHA-256 of ``checkpoint``'s canonical JSON (string keys, sorted), the digest left out."""
    body = _plain(checkpoint)
    assert isinstance(body, dict)
    extra = body.get(KEY)
    if isinstance(extra, dict):
        extra.pop("digest", None)
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write(identity: Identity, record: Record) -> dict[str, object]:
    """The checkpoint dict of ``record``: the reference's keys, then ``elastic_loader``."""
    out = snapshot(identity, record.state)
    extra: dict[str, object] = {"format": FORMAT}
    if record.reported != frozenset(range(identity.num_splits)):
        extra["reported"] = sorted(record.reported)
    if record.unknown:
        extra["unknown"] = sorted(record.unknown)
    if record.projected:
        extra["projected"] = dict(sorted(record.projected.items()))
    if record.cursor is not None:
        c = record.cursor
        extra["cursor"] = {
            "world_size": c.world_size,
            "num_workers": c.num_workers,
            "next_roles": list(c.next_roles),
        }
    if record.table is not None:
        extra["table"] = {"version": record.table[0], "rows": record.table[1]}
    out[KEY] = extra
    extra["digest"] = digest(out)
    return out


def _ids(raw: object, num_splits: int, what: str) -> frozenset[int]:
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"{KEY}[{what!r}] must be a list of split ids")
    ids = [as_int(v, what) for v in raw]
    if len(set(ids)) != len(ids) or any(not 0 <= s < num_splits for s in ids):
        raise ValueError(f"{KEY}[{what!r}] must hold distinct split ids in [0, {num_splits})")
    return frozenset(ids)


def _projected(raw: object, state: State, num_splits: int) -> dict[int, int]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{KEY}['projected'] must be a dict")
    if raw and not isinstance(state, PackedState):
        raise ValueError("a row checkpoint has no projected splits")
    out: dict[int, int] = {}
    for key, value in raw.items():
        split = int(key) if isinstance(key, str) and key.isdigit() else key
        valid = isinstance(split, int) and not isinstance(split, bool) and 0 <= split < num_splits
        if not valid or split in out:
            raise ValueError(f"{KEY}['projected'] key {key!r} is not a distinct split id")
        out[split] = as_int(value, "projected target")
        assert isinstance(state, PackedState)
        if out[split] <= state.emitted[split]:
            raise ValueError(f"split {split}: a projected block count must go beyond its base")
    return out


def _cursor(raw: object, num_splits: int) -> Cursor:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{KEY}['cursor'] must be a dict")
    need_keys(raw, ("world_size", "num_workers", "next_roles"))
    roles = raw["next_roles"]
    if not isinstance(roles, (list, tuple)):
        raise ValueError(f"{KEY}['cursor'] next_roles must be a list")
    cursor = Cursor(
        as_int(raw["world_size"], "cursor world_size"),
        as_int(raw["num_workers"], "cursor num_workers"),
        tuple(as_int(r, "cursor next role") for r in roles),
    )
    w, nw = cursor.world_size, cursor.num_workers
    ok = w >= 1 and nw >= 2 and num_splits % w == 0 and (num_splits // w) % nw == 0
    if not ok or len(cursor.next_roles) != w or any(not 0 <= r < nw for r in cursor.next_roles):
        raise ValueError(f"{KEY}['cursor'] does not fit {num_splits} splits: {dict(raw)!r}")
    return cursor


def _table(raw: object) -> tuple[int | None, int]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{KEY}['table'] must be a dict")
    need_keys(raw, ("version", "rows"))
    version = None if raw["version"] is None else as_int(raw["version"], "table version")
    rows = as_int(raw["rows"], "table rows")
    if (version is not None and version < 0) or rows < 1:
        raise ValueError(f"{KEY}['table'] holds an impossible version or row count: {dict(raw)!r}")
    return version, rows


def check_buffers(state: PackedState, eos: int) -> None:
    """Packed buffers hold whole documents, each followed by ``eos_id``, of splits that consumed some."""
    for split, (tokens, starts) in state.buffers.items():
        problem = None
        if state.consumed[split] == 0:
            problem = "buffers tokens but consumed no document"
        elif len(starts) > state.consumed[split]:
            problem = "buffers more documents than it consumed"
        elif tokens[-1] != eos or any(tokens[x - 1] != eos for x in starts if x > 0):
            problem = "holds a buffer that is not whole documents each followed by eos_id"
        elif min(tokens) < -(2**63) or max(tokens) >= 2**63:
            problem = "holds a token that is not an int64 value"
        if problem:
            raise ValueError(f"pack_buffers: split {split} {problem}; no run writes such a checkpoint")


def read(identity: Identity, checkpoint: object, split_len: int | None, *, alone: bool = True) -> Record:
    """Validate ``checkpoint`` for ``identity`` and return its record (``split_len=None``: merging).

    Raises:
        TypeError: not a dict.
        ValueError: a mismatched setting, malformed progress or provenance, a digest that does not
            match, progress no run produces.
    """
    st = as_dict(checkpoint)
    state = parse_for(identity, st, split_len)
    n = identity.num_splits
    if identity.packing is not None:
        assert isinstance(state, PackedState)
        check_buffers(state, identity.packing[1])
    extra = st.get(KEY)
    if extra is None:
        if alone and isinstance(state, PackedState) and len(set(state.emitted)) > 1:
            raise ValueError(
                "this packed checkpoint holds one rank's progress only (its splits emitted "
                f"{sorted(set(state.emitted))} blocks): merge every rank's state with merge_state_dicts "
                "(or elastic_loader.distributed.merged_state_dict) before loading it"
            )
        return fresh(state, None)
    if not isinstance(extra, Mapping):
        raise ValueError(f"{KEY} must be a dict")
    if extra.get("digest") is not None and extra["digest"] != digest(st):
        raise ValueError(
            "the checkpoint's integrity digest does not match its contents: its values do not all come "
            "from one state_dict(). Either it was edited or corrupted, or it was assembled key by key "
            "from several ranks' states (torch.distributed.checkpoint keeps one rank's value per key when "
            "a StreamingDataset is saved): save the StreamingDataLoader instead (its state is one entry), "
            "or merge every rank's state with merge_state_dicts. To load an edited checkpoint on purpose, "
            f"remove {KEY}['digest']"
        )
    if extra.get("format") != FORMAT:
        raise ValueError(f"unknown checkpoint format {extra.get('format')!r} in {KEY}")
    reported = _ids(extra["reported"], n, "reported") if "reported" in extra else frozenset(range(n))
    unknown = _ids(extra.get("unknown", []), n, "unknown")
    if unknown & reported:
        raise ValueError(f"{KEY}['unknown'] names a split that is also reported")
    projected = _projected(extra.get("projected", {}), state, n)
    if identity.packing is not None and any(t > identity.packing[3] // n for t in projected.values()):
        raise ValueError("a projected block count lies beyond the budget")
    cursor = None if extra.get("cursor") is None else _cursor(extra["cursor"], n)
    table = None if extra.get("table") is None else _table(extra["table"])
    return Record(state, reported, unknown, projected, cursor, table)


def require_known(record: Record, splits: Sequence[int]) -> None:
    """Raise when this rank owns a split whose progress the checkpoint does not know."""
    missing = sorted(record.unknown.intersection(splits))
    if missing:
        raise ValueError(
            f"this checkpoint does not know the progress of splits {missing} of this rank: one rank saved "
            "it while transform errors could skip rows (on_transform_error is not 'raise'), so it cannot "
            "tell where the other ranks stood; merge every rank's state (merge_state_dicts, or "
            "elastic_loader.distributed.merged_state_dict) and load that instead"
        )


def require_loadable(record: Record, splits: Sequence[int], table_pin: tuple[int | None, int]) -> None:
    """Raise unless ``record`` can resume a rank owning ``splits`` of a permutation pinned at
    ``table_pin`` (version, rows): every owned split known, and the same row count."""
    require_known(record, splits)
    version, rows = table_pin
    if record.table is not None and record.table[1] != rows:
        raise ValueError(
            f"the checkpoint was written for a permutation of {record.table[1]} rows, this dataset's "
            f"holds {rows} at table version {version}; the table or its filter differs"
        )


# ------------------------------------------------------------------ merge


def _key(record: Record, split: int) -> tuple[int, int, bool]:
    state = record.state
    second = state.positions[split] if isinstance(state, RowState) else state.consumed[split]
    return record.count(split), second, split not in record.projected


def merge(checkpoints: Sequence[object]) -> dict[str, object]:
    """``merge_state_dicts``: every split from the checkpoints that report it, furthest first.

    Raises:
        TypeError: a state is not a dict.
        ValueError: no states, mixed modes or settings, malformed states, a split no state reports
            (a rank was left out), different table versions.
    """
    if not checkpoints:
        raise ValueError("merge_state_dicts needs at least one state dict")
    parsed = [as_dict(c) for c in checkpoints]
    identity = identity_of(parsed)
    records = [read(identity, st, None, alone=False) for st in parsed]
    tables = {r.table for r in records if r.table is not None}
    if len(tables) > 1:
        raise ValueError(
            f"the state dicts were written for different table versions: {sorted(map(str, tables))}"
        )
    chosen: list[Record] = []
    for split in range(identity.num_splits):
        reporters = [r for r in records if split in r.reported]
        if not reporters:
            raise ValueError(
                f"no state dict reports split {split}: merge_state_dicts needs the state of every rank "
                "(one rank's state alone can be loaded directly with load_state_dict when the ranks ran "
                "in lockstep)"
            )
        chosen.append(max(reporters, key=lambda r: _key(r, split)))
    merged = fresh(_pick(records[0].state, chosen), tables.pop() if tables else None)
    merged.projected = {s: r.projected[s] for s, r in enumerate(chosen) if s in r.projected}
    merged.cursor = _merge_cursor(records, identity.num_splits)
    legacy = any(KEY not in st for st in parsed)
    if isinstance(merged.state, PackedState) and legacy and len(set(merged.state.emitted)) > 1:
        raise ValueError(
            "packed state dicts were not taken at the same global step, or do not cover every rank "
            f"(blocks emitted per split after merging: {merged.state.emitted})"
        )
    return write(identity, merged)


def _pick(template: State, chosen: Sequence[Record]) -> State:
    if isinstance(template, RowState):
        rows = [r.state for r in chosen]
        return RowState(
            [r.samples[s] for s, r in enumerate(rows) if isinstance(r, RowState)],
            [r.positions[s] for s, r in enumerate(rows) if isinstance(r, RowState)],
        )
    packs = [r.state for r in chosen if isinstance(r.state, PackedState)]
    buffers = {s: p.buffers[s] for s, p in enumerate(packs) if s in p.buffers}
    consumed = [p.consumed[s] for s, p in enumerate(packs)]
    return PackedState(consumed, [p.emitted[s] for s, p in enumerate(packs)], buffers)


def _merge_cursor(records: Sequence[Record], num_splits: int) -> Cursor | None:
    with_cursor = [r for r in records if r.cursor is not None]
    shapes = {(r.cursor.world_size, r.cursor.num_workers) for r in with_cursor if r.cursor is not None}
    if len(shapes) != 1:
        return None
    world_size, num_workers = shapes.pop()
    per_rank = num_splits // world_size
    roles = []
    for rank in range(world_size):
        block = set(range(rank * per_rank, (rank + 1) * per_rank))
        owner = next((r for r in with_cursor if block <= r.reported), with_cursor[0])
        assert owner.cursor is not None
        roles.append(owner.cursor.next_roles[rank])
    return Cursor(world_size, num_workers, tuple(roles))


# ------------------------------------------------------------------ one rank's checkpoint


def caps(record: Record, split_len: int, budget: int | None) -> list[int]:
    """How far every split's count can go if every unread row is yieldable (packed: the budget)."""
    state = record.state
    if isinstance(state, PackedState):
        assert budget is not None
        return [budget] * len(state.emitted)
    return [c + split_len - p for c, p in zip(state.samples, state.positions)]


def _sub_blocks(block: list[int], num_workers: int, rotation: int) -> list[list[int]]:
    per = len(block) // num_workers
    return [block[((w + rotation) % num_workers) * per :][:per] for w in range(num_workers)]


def after_pass(
    counts: list[int], limit: Sequence[int], block: list[int], p: Pass, rotation: int
) -> tuple[dict[int, int], int]:
    """Counts of ``block``'s splits once a rank delivered pass ``p`` from ``counts``; next role."""
    if p.num_workers == 0:
        have = [counts[s] for s in block]
        items = min(_schedule.capacity(have, [limit[s] for s in block]), p.batches * p.batch_size)
        return dict(zip(block, _schedule.advance(have, items))), 0
    subs = _sub_blocks(block, p.num_workers, rotation)
    room = [_schedule.capacity([counts[s] for s in b], [limit[s] for s in b]) for b in subs]
    done = _schedule.deliveries([-(-r // p.batch_size) for r in room], p.batches)
    out: dict[int, int] = {}
    for b, r, d in zip(subs, room, done):
        out.update(zip(b, _schedule.advance([counts[s] for s in b], min(r, d * p.batch_size))))
    return out, (_schedule.worker_after(done) + rotation) % p.num_workers


def infer(
    start: Record,
    committed: State,
    touched: frozenset[int],
    passes: Sequence[Pass],
    world_size: int,
    rank: int,
    split_len: int,
    budget: int | None,
    skipping: bool,
    partial: list[int] | None = None,
) -> Record:
    """The record rank ``rank`` checkpoints after ``passes`` of its session from ``start``.

    ``partial`` (simulated workers): report only these splits and mark every other one unknown.

    Own splits: ``committed`` where ``touched`` (a batch of their iterator reached the trainer),
    else ``start``. Other ranks' splits: inferred under lockstep (rows exact, or unknown when
    ``skipping``; packed splits projected).
    """
    n = len(committed.samples) if isinstance(committed, RowState) else len(committed.emitted)
    if partial is not None:
        return _partial(start, committed, touched, frozenset(partial), n)
    per_rank = n // world_size
    own = range(rank * per_rank, (rank + 1) * per_rank)
    counts = [start.count(s) for s in range(n)]
    limit = caps(start, split_len, budget)
    cursor = start.cursor
    for p in passes:
        roles = [0] * world_size
        for r in range(world_size):
            if r == rank:
                roles[r] = p.next_role
                continue
            rotation = 0 if cursor is None else cursor.rotation(world_size, r, p.num_workers)
            block = list(range(r * per_rank, (r + 1) * per_rank))
            moved, roles[r] = after_pass(counts, limit, block, p, rotation)
            for s, c in moved.items():
                counts[s] = c
        cursor = Cursor(world_size, p.num_workers, tuple(roles)) if p.num_workers >= 2 else None
    return _assemble(start, committed, touched, own, counts, skipping, cursor)


def _unknown(start: Record, counts: list[int], own: range, skipping: bool) -> set[int]:
    """Other ranks' splits the record cannot know: each block that held an unknown split at the
    start, and, when rows may be skipped, each block that moved at all (a skipped row can end a
    worker early and hand its turns to the other workers of the rank)."""
    per_rank = len(own)
    out: set[int] = set()
    for first in range(0, len(counts), per_rank):
        block = set(range(first, first + per_rank))
        if first == own.start:
            continue
        moved = any(counts[s] != start.count(s) for s in block)
        if block & start.unknown or (skipping and moved):
            out |= block
    return out


def _assemble(
    start: Record,
    committed: State,
    touched: frozenset[int],
    own: range,
    counts: list[int],
    skipping: bool,
    cursor: Cursor | None,
) -> Record:
    base = start.state
    unknown = _unknown(start, counts, own, skipping and isinstance(committed, RowState))
    projected: dict[int, int] = {}
    if isinstance(committed, RowState):
        assert isinstance(base, RowState)
        samples, positions = list(base.samples), list(base.positions)
        for s in range(len(samples)):
            if s in own:
                if s in touched:
                    samples[s], positions[s] = committed.samples[s], committed.positions[s]
                continue
            moved = counts[s] - start.count(s)
            if moved and s not in unknown:
                samples[s], positions[s] = counts[s], positions[s] + moved
        state: State = RowState(samples, positions)
    else:
        assert isinstance(base, PackedState)
        consumed, emitted, buffers = list(base.consumed), list(base.emitted), dict(base.buffers)
        for s in range(len(consumed)):
            if s in own and s in touched:
                consumed[s], emitted[s] = committed.consumed[s], committed.emitted[s]
                buffers.pop(s, None)
                if s in committed.buffers:
                    buffers[s] = committed.buffers[s]
            elif counts[s] > emitted[s] and s not in unknown:
                projected[s] = counts[s]
        state = PackedState(consumed, emitted, buffers)
    reported = frozenset(own)
    return replace(
        start, state=state, reported=reported, unknown=frozenset(unknown), projected=projected, cursor=cursor
    )


def pinned_version(checkpoint: object) -> int | None:
    """The table version a checkpoint was written for, when it names a valid one (``None`` else:
    :func:`read` then reports what is malformed)."""
    if not isinstance(checkpoint, Mapping):
        return None
    extra = checkpoint.get(KEY)
    table = extra.get("table") if isinstance(extra, Mapping) else None
    version = table.get("version") if isinstance(table, Mapping) else None
    return version if isinstance(version, int) and not isinstance(version, bool) and version >= 0 else None


def _partial(
    start: Record, committed: State, touched: frozenset[int], mine: frozenset[int], n: int
) -> Record:
    """A simulated worker's record: its own splits; the others unknown (their siblings moved on)."""
    base = start.state
    state: State
    if isinstance(committed, RowState):
        assert isinstance(base, RowState)
        samples, positions = list(base.samples), list(base.positions)
        for s in mine & touched:
            samples[s], positions[s] = committed.samples[s], committed.positions[s]
        state = RowState(samples, positions)
    else:
        assert isinstance(base, PackedState)
        consumed, emitted, buffers = list(base.consumed), list(base.emitted), dict(base.buffers)
        for s in mine & touched:
            consumed[s], emitted[s] = committed.consumed[s], committed.emitted[s]
            buffers.pop(s, None)
            if s in committed.buffers:
                buffers[s] = committed.buffers[s]
        state = PackedState(consumed, emitted, buffers)
    projected = {s: t for s, t in start.projected.items() if s in mine and s not in touched}
    unknown = frozenset(range(n)) - mine
    return Record(state, mine, unknown, projected, None, start.table)
