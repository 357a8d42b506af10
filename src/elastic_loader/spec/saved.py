"""Checkpoints as saved and resumed: where each split's progress comes from (issue: save protocols).

Rules:

* **Reported or inferred.** A checkpoint says, per split, whether its saver *reported* it (the
  saver's rank owned the split in the saving session, so the value is the owner's own account) or
  *inferred* it (another rank owned it). A rank infers another rank's splits by assuming *lockstep*:
  that rank delivered exactly as many batches as the saver since the session started, with the same
  loader settings. A merged checkpoint, and a checkpoint without our extra key (for example one
  written by ``lancedb.streaming``), reports every split.
* **Inferred rows are exact, or unknown.** Without skipped rows (``on_transform_error="raise"``)
  the saver computes another rank's row counts, and positions follow (a position is one past the
  last yielded row). When the saver's transform errors may skip rows, a row it cannot see may have
  been skipped, so the inferred splits are *unknown*: a rank whose splits are unknown refuses the
  checkpoint when it loads it (merge every rank's state instead).
* **Inferred packed splits are projected.** A packed split's block count is known the same way
  (skipped documents do not change how many blocks a split emits), but its buffer is not: the
  value is a *projection*, the split's last exact value (its *base*) plus a *target* block count.
  The rank that owns the split when it resumes replays the split's documents from the base to the
  target. A target the split cannot reach is an error, never a guess.
* **Merging prefers reported values.** A split's merged value is the join of the values that report
  it; a split that no state reports means the merge left out a rank, and raises.
* **Any one rank's checkpoint resumes the job.** Because every split has a value (reported or
  inferred), a lockstep job can resume from any single rank's checkpoint, on any topology, again
  and again.
* **Where the loaders stood.** A checkpoint of a loader with several workers records, per rank,
  the role whose batch comes next (the *cursor*). A loader resumed on the same ``world_size`` and
  ``num_workers`` starts its rotation there, so the batch sequence goes on unchanged.
* **The table under it.** A checkpoint records the table version its permutation was built from
  and the row count; resuming reads that version.

The wire format: the reference's keys (``checkpoint.py``), plus one extra key ``elastic_loader``
holding ``format``, ``reported`` (omitted: every split), ``unknown``, ``projected``, ``cursor``,
``table`` and a ``digest`` of everything else (``spec/VECTORS.md`` documents the layout).
``lancedb.streaming`` ignores the extra key; for an unknown or projected split the reference keys
hold its last exact value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .checkpoint import (
    Checkpoint,
    as_int,
    as_mapping,
    as_split_id,
    check_against,
    check_same_config,
    config_from,
    config_keys,
    is_packed,
    parse_packed,
    parse_row,
    require_keys,
    snapshot_packed,
    snapshot_row,
    split_entries,
)
from .errors import SpecValueError, require
from .packing import PackBuffer, PackedState, iterate_packed
from .params import INT64_MAX, INT64_MIN
from .rows import Faults, RowState
from .topology import Permutation, RunConfig, rank_splits

EXTRA_KEY = "elastic_loader"
FORMAT = 1
State = RowState | PackedState


@dataclass(frozen=True)
class Projection:
    """A packed split known as "its plain value (the base), then ``target`` blocks emitted in all"."""

    target: int


@dataclass(frozen=True)
class Cursor:
    """The saving session's loader rotation: ``next_roles[r]`` is rank ``r``'s next role."""

    world_size: int
    num_workers: int
    next_roles: tuple[int, ...]

    def __post_init__(self) -> None:
        require(self.world_size >= 1, "cursor_out_of_range", "a cursor has world_size >= 1")
        require(self.num_workers >= 2, "cursor_out_of_range", "a cursor is recorded for >= 2 workers")
        require(len(self.next_roles) == self.world_size, "cursor_out_of_range", "one next role per rank")
        require(
            all(0 <= r < self.num_workers for r in self.next_roles),
            "cursor_out_of_range",
            "next roles must be in [0, num_workers)",
        )

    def rotation(self, world_size: int, rank: int, num_workers: int) -> int:
        """The rotation a loader with this topology starts with: the cursor's role on the same
        topology, else 0 (a new topology starts its rotation afresh)."""
        if (world_size, num_workers) != (self.world_size, self.num_workers):
            return 0
        return self.next_roles[rank]


@dataclass(frozen=True)
class TablePin:
    """The table version a permutation was built from (``None``: the table has no versions) and
    the number of rows that passed the filter."""

    version: int | None
    rows: int

    def __post_init__(self) -> None:
        require(self.version is None or self.version >= 0, "table_out_of_range", "a version is >= 0")
        require(self.rows >= 1, "table_out_of_range", "a table has at least one row")


@dataclass(frozen=True)
class Saved:
    """A checkpoint as the model understands it.

    ``state`` holds the plain values (what the reference keys say); ``reported`` the splits whose
    owner wrote them; ``unknown`` the row splits whose progress the saver could not infer;
    ``projections`` the packed splits whose plain value is a base to replay from.
    """

    config: RunConfig
    state: State
    reported: frozenset[int]
    unknown: frozenset[int] = frozenset()
    projections: Mapping[int, Projection] = field(default_factory=dict)
    cursor: Cursor | None = None
    table: TablePin | None = None

    def __post_init__(self) -> None:
        n = self.config.num_splits
        require(all(0 <= s < n for s in self.reported), "reported_out_of_range", "reported splits are ids")
        require(all(0 <= s < n for s in self.unknown), "reported_out_of_range", "unknown splits are ids")
        require(not self.unknown & self.reported, "unknown_reported", "a reported split is never unknown")
        require(
            not self.projections or isinstance(self.state, PackedState),
            "projection_rows",
            "only packed progress is projected",
        )
        for s, projection in self.projections.items():
            require(0 <= s < n, "projection_out_of_range", "projected splits are ids")
            require(
                projection.target > plain_count(self.state, s),
                "projection_below_base",
                f"split {s}: a projection goes beyond its base",
            )
        if self.cursor is not None:
            require(n % self.cursor.world_size == 0, "cursor_out_of_range", "cursor world_size divides S")
            k = n // self.cursor.world_size
            require(k % self.cursor.num_workers == 0, "cursor_out_of_range", "cursor workers divide K")

    def count(self, split: int) -> int:
        """Samples (rows) or blocks emitted (packed) of ``split``; its target when projected."""
        projection = self.projections.get(split)
        if projection is not None:
            return projection.target
        return plain_count(self.state, split)


def plain_count(state: State, split: int) -> int:
    return state.samples[split] if isinstance(state, RowState) else state.emitted[split]


def pinned_permutation(history: Mapping[int, Permutation], pin: TablePin | None, latest: int) -> Permutation:
    """The permutation a resumed epoch reads: the recorded version's (``latest`` without a pin).

    ``history`` maps each table version still stored to the permutation built from it.

    Raises:
        SpecValueError: ``table_version_missing`` (the version was cleaned up).
    """
    version = latest if pin is None or pin.version is None else pin.version
    if version not in history:
        raise SpecValueError(
            "table_version_missing",
            f"table version {version}, which this checkpoint was written for, no longer exists (old "
            "versions were cleaned up); resume from a newer checkpoint or start the epoch again",
        )
    return history[version]


def exact(config: RunConfig, state: State, table: TablePin | None = None) -> Saved:
    """A checkpoint reporting every split exactly (a merged state, or the start of an epoch)."""
    return Saved(config, state, frozenset(range(config.num_splits)), table=table)


# ---------------------------------------------------------------- wire format


def _canonical(value: object) -> object:
    """JSON-like value with string keys and lists, so a JSON round trip keeps the digest."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def digest(checkpoint: Mapping[str, object]) -> str:
    """SHA-256 of the canonical JSON of ``checkpoint`` without the digest itself."""
    body = _canonical(checkpoint)
    assert isinstance(body, dict)
    extra = body.get(EXTRA_KEY)
    if isinstance(extra, dict):
        body[EXTRA_KEY] = {k: v for k, v in extra.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def snapshot_saved(saved: Saved) -> Checkpoint:
    """The checkpoint dict: the reference's keys in the reference's order, then ``elastic_loader``."""
    if isinstance(saved.state, RowState):
        out = snapshot_row(saved.config, saved.state)
    else:
        out = snapshot_packed(saved.config, saved.state)
    extra: dict[str, object] = {"format": FORMAT}
    if saved.reported != frozenset(range(saved.config.num_splits)):
        extra["reported"] = sorted(saved.reported)
    if saved.unknown:
        extra["unknown"] = sorted(saved.unknown)
    if saved.projections:
        extra["projected"] = {s: p.target for s, p in sorted(saved.projections.items())}
    if saved.cursor is not None:
        extra["cursor"] = {
            "world_size": saved.cursor.world_size,
            "num_workers": saved.cursor.num_workers,
            "next_roles": list(saved.cursor.next_roles),
        }
    if saved.table is not None:
        extra["table"] = {"version": saved.table.version, "rows": saved.table.rows}
    out[EXTRA_KEY] = extra
    extra["digest"] = digest(out)
    return out


def _extra(state: Mapping[str, object]) -> Mapping[str, object] | None:
    raw = state.get(EXTRA_KEY)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SpecValueError("checkpoint_value_type", f"{EXTRA_KEY} must be a dict")
    return raw


def _check_digest(state: Mapping[str, object], extra: Mapping[str, object]) -> None:
    given = extra.get("digest")
    if given is None:
        return
    require(
        given == digest(state),
        "checkpoint_digest_mismatch",
        "the checkpoint's integrity digest does not match its contents: it was edited or corrupted "
        "(drop the 'digest' entry of 'elastic_loader' to load an edited checkpoint on purpose)",
    )


def _split_ids(raw: object, num_splits: int, what: str) -> frozenset[int]:
    if not isinstance(raw, (list, tuple)):
        raise SpecValueError("checkpoint_value_type", f"{what} must be a list of split ids")
    ids = [as_int(v, what) for v in raw]
    require(all(0 <= s < num_splits for s in ids), "reported_out_of_range", f"{what} holds a bad split id")
    require(len(set(ids)) == len(ids), "reported_out_of_range", f"{what} repeats a split id")
    return frozenset(ids)


def _projected_split(key: object, num_splits: int) -> int:
    split = as_split_id(key, num_splits)
    if split is None:
        raise SpecValueError("projection_out_of_range", f"projected key {key!r} is not a split id")
    return split


def _parse_projections(raw: object, num_splits: int) -> dict[int, Projection]:
    out: dict[int, Projection] = {}
    for s, _, value in split_entries(raw, "projected", lambda key: _projected_split(key, num_splits)):
        require(s not in out, "projection_out_of_range", f"split {s} is projected twice")
        out[s] = Projection(as_int(value, "projected target"))
    return out


def _parse_cursor(raw: object) -> Cursor:
    if not isinstance(raw, Mapping):
        raise SpecValueError("checkpoint_value_type", "cursor must be a dict")
    require_keys(raw, ("world_size", "num_workers", "next_roles"))
    roles = raw["next_roles"]
    if not isinstance(roles, (list, tuple)):
        raise SpecValueError("checkpoint_value_type", "cursor next_roles must be a list")
    return Cursor(
        as_int(raw["world_size"], "cursor world_size"),
        as_int(raw["num_workers"], "cursor num_workers"),
        tuple(as_int(r, "cursor next role") for r in roles),
    )


def _parse_table(raw: object) -> TablePin:
    if not isinstance(raw, Mapping):
        raise SpecValueError("checkpoint_value_type", "table must be a dict")
    require_keys(raw, ("version", "rows"))
    version = raw["version"]
    return TablePin(
        None if version is None else as_int(version, "table version"), as_int(raw["rows"], "rows")
    )


def check_buffers_reachable(config: RunConfig, state: PackedState) -> None:
    """Structure every buffer the packer leaves behind has: whole documents, each followed by EOS."""
    assert config.packing is not None
    eos = config.packing.eos_id
    for s, buffer in state.buffers.items():
        require(state.consumed[s] > 0, "buffer_unreachable", f"split {s} buffers tokens but consumed nothing")
        require(
            len(buffer.starts) <= state.consumed[s],
            "buffer_unreachable",
            f"split {s} buffers more documents than it consumed",
        )
        require(buffer.tokens[-1] == eos, "buffer_unreachable", f"split {s}: a buffer ends with eos_id")
        require(
            all(INT64_MIN <= t <= INT64_MAX for t in buffer.tokens),
            "buffer_unreachable",
            f"split {s}: buffer tokens are int64 values",
        )
        require(
            all(buffer.tokens[x - 1] == eos for x in buffer.starts if x > 0),
            "buffer_unreachable",
            f"split {s}: every document in a buffer follows an eos_id",
        )


def _plain_state(config: RunConfig, st: Mapping[str, object], split_len: int | None) -> State:
    if config.packing is None:
        row = parse_row(st, config.num_splits)
        if split_len is not None:
            require(
                all(p <= split_len for p in row.positions), "progress_out_of_range", "beyond the split end"
            )
        return row
    packed = parse_packed(st, config.num_splits)
    budget = config.packing.blocks_per_split(config.num_splits)
    if split_len is not None:
        require(all(c <= split_len for c in packed.consumed), "progress_out_of_range", "beyond the split end")
    require(all(e <= budget for e in packed.emitted), "progress_out_of_range", "more blocks than the budget")
    check_buffers_reachable(config, packed)
    return packed


def is_legacy(checkpoint: Mapping[str, object]) -> bool:
    """A checkpoint without our extra key (``lancedb.streaming``'s, or an older elastic-loader's)."""
    return EXTRA_KEY not in checkpoint


def load_saved(config: RunConfig, checkpoint: object, split_len: int | None, *, alone: bool = True) -> Saved:
    """Validate a checkpoint for ``config`` and return it as the model understands it.

    ``split_len=None`` (merging) skips the checks that need the split length; ``alone=False``
    (merging) skips the alignment check of legacy packed checkpoints, which applies to the merge.

    Raises:
        SpecTypeError: not a dict.
        SpecValueError: everything ``load_row``/``load_packed`` reject, a malformed
            ``elastic_loader`` entry, a digest that does not match, a packed buffer no packer
            leaves behind, or a packed checkpoint without the extra key whose splits emitted
            different block counts (one rank's unmerged state, written by an older version or by
            the reference: ``packed_partial_state``).
    """
    st = as_mapping(checkpoint)
    check_against(config, st)
    state = _plain_state(config, st, split_len)
    everything = frozenset(range(config.num_splits))
    extra = _extra(st)
    if extra is None:
        if isinstance(state, PackedState) and alone:
            require(
                len(set(state.emitted)) <= 1,
                "packed_partial_state",
                "this packed checkpoint holds one rank's progress only (its splits emitted different "
                "block counts); merge every rank's state with merge_state_dicts",
            )
        return Saved(config, state, everything)
    _check_digest(st, extra)
    require(
        extra.get("format") == FORMAT,
        "checkpoint_format",
        f"unknown checkpoint format {extra.get('format')!r}",
    )
    n = config.num_splits
    reported = _split_ids(extra["reported"], n, "reported") if "reported" in extra else everything
    unknown = _split_ids(extra.get("unknown", []), n, "unknown")
    projections = _parse_projections(extra.get("projected", {}), n)
    if projections:
        assert config.packing is not None or isinstance(state, RowState)
        budget = config.packing.blocks_per_split(n) if config.packing is not None else 0
        require(
            all(p.target <= budget for p in projections.values()),
            "progress_out_of_range",
            "beyond the budget",
        )
    cursor = _parse_cursor(extra["cursor"]) if extra.get("cursor") is not None else None
    table = _parse_table(extra["table"]) if extra.get("table") is not None else None
    return Saved(config, state, reported, unknown, projections, cursor, table)


def load_for_rank(config: RunConfig, checkpoint: object, split_len: int, world_size: int, rank: int) -> Saved:
    """``load_state_dict`` on rank ``rank``: ``load_saved``, and the rank's splits must be known.

    Raises:
        SpecValueError: what ``load_saved`` raises, or ``progress_unknown``.
    """
    saved = load_saved(config, checkpoint, split_len)
    missing = sorted(saved.unknown & set(rank_splits(config.num_splits, world_size, rank)))
    if missing:
        raise SpecValueError(
            "progress_unknown",
            f"this checkpoint does not know the progress of splits {missing}: one rank wrote it while its "
            "transform errors could skip rows, so it cannot tell where other ranks stood; load a merge "
            "of every rank's state (merge_state_dicts or merged_state_dict) instead",
        )
    return saved


# ---------------------------------------------------------------- one split's values


@dataclass(frozen=True)
class SplitValue:
    """One split's plain values (row: samples, positions; packed: consumed, emitted, buffer)."""

    first: int
    second: int
    buffer: PackBuffer = field(default_factory=PackBuffer)


def split_value(state: State, s: int) -> SplitValue:
    """Split ``s``'s plain values in ``state``."""
    if isinstance(state, RowState):
        return SplitValue(state.samples[s], state.positions[s])
    return SplitValue(state.consumed[s], state.emitted[s], state.buffer(s))


def assemble_state(template: State, values: Sequence[SplitValue]) -> State:
    """The state of ``template``'s kind holding ``values[s]`` for every split ``s``."""
    if isinstance(template, RowState):
        return RowState(tuple(v.first for v in values), tuple(v.second for v in values))
    buffers = {s: v.buffer for s, v in enumerate(values) if v.buffer.tokens}
    return PackedState(tuple(v.first for v in values), tuple(v.second for v in values), buffers)


# ---------------------------------------------------------------- merge


def _rank_key(saved: Saved, s: int) -> tuple[int, int, bool]:
    """Sort key of split ``s``'s value: further progress first, an exact value before a projection."""
    state = saved.state
    second = state.positions[s] if isinstance(state, RowState) else state.consumed[s]
    return saved.count(s), second, s not in saved.projections


def merge_saved(states: Sequence[Saved]) -> Saved:
    """Merge the checkpoints of every rank: each split takes the furthest value that reports it.

    Raises:
        SpecValueError: no states; a split no state reports (``merge_missing_rank``: a rank was left
            out); different table versions (``table_version_mismatch``).
    """
    require(len(states) > 0, "merge_empty", "merge_state_dicts needs at least one state")
    first = states[0]
    n = first.config.num_splits
    tables = {st.table for st in states if st.table is not None}
    require(
        len(tables) <= 1, "table_version_mismatch", "the states were written for different table versions"
    )
    chosen: list[Saved] = []
    for s in range(n):
        reporters = [st for st in states if s in st.reported]
        if not reporters:
            raise SpecValueError(
                "merge_missing_rank",
                f"no state reports split {s}: merge_state_dicts needs the state of every rank (one rank's "
                "state alone can be loaded directly with load_state_dict when the ranks were in lockstep)",
            )
        chosen.append(max(reporters, key=lambda st: _rank_key(st, s)))  # the first of equals
    state = assemble_state(first.state, [split_value(st.state, s) for s, st in enumerate(chosen)])
    projections = {s: st.projections[s] for s, st in enumerate(chosen) if s in st.projections}
    table = tables.pop() if tables else None
    return Saved(
        first.config, state, frozenset(range(n)), frozenset(), projections, _merge_cursors(states), table
    )


def _merge_cursors(states: Sequence[Saved]) -> Cursor | None:
    """Each rank's next role from the state that reports that rank's splits (one cursor shape only)."""
    with_cursor = [st for st in states if st.cursor is not None]
    shapes = {(st.cursor.world_size, st.cursor.num_workers) for st in with_cursor if st.cursor is not None}
    if len(shapes) != 1:
        return None
    world_size, num_workers = shapes.pop()
    n = with_cursor[0].config.num_splits
    roles = []
    for r in range(world_size):
        block = set(rank_splits(n, world_size, r))
        owner = next((st for st in with_cursor if block <= st.reported), with_cursor[0])
        assert owner.cursor is not None
        roles.append(owner.cursor.next_roles[r])
    return Cursor(world_size, num_workers, tuple(roles))


def merge_state_dicts(checkpoints: Sequence[object]) -> Checkpoint:
    """Merge the checkpoints of every rank into one that loads on any topology.

    Each split takes the furthest value among the checkpoints that *report* it (written by the
    rank that owned it); a checkpoint written by ``lancedb.streaming`` or merged before reports
    every split.

    Raises:
        SpecTypeError: a state is not a dict.
        SpecValueError: no states, a missing key, mixed modes, differing config, a malformed
            state, or a split no state reports (``merge_missing_rank``).
    """
    require(len(checkpoints) > 0, "merge_empty", "merge_state_dicts needs at least one state")
    parsed = [as_mapping(c) for c in checkpoints]
    first = parsed[0]
    for st in parsed:
        require(
            is_packed(st) == is_packed(first), "merge_mode_mismatch", "cannot merge packed and row states"
        )
        require_keys(st, config_keys(st))
    for st in parsed[1:]:
        check_same_config(st, first, config_keys(first))
        require(
            st.get("perm_fingerprint") == first.get("perm_fingerprint"),
            "perm_fingerprint_mismatch",
            "states come from different permutations",
        )
    config = config_from(first)
    merged = merge_saved([load_saved(config, st, None, alone=False) for st in parsed])
    if isinstance(merged.state, PackedState) and any(is_legacy(st) for st in parsed):
        require(
            len(set(merged.state.emitted)) == 1,
            "merge_packed_not_aligned",
            "packed states without elastic-loader's provenance were not taken at one global step or do "
            "not cover every rank",
        )
    return snapshot_saved(merged)


# ---------------------------------------------------------------- resolving projections


def resolve(
    saved: Saved,
    perm: Permutation,
    faults: Faults,
    splits: Sequence[int],
    corpus: Mapping[int, Sequence[int]] | None = None,
) -> State:
    """The exact progress of ``splits`` (the other splits keep their plain values).

    A projected packed split is replayed from its plain value until it emitted its target.

    Raises:
        SpecValueError: ``progress_unknown`` (an unknown row split), ``projection_unreachable``.
    """
    state = saved.state
    missing = sorted(saved.unknown & set(splits))
    require(not missing, "progress_unknown", f"the progress of splits {missing} is unknown")
    if isinstance(state, RowState):
        return state
    assert saved.config.packing is not None and corpus is not None
    consumed, emitted, buffers = list(state.consumed), list(state.emitted), dict(state.buffers)
    for s in (s for s in splits if s in saved.projections):
        need = saved.projections[s].target - state.emitted[s]
        run = iterate_packed(perm, corpus, faults, (s,), saved.config.packing, state)
        require(
            len(run.blocks) >= need,
            "projection_unreachable",
            f"split {s} cannot reach the {saved.projections[s].target} blocks its checkpoint infers",
        )
        after = run.state_after(need)
        consumed[s], emitted[s] = after.consumed[s], after.emitted[s]
        buffers.pop(s, None)
        if s in after.buffers:
            buffers[s] = after.buffers[s]
    return PackedState(tuple(consumed), tuple(emitted), buffers)
