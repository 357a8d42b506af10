"""StreamingMixture checkpoints: merge, resume on other topologies, weight changes, refusals.

Expected values come from the spec (``merge_mixture``, ``load_mixture_for_rank``,
``iterate_mixture``); exactly-once is checked on the items themselves: along a chain of resumes no
(source, source epoch, row) is delivered twice and, once the mixture epoch is over, none is lost.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

import pytest

from elastic_loader.spec.mixture import iterate_mixture
from elastic_loader.spec.mixture_saved import (
    load_mixture,
    load_mixture_for_rank,
    merge_mixture,
    snapshot_mixture,
)
from elastic_loader.spec.mixture_schedule import integer_weights
from elastic_loader.spec.topology import PackingConfig, rank_splits

SIZES = ("web", "code", "books")


def _strip(state: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(state))
    out.pop("elastic_loader", None)
    return out


def _seen(items: list[Any], key_of: Any) -> Counter[Any]:
    """How often each item was delivered (padding-only blocks are alike, so not counted)."""
    keys = [key_of(i) for i in items]
    return Counter(k for k in keys if not (len(k) == 3 and set(k[1]) == {-2}))


def _take(mix: Any, n: int) -> list[Any]:
    it = iter(mix)
    got = list(itertools.islice(it, n))
    it.close()  # type: ignore[attr-defined]
    return got


def _run_ranks(
    model: Any, world_size: int, counts: list[int], state: Any = None, **kw: Any
) -> tuple[list[Any], list[Any]]:
    items, states = [], []
    for rank in range(world_size):
        mix = model.pipeline(rank, world_size, **kw)
        if state is not None:
            mix.load_state_dict(state)
        items += _take(mix, counts[rank])
        states.append(mix.state_dict())
    return items, states


@pytest.mark.parametrize("mode", ["rows", "packed"])
@pytest.mark.parametrize(("first", "second"), [(2, 1), (2, 4), (4, 2), (1, 4)])
def test_merge_then_resume_on_another_world_size_matches_the_spec(
    model: Any, keys: Any, mode: str, first: int, second: int
) -> None:
    key_of, spec_key = keys
    model.on_exhausted = "renormalize"
    if mode == "packed":
        model.packing = PackingConfig(4, -1, -2, 48)
    config, data = model.config(), model.data()
    counts = [7 + 3 * r for r in range(first)]  # ranks not in lockstep: the merge takes each split's own
    before, states = _run_ranks(model, first, counts)
    merged = model.pipeline().merge_state_dicts(states)
    spec_merged = merge_mixture(data, [load_mixture(config, data, _strip(s)) for s in states])
    assert _strip(merged) == json.loads(json.dumps(snapshot_mixture(spec_merged)))
    after = []
    for rank in range(second):
        mix = model.pipeline(rank, second)
        mix.load_state_dict(merged)
        regimes, start = load_mixture_for_rank(config, data, _strip(merged), second, rank)
        run = iterate_mixture(config, regimes, data, rank_splits(config.num_splits, second, rank), start)
        got = list(mix)
        assert [key_of(i) for i in got] == [spec_key(i) for i in run.items]
        after += got
    seen = _seen(before + after, key_of)
    assert max(seen.values()) == 1, "an item was delivered twice"
    if mode == "rows":  # every row of every scheduled cycle, none lost
        assert len(seen) == len(model.pipeline())


@pytest.mark.parametrize("mode", ["rows", "packed"])
def test_new_weights_apply_from_u0_and_no_row_repeats(model: Any, keys: Any, mode: str) -> None:
    key_of, spec_key = keys
    model.on_exhausted = "renormalize"
    if mode == "packed":
        model.packing = PackingConfig(4, -1, -2, 48)
    config, data = model.config(), model.data()
    before, states = _run_ranks(model, 2, [9, 14])
    merged = model.pipeline().merge_state_dicts(states)
    new = {"web": 1, "code": 6, "books": 3}
    weights = integer_weights([new[n] for n in SIZES])
    after = []
    for rank in range(4):
        mix = model.pipeline(rank, 4, weights=new)
        mix.load_state_dict(merged)
        regimes, start = load_mixture_for_rank(config, data, _strip(merged), 4, rank, weights)
        u0 = max(json.loads(json.dumps(merged))["cycles"])
        assert [r[0] for r in mix.regimes] == [0, u0] == [r.start for r in regimes]
        run = iterate_mixture(config, regimes, data, rank_splits(config.num_splits, 4, rank), start)
        got = list(mix)
        assert [key_of(i) for i in got] == [spec_key(i) for i in run.items]
        after += got
        mid = mix.state_dict()
    assert mid["regimes"] == [{"start": r.start, "weights": list(r.weights)} for r in regimes]
    seen = _seen(before + after, key_of)
    assert max(seen.values()) == 1


def test_same_weights_keep_the_regimes(model: Any) -> None:
    _, states = _run_ranks(model, 1, [10])
    mix = model.pipeline()
    mix.load_state_dict(states[0])
    assert [r[0] for r in mix.regimes] == [0]
    assert mix.state_dict()["regimes"] == states[0]["regimes"]


@pytest.mark.parametrize("mode", ["rows", "packed"])
@pytest.mark.parametrize(("first", "second"), [(2, 4), (4, 1), (2, 2)])
def test_one_rank_state_resumes_every_rank_by_lockstep(
    model: Any, keys: Any, mode: str, first: int, second: int
) -> None:
    """Every rank delivered the same items; any one rank's state resumes the whole job (rows
    inferred exactly, packed splits projected and replayed by their owner), as the spec says."""
    key_of, spec_key = keys
    model.on_exhausted = "renormalize"
    if mode == "packed":
        model.packing = PackingConfig(4, -1, -2, 48)
    config, data = model.config(), model.data()
    before, states = _run_ranks(model, first, [6] * first)
    for writer in range(first):
        one = states[writer]
        assert sorted(json.loads(json.dumps(one))["projected"]) == (
            [] if mode == "rows" else [str(s) for s in range(4) if s not in rank_splits(4, first, writer)]
        )
        after = []
        for rank in range(second):
            mix = model.pipeline(rank, second)
            mix.load_state_dict(one)
            regimes, start = load_mixture_for_rank(config, data, _strip(one), second, rank)
            run = iterate_mixture(config, regimes, data, rank_splits(config.num_splits, second, rank), start)
            got = list(mix)
            assert [key_of(i) for i in got] == [spec_key(i) for i in run.items]
            after += got
        seen = _seen(before + after, key_of)
        assert max(seen.values()) == 1
        if mode == "rows":
            assert len(seen) == len(model.pipeline())


def test_with_skipping_rows_a_one_rank_state_needs_a_merge(model: Any) -> None:
    model.skipped = frozenset({1003})
    _, states = _run_ranks(model, 2, [5, 5])
    assert json.loads(json.dumps(states[0]))["unknown"] == [2, 3]
    with pytest.raises(ValueError, match="merge every rank"):
        model.pipeline(1, 2).load_state_dict(states[0])
    with pytest.raises(ValueError, match="no merged state reports split 2"):
        model.pipeline().merge_state_dicts([states[0]])
    model.pipeline(0, 2).load_state_dict(states[0])  # its own splits are known
    model.pipeline().load_state_dict(model.pipeline().merge_state_dicts(states))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"seed": 12}, "its seed is 11"),
        ({"epoch": 1}, "its epoch is 0"),
        ({"on_exhausted": "renormalize"}, "its on_exhausted is 'stop'"),
        ({"cycles": 9}, "its cycles is None"),
    ],
)
def test_a_checkpoint_of_another_mixture_is_refused(model: Any, change: dict[str, Any], match: str) -> None:
    _, states = _run_ranks(model, 1, [6])
    for key, value in change.items():
        setattr(model, key, value)
    with pytest.raises(ValueError, match=match):
        model.pipeline().load_state_dict(states[0])


def test_other_names_seeds_tables_and_edits_are_refused(model: Any, mix_tables: Any) -> None:
    from elastic_loader import MixtureSource, StreamingMixture

    _, states = _run_ranks(model, 1, [6])
    state = states[0]
    renamed = StreamingMixture(
        {"w": model.source("web"), "code": model.source("code"), "books": model.source("books")},
        [5, 3, 2],
        num_splits=4,
        seed=11,
    )
    with pytest.raises(ValueError, match="its names"):
        renamed.load_state_dict(state)
    model.options = {"code": {"shuffle_seed": 99}}
    with pytest.raises(ValueError, match="shuffle_seed"):
        model.pipeline().load_state_dict(state)
    model.options = {}
    edited = json.loads(json.dumps(state))
    edited["cycles"][0] += 1
    with pytest.raises(ValueError, match=r"does not match|items where the schedule"):
        model.pipeline().load_state_dict(edited)
    pinned = json.loads(json.dumps(state))
    pinned["elastic_loader"]["tables"]["books"][1] += 1
    with pytest.raises(ValueError, match="source 'books': the checkpoint was written for table version"):
        model.pipeline().load_state_dict(pinned)
    with pytest.raises(ValueError, match="not a StreamingMixture checkpoint"):
        model.pipeline().load_state_dict({"shuffle_seed": 0, "num_splits": 4, "epoch": 0})
    del MixtureSource


def test_rows_added_to_a_table_after_the_checkpoint_do_not_shift_it(
    tmp_path: Any, perm_of: Any, keys: Any
) -> None:
    """The checkpoint pins each source's table version; the resume reads that version (time travel)."""
    import lancedb
    import pyarrow as pa

    from elastic_loader import MixtureSource, StreamingMixture

    db = lancedb.connect(str(tmp_path))
    tables = {
        n: db.create_table(n, pa.table({"id": list(range(b, b + 12))}), mode="overwrite")
        for n, b in (("x", 0), ("y", 100))
    }

    def mixture() -> StreamingMixture:
        return StreamingMixture({n: MixtureSource(t) for n, t in tables.items()}, [1, 1], num_splits=2)

    full = [r["id"] for r in mixture()]
    first = mixture()
    head = [r["id"] for r in _take(first, 5)]
    state = first.state_dict()
    tables["y"].add(pa.table({"id": list(range(200, 230))}))
    again = mixture()
    again.load_state_dict(state)
    assert head + [r["id"] for r in again] == full
