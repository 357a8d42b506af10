"""The machines' bookkeeping: sessions of slots, and the checkpoints they record.

Rules of this module: plain data and pure helpers; nothing here calls the
spec or judges anything. A :class:`Recorded` checkpoint carries, beside what
the implementation wrote, the spec's *truth* (where the job really is: every
split at its owner's progress) and the *history* of its lineage (what a trainer
received since the epoch started), so a wrong checkpoint shows up when it is
resumed; and what a conforming implementation would have written in its place
(``expected``), which the next session of the conforming chain starts from.

The bookkeeping stays sound: a lineage is judged (``lineage``) only while its
truth and history describe what the job delivered. Resuming one rank's
checkpoint keeps the lineage only when the conforming checkpoint's inferences
are the owners' truth (``sound``: the session was in lockstep); otherwise a
conforming implementation resumes elsewhere by design, and the resumed session
is judged only against the spec's run from the checkpoint it was given.

Rules always add an :class:`Entry` to :data:`CHECKPOINTS` (a :class:`Missing`
one when there is no checkpoint), which keeps Hypothesis's choices independent
of how the implementation behaved.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from hypothesis.stateful import Bundle

from ...spec import SpecError
from ...spec.loader import LoaderRun
from ...spec.protocols import Shape
from ...spec.saved import Saved
from ..adapters import DatasetLike
from .model import EpochModel, History, Item, ModelState, Run
from .plans import SessionPlan


@dataclass(frozen=True)
class LoaderMemo:
    """A lockstep ``StreamingDataLoader`` session, remembered for ``SameTopologyResumeProp``: its
    shape, every rank's spec run from what the rank was given, and the batches each rank took."""

    shape: Shape
    runs: tuple[LoaderRun, ...]
    taken: int


@dataclass(frozen=True, eq=False)
class Recorded:
    """A checkpoint in the bundle: what the implementation wrote, and the spec's truth beside it."""

    label: str
    epoch: int
    state: Mapping[str, object]
    truth: ModelState
    history: History
    expected: Saved
    """What a conforming implementation wrote here (in the conforming chain of sessions)."""
    lineage: bool = True
    """``truth`` and ``history`` describe the job (else nothing is judged against them)."""
    sound: bool = True
    """Loading ``state`` on every rank keeps the lineage (its inferences are the owners' truth)."""
    group: tuple[Mapping[str, object], ...] = ()
    """Every rank's checkpoint of the same moment, in rank order (for merging all, or each its own)."""
    true_group: tuple[Saved, ...] = ()
    """What a conforming implementation wrote on every rank at that moment."""
    memo: LoaderMemo | None = None
    """The loader session that wrote it, if one did."""
    chain: int = 0
    """How many resumes the lineage went through."""

    def __repr__(self) -> str:
        return f"<checkpoint {self.label}>"


@dataclass(frozen=True, eq=False)
class Missing:
    """What a checkpointing rule adds when there is no checkpoint; rules drawing it do nothing.

    Adding something every time keeps the bundle's contents, and with them
    Hypothesis's choices, independent of how the implementation behaved.
    """

    label: str

    def __repr__(self) -> str:
        return f"<no checkpoint: {self.label}>"


Entry = Recorded | Missing


@dataclass
class Slot:
    """One (rank, worker) iterator of a session."""

    rank: int
    worker: int
    owned: tuple[int, ...]
    dataset: DatasetLike | None
    saved: Saved
    """The spec's reading of the checkpoint the dataset loaded (the epoch's start when fresh)."""
    true_saved: Saved
    """The checkpoint the conforming chain gives this slot's rank."""
    start: ModelState
    truth: ModelState
    expected: Run | SpecError
    true_run: Run | SpecError
    resumed: bool
    simulated: bool = False
    """The dataset is a simulated DataLoader worker (``worker_info_override``)."""
    delivered: list[Item] = field(default_factory=list)
    iterator: Iterator[object] | None = None
    finished: str | None = None
    """``None`` while live; else ``"exhausted"``, ``"raised"``, ``"error"`` or ``"broken"``."""
    latest: Recorded | None = None

    @property
    def label(self) -> str:
        """``rank r worker w``."""
        return f"rank {self.rank} worker {self.worker}"


@dataclass
class Session:
    """Slots of one topology over one epoch, started from one checkpoint (or from scratch)."""

    plan: SessionPlan
    epoch: EpochModel
    slots: list[Slot]
    history: History
    origin: str
    lineage: bool = True
    """The slots' truths and the history describe the job (see the module rules)."""
    chain: int = 0
    """How many resumes the lineage went through."""


def close_iterator(iterator: Iterator[object] | None) -> None:
    """Close an implementation's iterator, if it can be closed (pipelines own threads)."""
    close = getattr(iterator, "close", None)
    if callable(close):
        close()


def lineage(session: Session) -> tuple[list[list[Item]], bool]:
    """The session's history plus what its slots delivered, per split; and whether the epoch is over."""
    splits = [list(h) for h in session.history]
    for slot in session.slots:
        for item in slot.delivered:
            if 0 <= item.split < len(splits):
                splits[item.split].append(item)
    finished = all(slot.finished == "exhausted" for slot in session.slots)
    return splits, finished


CHECKPOINTS: Bundle[Entry] = Bundle("checkpoints")
"""Every checkpoint taken, merged or committed; rules draw old ones again."""
