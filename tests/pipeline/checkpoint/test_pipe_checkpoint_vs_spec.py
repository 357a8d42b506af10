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
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import Phase, assume, given, settings
from hypothesis import strategies as st

from elastic_loader import merge_state_dicts
from elastic_loader._pipeline import _checkpoint as pipe
from elastic_loader.spec import checkpoint as spec
from elastic_loader.spec import saved
from elastic_loader.spec.errors import SpecError
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


def as_pipeline(state: RowState | PackedState) -> pipe.State:
    if isinstance(state, RowState):
        return pipe.RowState(list(state.samples), list(state.positions))
    buffers = {s: (list(b.tokens), list(b.starts)) for s, b in state.buffers.items()}
    return pipe.PackedState(list(state.consumed), list(state.emitted), buffers)


def as_spec(progress: pipe.State) -> RowState | PackedState:
    if isinstance(progress, pipe.RowState):
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
    """Packing settings no dataset can have: the spec rejects them in a merge (docs/MUTATION.md)."""
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
    assert isinstance(progress, pipe.PackedState)
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
    want = ordered(outcome(lambda: saved.merge_state_dicts(spec_input)))
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
        saved.merge_state_dicts(states)
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
        saved.merge_state_dicts([state])
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


# ---------------------------------------------- one malformed or borderline dict at a time
# Written for the mutants the comparisons above let through: split keys of ``pack_buffers`` that
# only look like ints, buffer entries that only look like dicts or lists, document starts at the
# edges of their buffer, progress exactly at the split end or the block budget (also beyond float
# precision), and the reason a fingerprint check gives. Expected results and error classes come
# from ``elastic_loader.spec.checkpoint``; where the pipeline's message names the offending key or
# value, the test checks that it does.

ROW = RunConfig(2, 5, 1)
ROW_FP = RunConfig(2, 5, 1, "f" * 8)
PACKED = RunConfig(2, 5, 1, None, PackingConfig(3, 1, 0, 4))
PACKED_FP = RunConfig(2, 5, 1, "f" * 8, PackingConfig(3, 1, 0, 4))
SPLIT_LEN = 10


def identity(config: RunConfig) -> pipe.Identity:
    p = config.packing
    packing = None if p is None else (p.pack_sequences, p.eos_id, p.pad_id, p.blocks_per_epoch)
    return pipe.Identity(
        config.shuffle_seed, config.num_splits, config.epoch, config.perm_fingerprint, packing
    )


def spec_error(call: Callable[[], object]) -> SpecError | None:
    """The spec's error for ``call`` (None when the spec accepts)."""
    try:
        call()
    except SpecError as error:
        return error
    return None


def builtin(error: SpecError) -> type[Exception]:
    """The builtin class an implementation must raise for a spec error."""
    return TypeError if isinstance(error, TypeError) else ValueError


def spec_load(config: RunConfig, state: object, split_len: int = SPLIT_LEN) -> RowState | PackedState:
    if config.packing is None:
        return spec.load_row(config, state, split_len)
    return spec.load_packed(config, state, split_len)


def packed_checkpoint(**changes: object) -> dict[str, Any]:
    """A well-formed packed checkpoint of ``PACKED`` at step 1, with ``changes`` applied."""
    state = PackedState((3, 4), (1, 1), {0: PackBuffer((7, 1, 9, 1), (0, 2))})  # eos_id is 1
    return {**spec.snapshot_packed(PACKED, state), **changes}


def row_checkpoint(config: RunConfig = ROW, **changes: object) -> dict[str, Any]:
    return {**spec.snapshot_row(config, RowState((2, 3), (4, 3))), **changes}


def assert_load_agrees(
    config: RunConfig, state: object, split_len: int = SPLIT_LEN, match: str | None = None
) -> SpecError | None:
    """Load ``state`` with the spec and the pipeline: the same progress or the same error class.

    When the spec rejects ``state`` and ``match`` is given, the pipeline's message must match it.
    Returns the spec's error (None when it accepted).
    """
    error = spec_error(lambda: spec_load(config, state, split_len))
    if error is None:
        got = pipe.parse_for(identity(config), state, split_len)
        assert as_spec(got) == spec_load(config, state, split_len)
    else:
        with pytest.raises(builtin(error), match=match):
            pipe.parse_for(identity(config), state, split_len)
    return error


def assert_everywhere(config: RunConfig, bad: dict[str, Any], match: str | None = None) -> None:
    """``bad`` is rejected by the spec, and by the pipeline's load, commit and merge alike."""
    good: dict[str, Any] = packed_checkpoint() if config.packing is not None else row_checkpoint(config)
    parent = spec_load(config, good)
    if isinstance(parent, PackedState):
        spec_commit = spec_error(lambda: spec.commit_packed(config, parent, bad))
    else:
        spec_commit = spec_error(lambda: spec.commit_row(config, parent, bad))
    errors = [
        spec_error(lambda: spec_load(config, bad)),
        spec_commit,
        spec_error(lambda: saved.merge_state_dicts([good, bad])),
    ]
    classes = {builtin(e) for e in errors if e is not None}
    assert None not in errors and len(classes) == 1, errors
    cls = classes.pop()
    with pytest.raises(cls, match=match):
        pipe.parse_for(identity(config), bad, SPLIT_LEN)
    with pytest.raises(cls, match=match):
        pipe.commit(identity(config), as_pipeline(parent), bad)
    with pytest.raises(cls, match=match):
        merge_state_dicts([good, bad])


# ------------------------------------------------------------------ pack_buffers keys


@pytest.mark.parametrize("key", [True, False, 1.5, 0.0, "x", None, -1, 2, "2", " 1", "-1", (0,)])
def test_a_buffer_key_that_is_not_a_split_id_is_rejected(key: object) -> None:
    """Only ints in [0, num_splits) and their decimal strings name a split; bools and floats do not."""
    bad = packed_checkpoint(pack_buffers={key: {"tokens": [5], "starts": [0]}})
    named = int(key) if isinstance(key, str) and key.isdigit() else key  # "2" is read as split 2
    assert_everywhere(PACKED, bad, match=re.escape(f"pack_buffers key {named!r} "))


@pytest.mark.parametrize("key", [0, 1, "0", "1"])
def test_a_split_id_or_its_string_is_a_buffer_key(key: object) -> None:
    assert_load_agrees(PACKED, packed_checkpoint(pack_buffers={key: {"tokens": [5, 6], "starts": [1]}}))


def test_two_entries_for_one_split_are_rejected() -> None:
    buffer = {"tokens": [5], "starts": [0]}
    bad = packed_checkpoint(pack_buffers={1: buffer, "1": buffer})
    assert_everywhere(PACKED, bad, match=r"\bpack_buffers\b.*\bsplit 1\b")


def test_an_empty_entry_does_not_count_as_a_second_entry() -> None:
    state = packed_checkpoint(
        pack_buffers={1: {"tokens": [], "starts": []}, "1": {"tokens": [4], "starts": []}}
    )
    assert assert_load_agrees(PACKED, state) is None


# ------------------------------------------------------------------ pack_buffers values


@pytest.mark.parametrize(
    "value",
    [
        ["tokens", "starts"],  # a list holding both names is not a dict
        "tokens and starts",
        ("tokens", "starts"),
        None,
        5,
        {"tokens": [5]},
        {"starts": [0]},
        {},
        {"Tokens": [5], "Starts": [0]},
    ],
    ids=repr,
)
def test_a_buffer_entry_must_be_a_dict_with_tokens_and_starts(value: object) -> None:
    bad = packed_checkpoint(pack_buffers={0: value})
    assert_everywhere(PACKED, bad, match=re.escape("pack_buffers[0]"))


@pytest.mark.parametrize(
    "value",
    [
        {"tokens": [5], "starts": 7},
        {"tokens": [5], "starts": {0: 0}},
        {"tokens": [5], "starts": "0"},
        {"tokens": [5], "starts": range(1)},
        {"tokens": [5], "starts": None},
        {"tokens": 7, "starts": [0]},
        {"tokens": {5: 5}, "starts": [0]},
        {"tokens": "5", "starts": [0]},
        {"tokens": None, "starts": []},
    ],
    ids=repr,
)
def test_buffer_tokens_and_starts_must_be_lists(value: object) -> None:
    bad = packed_checkpoint(pack_buffers={0: value})
    assert_everywhere(PACKED, bad, match=re.escape("pack_buffers[0]"))


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"tokens": [5, 6.0], "starts": [0]}, "pack buffer tokens"),
        ({"tokens": [True], "starts": []}, "pack buffer tokens"),
        ({"tokens": [None, 5], "starts": [1]}, "pack buffer tokens"),
        ({"tokens": [5, 6], "starts": [False]}, "pack buffer starts"),
        ({"tokens": [5, 6], "starts": [0, 1.0]}, "pack buffer starts"),
        ({"tokens": [5, 6], "starts": ["1"]}, "pack buffer starts"),
    ],
)
def test_a_buffer_value_that_is_not_an_int_is_named(value: object, named: str) -> None:
    bad = packed_checkpoint(pack_buffers={0: value})
    assert_everywhere(PACKED, bad, match=rf"\b{named}\b")


@pytest.mark.parametrize(
    ("tokens", "starts"),
    [
        ([5, 6], [0, 0]),
        ([5, 6], [1, 1]),
        ([5, 6], [1, 0]),
        ([5, 6, 7], [0, 2, 1]),
        ([5, 6], [2]),
        ([5, 6], [0, 2]),
        ([5, 6], [-1]),
        ([5, 6], [-1, 0]),
        ([], [0]),
    ],
)
def test_document_starts_must_increase_strictly_and_index_the_buffer(
    tokens: list[int], starts: list[int]
) -> None:
    bad = packed_checkpoint(pack_buffers={1: {"tokens": tokens, "starts": starts}})
    assert_everywhere(PACKED, bad, match=re.escape("pack_buffers[1]"))


@pytest.mark.parametrize(
    ("tokens", "starts"),
    # eos_id is 1: a buffer the packer leaves ends with it, and every document start follows it
    [([5, 1], []), ([5, 1], [0]), ([1, 1], [1]), ([1, 1], [0, 1]), ((5, 1, 1), (0, 2)), ([], [])],
)
def test_document_starts_inside_the_buffer_are_accepted(tokens: list[int], starts: list[int]) -> None:
    state = packed_checkpoint(pack_buffers={1: {"tokens": tokens, "starts": starts}})
    assert assert_load_agrees(PACKED, state) is None
    got = merge_state_dicts([state])
    assert list(got.items()) == list(saved.merge_state_dicts([state]).items())


# ------------------------------------------------------------------ progress at its bounds


@pytest.mark.parametrize("split_len", [3, 4, 5])
def test_row_positions_may_reach_the_split_end_but_not_pass_it(split_len: int) -> None:
    assert_load_agrees(ROW, row_checkpoint(), split_len)  # positions (4, 3)


@pytest.mark.parametrize("split_len", [3, 4, 5])
def test_packed_consumption_may_reach_the_split_end_but_not_pass_it(split_len: int) -> None:
    assert_load_agrees(PACKED, packed_checkpoint(), split_len)  # consumed (3, 4)


@pytest.mark.parametrize("emitted", [[2, 2], [2, 0], [0, 3], [3, 2]])
def test_packed_emission_may_reach_the_block_budget_but_not_pass_it(emitted: list[int]) -> None:
    assert_load_agrees(PACKED, packed_checkpoint(blocks_emitted_per_split=emitted))


@pytest.mark.parametrize("extra", [0, 1])
def test_the_block_budget_is_exact_beyond_float_precision(extra: int) -> None:
    """A budget of 2**53 + 1 blocks per split (no float holds it): reaching it is fine, passing it is not."""
    budget = 2**53 + 1
    for num_splits in (1, 3):
        config = RunConfig(num_splits, 0, 0, None, PackingConfig(2, 1, 0, budget * num_splits))
        state = spec.snapshot_packed(config, PackedState((0,) * num_splits, (budget,) * num_splits))
        state["blocks_emitted_per_split"] = [budget + extra] * num_splits
        error = assert_load_agrees(config, state)
        assert (error is None) == (extra == 0)


def test_a_legacy_sample_count_of_zero_means_no_progress() -> None:
    for positions in (None, [0, 0], [0, 2]):
        state = row_checkpoint(samples_consumed_per_split=0, positions_consumed_per_split=positions)
        assert assert_load_agrees(ROW, state) is None
    state = row_checkpoint(samples_consumed_per_split=0)
    del state["positions_consumed_per_split"]
    assert assert_load_agrees(ROW, state) is None
    assert list(merge_state_dicts([state]).items()) == list(saved.merge_state_dicts([state]).items())


@pytest.mark.parametrize("legacy", [-1, True, False, 1.0])
def test_a_legacy_sample_count_must_be_a_non_negative_int(legacy: object) -> None:
    bad = row_checkpoint(samples_consumed_per_split=legacy)
    del bad["positions_consumed_per_split"]
    assert_everywhere(ROW, bad, match=r"(?<!\w)samples_consumed_per_split(?!\w)")


@pytest.mark.parametrize("samples", [[4, 3], [0, 0], [4, 0], 3])
def test_positions_equal_to_samples_are_accepted(samples: object) -> None:
    assert assert_load_agrees(ROW, row_checkpoint(samples_consumed_per_split=samples)) is None


@pytest.mark.parametrize(("samples", "behind"), [([5, 3], 0), ([4, 4], 1), (4, 1)])
def test_positions_behind_samples_are_rejected(samples: object, behind: int) -> None:
    bad = row_checkpoint(samples_consumed_per_split=samples)  # positions (4, 3)
    assert_everywhere(ROW, bad, match=rf"\bsplit {behind}\b")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("samples_consumed_per_split", [0, -1]),
        ("samples_consumed_per_split", [0, 0, 0]),
        ("samples_consumed_per_split", "00"),
        ("positions_consumed_per_split", [4, -1]),
        ("positions_consumed_per_split", [4, 3.0]),
        ("positions_consumed_per_split", [4]),
        ("positions_consumed_per_split", 4),
    ],
)
def test_a_malformed_row_list_is_named_as_a_whole_word(key: str, value: object) -> None:
    assert_everywhere(ROW, row_checkpoint(**{key: value}), match=rf"(?<!\w){key}(?!\w)")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("samples_consumed_per_split", [3, -1]),
        ("samples_consumed_per_split", [3, 4.0]),
        ("samples_consumed_per_split", 3),
        ("blocks_emitted_per_split", [1, -1]),
        ("blocks_emitted_per_split", [1, True]),
        ("blocks_emitted_per_split", [1, 1, 1]),
        ("blocks_emitted_per_split", "11"),
    ],
)
def test_a_malformed_packed_list_is_named_as_a_whole_word(key: str, value: object) -> None:
    assert_everywhere(PACKED, packed_checkpoint(**{key: value}), match=rf"(?<!\w){key}(?!\w)")


# ------------------------------------------------------------------ settings, fingerprint, mode


MODE_KEYS = [(ROW, key) for key in spec.CONFIG_KEYS] + [
    (PACKED, key) for key in (*spec.CONFIG_KEYS, *spec.PACKING_KEYS)
]
MODE_IDS = [f"{'row' if c.packing is None else 'packed'}-{key}" for c, key in MODE_KEYS]


@pytest.mark.parametrize(("config", "key"), MODE_KEYS, ids=MODE_IDS)
def test_a_different_setting_is_named(config: RunConfig, key: str) -> None:
    good = packed_checkpoint() if config.packing is not None else row_checkpoint()
    error = assert_load_agrees(config, {**good, key: good[key] + 2}, match=rf"^{key} mismatch")
    assert error is not None and error.code == f"{key}_mismatch"


@pytest.mark.parametrize(
    ("config", "key"),
    [*MODE_KEYS, (ROW, "samples_consumed_per_split"), (PACKED, "samples_consumed_per_split")],
    ids=[*MODE_IDS, "row-samples", "packed-samples"],
)
def test_a_missing_key_is_named(config: RunConfig, key: str) -> None:
    good = packed_checkpoint() if config.packing is not None else row_checkpoint()
    bad = {k: v for k, v in good.items() if k != key}
    error = assert_load_agrees(config, bad, match=rf"missing .*'{key}'")
    assert error is not None and error.code == "checkpoint_missing_key"


@pytest.mark.parametrize("config", [ROW, PACKED], ids=["row", "packed"])
def test_a_checkpoint_without_fingerprint_is_rejected_for_a_strategy_dataset(config: RunConfig) -> None:
    strategy = ROW_FP if config.packing is None else PACKED_FP
    state = row_checkpoint() if config.packing is None else packed_checkpoint()
    error = assert_load_agrees(strategy, state, match="no perm_fingerprint")
    assert error is not None and error.code == "perm_fingerprint_missing"


@pytest.mark.parametrize("config", [ROW_FP, PACKED_FP], ids=["row", "packed"])
@pytest.mark.parametrize("theirs", ["e" * 8, "f" * 8, "", 7])
def test_a_fingerprint_must_be_the_datasets(config: RunConfig, theirs: object) -> None:
    good = (
        row_checkpoint(config)
        if config.packing is None
        else {**packed_checkpoint(), "perm_fingerprint": "f" * 8}
    )
    error = assert_load_agrees(
        config, {**good, "perm_fingerprint": theirs}, match="perm_fingerprint mismatch"
    )
    assert (error is None) == (theirs == config.perm_fingerprint)
    if error is not None:
        assert error.code == "perm_fingerprint_mismatch"


@pytest.mark.parametrize("config", [ROW, PACKED], ids=["row", "packed"])
def test_a_fingerprint_is_rejected_by_a_dataset_without_strategy(config: RunConfig) -> None:
    state = row_checkpoint() if config.packing is None else packed_checkpoint()
    error = assert_load_agrees(
        config, {**state, "perm_fingerprint": "f" * 8}, match="perm_fingerprint mismatch"
    )
    assert error is not None and error.code == "perm_fingerprint_mismatch"


def test_row_and_packed_checkpoints_do_not_load_into_each_other() -> None:
    packed = assert_load_agrees(ROW, packed_checkpoint(), match="cannot load a packed checkpoint")
    row = assert_load_agrees(PACKED, row_checkpoint(), match="cannot load a row-mode checkpoint")
    assert packed is not None and row is not None
    assert packed.code == row.code == "mode_mismatch"


@pytest.mark.parametrize("state", [None, [], "state", 3, [("epoch", 0)]], ids=repr)
def test_a_checkpoint_that_is_not_a_dict_is_a_type_error(state: object) -> None:
    error = assert_load_agrees(ROW, state, match=f"got {type(state).__name__}")
    assert error is not None and builtin(error) is TypeError
    with pytest.raises(TypeError, match=f"got {type(state).__name__}"):
        pipe.commit(identity(ROW), pipe.RowState([0, 0], [0, 0]), state)
    with pytest.raises(TypeError, match=f"got {type(state).__name__}"):
        merge_state_dicts([row_checkpoint(), state])  # type: ignore[list-item]  # malformed on purpose


# ------------------------------------------------------------------ snapshot


@pytest.mark.parametrize(
    "config", [ROW, ROW_FP, PACKED, PACKED_FP], ids=["row", "row-fp", "packed", "packed-fp"]
)
def test_snapshot_writes_the_spec_keys_in_order(config: RunConfig) -> None:
    """Keys in the spec's order; buffers by split, empty ones left out, tokens before starts."""
    if config.packing is None:
        row = RowState((2, 3), (4, 3))
        want = spec.snapshot_row(config, row)
        progress = as_pipeline(row)
    else:
        packed = PackedState((3, 4, 0), (1, 1, 1), {2: PackBuffer((7, 8), (1,)), 0: PackBuffer((9,), ())})
        config = RunConfig(
            3, config.shuffle_seed, config.epoch, config.perm_fingerprint, PackingConfig(3, 1, 0, 6)
        )
        want = spec.snapshot_packed(config, packed)
        progress = as_pipeline(packed)
        assert isinstance(progress, pipe.PackedState)
        progress.buffers = {2: progress.buffers[2], 1: ([], []), 0: progress.buffers[0]}
    got = pipe.snapshot(identity(config), progress)
    assert list(got.items()) == list(want.items())
    if config.packing is not None:
        assert isinstance(got["pack_buffers"], dict) and isinstance(want["pack_buffers"], dict)
        assert list(got["pack_buffers"]) == list(want["pack_buffers"])
        assert [list(v.items()) for v in got["pack_buffers"].values()] == [
            list(v.items()) for v in want["pack_buffers"].values()
        ]
