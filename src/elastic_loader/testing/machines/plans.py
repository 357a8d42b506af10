"""What the machines draw: a configuration per example, session, loader and fault plans.

Rules of this module: every plan is a frozen dataclass whose repr is valid
Python (a printed failing program replays by pasting it); a strategy draws
only from its own arguments, never from how an implementation behaved, so
data generation cannot be flaky; simplest values first (Hypothesis shrinks
towards them). :meth:`SessionPlan.fit` adapts a drawn plan to the
configuration instead of filtering draws.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Literal

from hypothesis import strategies as st

from ...spec import Faults
from ..tables import ID_COLUMN, TOKEN_COLUMN, TableKey


@dataclass(frozen=True)
class SimulatedWorker:
    """A ``worker_info_override`` value: DataLoader worker ``id`` of ``num_workers``."""

    id: int
    num_workers: int


@dataclass(frozen=True)
class FaultPlan:
    """Which ids fail and how: ``mode`` is ``"none"`` or an ``on_transform_error`` value."""

    mode: Literal["none", "skip", "warn", "raise"] = "none"
    ids: frozenset[int] = frozenset()

    def faults(self, present: frozenset[int]) -> Faults:
        """The spec faults for the ids that exist (``present``)."""
        ids = self.ids & present
        if self.mode == "raise":
            return Faults(raising=ids)
        if self.mode in ("skip", "warn"):
            return Faults(skipped=ids)
        return Faults()


@dataclass(frozen=True)
class PackingPlan:
    """Packing parameters; ``blocks_per_split=None`` asks for ``blocks_per_epoch="auto"``."""

    pack_sequences: int
    blocks_per_split: int | None
    eos_id: int = -1
    pad_id: int = -2


PermutationKind = Literal["builder", "computed", "local"]
PERMUTATIONS: tuple[PermutationKind, ...] = ("builder", "computed", "local")
"""``StreamingDataset(permutation=...)`` kinds the machines draw (the builder first: the default)."""

DRAWN_PERMUTATIONS: ContextVar[tuple[PermutationKind, ...]] = ContextVar(
    "DRAWN_PERMUTATIONS", default=PERMUTATIONS
)
"""The kinds :func:`machine_configs` draws from. A machine sets it for the implementation it drives
(only ``"builder"`` when its ``StreamingDataset`` has no ``permutation=``): with one kind nothing is
drawn, so such an implementation meets exactly the examples it met before the kinds existed (the
reference's pinned results depend on them)."""


@dataclass(frozen=True)
class MachineConfig:
    """Everything fixed for one example: the table, the permutation, faults and mode."""

    rows: int
    fragments: int
    num_splits: int
    shuffle: bool = True
    shuffle_seed: int = 0
    epoch: int = 0
    filter: str | None = None
    columns: tuple[str, ...] | None = None
    faults: FaultPlan = FaultPlan()
    packing: PackingPlan | None = None
    permutation: PermutationKind = "builder"
    """``StreamingDataset(permutation=...)``; ``"local"`` is ``LocalShuffle(clump, window)``. The
    computed kinds shuffle every row: ``shuffle`` and ``filter`` apply to the builder only."""
    clump: int = 1
    window: int = 1

    @property
    def local(self) -> tuple[int, int] | None:
        """``(clump, window)`` of a local permutation, else ``None``."""
        return (self.clump, self.window) if self.permutation == "local" else None

    def permutation_params(self) -> dict[str, object]:
        """The keywords that choose the permutation: ``shuffle`` and ``filter`` (the builder), or
        ``permutation`` (only an implementation that accepts it is given one)."""
        if self.permutation == "builder":
            return {"shuffle": self.shuffle, **({} if self.filter is None else {"filter": self.filter})}
        if self.local is None:
            return {"permutation": self.permutation}
        from elastic_loader import LocalShuffle

        return {"permutation": LocalShuffle(clump=self.clump, window=self.window)}

    @property
    def table_key(self) -> TableKey:
        """Packing faults are null token lists in the table; row faults come from the transform."""
        nulls = self.faults.ids if self.packing is not None and self.faults.mode != "none" else frozenset()
        return TableKey(self.rows, self.fragments, frozenset(nulls))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class SessionPlan:
    """A topology and pipeline knobs for one session; :meth:`fit` adapts it to ``num_splits``."""

    world_size: int = 1
    num_workers: int = 0
    read_batch_size: int = 4
    io_queue_depth: int = 1
    transform_parallelism: int = 1

    def fit(self, num_splits: int, splits_per_rank_multiple: int = 1) -> SessionPlan:
        """The nearest valid plan: ``W | S``, ``(S/W) % multiple == 0`` and ``nw | S/W``."""
        sizes = [
            d
            for d in _divisors(num_splits)
            if d <= max(1, self.world_size) and (num_splits // d) % splits_per_rank_multiple == 0
        ]
        world = max(sizes) if sizes else 1
        per_rank = num_splits // world
        workers = 0 if self.num_workers <= 0 else max(d for d in _divisors(per_rank) if d <= self.num_workers)
        return replace(self, world_size=world, num_workers=workers)


FILTERS: dict[str | None, Callable[[int], bool]] = {
    None: lambda i: True,
    "id % 3 != 1": lambda i: i % 3 != 1,
    "id >= 5": lambda i: i >= 5,
}
ROW_COUNTS = (8, 9, 12, 17, 24, 33, 48, 64, 95, 120)


@st.composite
def machine_configs(
    draw: st.DrawFn,
    *,
    packing: bool | None = None,
    splits_multiple_of: int = 1,
    max_splits: int = 8,
    modes: Sequence[Literal["none", "skip", "raise", "warn"]] = ("none", "skip", "raise", "warn"),
) -> MachineConfig:
    """Draw a valid :class:`MachineConfig` (``packing=None`` draws the mode too; ``modes`` are
    the ``FaultPlan`` modes to draw from)."""
    rows = draw(st.sampled_from(ROW_COUNTS))
    fragments = draw(st.integers(1, 3))
    flt = draw(st.sampled_from(list(FILTERS)))
    available = sum(1 for i in range(rows) if FILTERS[flt](i))
    # Simplest first: 4 and 2 splits (several ranks and workers fit), then the rest.
    preferred = sorted(range(1, max_splits + 1), key=lambda s: (s not in (4, 2), s != 4, s))
    choices = [s for s in preferred if s <= available and s % splits_multiple_of == 0]
    num_splits = choices[draw(st.integers(0, len(choices) - 1))]
    packed = draw(st.booleans()) if packing is None else packing
    mode = draw(st.sampled_from(list(modes)))
    ids: frozenset[int] = frozenset()
    if mode != "none" and draw(st.booleans()):
        ids = draw(st.frozensets(st.integers(0, rows - 1), min_size=1, max_size=max(1, rows // 4)))
    elif mode != "none":
        # Every period-th id: faults spread over every split, so short runs meet them too.
        period = draw(st.integers(2, 12))
        ids = frozenset(range(draw(st.integers(0, period - 1)), rows, period))
    plan: PackingPlan | None = None
    columns: tuple[str, ...] | None = None
    if packed:
        auto = mode == "none" and draw(st.integers(0, 3)) == 3
        plan = PackingPlan(
            pack_sequences=draw(st.integers(1, 8)),
            blocks_per_split=None if auto else draw(st.integers(1, 8)),
            eos_id=draw(st.sampled_from((-1, 0))),
            pad_id=draw(st.sampled_from((-2, 7))),
        )
    else:
        columns = draw(st.sampled_from(((ID_COLUMN,), None, (ID_COLUMN, TOKEN_COLUMN))))
    shuffle = draw(st.booleans())
    seed, epoch = draw(st.integers(0, 1000)), draw(st.integers(0, 3))
    # Drawn last and only where there is a choice (DRAWN_PERMUTATIONS), so an implementation
    # without permutation= draws the same bytes as before; the builder first (the default).
    kinds = DRAWN_PERMUTATIONS.get()
    kind: PermutationKind = draw(st.sampled_from(kinds)) if len(kinds) > 1 else kinds[0]
    local = (draw(st.integers(1, 6)), draw(st.integers(1, 6))) if kind == "local" else (1, 1)
    return MachineConfig(
        rows=rows,
        fragments=fragments,
        num_splits=num_splits,
        shuffle=shuffle,
        shuffle_seed=seed,
        epoch=epoch,
        filter=flt,
        columns=columns,
        faults=FaultPlan(mode, ids),
        packing=plan,
        permutation=kind,
        clump=local[0],
        window=local[1],
    )


def session_plans() -> st.SearchStrategy[SessionPlan]:
    """Draw a :class:`SessionPlan` (fitted to the configuration when used)."""
    return st.builds(
        SessionPlan,
        world_size=st.sampled_from((2, 1, 4, 3)),
        # Simulated workers write partial checkpoints (no inference): draw sessions of whole ranks
        # about two times in three, so one rank's checkpoint of a lockstep job is common.
        num_workers=st.one_of(st.just(0), st.integers(0, 2)),
        read_batch_size=st.integers(1, 8),
        io_queue_depth=st.integers(1, 3),
        transform_parallelism=st.integers(1, 2),
    )


ProtocolName = Literal["one_rank", "merge_all", "own"]
"""A save protocol (``spec.protocols.Protocol``): how a session's checkpoints become the next starts."""
PROTOCOLS: tuple[ProtocolName, ...] = ("one_rank", "merge_all", "own")


def protocols() -> st.SearchStrategy[ProtocolName]:
    """Draw a save protocol (one rank's checkpoint first: the simplest, and the one users keep)."""
    return st.sampled_from(PROTOCOLS)


@dataclass(frozen=True)
class LoaderPlan:
    """One lockstep ``StreamingDataLoader`` session: every rank of ``world_size`` ranks takes
    ``batches`` batches of ``batch_size`` (fewer when a rank cannot deliver them, as
    ``sync_epoch_end`` does), then every rank checkpoints.

    ``rank`` (modulo ``W``) is the rank whose checkpoint is kept for a one-rank resume;
    ``protocol`` says how the checkpoint the session starts from is used (a one-rank state, a
    merge of its session's states, or each rank's own); ``same_shape`` resumes it on the shape of
    the loader session that wrote it (``SameTopologyResumeProp``). ``aligned`` scales
    ``batch_size`` by the splits per worker, so every batch is whole cycles.
    """

    rank: int = 0
    batch_size: int = 1
    batches: int = 1
    aligned: bool = True
    world_size: int = 0
    """Run on this many ranks (fitted like :meth:`SessionPlan.fit`); 0 keeps the session's."""
    protocol: ProtocolName = "one_rank"
    same_shape: bool = False


def loader_plans() -> st.SearchStrategy[LoaderPlan]:
    """Draw a :class:`LoaderPlan` (the simplest plan: one rank's state, aligned batches)."""
    return st.builds(
        LoaderPlan,
        rank=st.integers(0, 7),
        batch_size=st.integers(1, 6),
        batches=st.integers(1, 4),
        aligned=st.booleans().map(lambda unaligned: not unaligned),
        world_size=st.integers(0, 4),
        protocol=protocols(),
        same_shape=st.booleans(),
    )


__all__ = [
    "DRAWN_PERMUTATIONS",
    "FILTERS",
    "PERMUTATIONS",
    "PROTOCOLS",
    "ROW_COUNTS",
    "FaultPlan",
    "LoaderPlan",
    "MachineConfig",
    "PackingPlan",
    "PermutationKind",
    "ProtocolName",
    "SessionPlan",
    "SimulatedWorker",
    "loader_plans",
    "machine_configs",
    "protocols",
    "session_plans",
]
