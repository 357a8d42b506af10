"""The pipeline's checkpoint code against the executable spec, on well-formed and malformed dicts.

Written to kill mutants of ``elastic_loader._pipeline._checkpoint`` (docs/MUTATION.md): Hypothesis
draws a dataset configuration and checkpoints for it (row or packed, legacy forms, string split
keys, empty buffers), then damages some of them (a key dropped, a value of the wrong type or
sign, a list of the wrong length, bad buffers, mixed modes, mismatched settings). Snapshot,
load, consumer commit and ``merge_state_dicts`` must then agree with ``elastic_loader.spec``:
the same result (keys in the same order), or an error of the same builtin class.

CheckpointRoundTripInv, MergeLatticeInv and MergeExactProp are the invariants behind the
agreement; the spec is the oracle, never the implementation.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import Phase, assume, given, settings
from hypothesis import strategies as st

from elastic_loader import merge_state_dicts
from elastic_loader._pipeline import _checkpoint as pipe
from elastic_loader.spec import checkpoint as spec
from elastic_loader.spec.packing import PackBuffer, PackedState
from elastic_loader.spec.rows import RowState
from elastic_loader.spec.topology import PackingConfig, RunConfig

# Under mutmut (MUTANT_UNDER_TEST is set) a failure only has to be found, not shrunk.
EXAMPLES = settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate] if "MUTANT_UNDER_TEST" in os.environ else list(Phase),
)
CONFIG_KEYS = ("shuffle_seed", "num_splits", "epoch")
PACKING_KEYS = ("pack_sequences", "eos_id", "pad_id", "blocks_per_epoch")
ODD_VALUES: tuple[object, ...] = (True, False, 1.0, "1", 0, -1, None, [], {}, 10**6, (0,))


@dataclass(frozen=True)
class Case:
    """A dataset configuration in both vocabularies."""

    config: RunConfig

    @property
    def identity(self) -> pipe.Identity:
        c, p = self.config, self.config.packing
        packing = None if p is None else (p.pack_sequences, p.eos_id, p.pad_id, p.blocks_per_epoch)
        return pipe.Identity(c.shuffle_seed, c.num_splits, c.epoch, c.perm_fingerprint, packing)

    @property
    def packed(self) -> bool:
        return self.config.packing is not None


@st.composite
def cases(draw: st.DrawFn) -> Case:
    num_splits = draw(st.integers(1, 4))
    packing = draw(
        st.none()
        | st.builds(
            PackingConfig,
            st.integers(1, 4),
            st.integers(0, 3),
            st.integers(0, 3),
            st.integers(1, 3).map(lambda b: b * num_splits),
        )
    )
    fingerprint = draw(st.sampled_from([None, "f" * 8, "e" * 8]))
    return Case(RunConfig(num_splits, draw(st.integers(0, 2)), draw(st.integers(0, 2)), fingerprint, packing))


@st.composite
def row_states(draw: st.DrawFn, case: Case) -> RowState:
    n = case.config.num_splits
    samples = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    extra = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return RowState(tuple(samples), tuple(s + e for s, e in zip(samples, extra)))


@st.composite
def buffers(draw: st.DrawFn) -> PackBuffer:
    tokens = draw(st.lists(st.integers(0, 9), min_size=1, max_size=5))
    starts = draw(st.sets(st.integers(0, len(tokens) - 1)))
    return PackBuffer(tuple(tokens), tuple(sorted(starts)))


@st.composite
def packed_states(draw: st.DrawFn, case: Case, step: int | None = None) -> PackedState:
    assert case.config.packing is not None
    n = case.config.num_splits
    budget = case.config.packing.blocks_per_split(n)
    consumed = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    emitted = draw(st.lists(st.integers(0, budget), min_size=n, max_size=n)) if step is None else [step] * n
    owned = draw(st.sets(st.integers(0, n - 1)))
    return PackedState(tuple(consumed), tuple(emitted), {s: draw(buffers()) for s in sorted(owned)})


def progress_states(case: Case) -> st.SearchStrategy[RowState | PackedState]:
    strategy: st.SearchStrategy[RowState | PackedState] = (
        packed_states(case) if case.packed else row_states(case)
    )
    return strategy


def snapshot_of(case: Case, state: RowState | PackedState) -> dict[str, Any]:
    if isinstance(state, RowState):
        return spec.snapshot_row(case.config, state)
    return spec.snapshot_packed(case.config, state)


def as_pipeline(state: RowState | PackedState) -> pipe.Progress:
    if isinstance(state, RowState):
        return pipe.RowProgress(list(state.samples), list(state.positions))
    buffers = {s: (list(b.tokens), list(b.starts)) for s, b in state.buffers.items()}
    return pipe.PackedProgress(list(state.consumed), list(state.emitted), buffers)


def as_spec(progress: pipe.Progress) -> RowState | PackedState:
    if isinstance(progress, pipe.RowProgress):
        return RowState(tuple(progress.samples), tuple(progress.positions))
    buffers = {s: PackBuffer(tuple(t), tuple(b)) for s, (t, b) in progress.buffers.items()}
    return PackedState(tuple(progress.consumed), tuple(progress.emitted), buffers)


# ------------------------------------------------------------------ damage


def _damage_value(data: st.DataObject, state: dict[str, Any]) -> None:
    key = data.draw(st.sampled_from(sorted(state)))
    state[key] = data.draw(st.sampled_from(ODD_VALUES))


def _drop_key(data: st.DataObject, state: dict[str, Any]) -> None:
    del state[data.draw(st.sampled_from(sorted(state)))]


def _damage_list(data: st.DataObject, state: dict[str, Any]) -> None:
    keys = sorted(k for k, v in state.items() if isinstance(v, list))
    if not keys:
        return
    values = state[data.draw(st.sampled_from(keys))]
    choice = data.draw(st.integers(0, 3))
    if choice == 0:
        values.append(0)
    elif choice == 1 and values:
        values.pop()
    elif values:
        values[data.draw(st.integers(0, len(values) - 1))] = data.draw(st.sampled_from((True, -1, "2", 1.0)))


def _legacy_samples(data: st.DataObject, state: dict[str, Any]) -> None:
    """The old form: one int for every split, and no positions."""
    state["samples_consumed_per_split"] = data.draw(st.sampled_from((0, 3, -2, True)))
    if data.draw(st.booleans()):
        state.pop("positions_consumed_per_split", None)


def _positions_behind(data: st.DataObject, state: dict[str, Any]) -> None:
    samples, positions = state.get("samples_consumed_per_split"), state.get("positions_consumed_per_split")
    if isinstance(samples, list) and isinstance(positions, list) and samples:
        s = data.draw(st.integers(0, len(samples) - 1))
        samples[s] = positions[s] + data.draw(st.integers(1, 2))


def _damage_buffers(data: st.DataObject, state: dict[str, Any]) -> None:
    raw = state.get("pack_buffers")
    if not isinstance(raw, dict):
        state["pack_buffers"] = {}
        return
    n = state.get("num_splits", 1) if isinstance(state.get("num_splits"), int) else 1
    key = data.draw(st.sampled_from((0, "0", str(max(0, n - 1)), n, -1, "x", True, 1.5)))
    value = data.draw(
        st.sampled_from(
            (
                {"tokens": [1, 2], "starts": [0]},
                {"tokens": [], "starts": []},
                {"tokens": [], "starts": [0]},
                {"tokens": [1, 2], "starts": [1, 0]},
                {"tokens": [1, 2], "starts": [0, 0]},
                {"tokens": [1, 2], "starts": [2]},
                {"tokens": [1, 2], "starts": [-1]},
                {"tokens": [True], "starts": []},
                {"tokens": [1], "starts": [0.0]},
                {"tokens": "12", "starts": []},
                {"tokens": [1], "starts": (0,)},
                {"tokens": (5, 6), "starts": [0, 1]},
                {"tokens": [1]},
                {"starts": []},
                {"tokens": 7, "starts": []},
                {"tokens": {5: 1}, "starts": []},
                [1, 2],
            )
        )
    )
    raw[key] = value


def _string_keys(data: st.DataObject, state: dict[str, Any]) -> None:
    """JSON round trips turn the split keys of ``pack_buffers`` into strings."""
    raw = state.get("pack_buffers")
    if isinstance(raw, dict):
        state["pack_buffers"] = {str(k): v for k, v in raw.items()}


def _other_setting(data: st.DataObject, state: dict[str, Any]) -> None:
    key = data.draw(st.sampled_from((*CONFIG_KEYS, *PACKING_KEYS, "perm_fingerprint")))
    if key == "perm_fingerprint":
        state[key] = data.draw(st.sampled_from(("f" * 8, "d" * 8, 7, None)))
        if state[key] is None:
            del state[key]
    elif isinstance(state.get(key), int):
        state[key] += data.draw(st.sampled_from((1, -1)))


def _switch_mode(data: st.DataObject, state: dict[str, Any]) -> None:
    if "pack_buffers" in state:
        del state["pack_buffers"]
    else:
        state["pack_buffers"] = {}


DAMAGE: tuple[Callable[[st.DataObject, dict[str, Any]], None], ...] = (
    _damage_value,
    _drop_key,
    _damage_list,
    _legacy_samples,
    _positions_behind,
    _damage_buffers,
    _string_keys,
    _other_setting,
    _switch_mode,
)


def damaged(data: st.DataObject, state: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(state)
    for damage in data.draw(st.lists(st.sampled_from(DAMAGE), max_size=2)):
        damage(data, out)
    return out


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", result)``, or the builtin class of the error (the spec's errors subclass them)."""
    try:
        return ("ok", call())
    except TypeError:
        return ("error", TypeError)
    except ValueError:
        return ("error", ValueError)


def impossible_packing(state: object) -> bool:
    """Packing settings no dataset can have (see pipeline_bugs.md, I1): the spec rejects them in a merge."""
    if not isinstance(state, dict) or "pack_buffers" not in state:
        return False
    values = [state.get(k) for k in ("num_splits", "pack_sequences", "blocks_per_epoch")]
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) < len(values):
        return False
    num_splits, length, blocks = ints
    return num_splits > 0 and (length <= 0 or blocks <= 0 or blocks % num_splits != 0)


def ordered(result: tuple[str, Any]) -> tuple[str, Any]:
    """A dict result as its item list, so that key order counts."""
    kind, value = result
    return (kind, list(value.items())) if isinstance(value, dict) else result


# ------------------------------------------------------------------ tests


@EXAMPLES
@given(data=st.data())
def test_snapshot_matches_the_spec(data: st.DataObject) -> None:
    case = data.draw(cases())
    state = data.draw(progress_states(case))
    got = pipe.snapshot(case.identity, as_pipeline(state))
    assert list(got.items()) == list(snapshot_of(case, state).items())


@EXAMPLES
@given(data=st.data())
def test_snapshot_leaves_out_empty_buffers(data: st.DataObject) -> None:
    case = data.draw(cases().filter(lambda c: c.packed))
    state = data.draw(packed_states(case))
    progress = as_pipeline(state)
    assert isinstance(progress, pipe.PackedProgress)
    progress.buffers[case.config.num_splits] = ([], [])
    assert pipe.snapshot(case.identity, progress) == snapshot_of(case, state)


@EXAMPLES
@given(data=st.data(), split_len=st.integers(0, 9))
def test_load_matches_the_spec(data: st.DataObject, split_len: int) -> None:
    case = data.draw(cases())
    state = data.draw(progress_states(case))
    checkpoint = damaged(data, snapshot_of(case, state))
    load = spec.load_packed if case.packed else spec.load_row
    want = outcome(lambda: load(case.config, checkpoint, split_len))
    got = outcome(lambda: as_spec(pipe.parse_for(case.identity, checkpoint, split_len)))
    assert got == want, checkpoint


@EXAMPLES
@given(data=st.data())
def test_commit_matches_the_spec(data: st.DataObject) -> None:
    case = data.draw(cases())
    parent = data.draw(progress_states(case))
    incoming = data.draw(progress_states(case))
    checkpoint = damaged(data, snapshot_of(case, incoming))
    if isinstance(parent, PackedState):
        want = outcome(lambda: spec.commit_packed(case.config, parent, checkpoint))
    else:
        want = outcome(lambda: spec.commit_row(case.config, parent, checkpoint))
    got = outcome(lambda: as_spec(pipe.commit(case.identity, as_pipeline(parent), checkpoint)))
    assert got == want, checkpoint


@EXAMPLES
@given(data=st.data(), ranks=st.integers(1, 3))
def test_merge_matches_the_spec(data: st.DataObject, ranks: int) -> None:
    case = data.draw(cases())
    aligned = data.draw(st.booleans())
    states: list[object] = []
    for _ in range(ranks):
        if case.packed:
            assert case.config.packing is not None
            budget = case.config.packing.blocks_per_split(case.config.num_splits)
            step = data.draw(st.integers(0, budget)) if aligned else None
            state: RowState | PackedState = data.draw(packed_states(case, step))
        else:
            state = data.draw(row_states(case))
        states.append(
            damaged(data, snapshot_of(case, state)) if data.draw(st.booleans()) else snapshot_of(case, state)
        )
    assume(not impossible_packing(states[0]))
    if data.draw(st.integers(0, 9)) == 0:
        states.append(data.draw(st.sampled_from(([], "state", None, 3))))
    spec_input: list[object] = copy.deepcopy(states)
    want = ordered(outcome(lambda: spec.merge_state_dicts(spec_input)))
    got = ordered(outcome(lambda: merge_state_dicts(states)))  # type: ignore[arg-type]  # malformed on purpose
    assert got == want, states


@pytest.mark.parametrize(
    "states",
    [
        [],
        [{"shuffle_seed": 0, "num_splits": 0, "epoch": 0, "samples_consumed_per_split": 0}],
        [{"shuffle_seed": 0, "num_splits": -1, "epoch": 0, "samples_consumed_per_split": []}],
    ],
    ids=["no-states", "zero-splits", "negative-splits"],
)
def test_merge_without_splits_is_a_value_error(states: list[dict[str, object]]) -> None:
    with pytest.raises(ValueError):
        spec.merge_state_dicts(states)
    with pytest.raises(ValueError):
        merge_state_dicts(states)


@pytest.mark.parametrize("key", [*CONFIG_KEYS, *PACKING_KEYS])
@pytest.mark.parametrize("value", [True, 2.0])
def test_a_malformed_setting_is_named_in_the_error(key: str, value: object) -> None:
    """Merge, load and commit name the key whose value is not an int (True and 2.0 are not 2)."""
    case = Case(RunConfig(2, 1, 1, None, PackingConfig(3, 1, 0, 4)))
    good = spec.snapshot_packed(case.config, PackedState((0, 0), (0, 0)))
    bad = {**good, key: value}
    with pytest.raises(ValueError, match=key):
        merge_state_dicts([good, bad])
    with pytest.raises(ValueError, match=key):
        merge_state_dicts([bad, good])
    with pytest.raises(ValueError, match=key):
        pipe.parse_for(case.identity, bad, 10)
    with pytest.raises(ValueError, match=key):
        pipe.commit(case.identity, as_pipeline(PackedState((0, 0), (0, 0))), bad)


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("samples_consumed_per_split", [0, True], "samples_consumed_per_split"),
        ("samples_consumed_per_split", [0], "samples_consumed_per_split"),
        ("samples_consumed_per_split", 5, "samples_consumed_per_split"),
        ("positions_consumed_per_split", [0, -1], "positions_consumed_per_split"),
        ("positions_consumed_per_split", "01", "positions_consumed_per_split"),
    ],
)
def test_a_malformed_progress_list_is_named_in_the_error(key: str, value: object, named: str) -> None:
    case = Case(RunConfig(2, 1, 1))
    good = spec.snapshot_row(case.config, RowState((0, 0), (1, 1)))
    bad = {**good, key: value}
    if key == "samples_consumed_per_split" and value == 5:
        bad["positions_consumed_per_split"] = [1, 1]  # five samples but one position
    with pytest.raises(ValueError, match=named if value != 5 else "position"):
        merge_state_dicts([good, bad])


@pytest.mark.parametrize("setting", [{"blocks_per_epoch": 5}, {"pack_sequences": 0}, {"blocks_per_epoch": 0}])
def test_merge_rejects_impossible_packing_settings(setting: dict[str, int]) -> None:
    case = Case(RunConfig(2, 1, 1, None, PackingConfig(3, 1, 0, 4)))
    state = {**spec.snapshot_packed(case.config, PackedState((0, 0), (0, 0))), **setting}
    with pytest.raises(ValueError):
        spec.merge_state_dicts([state])
    with pytest.raises(ValueError):
        merge_state_dicts([state])


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"samples_consumed_per_split": [0, True]}, "samples_consumed_per_split"),
        ({"blocks_emitted_per_split": [0]}, "blocks_emitted_per_split"),
        ({"blocks_emitted_per_split": [0, -1]}, "blocks_emitted_per_split"),
        ({"pack_buffers": {0: {"tokens": [1, 2.0], "starts": [0]}}}, "token"),
        ({"pack_buffers": {0: {"tokens": [1, 2], "starts": [True]}}}, "start"),
    ],
)
def test_a_malformed_packed_progress_is_named_in_the_error(changes: dict[str, object], named: str) -> None:
    case = Case(RunConfig(2, 1, 1, None, PackingConfig(3, 1, 0, 4)))
    good = spec.snapshot_packed(case.config, PackedState((0, 0), (0, 0)))
    bad = {**good, **changes}
    with pytest.raises(ValueError, match=named):
        merge_state_dicts([good, bad])
    with pytest.raises(ValueError, match=named):
        pipe.parse_for(case.identity, bad, 10)
