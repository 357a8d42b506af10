"""Save protocols in the machines: what every rank of the next session is given, and merges.

A protocol (``spec.protocols.Protocol``; spec/INVARIANTS.md, "Save protocols")
turns a recorded checkpoint into every rank's start, always through the
implementation's checkpoint dicts, as users do:

* ``one_rank``: every rank loads the recorded checkpoint (one rank's state,
  or a merge). The lineage goes on only when the record is *sound* (the
  conforming checkpoint's inferences are the owners' truth).
* ``merge_all``: the implementation merges the record's *group* (every rank's
  checkpoint of the same moment) and every rank loads the merge.
* ``own``: rank ``r`` loads its own checkpoint of the group, on the group's
  world size.

A record without a group (a slot's checkpoint, a merge) is resumed by
``one_rank`` whatever protocol was drawn. Beside every rank's payload, a
:class:`Starts` holds what the conforming chain gives the rank (the spec's
versions of the same checkpoints), from which the next session's conforming
checkpoints are computed.

Every merge the machines ask for is judged the same way (:func:`judge_merges`):
against the spec's merge of the same checkpoints and its lattice laws
(``MergeLatticeInv``), every split from its owner's checkpoint and a merge that
leaves out a rank refused (``MergeReportedInv``), and the job's truth
(``MergeExactProp``). :func:`probe` loads variants of a fresh checkpoint into a
fresh dataset: without the provenance key (``PartialStateRefusedInv``), with an
edited progress value (``ReachableLoadInv``), then as written.

Rules of this module: functions of the machine they run for (its
implementation, datasets and loads); the judging is in :mod:`.checkpoints`.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...spec import SpecError, rank_splits
from ...spec.saved import EXTRA_KEY, Saved, exact, merge_saved, merge_state_dicts, snapshot_saved
from ..adapters import DatasetLike, State
from . import checkpoints
from .model import ModelState, attempt, describe, note
from .plans import ProtocolName, SessionPlan
from .sessions import Recorded

if TYPE_CHECKING:
    from .differential import DifferentialMachine


@dataclass(frozen=True)
class Starts:
    """What every rank of the next session loads, and what the conforming chain gives it."""

    protocol: ProtocolName
    """The protocol applied (``one_rank`` when the record has no group)."""
    world_size: int | None
    """The world size the protocol needs (``own``: the group's), else ``None``."""
    payloads: tuple[Mapping[str, object], ...]
    """Per rank (a single one: every rank's)."""
    true: tuple[Saved, ...]
    """Per rank, the same way: the conforming chain's start."""
    lineage: bool
    """The resumed session's truth and history describe the job."""

    def payload(self, rank: int) -> Mapping[str, object]:
        """The checkpoint dict ``rank`` loads."""
        return self.payloads[rank if len(self.payloads) > 1 else 0]

    def true_start(self, rank: int) -> Saved:
        """The conforming chain's start of ``rank``."""
        return self.true[rank if len(self.true) > 1 else 0]


def starts(machine: DifferentialMachine, record: Recorded, protocol: ProtocolName) -> Starts | None:
    """The starts ``protocol`` gives the ranks of the next session from ``record`` (``None``: the
    implementation's merge of the group failed, which is judged)."""
    used: ProtocolName = protocol if record.group else "one_rank"
    if used == "one_rank":
        return Starts(used, None, (record.state,), (record.expected,), record.lineage and record.sound)
    if used == "own":
        return Starts(used, len(record.group), record.group, record.true_group, record.lineage)
    owners = [
        (state, rank_splits(machine.spec_model().config.num_splits, len(record.group), r))
        for r, state in enumerate(record.group)
    ]
    true_dicts = [snapshot_saved(saved) for saved in record.true_group]
    merged = machine.impl_merge(record.group)
    what = f"merge of {record!r}'s group"
    if record.epoch == machine.spec_model().number:  # merges are judged in their own epoch
        group = list(record.group)
        judge_merges(machine, group, merged, owners, true_dicts, record.truth, record.lineage, what)
    if isinstance(merged, Exception):
        return None
    return Starts(used, None, (merged,), (merge_saved(record.true_group),), record.lineage)


def true_start(
    machine: DifferentialMachine, given: Starts, rank: int, world_size: int, truth: ModelState
) -> Saved:
    """The conforming chain's start of ``rank``; when that chain would refuse it (a split of the rank
    unknown), the job's truth, so the lineage goes on from where the job really is."""
    model = machine.spec_model()
    saved = given.true_start(rank)
    if saved.unknown & set(rank_splits(model.config.num_splits, world_size, rank)):
        return exact(model.config, truth, model.pin)
    return saved


def judge_merges(
    machine: DifferentialMachine,
    states: Sequence[Mapping[str, object]],
    merged: State | Exception,
    owners: Sequence[tuple[Mapping[str, object], Sequence[int]]],
    true_dicts: Sequence[Mapping[str, object]],
    truth: ModelState,
    lineage: bool,
    what: str,
) -> None:
    """Judge the implementation's ``merged`` of ``states`` (every rank's or slot's checkpoint; each
    writer's own splits in ``owners``; the conforming versions ``true_dicts``)."""
    model, verdicts = machine.spec_model(), machine.verdicts
    provenance = bool(machine.provenance)
    spec = attempt(lambda: merge_state_dicts(list(states)))
    checkpoints.judge_merge(verdicts, model, merged, spec, "MergeLatticeInv", what, provenance)
    _judge_lattice(machine, states, merged, provenance, what)
    if isinstance(merged, Exception):
        return
    checkpoints.judge_reported(verdicts, model, merged, owners, what)
    for left_out in range(len(states) if len(states) > 1 else 0):
        rest = [s for i, s in enumerate(states) if i != left_out]
        true_rest = [s for i, s in enumerate(true_dicts) if i != left_out]
        spec_rest = attempt(functools.partial(merge_state_dicts, true_rest))
        checkpoints.judge_subset(
            verdicts, machine.impl_merge(rest), spec_rest, f"{what} without checkpoint {left_out}"
        )
    if lineage:
        checkpoints.judge_exact(verdicts, model, merged, truth, what)


def _judge_lattice(
    machine: DifferentialMachine,
    states: Sequence[Mapping[str, object]],
    merged: State | Exception,
    provenance: bool,
    what: str,
) -> None:
    """The merge commutes, is idempotent and associative, as the spec's is."""
    variants: list[tuple[str, list[Mapping[str, object]]]] = [
        ("merge(reversed)", list(states[::-1])),
        ("merge(states + states)", list(states) + list(states)),
    ]
    if not isinstance(merged, Exception):
        half = max(1, len(states) // 2)
        variants.append(("merge([merge(states)] + states[half:])", [merged, *states[half:]]))
        again = machine.impl_merge(list(states[::-1]))
        if not isinstance(again, Exception):
            variants.append(("merge([merge(reversed), merge(states)])", [again, merged]))
    for label, variant in variants:
        checkpoints.judge_merge(
            machine.verdicts,
            machine.spec_model(),
            machine.impl_merge(variant),
            attempt(functools.partial(merge_state_dicts, variant)),
            "MergeLatticeInv",
            f"{what}: {label}",
            provenance,
        )


def _edited(state: Mapping[str, object], split_len: int) -> dict[str, object] | None:
    """``state`` with one progress value moved by one, still within every bound a load checks
    (only the digest can tell); ``None`` when no value can move."""
    out = copy.deepcopy(dict(state))
    key = (
        "positions_consumed_per_split"
        if "positions_consumed_per_split" in out
        else "samples_consumed_per_split"
    )
    values = out.get(key)
    if not isinstance(values, list):
        return None
    for i, v in enumerate(values):
        if isinstance(v, int) and not isinstance(v, bool) and v < split_len:
            values[i] = v + 1
            return out
    return None


def probe(
    machine: DifferentialMachine,
    plan: SessionPlan,
    rank: int,
    record: Recorded,
    where: str,
    dataset: DatasetLike | None = None,
) -> None:
    """Load variants of ``record.state`` into a dataset of ``rank`` that is not iterating (a fresh one
    unless ``dataset`` is given): without its provenance key, with an edited progress value, then
    as written (which must load back unless the spec refuses it, and then answer ``state_dict()``
    as the spec does)."""
    model = machine.spec_model()
    dataset = machine.new_dataset(plan, rank, None) if dataset is None else dataset
    if dataset is None:
        return
    state = record.state
    variants: list[tuple[str, Mapping[str, object] | None, str]] = []
    if EXTRA_KEY in state:
        stripped = {k: v for k, v in state.items() if k != EXTRA_KEY}
        variants.append((f"without {EXTRA_KEY!r}", stripped, "PartialStateRefusedInv"))
        variants.append(
            ("with an edited progress value", _edited(state, model.split_len), "ReachableLoadInv")
        )
    for label, payload, name in variants:
        if payload is None:
            continue
        spec = attempt(functools.partial(model.read, payload, plan.world_size, rank))
        try:
            dataset.load_state_dict(copy.deepcopy(dict(payload)))
        except Exception as error:
            if not isinstance(spec, SpecError):
                machine.fail(
                    name, f"{where}: {record!r} {label} was refused ({describe(error)}); the spec loads it"
                )
            continue
        if isinstance(spec, SpecError):
            reason = checkpoints.REFUSALS.get(spec.code, name)
            machine.fail(reason, f"{where}: {record!r} {label} was loaded; the spec refuses it: {spec}")
    loaded = machine.load_checkpoint(
        dataset, copy.deepcopy(dict(state)), plan.world_size, rank, record, f"{where}: reload"
    )
    if loaded is not None:
        owned = rank_splits(model.config.num_splits, plan.world_size, rank)
        machine.check_reload(dataset, plan, rank, loaded, owned, False, f"{where}: reload")
    note(f"{where}: probed loads of {record!r} on rank {rank}")
