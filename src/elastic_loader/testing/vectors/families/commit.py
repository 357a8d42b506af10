"""The ``commit`` family: the loader's fold of one delivered batch's snapshot into its parent state.

Every case is checked never to move a split's progress backwards.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ....spec.checkpoint import commit_packed, commit_row, snapshot_packed, snapshot_row
from ....spec.packing import PackedState, initial_packed_state, iterate_packed
from ....spec.rows import RowState, initial_row_state, iterate_rows
from ....spec.topology import PackingConfig, RunConfig
from ..codec import CONFIG, OPAQUE, STATE, corpus_map, enc_state, record
from ..plumbing import NO_FAULTS, random_corpus, random_perm
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, make_case
from .fixtures import changed


@dataclass(frozen=True)
class CommitInput:
    """The parent's state and the snapshot one delivered batch carries (possibly malformed)."""

    config: RunConfig
    parent: RowState | PackedState
    incoming: object


_encode, _decode = record(CommitInput, CONFIG, STATE, OPAQUE)


def _run(x: CommitInput) -> JsonObject:
    def compute() -> RowState | PackedState:
        if isinstance(x.parent, RowState):
            return commit_row(x.config, x.parent, x.incoming)
        return commit_packed(x.config, x.parent, x.incoming)

    state = attempt(compute)
    if isinstance(state, SpecError):
        return error_json(state)
    if isinstance(state, RowState) and isinstance(x.parent, RowState):
        moved_back = any(
            a < b for a, b in zip(state.samples + state.positions, x.parent.samples + x.parent.positions)
        )
    elif isinstance(state, PackedState) and isinstance(x.parent, PackedState):
        moved_back = any(
            (state.emitted[s], state.consumed[s]) < (x.parent.emitted[s], x.parent.consumed[s])
            for s in range(len(state.emitted))
        )
    else:
        raise AssertionError("commit changed the mode of the state")
    if moved_back:
        raise AssertionError("a commit never moves a split's progress backwards")
    return {"state": enc_state(state)}


CODEC = Codec(_encode, _decode, _run)


_PERM = random_perm(random.Random(61), 4, 6)
_CFG = RunConfig(4, 9, 0)
_W0 = iterate_rows(_PERM, NO_FAULTS, (0, 1), initial_row_state(4))
_W1 = iterate_rows(_PERM, NO_FAULTS, (2, 3), initial_row_state(4))
_PACKING = PackingConfig(3, 1, 0, 12)
_PCFG = RunConfig(4, 9, 0, None, _PACKING)
_DOCS = corpus_map(random_corpus(random.Random(62), 24, 5))
_PW0 = iterate_packed(_PERM, _DOCS, NO_FAULTS, (0, 1), _PACKING, initial_packed_state(4))
_PW1 = iterate_packed(_PERM, _DOCS, NO_FAULTS, (2, 3), _PACKING, initial_packed_state(4))
_AFTER_W0 = commit_row(_CFG, initial_row_state(4), snapshot_row(_CFG, _W0.state_after(4)))
_PACKED_AFTER_W0 = commit_packed(_PCFG, initial_packed_state(4), snapshot_packed(_PCFG, _PW0.state_after(2)))


def _case(
    name: str, description: str, config: RunConfig, parent: RowState | PackedState, incoming: object
) -> CaseDef:
    """A case of this family."""
    return make_case("commit", CODEC, name, description, CommitInput(config, parent, incoming))


def cases() -> list[CaseDef]:
    """Folding the snapshot carried by one delivered batch into the parent's state."""
    return [*_row_cases(), *_packed_cases(), *_error_cases()]


def _row_cases() -> list[CaseDef]:
    """Row mode: two workers' snapshots fold into the parent; stale and legacy snapshots."""
    return [
        _case(
            "row_first_batch_of_worker_0",
            "the parent takes worker 0's progress on its splits",
            _CFG,
            initial_row_state(4),
            snapshot_row(_CFG, _W0.state_after(4)),
        ),
        _case(
            "row_then_worker_1",
            "worker 1's snapshot does not undo worker 0's progress",
            _CFG,
            _AFTER_W0,
            snapshot_row(_CFG, _W1.state_after(4)),
        ),
        _case(
            "row_stale_snapshot_changes_nothing",
            "an older snapshot of the same worker is absorbed",
            _CFG,
            commit_row(_CFG, _AFTER_W0, snapshot_row(_CFG, _W0.state_after(6))),
            snapshot_row(_CFG, _W0.state_after(4)),
        ),
        _case(
            "row_legacy_int_snapshot",
            "a legacy int snapshot is a uniform list",
            _CFG,
            _AFTER_W0,
            {"shuffle_seed": 9, "num_splits": 4, "epoch": 0, "samples_consumed_per_split": 3},
        ),
    ]


def _packed_cases() -> list[CaseDef]:
    """Packed mode: each worker's splits advance; a tie keeps the parent's split state."""
    return [
        _case(
            "packed_first_batch",
            "the parent takes worker 0's blocks and buffers",
            _PCFG,
            initial_packed_state(4),
            snapshot_packed(_PCFG, _PW0.state_after(2)),
        ),
        _case(
            "packed_then_worker_1",
            "worker 1's splits advance, worker 0's stay",
            _PCFG,
            _PACKED_AFTER_W0,
            snapshot_packed(_PCFG, _PW1.state_after(2)),
        ),
        _case(
            "packed_equal_progress_keeps_parent",
            "a tie keeps the parent's split state",
            _PCFG,
            _PACKED_AFTER_W0,
            snapshot_packed(_PCFG, _PW0.state_after(2)),
        ),
    ]


def _error_cases() -> list[CaseDef]:
    """Snapshots the parent rejects."""
    return [
        _case(
            "error_epoch_differs",
            "the incoming snapshot is checked like a load",
            _CFG,
            _AFTER_W0,
            changed(snapshot_row(_CFG, _W1.state_after(2)), epoch=1),
        ),
        _case(
            "error_mode_differs",
            "a packed snapshot into a row parent",
            _CFG,
            _AFTER_W0,
            snapshot_packed(_PCFG, _PW1.state_after(2)),
        ),
        _case(
            "error_list_length",
            "the incoming lists have one entry per split",
            _CFG,
            _AFTER_W0,
            changed(snapshot_row(_CFG, _W1.state_after(2)), samples_consumed_per_split=[0, 0, 1]),
        ),
        _case("error_not_a_dict", "the incoming snapshot is a dict", _PCFG, _PACKED_AFTER_W0, None),
    ]


FAMILY = family("commit", cases, CODEC)
