"""A mixture's progress and its checkpoint dict (spec/MIXTURES.md, "Progress" and section 2).

Rules:

* :class:`MixState` holds per split the global cycles it delivered (``cycles``) and per
  ``(source, source epoch)`` that source epoch's single-table progress (``entries``: a full-length
  ``RowState`` / ``PackedState``). It is kept *canonical* (:func:`canonical`): for split ``s`` and
  source ``k`` only the epoch ``k`` is in after ``cycles[s]`` global cycles holds real values;
  earlier epochs hold the finished value (rows ``(m, m)``; packed ``consumed = m``, ``emitted =
  C``, no buffer: tokens left at a source epoch's end are dropped), later ones the initial value;
  only the epochs some split is in, or between two such, are kept.
* The checkpoint (:func:`write`) is the spec's wire format: ``format``, ``mixture`` (names, seed,
  epoch, ``on_exhausted``, ``cycles``), ``regimes``, ``cycles``, ``sources`` (name -> source epoch
  -> that source epoch's single-table checkpoint dict, ``_checkpoint.snapshot``), ``reported``,
  ``unknown``, ``projected``; plus an ``elastic_loader`` key with every source's table pin.
* :func:`read` refuses another mixture (names, seed, epoch, ``on_exhausted``, ``cycles``, every
  source's single-table identity), a changed table (the pins) and a state that is not canonical
  for its cycles under its regimes; :func:`merge` takes every split from the furthest state that
  reports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._checkpoint import PackedState, RowState, State, Tokens, as_dict, as_int, parse_for, snapshot
from ._mixture_schedule import Regime, Schedule
from ._mixture_source import SourceReader

FORMAT = 1
PINS = "elastic_loader"

Value = tuple[int, int, tuple[Tokens, Tokens] | None]
"""One split's value in a source epoch: (samples, positions, -) or (consumed, emitted, buffer)."""


@dataclass
class MixState:
    """Per split the global cycles delivered; per (source, epoch) single-table progress."""

    cycles: list[int]
    entries: dict[tuple[int, int], State] = field(default_factory=dict)


def value(state: State, s: int) -> Value:
    if isinstance(state, RowState):
        return state.samples[s], state.positions[s], None
    return state.consumed[s], state.emitted[s], state.buffers.get(s)


def assemble(values: Sequence[Value], packed: bool) -> State:
    if not packed:
        return RowState([v[0] for v in values], [v[1] for v in values])
    buffers = {s: v[2] for s, v in enumerate(values) if v[2] is not None and len(v[2][0])}
    return PackedState([v[0] for v in values], [v[1] for v in values], buffers)


def count(state: State, s: int) -> int:
    """Split ``s``'s items in this source epoch (rows yielded, blocks emitted)."""
    return state.samples[s] if isinstance(state, RowState) else state.emitted[s]


Lookup = Callable[[int, int, int], Value | None]


def canonical(
    schedule: Schedule, readers: Sequence[SourceReader], cycles: Sequence[int], current: Lookup
) -> MixState:
    """The canonical state for ``cycles``: ``current(k, e, s)`` (``None``: initial) in the epoch ``e``
    split ``s`` is in, finished before it, initial after."""
    packed = readers[0].settings.packed
    zero: Value = (0, 0, None)
    entries: dict[tuple[int, int], State] = {}
    for k, reader in enumerate(readers):
        where = [schedule.where(g, k)[0] for g in cycles]
        done: Value = (reader.split_len, reader.capacity if packed else reader.split_len, None)
        for e in range(min(where), max(where) + 1):
            values = [
                done if e < at else zero if e > at else (current(k, e, s) or zero)
                for s, at in enumerate(where)
            ]
            entries[(k, e)] = assemble(values, packed)
    return MixState(list(cycles), entries)


def lookup_in(state: MixState) -> Lookup:
    def current(k: int, e: int, s: int) -> Value | None:
        entry = state.entries.get((k, e))
        return None if entry is None else value(entry, s)

    return current


def check(schedule: Schedule, readers: Sequence[SourceReader], state: MixState) -> None:
    """``ValueError`` unless ``state`` is canonical and every count is the one the schedule gives."""
    if any(not 0 <= g <= len(schedule) for g in state.cycles):
        raise ValueError(
            "a split of the mixture checkpoint delivered more global cycles than its schedule has"
        )
    again = canonical(schedule, readers, state.cycles, lookup_in(state))
    if set(again.entries) != set(state.entries) or any(
        again.entries[key] != state.entries[key] for key in again.entries
    ):
        raise ValueError("the mixture checkpoint's source progress does not match its global cycles")
    for (k, e), entry in state.entries.items():
        for s, g in enumerate(state.cycles):
            at, used = schedule.where(g, k)
            want = readers[k].capacity if e < at else used if e == at else 0
            if count(entry, s) != want:
                raise ValueError(
                    f"the mixture checkpoint's source {readers[k].name!r} epoch {e} split {s} has "
                    f"{count(entry, s)} items where the schedule gives {want}"
                )


@dataclass(frozen=True)
class Head:
    """What a mixture checkpoint must agree on with the mixture that loads it."""

    names: tuple[str, ...]
    seed: int
    epoch: int
    on_exhausted: str
    cycles: int | None

    def as_dict(self) -> dict[str, object]:
        return {
            "names": list(self.names),
            "seed": self.seed,
            "epoch": self.epoch,
            "on_exhausted": self.on_exhausted,
            "cycles": self.cycles,
        }


def write(
    head: Head,
    regimes: Sequence[Regime],
    readers: Sequence[SourceReader],
    state: MixState,
    reported: Iterable[int],
    unknown: Iterable[int],
    projected: Mapping[int, int] | None = None,
) -> dict[str, object]:
    """The mixture checkpoint dict (JSON-able)."""
    sources: dict[str, dict[str, object]] = {name: {} for name in head.names}
    for (k, e), entry in sorted(state.entries.items()):
        sources[head.names[k]][str(e)] = snapshot(readers[k].identity(e), entry)
    return {
        "format": FORMAT,
        "mixture": head.as_dict(),
        "regimes": [{"start": r.start, "weights": list(r.weights)} for r in regimes],
        "cycles": list(state.cycles),
        "sources": sources,
        "reported": sorted(reported),
        "unknown": sorted(unknown),
        "projected": {str(s): t for s, t in sorted((projected or {}).items())},
        PINS: {"tables": {r.name: r.pin for r in readers}},
    }


@dataclass(frozen=True)
class Saved:
    """A parsed mixture checkpoint."""

    regimes: tuple[Regime, ...]
    state: MixState
    reported: frozenset[int]
    unknown: frozenset[int]
    projected: dict[int, int] = field(default_factory=dict)


def _int_list(raw: object, what: str) -> list[int]:
    if not isinstance(raw, list):
        raise ValueError(f"the mixture checkpoint's {what} must be a list")
    return [as_int(v, what) for v in raw]


def read_head(head: Head, checkpoint: object) -> tuple[Mapping[str, Any], tuple[Regime, ...]]:
    """The checkpoint as a mapping and its regimes; ``ValueError`` for another mixture."""
    state = as_dict(checkpoint)
    if state.get("format") != FORMAT or not isinstance(state.get("mixture"), dict):
        raise ValueError(
            "not a StreamingMixture checkpoint (no mixture format 1); a StreamingDataset checkpoint loads "
            "into a StreamingDataset"
        )
    theirs = as_dict(state["mixture"])
    for key, want in head.as_dict().items():
        if theirs.get(key) != want:
            raise ValueError(
                f"the checkpoint is of another mixture: its {key} is {theirs.get(key)!r}, this mixture's "
                f"{want!r}"
            )
    regimes = []
    for raw in _as_list(state.get("regimes"), "regimes"):
        entry = as_dict(raw)
        regimes.append(
            Regime(
                as_int(entry.get("start"), "regime start"), tuple(_int_list(entry.get("weights"), "weights"))
            )
        )
    return state, tuple(regimes)


def _as_list(raw: object, what: str) -> list[object]:
    if not isinstance(raw, list):
        raise ValueError(f"the mixture checkpoint's {what} must be a list")
    return raw


def pinned_version(state: Mapping[str, Any], name: str) -> int | None:
    """The table version source ``name``'s permutations were built from (``None``: not pinned)."""
    pins = state.get(PINS)
    tables = pins.get("tables") if isinstance(pins, dict) else None
    pin = tables.get(name) if isinstance(tables, dict) else None
    return pin[0] if isinstance(pin, list) and pin and isinstance(pin[0], int) else None


def read(
    head: Head,
    readers: Sequence[SourceReader],
    state: Mapping[str, Any],
    regimes: tuple[Regime, ...],
    schedule: Schedule,
) -> Saved:
    """Parse the progress of a checkpoint whose head matched (:func:`read_head`)."""
    n = readers[0].settings.num_splits
    cycles = _int_list(state.get("cycles"), "cycles")
    if len(cycles) != n:
        raise ValueError(f"the mixture checkpoint has {len(cycles)} global cycle counts for {n} splits")
    sources = as_dict(state.get("sources"))
    if set(sources) != set(head.names):
        raise ValueError(
            f"the mixture checkpoint's sources are {sorted(sources)}, this mixture's {sorted(head.names)}"
        )
    pins = as_dict(state.get(PINS, {})).get("tables", {})
    entries: dict[tuple[int, int], State] = {}
    for k, (name, reader) in enumerate(zip(head.names, readers)):
        pin = pins.get(name) if isinstance(pins, dict) else None
        if pin is not None and list(pin) != reader.pin:
            raise ValueError(
                f"source {name!r}: the checkpoint was written for table version {pin[0]} with {pin[1]} rows, "
                f"this source reads version {reader.version} with {reader.pin[1]} rows; load it into a "
                "mixture over the same tables"
            )
        for key, snap in as_dict(sources[name]).items():
            if not key.lstrip("-").isdigit():
                raise ValueError(f"source {name!r}: source epoch {key!r} is not an int")
            e = int(key)
            if e not in reader.perms:
                raise ValueError(
                    f"source {name!r}: the checkpoint holds epoch {e}, which the schedule never reads"
                )
            entries[(k, e)] = parse_for(reader.identity(e), snap, reader.split_len)
    parsed = MixState(cycles, entries)
    check(schedule, readers, parsed)
    reported = frozenset(_int_list(state.get("reported"), "reported"))
    unknown = frozenset(_int_list(state.get("unknown", []), "unknown"))
    raw = as_dict(state.get("projected", {}))
    if not all(isinstance(k, str) and k.isdigit() for k in raw):
        raise ValueError("the mixture checkpoint's projected splits must be split ids")
    projected = {int(k): as_int(v, "projected target") for k, v in raw.items()}
    ids = reported | unknown | set(projected)
    if any(not 0 <= s < n for s in ids) or reported & unknown or set(projected) & (reported | unknown):
        raise ValueError(
            "the mixture checkpoint's reported, unknown and projected splits must be distinct ids"
        )
    if projected and not readers[0].settings.packed:
        raise ValueError("only packed progress is projected in a mixture checkpoint")
    if any(t <= cycles[s] or t > len(schedule) for s, t in projected.items()):
        raise ValueError(
            "a projected split of the mixture checkpoint must go beyond its base, within the schedule"
        )
    return Saved(regimes, parsed, reported, unknown, projected)


def split_key(schedule: Schedule, state: MixState, s: int) -> tuple[int, int, int]:
    """How far split ``s`` is: global cycles, then its count and second value in its next source epoch."""
    g = state.cycles[s]
    if g >= len(schedule):
        return g, 0, 0
    entry = state.entries.get((schedule.source[g], schedule.epoch[g]))
    if entry is None:
        return g, 0, 0
    v = value(entry, s)
    return (g, v[1], v[0]) if isinstance(entry, PackedState) else (g, v[0], v[1])


def reweighted(regimes: tuple[Regime, ...], state: MixState, weights: tuple[int, ...]) -> tuple[Regime, ...]:
    """The regimes a resume with ``weights`` runs under: a new regime at ``u0`` (the furthest split's
    global cycles, later planned regimes dropped) unless the regime in effect there has them."""
    u0 = max(state.cycles)
    kept = tuple(r for r in regimes if r.start < u0)
    if kept and kept[-1].weights == weights:
        return regimes
    return (*kept, Regime(u0, weights))
