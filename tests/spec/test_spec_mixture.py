"""Mixtures against the model: the schedule's proportions, elastic determinism, exactly-once per
source across chains of resumes (topology and weight changes), one rank's checkpoint, the wire
format and ``on_exhausted`` (spec/INVARIANTS.md, "Mixtures"; spec/MIXTURES.md)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from elastic_loader.spec import Faults, RunConfig, cut_splits, initial_row_state, iterate_rows
from elastic_loader.spec.errors import InvariantViolation, SpecValueError
from elastic_loader.spec.invariants import (
    MixtureElasticDeterminismProp,
    MixtureExactlyOnceProp,
    MixtureLockstepInv,
    MixtureProportionInv,
)
from elastic_loader.spec.mixture import (
    MixtureItem,
    MixtureState,
    initial_mixture_state,
    iterate_mixture,
    mixture_global_steps,
    mixture_topology_steps,
)
from elastic_loader.spec.mixture_saved import (
    MixtureSaved,
    exact_mixture,
    load_mixture,
    merge_mixture,
    reweighted,
    run_mixture_session,
    snapshot_mixture,
)
from elastic_loader.spec.mixture_schedule import (
    ON_EXHAUSTED,
    MixtureConfig,
    Regime,
    Schedule,
    Segment,
    Slot,
    SourceData,
    capacity,
    edf_pick,
    integer_weights,
    mixture_schedule,
    tie_order,
)
from elastic_loader.spec.rows import NO_FAULTS
from elastic_loader.spec.topology import rank_splits
from elastic_loader.testing.strategies import corpora, fault_sets, packing_configs


@dataclass(frozen=True)
class Mix:
    """A drawn mixture: its configuration, data, regimes and whether rows may be skipped."""

    config: MixtureConfig
    data: tuple[SourceData, ...]
    regimes: tuple[Regime, ...]
    skipping: bool

    @property
    def weights(self) -> tuple[int, ...]:
        return self.regimes[-1].weights


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def weight_vectors(draw: st.DrawFn, n: int, max_weight: int = 4) -> tuple[int, ...]:
    return tuple(
        draw(st.lists(st.integers(0, max_weight), min_size=n, max_size=n).filter(lambda w: sum(w) > 0))
    )


@st.composite
def mixtures(
    draw: st.DrawFn,
    *,
    packed: bool | None = None,
    skipping: bool = False,
    max_sources: int = 3,
    max_split_len: int = 3,
) -> Mix:
    """A mixture of 1..``max_sources`` sources with S in {1, 2, 4}, short splits, one or two regimes."""
    s = draw(st.sampled_from([1, 2, 4]))
    n = draw(st.integers(1, max_sources))
    pack = draw(st.booleans()) if packed is None else packed
    packing = draw(packing_configs(s, max_pack_len=3, max_blocks_per_split=3)) if pack else None
    mode = draw(st.sampled_from(ON_EXHAUSTED))
    cycles = draw(st.integers(1, 10)) if mode == "cycle" else draw(st.none() | st.integers(1, 10))
    epochs = (cycles or 0) + 1 if mode == "cycle" else 1
    sources, data = [], []
    for k in range(n):
        m = draw(st.integers(1, max_split_len))
        ids = list(range(100 * k, 100 * k + s * m))
        perms = {}
        for e in range(epochs):
            random.Random(draw(st.integers(0, 2**16)) + e).shuffle(ids)
            perms[e] = cut_splits(list(ids), s)
        faults = draw(fault_sets(perms[0], allow_raise=False)) if skipping else NO_FAULTS
        corpus = draw(corpora(perms[0], max_tokens=3)) if pack else None
        sources.append(RunConfig(s, draw(st.integers(0, 3)), 0, packing=packing))
        data.append(SourceData(perms, faults, corpus))
    config = MixtureConfig(
        tuple(f"s{k}" for k in range(n)), tuple(sources), draw(st.integers(0, 3)), 0, mode, cycles
    )
    regimes = [Regime(0, draw(weight_vectors(n)))]
    if draw(st.booleans()):
        regimes.append(Regime(draw(st.integers(1, 6)), draw(weight_vectors(n))))
    return Mix(config, tuple(data), tuple(regimes), skipping)


@st.composite
def topologies(draw: st.DrawFn, num_splits: int) -> tuple[int, int]:
    ws = draw(st.sampled_from(_divisors(num_splits)))
    nw = draw(st.sampled_from([0, *_divisors(num_splits // ws)]))
    return ws, nw


# ---------------------------------------------------------------- the schedule


@given(mixtures(max_sources=4, max_split_len=6))
def test_MixtureProportionInv_every_schedule(mix: Mix) -> None:
    MixtureProportionInv(mixture_schedule(mix.config, mix.regimes, mix.data))


@given(st.integers(1, 5).flatmap(lambda n: st.tuples(weight_vectors(n, 9), st.permutations(range(n)))))
def test_MixtureProportionInv_edf_quota_over_two_periods(case: tuple[tuple[int, ...], list[int]]) -> None:
    """The pick rule alone, over two periods ``2W``: counts stay within the quota and a period
    ``W`` gives each source exactly its weight."""
    weights, order = case
    total, picks = sum(weights), [0] * len(weights)
    slots = []
    for t in range(2 * total):
        k = edf_pick(weights, picks, t, order)
        picks[k] += 1
        slots.append(Slot(k, 0, picks[k] - 1))
        assert picks[k] * total < (t + 1) * weights[k] + total
    assert picks == [2 * w for w in weights]
    MixtureProportionInv(Schedule(tuple(slots), (Segment(0, len(slots), weights),), "cycles"))


def test_MixtureProportionInv_refuses_a_skewed_schedule() -> None:
    """Weights (1, 1) but source 0 three times in a row: the predicate is not vacuous."""
    slots = tuple(Slot(k, 0, i) for i, k in enumerate([0, 0, 0, 1]))
    with pytest.raises(InvariantViolation, match="MixtureProportionInv"):
        MixtureProportionInv(Schedule(slots, (Segment(0, 4, (1, 1)),), "cycles"))
    with pytest.raises(InvariantViolation, match="weight 0"):
        MixtureProportionInv(Schedule(slots[:1], (Segment(0, 1, (0, 1)),), "cycles"))


def test_smooth_weighted_round_robin_breaks_the_quota() -> None:
    """Why the schedule is earliest-deadline first: nginx's smooth weighted round robin strays by
    more than one slot from the quota for these weights (spec/MIXTURES.md)."""
    weights = (2, 28, 2, 28, 28, 2, 19, 1)
    total, credit, count, worst = sum(weights), [0] * 8, [0] * 8, Fraction(0)
    for t in range(total):
        credit = [c + w for c, w in zip(credit, weights)]
        k = max(range(8), key=lambda i: (credit[i], -i))
        credit[k] -= total
        count[k] += 1
        worst = max(
            worst, *(abs(Fraction(count[j] * total - (t + 1) * w, total)) for j, w in enumerate(weights))
        )
    assert worst > 1
    picks = [0] * 8
    for t in range(total):
        picks[edf_pick(weights, picks, t, range(8))] += 1
        assert all(abs(picks[j] * total - (t + 1) * w) < total for j, w in enumerate(weights))


@given(st.integers(0, 50), st.integers(0, 5))
def test_tie_order_is_a_seeded_permutation(seed: int, epoch: int) -> None:
    config = MixtureConfig(("a", "b", "c", "d"), tuple(RunConfig(2, 0, 0) for _ in range(4)), seed, epoch)
    order = tie_order(config)
    assert sorted(order) == [0, 1, 2, 3]
    assert order == tie_order(replace(config))


def test_integer_weights_largest_remainders() -> None:
    assert integer_weights([0.5, 0.3, 0.2]) == (500, 300, 200)
    assert integer_weights([1, 1, 1], resolution=10) == (4, 3, 3)
    assert integer_weights([Fraction(2, 3), Fraction(1, 3)], resolution=3) == (2, 1)
    with pytest.raises(SpecValueError):
        integer_weights([0, 0])


def _rows_mix(lengths: list[int], weights: tuple[int, ...], mode: str, cycles: int | None = None) -> Mix:
    s = 2
    data = tuple(
        SourceData({e: cut_splits(range(100 * k, 100 * k + s * m), s) for e in range(12)})
        for k, m in enumerate(lengths)
    )
    names = tuple(f"s{k}" for k in range(len(lengths)))
    config = MixtureConfig(names, tuple(RunConfig(s, k, 0) for k in range(len(lengths))), 0, 0, mode, cycles)
    return Mix(config, data, (Regime(0, weights),), False)


def test_on_exhausted_stop_ends_at_the_first_source_that_runs_out() -> None:
    mix = _rows_mix([2, 5], (1, 1), "stop")
    schedule = mixture_schedule(mix.config, mix.regimes, mix.data)
    assert schedule.end == "stop"
    assert [sl.source for sl in schedule.slots].count(0) == 2 and len(schedule.slots) < 7


def test_on_exhausted_renormalize_drops_the_source_and_uses_everything() -> None:
    mix = _rows_mix([2, 5], (1, 1), "renormalize")
    schedule = mixture_schedule(mix.config, mix.regimes, mix.data)
    assert schedule.end == "exhausted" and len(schedule.slots) == 7
    assert len(schedule.segments) == 2 and schedule.segments[1].weights == (0, 1)
    MixtureProportionInv(schedule)


def test_on_exhausted_cycle_starts_the_next_source_epoch() -> None:
    mix = _rows_mix([2, 5], (1, 1), "cycle", cycles=10)
    schedule = mixture_schedule(mix.config, mix.regimes, mix.data)
    assert schedule.end == "cycles" and len(schedule.slots) == 10
    zero = [(sl.epoch, sl.index) for sl in schedule.slots if sl.source == 0]
    assert zero == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]


# ---------------------------------------------------------------- iteration and global steps


@given(mixtures(packed=False, max_sources=1), st.data())
def test_one_source_mixture_is_its_table(mix: Mix, data: st.DataObject) -> None:
    ws, _ = data.draw(topologies(mix.config.num_splits))
    owned = rank_splits(mix.config.num_splits, ws, data.draw(st.integers(0, ws - 1)))
    config = replace(mix.config, on_exhausted="stop", cycles=None)
    run = iterate_mixture(config, mix.regimes, mix.data, owned, initial_mixture_state(config))
    table = iterate_rows(mix.data[0].perm(0), NO_FAULTS, owned, initial_row_state(config.num_splits))
    assert [i.item for i in run.items] == list(table.rows)


@given(mixtures(), st.data())
def test_MixtureElasticDeterminismProp_any_topology(mix: Mix, data: st.DataObject) -> None:
    ws, nw = data.draw(topologies(mix.config.num_splits))
    c = data.draw(st.integers(1, 2))
    expected = mixture_global_steps(mix.config, mix.regimes, mix.data, c)
    got = mixture_topology_steps(mix.config, mix.regimes, mix.data, ws, nw, c)
    MixtureElasticDeterminismProp(expected, got, complete=True)


def test_MixtureElasticDeterminismProp_sees_a_changed_step() -> None:
    step = frozenset({(0, 0, 0, 0, 1)})
    with pytest.raises(InvariantViolation):
        MixtureElasticDeterminismProp([step], [frozenset({(0, 1, 0, 0, 1)})], complete=True)
    with pytest.raises(InvariantViolation):
        MixtureElasticDeterminismProp([step, step], [step], complete=True)


# ---------------------------------------------------------------- sessions and checkpoints


@st.composite
def chains(draw: st.DrawFn, mix: Mix, max_sessions: int = 3) -> list[tuple[object, ...]]:
    out = []
    for _ in range(draw(st.integers(1, max_sessions))):
        shape = draw(topologies(mix.config.num_splits))
        weights = draw(st.none() | weight_vectors(len(mix.config.sources)))
        protocol = draw(st.sampled_from(["merge", "one_rank"]))
        out.append(
            (
                shape,
                draw(st.integers(1, 3)),
                draw(st.integers(0, 4)),
                weights,
                draw(st.integers(0, 3)),
                protocol,
            )
        )
    return out


def _run_chain(mix: Mix, chain: list[tuple[object, ...]], check_lockstep: bool) -> None:
    config = mix.config
    checkpoint: object = snapshot_mixture(exact_mixture(config, mix.regimes, initial_mixture_state(config)))
    delivered: list[MixtureItem] = []
    rows_skip = mix.skipping and not config.packed
    for shape, bs, batches, weights, saver, protocol in chain:
        assert isinstance(shape, tuple) and isinstance(bs, int) and isinstance(batches, int)
        assert isinstance(saver, int) and (weights is None or isinstance(weights, tuple))
        session = run_mixture_session(config, mix.data, checkpoint, shape, bs, batches, weights, mix.skipping)
        delivered += session.items
        if check_lockstep:
            for ws in _divisors(config.num_splits):
                one = session.one_rank[saver % len(session.one_rank)]
                MixtureLockstepInv(mix.data, session.truth.state, one, ws, may_refuse=rows_skip)
        one_rank = session.one_rank[saver % len(session.one_rank)]
        saved = session.truth if protocol == "merge" or rows_skip else one_rank
        checkpoint = json.loads(json.dumps(snapshot_mixture(saved)))
    final = run_mixture_session(config, mix.data, checkpoint, (1, 0), 1, 10**6, None, mix.skipping)
    delivered += final.items
    schedule = mixture_schedule(config, final.regimes, mix.data)
    MixtureExactlyOnceProp(config, mix.data, schedule, delivered, finished=not rows_skip)


@settings(max_examples=30)
@given(mixtures(), st.data())
def test_MixtureExactlyOnceProp_chain_of_resumes_with_new_weights(mix: Mix, data: st.DataObject) -> None:
    _run_chain(mix, data.draw(chains(mix)), check_lockstep=False)


@settings(max_examples=25)
@given(mixtures(skipping=True), st.data())
def test_MixtureExactlyOnceProp_chain_with_skipped_rows(mix: Mix, data: st.DataObject) -> None:
    _run_chain(mix, data.draw(chains(mix, max_sessions=2)), check_lockstep=False)


@settings(max_examples=30)
@given(mixtures(), st.data())
def test_MixtureLockstepInv_one_rank_checkpoint_resumes_any_topology(mix: Mix, data: st.DataObject) -> None:
    _run_chain(mix, data.draw(chains(mix, max_sessions=2)), check_lockstep=True)


@settings(max_examples=20)
@given(mixtures(skipping=True), st.data())
def test_MixtureLockstepInv_with_skipped_rows_refuses_or_is_exact(mix: Mix, data: st.DataObject) -> None:
    _run_chain(mix, data.draw(chains(mix, max_sessions=2)), check_lockstep=True)


def test_MixtureExactlyOnceProp_sees_a_repeated_cycle() -> None:
    mix = _rows_mix([2, 2], (1, 1), "stop")
    config = mix.config
    run = iterate_mixture(config, mix.regimes, mix.data, (0, 1), initial_mixture_state(config))
    schedule = mixture_schedule(config, mix.regimes, mix.data)
    MixtureExactlyOnceProp(config, mix.data, schedule, run.items, finished=True)
    with pytest.raises(InvariantViolation):
        MixtureExactlyOnceProp(config, mix.data, schedule, (*run.items, run.items[0]), finished=True)
    with pytest.raises(InvariantViolation):
        MixtureExactlyOnceProp(config, mix.data, schedule, run.items[:-2], finished=True)


def test_MixtureLockstepInv_sees_a_wrong_inference() -> None:
    mix = _rows_mix([3, 3], (1, 1), "stop")
    config = mix.config
    run = iterate_mixture(config, mix.regimes, mix.data, (0, 1), initial_mixture_state(config))
    truth = run.state_after(4)
    stale = exact_mixture(config, mix.regimes, run.state_after(2))
    MixtureLockstepInv(mix.data, truth, exact_mixture(config, mix.regimes, truth), 2, may_refuse=False)
    with pytest.raises(InvariantViolation):
        MixtureLockstepInv(mix.data, truth, stale, 2, may_refuse=False)


@given(mixtures(), st.data())
def test_snapshot_load_round_trip(mix: Mix, data: st.DataObject) -> None:
    config = mix.config
    run = iterate_mixture(
        config, mix.regimes, mix.data, tuple(range(config.num_splits)), initial_mixture_state(config)
    )
    state = run.state_after(data.draw(st.integers(0, len(run.items))))
    saved = exact_mixture(config, mix.regimes, state)
    wire = json.loads(json.dumps(snapshot_mixture(saved)))
    assert load_mixture(config, mix.data, wire) == saved


def test_load_refuses_another_mixture_or_a_forged_state() -> None:
    mix = _rows_mix([2, 2], (1, 1), "stop")
    config = mix.config
    wire = snapshot_mixture(exact_mixture(config, mix.regimes, initial_mixture_state(config)))
    with pytest.raises(SpecValueError) as info:
        load_mixture(replace(config, seed=9), mix.data, wire)
    assert info.value.code == "mixture_config_mismatch"
    forged = dict(wire, cycles=[1, 0])
    with pytest.raises(SpecValueError) as info:
        load_mixture(config, mix.data, forged)
    assert info.value.code == "mixture_state_invalid"


def test_weight_change_applies_from_the_furthest_split() -> None:
    """New weights start a regime at u0 = max cycles; earlier cycles keep their sources."""
    mix = _rows_mix([6, 6, 6], (1, 1, 1), "stop")
    config = mix.config
    run = iterate_mixture(config, mix.regimes, mix.data, (0, 1), initial_mixture_state(config))
    state = run.state_after(5)  # split 0 at 3 cycles, split 1 at 2
    saved = exact_mixture(config, mix.regimes, state)
    regimes = reweighted(saved, (0, 1, 3))
    assert regimes == (Regime(0, (1, 1, 1)), Regime(3, (0, 1, 3)))
    assert reweighted(saved, (1, 1, 1)) == mix.regimes
    old = mixture_schedule(config, mix.regimes, mix.data)
    new = mixture_schedule(config, regimes, mix.data)
    assert new.slots[:3] == old.slots[:3]
    assert all(sl.source != 0 for sl in new.slots[3:])
    MixtureProportionInv(new)


def test_merge_needs_every_split_reported() -> None:
    mix = _rows_mix([2, 2], (1, 1), "stop")
    config = mix.config
    half = MixtureSaved(config, mix.regimes, initial_mixture_state(config), frozenset({0}))
    with pytest.raises(SpecValueError) as info:
        merge_mixture(mix.data, [half])
    assert info.value.code == "merge_missing_rank"


def test_mixture_config_requires_equal_num_splits() -> None:
    with pytest.raises(SpecValueError) as info:
        MixtureConfig(("a", "b"), (RunConfig(2, 0, 0), RunConfig(4, 0, 0)))
    assert info.value.code == "mixture_num_splits_mismatch"


def test_skipped_rows_end_the_mixture_where_the_canonical_order_blocks() -> None:
    """A split whose scheduled source has no row left ends the iterator (reason ``source``)."""
    perm = cut_splits(range(4), 2)
    data = (SourceData({0: perm}, Faults(skipped=frozenset({perm[0][0]}))),)
    config = MixtureConfig(("a",), (RunConfig(2, 0, 0),))
    run = iterate_mixture(config, (Regime(0, (1,)),), data, (0, 1), initial_mixture_state(config))
    assert run.reason == "source" and len(run.items) == 2
    assert capacity(config, data, 0, 0) == 2
    assert isinstance(run.state_after(2), MixtureState)


def _nested_ceilings(k: int, weights: tuple[int, ...]) -> list[int]:
    """Counts after ``k`` elements when source 0 takes ``ceil(k*w_0/W)`` and the rest are split the
    same way recursively (the interleave spec/MIXTURES.md compares against)."""
    if len(weights) == 1:
        return [k]
    first = -(-k * weights[0] // sum(weights))
    return [first, *_nested_ceilings(k - first, weights[1:])]


def test_nested_ceiling_interleave_strays_by_more_than_two() -> None:
    """The peer comparison's claim: nested ceilings keep only the first source within the quota."""
    weights, k = (7, 1, 1, 7), 5
    got = _nested_ceilings(k, weights)
    assert got == [3, 1, 1, 0]
    assert Fraction(k * weights[3], sum(weights)) - got[3] == Fraction(35, 16)
    picks = [0] * 4
    for t in range(k):
        picks[edf_pick(weights, picks, t, range(4))] += 1
    assert all(abs(picks[j] * 16 - k * w) < 16 for j, w in enumerate(weights))
