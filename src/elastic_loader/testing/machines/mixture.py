"""The mixture machine: ``StreamingMixture`` and ``spec.mixture`` side by side, session after session.

A Hypothesis state machine over one mixture of three real tables (its plan drawn at the start:
splits, weights, ``on_exhausted``, ``cycles``, rows or packing, the seed). Each rule step is a
*session*: every rank of a drawn topology resumes the current checkpoint (with new weights or
not), delivers the same number of batches through ``StreamingDataLoader`` (lockstep), and the job
keeps either the merge of every rank's state or one rank's state. After every session the machine
checks, on what the pipeline did:

* the items every rank received are the spec's (``run_mixture_session``), and so are the merged
  and every one-rank checkpoint;
* ``MixtureProportionInv`` on the pipeline's schedule (its source per global cycle, against the
  spec's segments);
* ``MixtureExactlyOnceProp`` on every item delivered since the epoch began (the pipeline's items,
  identified by their source and row against the spec's items of the same delivery);
* ``MixtureLockstepInv`` on every one-rank checkpoint the pipeline wrote, for world sizes 1, 2, 4;
* ``MixtureElasticDeterminismProp`` (rule ``global_steps``): a fresh epoch's global steps as a drawn
  topology of pipelines delivers them equal the topology-free ones.

It is a conformance machine (``elastic-loader conformance``, machine ``mixture``) for every
implementation that has mixtures (:func:`~elastic_loader.testing.adapters.mixture_api`: the module's
``StreamingMixture`` and ``MixtureSource``, with this pipeline's keywords, ``schedule()`` and
``merge_state_dicts``); ``lancedb.streaming`` has none, so there its four names are *not applicable*.

Rules of this module: every violation is recorded under the name it breaks (the merged checkpoint
differing from the spec's breaks ``MixtureExactlyOnceProp``, a one-rank checkpoint differing breaks
``MixtureLockstepInv``) and raised when that name is enforced (:meth:`MixtureMachine.bind`, like the
differential machines); an example that recorded a violation without raising stops driving the
implementation (its later rules do nothing), since the spec cannot follow a wrong state. The
machine reaches the implementation only through :class:`~elastic_loader.testing.adapters.Implementation`
and :func:`~elastic_loader.testing.adapters.mixture_api`, and imports LanceDB when it is used.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ...spec import invariants_mixture as inv
from ...spec.invariants import InvariantViolation
from ...spec.mixture import (
    MixtureItem,
    initial_mixture_state,
    item_key,
    mixture_global_steps,
    run_mixture_loader,
)
from ...spec.mixture_saved import (
    exact_mixture,
    load_mixture,
    run_mixture_session,
    snapshot_mixture,
)
from ...spec.mixture_schedule import MixtureConfig, Regime, Schedule, Slot, SourceData, mixture_schedule
from ...spec.packing import Block
from ...spec.rows import Yielded
from ...spec.topology import PackingConfig, RunConfig, Topology
from ..adapters import Implementation, implementation_from_module, mixture_api
from ..tables import TableCache, TableKey
from .judges import MIXTURE_CHECKED

NAMES = ("web", "code", "books")
KEYS = {"web": TableKey(24, 2), "code": TableKey(16, 1), "books": TableKey(8, 2)}
SEEDS = {"web": 1, "code": 2, "books": 3}
EOS, PAD, LENGTH = -1, -2, 4


@dataclass(frozen=True)
class MixturePlan:
    """The mixture one example runs."""

    num_splits: int
    weights: tuple[int, int, int]
    on_exhausted: str
    cycles: int | None
    packed: bool
    seed: int

    def blocks(self, name: str) -> int:
        return KEYS[name].rows // 2 // self.num_splits * self.num_splits


@st.composite
def mixture_plans(draw: st.DrawFn) -> MixturePlan:
    weights = draw(st.tuples(*[st.integers(0, 4)] * 3).filter(lambda w: sum(w) > 0))
    on_exhausted = draw(st.sampled_from(["stop", "cycle", "renormalize"]))
    cycles = draw(st.integers(4, 16)) if on_exhausted == "cycle" else draw(st.none() | st.integers(3, 16))
    return MixturePlan(
        draw(st.sampled_from([2, 4])),
        weights,
        on_exhausted,
        cycles,
        draw(st.booleans()),
        draw(st.integers(0, 5)),
    )


def _strip(state: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(state))
    out.pop("elastic_loader", None)
    return out


def _pipeline_key(item: Any) -> tuple[object, ...]:
    if "input_ids" in item:
        return (item["source"], tuple(item["input_ids"].tolist()), tuple(item["doc_ids"].tolist()))
    return (item["source"], item["id"])


def _spec_key(item: MixtureItem) -> tuple[object, ...]:
    inner = item.item
    if isinstance(inner, Yielded):
        return (NAMES[item.source], inner.row_id)
    assert isinstance(inner, Block)
    return (NAMES[item.source], inner.input_ids, inner.doc_ids)


class MixtureMachine(RuleBasedStateMachine):
    """See the module docstring; bind an implementation and the tables with :meth:`bind` first."""

    tables: ClassVar[TableCache | None] = None
    implementation: ClassVar[Implementation | None] = None
    checks: ClassVar[tuple[str, ...]] = MIXTURE_CHECKED
    """The names this machine judges (``check_invariants`` reports these)."""
    exercises: ClassVar[frozenset[str]] = frozenset(MIXTURE_CHECKED)
    """What the conformance report counts as checked by this machine."""
    enforced: ClassVar[frozenset[str]] = frozenset(MIXTURE_CHECKED)
    """Names whose violation fails the example; the others are only recorded."""
    observed: ClassVar[dict[str, str] | None] = None
    """When set, the first violation text of every name, across all examples of a run."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    @classmethod
    def applies(cls, implementation: Implementation) -> str | None:
        """``None`` when the machine can drive ``implementation``, else why not."""
        if mixture_api(implementation) is None:
            return "the implementation has no mixtures (no StreamingMixture and MixtureSource)"
        return None

    @classmethod
    def bind(
        cls,
        implementation: Implementation | TableCache,
        tables: TableCache | None = None,
        *,
        enforced: frozenset[str] | None = None,
        observed: dict[str, str] | None = None,
    ) -> type[MixtureMachine]:
        """A subclass driving ``implementation`` over ``tables`` (given only a ``TableCache``: this
        package, ``elastic_loader``), with the same name, module and qualified name, so printed
        programs replay and derandomized runs draw the same examples whoever binds it."""
        if isinstance(implementation, TableCache):
            tables, implementation = implementation, implementation_from_module("elastic_loader")
        attrs: dict[str, object] = {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "implementation": implementation,
            "tables": tables,
            "enforced": frozenset(MIXTURE_CHECKED) if enforced is None else enforced,
            "observed": observed,
        }
        return type(cls.__name__, (cls,), attrs)

    def violate(self, name: str, detail: str) -> None:
        """Record a violation of ``name``; raise it if enforced, else stop driving this example."""
        if self.observed is not None:
            self.observed.setdefault(name, detail)
        self.broken = True
        if name in self.enforced:
            raise InvariantViolation(name, detail)

    def judge(self, check: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        """Run a spec predicate on ``args`` and record the violation it raises."""
        try:
            check(*args, **kwargs)
        except InvariantViolation as error:
            self.violate(error.name, error.detail)

    # ------------------------------------------------------------ the model

    @initialize(plan=mixture_plans())
    def start(self, plan: MixturePlan) -> None:
        assert self.tables is not None, "bind the machine to a TableCache first"
        self.plan = plan
        packing = {n: PackingConfig(LENGTH, EOS, PAD, plan.blocks(n)) if plan.packed else None for n in NAMES}
        sources = tuple(RunConfig(plan.num_splits, SEEDS[n], 0, None, packing[n]) for n in NAMES)
        self.config = MixtureConfig(NAMES, sources, plan.seed, 0, plan.on_exhausted, plan.cycles)
        data = []
        for n in NAMES:
            perms = {
                e: self.tables.permutation(
                    KEYS[n],
                    num_splits=plan.num_splits,
                    shuffle_seed=SEEDS[n],
                    epoch=e,
                    shuffle=True,
                    filter=None,
                )
                for e in range(0, 17)  # "cycle" reads at most 16 epochs of a source
            }
            corpus = {i: d or () for i, d in self.tables.documents(KEYS[n]).items()} if plan.packed else None
            data.append(SourceData(perms, corpus=corpus))
        self.data = tuple(data)
        self.weights = plan.weights
        self.regimes: tuple[Regime, ...] = (Regime(0, plan.weights),)
        self.checkpoint: dict[str, Any] | None = None
        self.delivered: list[MixtureItem] = []
        self.finished = False
        self.one_rank: list[tuple[dict[str, Any], Any]] = []
        self.scheduled: list[str] = self._mixture(0, 1, plan.weights).schedule()

    def _mixture(self, rank: int, world_size: int, weights: tuple[int, ...]) -> Any:
        assert self.tables is not None and self.implementation is not None
        api = mixture_api(self.implementation)
        assert api is not None, "the mixture machine needs an implementation with mixtures"
        plan = self.plan
        sources = {}
        for n in NAMES:
            opts: dict[str, Any] = {"shuffle_seed": SEEDS[n], "read_batch_size": 3}
            if plan.packed:
                opts.update(columns=["tokens"], pack_sequences=LENGTH, eos_id=EOS, pad_id=PAD)
                opts["blocks_per_epoch"] = plan.blocks(n)
            else:
                opts["columns"] = ["id"]
            sources[n] = api.source(self.tables.table(KEYS[n]), **opts)
        return api.mixture(
            sources,
            list(weights),
            num_splits=plan.num_splits,
            rank=rank,
            world_size=world_size,
            seed=plan.seed,
            on_exhausted=plan.on_exhausted,
            cycles=plan.cycles,
            resolution=sum(weights),
        )

    # ------------------------------------------------------------ sessions

    @rule(
        world_size=st.sampled_from([1, 2, 4]),
        batch_size=st.integers(1, 4),
        batches=st.integers(0, 6),
        reweight=st.none() | st.tuples(*[st.integers(0, 4)] * 3).filter(lambda w: sum(w) > 0),
        merge=st.booleans(),
        writer=st.integers(0, 3),
    )
    def session(
        self, world_size: int, batch_size: int, batches: int, reweight: Any, merge: bool, writer: int
    ) -> None:
        assert self.implementation is not None
        if world_size > self.plan.num_splits or self.finished or self.broken:
            return
        start = self.checkpoint or json.loads(
            json.dumps(
                snapshot_mixture(exact_mixture(self.config, self.regimes, initial_mixture_state(self.config)))
            )
        )
        weights = tuple(reweight) if reweight is not None else self.weights
        spec = run_mixture_session(
            self.config, self.data, start, (world_size, 0), batch_size, batches, weights, skipping=False
        )
        per_rank = [
            [i for i in spec.items if i.split // (self.plan.num_splits // world_size) == r]
            for r in range(world_size)
        ]
        b = min(batches, *(-(-len(items) // batch_size) for items in per_rank)) if per_rank else 0
        states = []
        for r in range(world_size):
            mix = self._mixture(r, world_size, weights)
            if self.checkpoint is not None:
                mix.load_state_dict(self.checkpoint)
            loader = self.implementation.loader(mix, batch_size=batch_size, collate_fn=list)
            got: list[Any] = []
            it: Iterator[Any] = iter(loader)
            for _ in range(b):
                got += next(it)
            del it
            want = per_rank[r]
            if [_pipeline_key(i) for i in got] != [_spec_key(i) for i in want]:
                self.violate(
                    "MixtureExactlyOnceProp", f"rank {r} of {world_size} delivered other items than the spec"
                )
                return
            self.delivered += want
            states.append(mix.state_dict())
        self.regimes, self.weights = spec.regimes, weights
        merged = self._mixture(0, 1, weights).merge_state_dicts(states)
        if _strip(merged) != _strip(snapshot_mixture(spec.truth)):
            self.violate("MixtureExactlyOnceProp", "the merged checkpoint differs from the spec's")
            return
        for r, state in enumerate(states):
            if _strip(state) != _strip(snapshot_mixture(spec.one_rank[r])):
                self.violate("MixtureLockstepInv", f"rank {r}'s checkpoint differs from the spec's")
                return
            self.one_rank.append((state, spec.truth.state))
        self.checkpoint = merged if merge else states[writer % world_size]
        self.finished = spec.finished
        self.scheduled = mix.schedule()

    @rule(world_size=st.sampled_from([1, 2, 4]), cycles_per_step=st.integers(1, 3))
    def global_steps(self, world_size: int, cycles_per_step: int) -> None:
        """A fresh epoch's global steps, as ``world_size`` pipelines (no workers) deliver them."""
        assert self.implementation is not None
        if world_size > self.plan.num_splits or self.broken:
            return
        regimes = (Regime(0, self.plan.weights),)
        expected = mixture_global_steps(self.config, regimes, self.data, cycles_per_step)
        k = self.plan.num_splits // world_size
        per_rank = []
        for r in range(world_size):
            spec = run_mixture_loader(
                self.config,
                regimes,
                self.data,
                Topology(world_size, r, 0),
                initial_mixture_state(self.config),
                k * cycles_per_step,
            )
            mix = self._mixture(r, world_size, self.plan.weights)
            batches: list[list[Any]] = [
                list(b)
                for b in cast(
                    Iterable[Any],
                    self.implementation.loader(mix, batch_size=k * cycles_per_step, collate_fn=list),
                )
            ]
            steps = []
            for batch, d in zip(batches, spec.deliveries):
                if [_pipeline_key(i) for i in batch] != [_spec_key(i) for i in d.items]:
                    break
                if len(batch) == k * cycles_per_step:
                    steps.append(frozenset(item_key(i) for i in d.items))
            per_rank.append(steps)
        count = min(len(s) for s in per_rank)
        got = [frozenset().union(*(s[g] for s in per_rank)) for g in range(count)]
        self.judge(inv.MixtureElasticDeterminismProp, expected, got, complete=True)

    # ------------------------------------------------------------ invariants

    def _schedule(self) -> Schedule:
        return mixture_schedule(self.config, self.regimes, self.data)

    @invariant()
    def MixtureProportionInv(self) -> None:
        """Judged on the pipeline's schedule: its source per global cycle, the spec's segments."""
        if not hasattr(self, "plan") or self.broken:
            return
        spec = self._schedule()
        if len(self.scheduled) != len(spec.slots):
            self.violate(
                "MixtureProportionInv",
                f"the pipeline schedules {len(self.scheduled)} global cycles, the spec {len(spec.slots)}",
            )
            return
        slots = tuple(Slot(NAMES.index(n), s.epoch, s.index) for n, s in zip(self.scheduled, spec.slots))
        self.judge(inv.MixtureProportionInv, Schedule(slots, spec.segments, spec.end))

    @invariant()
    def MixtureExactlyOnceProp(self) -> None:
        """Every item delivered since the epoch began, against the spec's schedule."""
        if hasattr(self, "plan") and not self.broken:
            schedule = self._schedule()
            self.judge(
                inv.MixtureExactlyOnceProp, self.config, self.data, schedule, self.delivered, self.finished
            )

    @invariant()
    def MixtureLockstepInv(self) -> None:
        """Every one-rank checkpoint written since the last step resumes world sizes 1, 2 and 4."""
        if not hasattr(self, "plan") or self.broken:
            self.one_rank = []
            return
        for state, truth in self.one_rank:
            saved = load_mixture(self.config, self.data, _strip(state))
            for world_size in (1, 2, 4):
                if world_size <= self.plan.num_splits:
                    self.judge(inv.MixtureLockstepInv, self.data, truth, saved, world_size, may_refuse=False)
        self.one_rank.clear()


__all__ = ["MixtureMachine", "MixturePlan", "mixture_plans"]
