"""StreamingMixture under StreamingDataLoader with real worker processes, against the spec's loader.

Batches (their items and order) and the committed checkpoint after a delivered batch equal
``spec.mixture.run_mixture_loader``; a loader state saved on one world size and worker count
resumes on another (and with new weights) exactly: no row repeated, none lost.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from elastic_loader import StreamingDataLoader
from elastic_loader.spec.mixture import initial_mixture_state, run_mixture_loader
from elastic_loader.spec.mixture_saved import MixtureSaved, load_mixture_for_rank, snapshot_mixture
from elastic_loader.spec.mixture_schedule import integer_weights
from elastic_loader.spec.topology import Topology

NAMES = ("web", "code", "books")


def _strip(state: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(state))
    out.pop("elastic_loader", None)
    return out


def _dataset_state(loader_state: dict[str, Any]) -> dict[str, Any]:
    body = json.loads(loader_state["elastic_loader"])
    return dict(body["dataset"])


def _spec_batches(run: Any, n: int, key: Any) -> list[list[Any]]:
    return [[key(i) for i in d.items] for d in run.deliveries[:n]]


def _batches(loader: Any, n: int | None) -> tuple[list[list[Any]], Any]:
    out = []
    it = iter(loader)
    for batch in it:
        out.append([(row["source"], row["id"]) for row in batch])
        if n is not None and len(out) == n:
            break
    return out, it


@pytest.mark.parametrize(("workers", "again"), [(2, 0), (0, 2), (2, 2)])
def test_loader_batches_and_resume_on_another_topology(
    model: Any, keys: Any, workers: int, again: int
) -> None:
    _, spec_key = keys
    model.on_exhausted = "renormalize"
    model.options = {n: {"columns": ["id"]} for n in NAMES}
    config, data = model.config(), model.data()
    regimes = model.regimes()
    mix = model.pipeline()
    loader = StreamingDataLoader(mix, batch_size=3, num_workers=workers, collate_fn=list)
    spec = run_mixture_loader(
        config, regimes, data, Topology(1, 0, workers), initial_mixture_state(config), 3
    )
    got, it = _batches(loader, 5)
    assert got == _spec_batches(spec, 5, spec_key)
    state = loader.state_dict()
    committed = spec.state_after(5)
    saved = MixtureSaved(config, regimes, committed, frozenset(range(4)))
    assert _strip(_dataset_state(state)) == json.loads(json.dumps(snapshot_mixture(saved)))
    del it
    new = {"web": 1, "code": 1, "books": 2}
    after: list[list[Any]] = []
    for rank in range(2):
        other = model.pipeline(rank, 2, weights=new)
        resumed = StreamingDataLoader(other, batch_size=2, num_workers=again, collate_fn=list)
        resumed.load_state_dict(state)
        w = integer_weights([new[n] for n in NAMES])
        regimes2, start = load_mixture_for_rank(config, data, _strip(_dataset_state(state)), 2, rank, w)
        spec2 = run_mixture_loader(config, regimes2, data, Topology(2, rank, again), start, 2)
        rest, _ = _batches(resumed, None)
        assert rest == _spec_batches(spec2, len(spec2.deliveries), spec_key)
        after += rest
        assert resumed.epoch_finished()
    seen = Counter(item for batch in got + after for item in batch)
    assert max(seen.values()) == 1, "a row was delivered twice"
    per_source = Counter(name for name, _ in seen)
    assert sum(per_source.values()) == len(model.pipeline()), "a row was lost"


def test_in_process_last_partial_batch_is_committed(model: Any, keys: Any) -> None:
    """Origin: found by the mixture machine. In process, torch collates the last (short) batch
    after the mixture's iterator ended; its checkpoint must still count that batch."""
    _, spec_key = keys
    model.options = {n: {"columns": ["id"]} for n in NAMES}
    config, data, regimes = model.config(), model.data(), model.regimes()
    loader = StreamingDataLoader(model.pipeline(), batch_size=5, collate_fn=list)
    spec = run_mixture_loader(config, regimes, data, Topology(1, 0, 0), initial_mixture_state(config), 5)
    assert len(spec.deliveries[-1].items) < 5
    got, _ = _batches(loader, None)
    assert got == _spec_batches(spec, len(spec.deliveries), spec_key)
    saved = MixtureSaved(config, regimes, spec.state_after(len(spec.deliveries)), frozenset(range(4)))
    assert _strip(_dataset_state(loader.state_dict())) == json.loads(json.dumps(snapshot_mixture(saved)))
    assert loader.epoch_finished()


def test_columnar_batches_are_refused_for_a_mixture(model: Any) -> None:
    """Origin: merging columnar batches with mixtures. A mixture's items come from several tables,
    so ``batch_format`` is refused when the loader is built, before any worker starts."""
    model.options = {n: {"columns": ["id"]} for n in NAMES}
    with pytest.raises(ValueError, match="batch_format is not supported for a StreamingMixture"):
        StreamingDataLoader(model.pipeline(), batch_size=4, batch_format="arrow")


def test_persistent_workers_continue_and_start_the_next_epoch(tmp_path: Any) -> None:
    """Origin: the mixture's untested paths. With ``persistent_workers=True`` torch keeps the worker
    processes (and their copies of the mixture) between iterations: a loader broken off after 3
    batches and iterated again continues where the trainer stood, a fresh loader resumed from the
    mid-epoch state continues too, and the next epoch again holds every row of every source once."""
    import lancedb
    import pyarrow as pa

    from elastic_loader import MixtureSource, StreamingMixture

    db = lancedb.connect(str(tmp_path / "db"))
    sizes = {"web": 64, "code": 32, "books": 16}
    tables = {n: db.create_table(n, pa.table({"id": list(range(k))})) for n, k in sizes.items()}
    every = Counter({(n, i): 1 for n, k in sizes.items() for i in range(k)})

    def mixture() -> StreamingMixture:
        sources = {n: MixtureSource(t) for n, t in tables.items()}
        weights = {"web": 4, "code": 2, "books": 1}
        return StreamingMixture(sources, weights, num_splits=4, rank=0, world_size=1, seed=1)

    def loader_of(mix: StreamingMixture) -> Any:
        return StreamingDataLoader(mix, batch_size=4, num_workers=2, persistent_workers=True, collate_fn=list)

    def keys(rows: list[Any]) -> Counter[tuple[str, int]]:
        return Counter((r["source"], r["id"]) for r in rows)

    mix = mixture()
    loader = loader_of(mix)
    it = iter(loader)
    first = [r for _ in range(3) for r in next(it)]
    state = loader.state_dict()
    del it
    assert keys(first + [r for b in loader for r in b]) == every
    assert keys([r for b in loader for r in b]) == every and mix.epoch == 1
    resumed = loader_of(mixture())
    resumed.load_state_dict(state)
    assert keys(first + [r for b in resumed for r in b]) == every
