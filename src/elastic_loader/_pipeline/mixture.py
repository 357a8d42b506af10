"""StreamingMixture: several tables with weights, one elastic and resumable iterable (issue 16).

Rules (spec/MIXTURES.md defines every one; this is the pipeline's implementation of it):

* Construction validates every source with the single-table rules (``_mixture_source``), checks
  that all sources are in row mode or all pack with the same ``pack_sequences``, turns the
  weights into integer weights (``_mixture_schedule.integer_weights``), computes the schedule of
  the mixture epoch and builds every source epoch it reads. Nothing reads rows up front.
* Iteration resolves the owned splits as ``StreamingDataset`` does (``_topology``: rank block,
  then worker sub-block) and runs one ``_mixture_iter.MixtureIterator`` over them: global cycle
  ``u`` gives one item of every owned split from the scheduled source epoch, so a global step
  holds the same items of the same sources whatever ``world_size`` and ``num_workers`` are.
* Items are the sources' items; with ``source_key`` (default ``"source"``) every item, which must
  then be a dict (rows with the default transform, packed blocks), gets the source's name under
  that key. A packed block is always one source's block.
* ``state_dict()`` is one checkpoint of the whole mixture (``_mixture_state.write``): this rank's
  splits reported, every other split as loaded and marked unknown when other ranks exist (their
  progress is not inferred yet: merge every rank's state with :meth:`merge_state_dicts` to resume
  on any topology). ``load_state_dict()`` refuses another mixture, changed tables and a state the
  schedule does not produce, reads the sources at their pinned table versions, and applies this
  mixture's weights from ``u0`` on when they differ from the checkpoint's (a new regime).
* A plain DataLoader with workers makes the parent's progress unknown: ``state_dict()`` then
  refuses (``_gate``), as for one table.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from .._exports import public
from ._gate import CheckpointGate
from ._mixture_infer import Pass, Start, rank_checkpoint, resolve
from ._mixture_iter import MixtureIterator
from ._mixture_schedule import ON_EXHAUSTED, Regime, Schedule, build_schedule, integer_weights
from ._mixture_source import MixtureSource, SourceReader
from ._mixture_state import (
    Head,
    MixState,
    Saved,
    canonical,
    lookup_in,
    pinned_version,
    read,
    read_head,
    reweighted,
    split_key,
    write,
)
from ._session import EpochLink, Lease
from ._stats import Counters, new_shared, zero_worker_gauges
from ._topology import check_workers, owned_splits, rank_block, role_splits


def _weights(names: Sequence[str], weights: Any, resolution: int) -> tuple[int, ...]:
    if isinstance(weights, Mapping):
        if set(weights) != set(names):
            raise ValueError(f"weights name the sources {sorted(weights)}; the mixture has {sorted(names)}")
        weights = [weights[n] for n in names]
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or len(weights) != len(names):
        raise TypeError(f"weights must be a mapping of source names or a sequence of {len(names)} numbers")
    return integer_weights(list(weights), resolution)


def _check_options(on_exhausted: object, cycles: object, seed: object, epoch: object) -> None:
    if on_exhausted not in ON_EXHAUSTED:
        raise ValueError(f"on_exhausted must be one of {ON_EXHAUSTED}, got {on_exhausted!r}")
    for name, v, low in (("seed", seed, 0), ("epoch", epoch, 0), ("cycles", cycles, 1)):
        if v is None and name == "cycles":
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if v < low:
            raise ValueError(f"{name} must be >= {low}, got {v}")
    if on_exhausted == "cycle" and cycles is None:
        raise ValueError("on_exhausted='cycle' never runs out: give the mixture epoch's length (cycles)")


@public
class StreamingMixture(IterableDataset[Any]):
    """An elastic, resumable mixture of several LanceDB tables with weights (spec/MIXTURES.md).

    Every source has its own table, seed, filter, columns and transform (a
    :class:`MixtureSource`) and the mixture's ``num_splits``. Global cycle ``u``
    is one item of every split from one source, chosen by earliest-deadline-
    first over the integer weights (a pure function of ``seed``, ``epoch`` and
    the weights), so the realised proportions stay within one cycle of the
    weights after any prefix and a global step holds the same items on any
    topology.

    Args:
        sources: source name -> :class:`MixtureSource` (the order is the sources' order).
        weights: proportions per source (a mapping of names or a sequence), any
            non-negative numbers not all zero; rounded to integers summing to
            ``resolution`` by largest remainders.
        num_splits: splits of every source (``None``: ``world_size``).
        rank, world_size: the topology, as for ``StreamingDataset``.
        seed: the mixture's seed (the deadline ties); ``epoch``: the mixture
            epoch, also every source's first epoch.
        on_exhausted: ``"stop"`` (end the mixture epoch when a scheduled
            source has no cycle left), ``"cycle"`` (that source goes on with
            its next epoch; needs ``cycles``) or ``"renormalize"`` (drop it and
            go on with the others' weights).
        cycles: the mixture epoch's length in global cycles (``None``: until a
            source or every weight runs out).
        resolution: the sum of the integer weights.
        source_key: the key every (dict) item gets its source's name under;
            ``None`` yields the items unchanged.
        worker_info_override: as for ``StreamingDataset``.

    Raises:
        TypeError, ValueError: a bad argument or source option, sources with
            different modes or ``pack_sequences``.
    """

    def __init__(
        self,
        sources: Mapping[str, MixtureSource],
        weights: Mapping[str, float] | Sequence[float],
        *,
        num_splits: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        epoch: int = 0,
        on_exhausted: str = "stop",
        cycles: int | None = None,
        resolution: int = 1000,
        source_key: str | None = "source",
        worker_info_override: Any = None,
    ) -> None:
        super().__init__()
        if not isinstance(sources, Mapping) or not sources:
            raise TypeError("sources must be a non-empty mapping of names to MixtureSource")
        if any(not isinstance(n, str) or not n for n in sources):
            raise ValueError("every source needs a non-empty str name")
        _check_options(on_exhausted, cycles, seed, epoch)
        if source_key is not None and not isinstance(source_key, str):
            raise TypeError("source_key must be a str or None")
        self.names = tuple(sources)
        self._weights = _weights(self.names, weights, resolution)
        topology = {
            "num_splits": num_splits,
            "rank": rank,
            "world_size": world_size,
            "worker_info_override": worker_info_override,
        }
        self._readers = [SourceReader(n, s, topology) for n, s in sources.items()]
        modes = {r.settings.pack_sequences for r in self._readers}
        if len(modes) != 1:
            raise ValueError(
                "the sources of a mixture are all in row mode, or all pack with the same pack_sequences; "
                f"got pack_sequences {sorted(modes, key=str)}"
            )
        first = self._readers[0].settings
        self._head = Head(self.names, seed, epoch, on_exhausted, cycles)
        self._source_key = source_key
        self._override = worker_info_override
        self._rank_splits = rank_block(rank, first.splits_per_rank)
        self._counters = Counters()
        self._counters.attach_shared(new_shared())
        self._gate = CheckpointGate(self._counters.shared)
        self._live: MixtureIterator | None = None
        self._lease = Lease()  # a StreamingDataLoader's token while it iterates
        self._generation = 0
        self._transport = False  # under a StreamingDataLoader: progress moves by commits only
        for r in self._readers:
            r.build(range(epoch, epoch + 1))
        self._start_epoch((Regime(0, self._weights),))

    # ------------------------------------------------------------ schedule and progress

    def _schedule_for(self, regimes: tuple[Regime, ...]) -> Schedule:
        """The schedule of ``regimes`` (kept per head, regimes and capacities: loads reuse it)."""
        h = self._head
        capacities = tuple(r.capacity for r in self._readers)
        key = (h, regimes, capacities)
        cache: dict[Any, Schedule] = self.__dict__.setdefault("_schedules", {})
        if key not in cache:
            cache.clear()  # one entry: the regimes of the epoch in use
            cache[key] = build_schedule(
                regimes,
                capacities,
                [h.epoch] * len(self._readers),
                seed=h.seed,
                epoch=h.epoch,
                on_exhausted=h.on_exhausted,
                cycles=h.cycles,
            )
        return cache[key]

    def _use(self, regimes: tuple[Regime, ...], version: dict[str, int | None] | None = None) -> None:
        """Run under ``regimes``, with every source epoch they read built (at ``version[name]``)."""
        for r in self._readers:  # a pinned version may hold other rows: the capacities first
            r.build(
                range(self._head.epoch, self._head.epoch + 1),
                None if version is None else version.get(r.name),
            )
        self._regimes = regimes
        self._schedule = self._schedule_for(regimes)
        for k, r in enumerate(self._readers):
            r.build(self._schedule.epochs(k))

    def _start_epoch(self, regimes: tuple[Regime, ...]) -> None:
        self._use(regimes)
        n = self._readers[0].settings.num_splits
        self._progress = canonical(self._schedule, self._readers, [0] * n, lambda k, e, s: None)
        self._begin(Start(self._progress))

    def _begin(self, start: Start) -> None:
        """A session starts from ``start``: its ledger of passes is empty, the gate open."""
        self._start = start
        self._ended: dict[str, object] | None = None
        self._passes: list[Pass] = []
        self._gate.after_load()
        self._generation += 1

    def set_epoch(self, epoch: int) -> None:
        """Start mixture epoch ``epoch`` (every source's first epoch too) from its beginning."""
        _check_options(self._head.on_exhausted, self._head.cycles, self._head.seed, epoch)
        self._refuse_while_active("set_epoch")
        h = self._head
        self._head = Head(h.names, h.seed, epoch, h.on_exhausted, h.cycles)
        self._start_epoch((Regime(0, self._weights),))

    # ------------------------------------------------------------ properties

    @property
    def num_splits(self) -> int:
        return self._readers[0].settings.num_splits

    @property
    def epoch(self) -> int:
        return self._head.epoch

    @property
    def weights(self) -> dict[str, int]:
        """The integer weights this mixture applies (from the resumed global cycle on, after a load)."""
        return dict(zip(self.names, self._weights))

    @property
    def regimes(self) -> list[tuple[int, dict[str, int]]]:
        """``(first global cycle, weights)`` of every regime of the current mixture epoch."""
        return [(r.start, dict(zip(self.names, r.weights))) for r in self._regimes]

    @property
    def rank_splits(self) -> list[int]:
        return list(self._rank_splits)

    def schedule(self) -> list[str]:
        """The source name of every global cycle of the current mixture epoch."""
        return [self.names[k] for k in self._schedule.source]

    def __len__(self) -> int:
        """Items this rank yields in the whole mixture epoch (no skipped rows)."""
        return len(self._schedule) * len(self._rank_splits)

    # ------------------------------------------------------------ iteration

    def _refuse_while_active(self, what: str) -> None:
        if self._live is not None or self._lease.token is not None:
            raise RuntimeError(f"{what} is not allowed while an iterator over this mixture is active")

    def __iter__(self) -> Iterator[Any]:
        self._refuse_while_active("a second iterator")
        return self._run(transport=False)

    def _run(self, *, transport: bool) -> Iterator[Any]:
        owned, worker = owned_splits(self._rank_splits, self._override, get_worker_info())
        if worker is not None and not transport:
            self._gate.after_untracked_iteration()
        it = MixtureIterator(
            self._schedule, self._readers, owned, self._progress, self._counters, self._label
        )
        self._live, self._transport, self._ended = it, transport, None
        if not transport:  # a plain iteration: one pass of batches of one item (see _count)
            self._passes.append(Pass(0, 1))
        try:
            yield from it.items()
        finally:
            if not transport:  # under a loader only delivered batches move the progress (commit)
                self._count()
                self._progress = it.cursor.state()
            else:  # in process, the last batch is collated after the iterator ended
                self._ended = {"state": it.cursor.state(), "owned": list(it.owned)}
            self._live = None

    def _label(self, source: int, items: list[Any]) -> BaseException | None:
        """Give a cycle's items their source's name in place (one pass per cycle); the first item
        that cannot take it cuts the list and its error is returned, raised at that item's turn."""
        key = self._source_key
        if key is None:
            return None
        name = self.names[source]
        for item in items:
            if not isinstance(item, dict) or key in item:
                break
            item[key] = name
        else:
            return None
        del items[next(i for i, x in enumerate(items) if x is item) :]  # by identity: dicts may be equal
        return self._refusal(source, item, key)

    def _refusal(self, source: int, item: Any, key: str) -> Exception:
        if not isinstance(item, dict):
            return TypeError(
                f"source {self.names[source]!r} gave a {type(item).__name__}; with source_key={key!r} items "
                "must be dicts (return dicts from the transform, or pass source_key=None)"
            )
        return ValueError(
            f"source {self.names[source]!r} gave an item with a {key!r} key already; pass another source_key"
        )

    # ------------------------------------------------------------ checkpoints

    def _count(self) -> None:
        """A plain iteration's pass counts the items it handed out."""
        if self._live is not None and not self._transport:
            self._passes[-1].batches = self._live.handed()

    def _current(self) -> MixState:
        if self._live is None or self._transport:
            return self._progress
        return self._live.cursor.state()

    def state_dict(self) -> dict[str, object]:
        """One checkpoint of the whole mixture (JSON-able; spec/MIXTURES.md, section 2).

        This rank's splits are reported. With other ranks, theirs are marked
        unknown: merge every rank's state (:meth:`merge_state_dicts`) to resume.

        Raises:
            RuntimeError: a plain ``DataLoader`` with workers iterated the mixture.
        """
        self._gate.check_state_dict(in_worker=get_worker_info() is not None)
        settings = self._readers[0].settings
        self._count()
        out = rank_checkpoint(
            self._start,
            self._schedule,
            self._readers,
            self._current(),
            self._passes,
            settings.world_size,
            settings.rank,
        )
        return write(
            self._head, self._regimes, self._readers, out.state, out.reported, out.unknown, out.projected
        )

    def _parse(self, checkpoint: object) -> Saved:
        state, regimes = read_head(self._head, checkpoint)
        self._use(regimes, {r.name: pinned_version(state, r.name) for r in self._readers})
        return read(self._head, self._readers, state, regimes, self._schedule)

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Resume from a checkpoint of this mixture (its own, or a merge of every rank's).

        When this mixture's weights differ from those the checkpoint ran under,
        they apply from ``u0`` on, the furthest split's global cycle (a new
        regime, zero counts); every source goes on from its own progress.

        Raises:
            TypeError: ``state`` is not a dict.
            ValueError: another mixture (names, seed, epoch, ``on_exhausted``,
                ``cycles``, a source's settings), another table version or row
                count, a state no run produces, or a split of this rank whose
                progress the checkpoint does not know (merge every rank's state).
            RuntimeError: an iterator over this mixture is active.
        """
        self._refuse_while_active("load_state_dict")
        saved = self._parse(state)
        missing = sorted(set(self._rank_splits) & saved.unknown)
        if missing:
            raise ValueError(
                f"the checkpoint does not know the progress of splits {missing} of this rank (another rank "
                "wrote it): merge every rank's state_dict() with StreamingMixture.merge_state_dicts"
            )
        reached = MixState([max(g, saved.projected.get(s, 0)) for s, g in enumerate(saved.state.cycles)])
        regimes = reweighted(saved.regimes, reached, self._weights)
        pins = {r.name: r.version for r in self._readers}
        self._use(regimes, pins)
        base = canonical(self._schedule, self._readers, saved.state.cycles, lookup_in(saved.state))
        self._progress = resolve(self._schedule, self._readers, base, saved.projected, self._rank_splits)
        self._begin(Start(base, saved.unknown, dict(saved.projected)))

    def merge_state_dicts(self, states: list[dict[str, object]]) -> dict[str, object]:
        """Merge every rank's ``state_dict()`` of this mixture into one that resumes on any topology.

        Every split takes the furthest value among the states that report it.

        Raises:
            ValueError: no states, states of another mixture or with other
                regimes, or a split no state reports (a rank was left out).
        """
        if not states:
            raise ValueError("merging needs at least one mixture state")
        before = self._regimes
        saved = [self._parse(s) for s in states]
        if any(s.regimes != saved[0].regimes for s in saved):
            raise ValueError("merged mixture states must have run under the same regimes")
        schedule = self._schedule
        chosen: list[MixState] = []
        for s in range(self.num_splits):
            reporting = [x.state for x in saved if s in x.reported]
            if not reporting:
                raise ValueError(f"no merged state reports split {s}: pass the state_dict() of every rank")
            chosen.append(max(reporting, key=lambda st: split_key(schedule, st, s)))
        merged = canonical(
            schedule,
            self._readers,
            [chosen[s].cycles[s] for s in range(self.num_splits)],
            lambda k, e, s: lookup_in(chosen[s])(k, e, s),
        )
        self._use(before, {r.name: r.version for r in self._readers})
        return write(self._head, saved[0].regimes, self._readers, merged, range(self.num_splits), [])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_progress"], state["_live"] = self._current(), None
        return state

    def __repr__(self) -> str:
        weights = dict(zip(self.names, self._weights))
        return f"StreamingMixture({weights}, num_splits={self.num_splits}, epoch={self.epoch})"


class MixtureLink(EpochLink):
    """What StreamingDataLoader may do with a mixture: the same narrow interface as
    ``dataset.LoaderLink`` (lease, worker check, items, snapshot, commit, invalidate, epochs, state).

    A snapshot is the producing iterator's progress with the splits it owns; a commit takes those
    splits from it (a delivered batch is always further than the parent), so the parent's
    progress is what the trainer received. A loader's workers start their round robin at worker 0.
    """

    def __init__(self, mixture: StreamingMixture) -> None:
        super().__init__(mixture)
        self._mixture = mixture

    def check_workers(self, num_workers: int) -> None:
        check_workers(len(self._mixture._rank_splits), num_workers)

    def acquire(self) -> int:
        m = self._mixture
        if m._live is not None:
            raise RuntimeError("StreamingMixture does not support concurrent iteration (one active iterator)")
        return m._lease.acquire()

    def release(self, token: int) -> None:
        self._mixture._lease.release(token)

    def open(self, num_workers: int, batch_size: int) -> None:
        """A loader iteration starts (its workers always start the round robin at worker 0)."""
        self._mixture._passes.append(Pass(num_workers, batch_size))

    def close(self) -> None:
        """The loader iteration is over."""

    def items(self, columnar: object = None) -> Iterator[Any]:
        """The mixture's items for torch (rows or blocks; a loader never asks a mixture for
        columnar batches, ``StreamingDataLoader`` refuses ``batch_format`` with one)."""
        assert columnar is None
        return self._mixture._run(transport=True)

    def snapshot(self) -> dict[str, object]:
        """The producing iterator's progress (the same dict in this process and in a worker)."""
        m = self._mixture
        live = m._live
        if live is None:
            return m._ended or {"state": m._progress, "owned": []}
        return {"state": live.cursor.state(), "owned": list(live.owned)}

    def commit(self, state: object, worker: int | None, num_workers: int) -> None:
        m = self._mixture
        if not isinstance(state, dict) or not isinstance(state.get("state"), MixState):
            raise ValueError("a StreamingMixture batch carries its iterator's progress")
        incoming: MixState = state["state"]
        owned = set(state["owned"])
        parent = m._progress
        cycles = [incoming.cycles[s] if s in owned else g for s, g in enumerate(parent.cycles)]

        def current(k: int, e: int, s: int) -> Any:
            return lookup_in(incoming if s in owned else parent)(k, e, s)

        m._progress = canonical(m._schedule, m._readers, cycles, current)
        m._passes[-1].batches += 1

    def invalidate(self, reason: str) -> None:
        self._mixture._gate.after_failure(reason)

    def workers_done(self) -> None:
        zero_worker_gauges(self._mixture._counters.shared)

    def keep_shared(self, old: MixtureLink) -> None:
        new, before = self._mixture, old._mixture
        new._counters.attach_shared(before._counters.shared)
        new._gate = CheckpointGate(before._counters.shared)

    def generation(self) -> int:
        return self._mixture._generation

    def remaining(self, num_workers: int) -> list[int]:
        m = self._mixture
        total, cycles = len(m._schedule), m._progress.cycles
        roles = range(max(num_workers, 1))
        return [sum(total - cycles[s] for s in role_splits(m._rank_splits, num_workers, r)) for r in roles]
