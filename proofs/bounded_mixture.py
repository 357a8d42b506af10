"""Bounded checks of the mixture invariants: the schedule, global steps, chains and one-rank saves.

Rules: every check enumerates the *mixture universe* up to its bounds and calls the predicates of
``spec/invariants_mixture.py`` by name; nothing here re-implements the model. The universe: every
``S`` in ``{1, 2, 4}`` up to ``splits``, every number of sources up to ``sources``, every split
length per source up to ``split_len`` (source ``k``'s rows ``100k ..``, cut in order, its next
epoch reversed), every weight vector with entries up to ``weight`` (not all zero; with ``zeros``
0 none is zero), every
``on_exhausted`` (``"cycle"`` with ``cycles`` global cycles), row mode and, when ``packed`` is 1,
packing with ``L = 2``, documents of ``row % 3`` tokens and one or two blocks per split; with
``skip`` 1 also every row job with the first row of a source's split 0 skipped. The pick rule on
its own: every weight vector of up to ``pick_sources`` sources with entries up to ``pick_weight``,
every tie order, over two periods ``2W``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from elastic_loader.spec import Faults, RunConfig, cut_splits
from elastic_loader.spec.invariants import (
    MixtureElasticDeterminismProp,
    MixtureExactlyOnceProp,
    MixtureLockstepInv,
    MixtureProportionInv,
)
from elastic_loader.spec.mixture import (
    MixtureItem,
    initial_mixture_state,
    mixture_global_steps,
    mixture_topology_steps,
)
from elastic_loader.spec.mixture_saved import exact_mixture, run_mixture_session, snapshot_mixture
from elastic_loader.spec.mixture_schedule import (
    ON_EXHAUSTED,
    MixtureConfig,
    Regime,
    Schedule,
    Segment,
    Slot,
    SourceData,
    edf_pick,
    mixture_schedule,
)
from elastic_loader.spec.rows import NO_FAULTS
from elastic_loader.spec.topology import PackingConfig

from .framework import BoundedCheck, Bounds, Recorder


@dataclass(frozen=True)
class Mix:
    config: MixtureConfig
    data: tuple[SourceData, ...]
    weights: tuple[int, ...]
    skipping: bool


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _shapes(num_splits: int) -> list[tuple[int, int]]:
    return [(ws, nw) for ws in _divisors(num_splits) for nw in [0, *_divisors(num_splits // ws)]]


def _source(k: int, s: int, m: int, epochs: int, packed: bool, skip: bool) -> SourceData:
    rows = list(range(100 * k, 100 * k + s * m))
    perms = {e: cut_splits(rows if e % 2 == 0 else rows[::-1], s) for e in range(epochs)}
    faults = Faults(skipped=frozenset({perms[0][0][0]})) if skip else NO_FAULTS
    corpus = {r: tuple(range(r % 3)) for r in rows} if packed else None
    return SourceData(perms, faults, corpus)


def mixtures(rec: Recorder, b: Bounds) -> Iterator[Mix]:
    """Every mixture of the universe (see the module rules)."""
    for s in (x for x in (1, 2, 4) if x <= b["splits"]):
        for n in range(1, b["sources"] + 1):
            for lengths in itertools.product(range(1, b["split_len"] + 1), repeat=n):
                for packing in [
                    None,
                    *([PackingConfig(2, 9, 0, s), PackingConfig(2, 9, 0, 2 * s)] * b["packed"]),
                ]:
                    for mode in ON_EXHAUSTED:
                        cycles = b["cycles"] if mode == "cycle" else None
                        epochs = b["cycles"] + 1 if mode == "cycle" else 1
                        skips = [False, True] if b["skip"] and packing is None else [False]
                        for skip in skips:
                            data = tuple(
                                _source(k, s, m, epochs, packing is not None, skip and k == 0)
                                for k, m in enumerate(lengths)
                            )
                            sources = tuple(RunConfig(s, k, 0, packing=packing) for k in range(n))
                            config = MixtureConfig(
                                tuple(f"s{k}" for k in range(n)), sources, 0, 0, mode, cycles
                            )
                            for weights in itertools.product(range(b["weight"] + 1), repeat=n):
                                if sum(weights) == 0 or (not b.get("zeros", 1) and 0 in weights):
                                    continue
                                rec.at(
                                    S=s,
                                    lengths=lengths,
                                    packing=packing,
                                    on_exhausted=mode,
                                    skip=skip,
                                    weights=weights,
                                )
                                yield Mix(config, data, weights, skip)


# ---------------------------------------------------------------- MixtureProportionInv


def check_proportion(rec: Recorder, b: Bounds) -> None:
    """The pick rule on every weight vector and tie order; every schedule of the universe with one
    regime and with a second regime (the reversed weights) from every cycle up to 3."""
    for n in range(1, b["pick_sources"] + 1):
        for weights in itertools.product(range(b["pick_weight"] + 1), repeat=n):
            total = sum(weights)
            if total == 0:
                continue
            for order in itertools.permutations(range(n)):
                rec.at(weights=weights, order=order)
                picks, slots = [0] * n, []
                for t in range(2 * total):
                    k = edf_pick(weights, picks, t, order)
                    slots.append(Slot(k, 0, picks[k]))
                    picks[k] += 1
                rec.apply(
                    MixtureProportionInv, Schedule(tuple(slots), (Segment(0, 2 * total, weights),), "cycles")
                )
    for mix in mixtures(rec, b):
        for start in range(0, 4):
            regimes = [Regime(0, mix.weights)]
            if start:
                regimes.append(Regime(start, mix.weights[::-1]))
            rec.at(second_regime=start)
            rec.apply(MixtureProportionInv, mixture_schedule(mix.config, regimes, mix.data))


MIXTURE_PROPORTION = BoundedCheck(
    "MixtureProportionInv",
    "edf_pick on every weight vector of <={pick_sources} sources with weights<={pick_weight}, "
    "every tie order, 2W slots; every schedule of S<={splits}, <={sources} sources, "
    "split_len<={split_len}, weights<={weight}, packed={packed}, every on_exhausted "
    "(cycle: {cycles} cycles), a second regime from every cycle <=3",
    quick={
        "pick_sources": 3,
        "pick_weight": 3,
        "splits": 2,
        "sources": 2,
        "split_len": 2,
        "weight": 2,
        "packed": 0,
        "cycles": 4,
        "skip": 0,
    },
    full={
        "pick_sources": 4,
        "pick_weight": 4,
        "splits": 4,
        "sources": 3,
        "split_len": 3,
        "weight": 3,
        "packed": 1,
        "cycles": 6,
        "skip": 0,
    },
    run=check_proportion,
)


# ---------------------------------------------------------------- MixtureElasticDeterminismProp


def check_elastic(rec: Recorder, b: Bounds) -> None:
    """Every mixture, every shape, one and two cycles per step."""
    for mix in mixtures(rec, b):
        regimes = [Regime(0, mix.weights)]
        for c in range(1, b["cycles_per_step"] + 1):
            expected = mixture_global_steps(mix.config, regimes, mix.data, c)
            for ws, nw in _shapes(mix.config.num_splits):
                rec.at(c=c, world_size=ws, num_workers=nw)
                got = mixture_topology_steps(mix.config, regimes, mix.data, ws, nw, c)
                rec.apply(MixtureElasticDeterminismProp, expected, got, not mix.skipping)


MIXTURE_ELASTIC = BoundedCheck(
    "MixtureElasticDeterminismProp",
    "every mixture of S<={splits}, <={sources} sources, split_len<={split_len}, weights<={weight}, "
    "packed={packed}, skip={skip}, every on_exhausted; every (world_size, num_workers); "
    "cycles per step<={cycles_per_step}",
    quick={
        "splits": 2,
        "sources": 2,
        "split_len": 2,
        "weight": 1,
        "packed": 0,
        "cycles": 3,
        "skip": 0,
        "cycles_per_step": 1,
    },
    full={
        "splits": 4,
        "sources": 2,
        "split_len": 2,
        "weight": 2,
        "packed": 1,
        "cycles": 4,
        "skip": 1,
        "cycles_per_step": 2,
    },
    run=check_elastic,
)


# ---------------------------------------------------------------- chains: ExactlyOnce and Lockstep


def _chains(rec: Recorder, b: Bounds, lockstep: bool) -> None:
    """Every mixture; a first session on every shape, batch size <= batch, every batch count <=
    wanted, with the weights kept or changed at its start (the first source's weight plus one);
    every rank's checkpoint (and the merge)
    resumed by a final session on one rank to the end."""
    for mix in mixtures(rec, b):
        config = mix.config
        start = snapshot_mixture(
            exact_mixture(config, [Regime(0, mix.weights)], initial_mixture_state(config))
        )
        rows_skip = mix.skipping and not config.packed
        for (ws, nw), bs, n, bump in itertools.product(
            _shapes(config.num_splits), range(1, b["batch"] + 1), range(b["wanted"] + 1), (False, True)
        ):
            rec.at(world_size=ws, num_workers=nw, batch_size=bs, batches=n, new_weights=bump)
            weights = (mix.weights[0] + 1, *mix.weights[1:]) if bump else None
            first = run_mixture_session(config, mix.data, start, (ws, nw), bs, n, weights, mix.skipping)
            saves = [first.truth] + ([] if rows_skip else list(first.one_rank))
            for saver, saved in enumerate(saves):
                rec.at(saver="merge" if saver == 0 else saver - 1)
                if lockstep:
                    for new_ws in _divisors(config.num_splits):
                        rec.at(new_world_size=new_ws)
                        rec.apply(MixtureLockstepInv, mix.data, first.truth.state, saved, new_ws, rows_skip)
                    continue
                final = run_mixture_session(
                    config, mix.data, snapshot_mixture(saved), (1, 0), 1, 10**6, None, mix.skipping
                )
                items: list[MixtureItem] = [*first.items, *final.items]
                schedule = mixture_schedule(config, final.regimes, mix.data)
                rec.apply(MixtureExactlyOnceProp, config, mix.data, schedule, items, not rows_skip)
            if lockstep and rows_skip:
                for r, saved in enumerate(first.one_rank):
                    rec.at(saver=r)
                    for new_ws in _divisors(config.num_splits):
                        rec.at(new_world_size=new_ws)
                        rec.apply(MixtureLockstepInv, mix.data, first.truth.state, saved, new_ws, True)


def check_exactly_once(rec: Recorder, b: Bounds) -> None:
    _chains(rec, b, lockstep=False)


def check_lockstep(rec: Recorder, b: Bounds) -> None:
    _chains(rec, b, lockstep=True)


_QUICK_CHAINS = {
    "splits": 2,
    "sources": 2,
    "split_len": 1,
    "weight": 1,
    "packed": 0,
    "cycles": 2,
    "skip": 0,
    "batch": 1,
    "wanted": 1,
    "zeros": 0,
}
_FULL_CHAINS = {
    "splits": 4,
    "sources": 2,
    "split_len": 1,
    "weight": 2,
    "packed": 1,
    "cycles": 2,
    "skip": 1,
    "batch": 1,
    "wanted": 2,
    "zeros": 1,
}
_CHAINS = (
    "every mixture of S<={splits}, <={sources} sources, split_len<={split_len}, weights<={weight}, "
    "packed={packed}, skip={skip}, zero weights={zeros}, every on_exhausted; a first session on every "
    "shape, batch size<={batch}, <={wanted} batches, weights kept or changed (first weight + 1); "
    "resumed from the merge and from every rank's checkpoint"
)

MIXTURE_EXACTLY_ONCE = BoundedCheck(
    "MixtureExactlyOnceProp", _CHAINS, _QUICK_CHAINS, _FULL_CHAINS, check_exactly_once
)
MIXTURE_LOCKSTEP = BoundedCheck(
    "MixtureLockstepInv", _CHAINS + ", on every world size", _QUICK_CHAINS, _FULL_CHAINS, check_lockstep
)
