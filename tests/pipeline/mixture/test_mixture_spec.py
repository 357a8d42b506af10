"""StreamingMixture against the spec (``elastic_loader.spec.mixture``) on real tables.

Items (source and row, or source and block), schedules and checkpoints after every item must be
exactly the spec's, in row mode and packing, for every ``on_exhausted`` rule, on one rank and on
every rank of a world of two and four.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from elastic_loader.spec.inference import Pass
from elastic_loader.spec.mixture import initial_mixture_state, iterate_mixture
from elastic_loader.spec.mixture_saved import exact_mixture, rank_mixture_checkpoint, snapshot_mixture
from elastic_loader.spec.mixture_schedule import mixture_schedule
from elastic_loader.spec.topology import PackingConfig, rank_splits

PACKING = PackingConfig(4, -1, -2, 48)  # web: 48 blocks (12 per split), code 24, books 16


def _strip(state: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(state))
    out.pop("elastic_loader")
    return out


def _spec_run(model: Any, world_size: int, rank: int) -> Any:
    config, data = model.config(), model.data()
    _DATA[:] = [data]
    owned = rank_splits(config.num_splits, world_size, rank)
    regimes = model.regimes()
    run = iterate_mixture(config, regimes, data, owned, initial_mixture_state(config))
    return config, regimes, owned, run


def _spec_checkpoint(
    config: Any, regimes: Any, state: Any, owned: Any, items: int, skipping: bool = False
) -> Any:
    """The spec's checkpoint of the rank owning ``owned`` after a plain iteration of ``items`` items
    (one pass of batches of one item, no workers), the other ranks inferred by lockstep."""
    world_size = config.num_splits // len(owned)
    rank = owned[0] // len(owned)
    start = exact_mixture(config, tuple(regimes), initial_mixture_state(config))
    data = _DATA[0]
    saved = rank_mixture_checkpoint(start, data, state, [Pass(0, 1, items)], world_size, rank, skipping)
    return json.loads(json.dumps(snapshot_mixture(saved)))


_DATA: list[Any] = []


@pytest.mark.parametrize("mode", ["rows", "packed"])
@pytest.mark.parametrize(
    ("on_exhausted", "cycles"), [("stop", None), ("renormalize", None), ("cycle", 45), ("stop", 7)]
)
def test_items_and_every_state_match_the_spec(
    model: Any, keys: Any, mode: str, on_exhausted: str, cycles: int | None
) -> None:
    key_of, spec_key = keys
    model.on_exhausted, model.cycles = on_exhausted, cycles
    if mode == "packed":
        model.packing = PACKING
    config, regimes, owned, run = _spec_run(model, 1, 0)
    mix = model.pipeline()
    assert mix.schedule() == [
        config.names[s.source] for s in mixture_schedule(config, regimes, model.data()).slots
    ]
    got = []
    for i, item in enumerate(mix):
        got.append(key_of(item))
        if i % 5 == 0 or i == len(run.items) - 1:
            want = _spec_checkpoint(config, regimes, run.state_after(i + 1), owned, i + 1)
            assert _strip(mix.state_dict()) == want, i
    assert got == [spec_key(i) for i in run.items]
    assert len(got) == len(mix) or model.packing is None
    n = len(run.items)
    assert _strip(mix.state_dict()) == _spec_checkpoint(config, regimes, run.state_after(n), owned, n)


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("mode", ["rows", "packed"])
def test_every_rank_matches_the_spec(model: Any, keys: Any, world_size: int, mode: str) -> None:
    key_of, spec_key = keys
    model.on_exhausted = "renormalize"
    if mode == "packed":
        model.packing = PACKING
    for rank in range(world_size):
        config, regimes, owned, run = _spec_run(model, world_size, rank)
        mix = model.pipeline(rank, world_size)
        assert mix.rank_splits == list(owned)
        assert [key_of(i) for i in mix] == [spec_key(i) for i in run.items]
        n = len(run.items)
        assert _strip(mix.state_dict()) == _spec_checkpoint(config, regimes, run.state_after(n), owned, n)


def test_skipped_rows_end_the_iterator_where_the_spec_does(model: Any, keys: Any) -> None:
    """A skipping transform shortens a split; the mixture ends at the first cycle it cannot fill."""
    key_of, spec_key = keys
    model.skipped = frozenset({1003, 1010, 2001})
    config, regimes, owned, run = _spec_run(model, 1, 0)
    assert run.reason == "source"
    mix = model.pipeline()
    assert [key_of(i) for i in mix] == [spec_key(i) for i in run.items]
    n = len(run.items)
    assert _strip(mix.state_dict()) == _spec_checkpoint(config, regimes, run.state_after(n), owned, n, True)


def test_a_one_source_mixture_is_its_table(model: Any, mix_tables: Any) -> None:
    from elastic_loader import MixtureSource, StreamingDataset, StreamingMixture

    alone = StreamingMixture({"web": MixtureSource(mix_tables["web"], shuffle_seed=3)}, [1], num_splits=4)
    table = StreamingDataset(mix_tables["web"], num_splits=4, shuffle_seed=3)
    assert [r["id"] for r in alone] == [r["id"] for r in table]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("epoch", [0, 1])
def test_deadline_ties_follow_the_seeded_order(model: Any, keys: Any, seed: int, epoch: int) -> None:
    """Equal weights tie at every deadline: the seeded tie order decides every slot."""
    key_of, spec_key = keys
    model.weights, model.seed, model.epoch, model.on_exhausted = (
        {"web": 1, "code": 1, "books": 1},
        seed,
        epoch,
        "renormalize",
    )
    config, regimes, _owned, run = _spec_run(model, 1, 0)
    mix = model.pipeline()
    assert mix.schedule() == [
        config.names[s.source] for s in mixture_schedule(config, regimes, model.data()).slots
    ]
    assert [key_of(i) for i in mix] == [spec_key(i) for i in run.items]


@pytest.mark.parametrize("bad", ["not a dict", "has the key"])
def test_an_item_the_source_key_refuses_raises_at_its_turn(model: Any, keys: Any, bad: str) -> None:
    """The source key is set once per cycle; an item it cannot take still raises at its own turn:
    every item before it is yielded, and the checkpoint is the spec's after the last of them."""
    key_of, spec_key = keys
    model.on_exhausted = "renormalize"
    victim = 1005

    def transform(batch: Any) -> list[Any]:
        rows = batch.to_pylist()
        if bad == "not a dict":
            return [[r["id"]] if r["id"] == victim else r for r in rows]
        return [{**r, "source": "mine"} if r["id"] == victim else r for r in rows]

    model.options = {"code": {"transform": transform}}
    config, regimes, owned, run = _spec_run(model, 1, 0)
    want = [spec_key(i) for i in run.items]
    at = want.index(("code", victim))
    assert at % model.num_splits != 0  # mid-cycle: items of its own cycle come before it
    mix = model.pipeline()
    got = []
    error = TypeError if bad == "not a dict" else ValueError
    with pytest.raises(error, match="source 'code' gave"):
        for item in mix:
            got.append(key_of(item))
    assert got == want[:at]
    assert _strip(mix.state_dict()) == _spec_checkpoint(config, regimes, run.state_after(at), owned, at)
