"""The judges of checkpoints as saved: what ``state_dict()`` must say, loads, merges, lockstep.

A checkpoint the implementation wrote is compared with the spec's
(:meth:`~.model.EpochModel.checkpoint`, ``rank_checkpoint``) split by split, and
each difference is named by what the spec does with that split:

* a split of the slot (or loader rank) itself: the progress must be exact (the
  caller names the invariant: ``ResumeEquivalenceProp`` for an iterator,
  ``ConsumerCommitProp`` for a loader, ``CheckpointRoundTripInv`` right after a load);
* a split the spec leaves at its loaded value (a sibling worker's, an unknown
  split, a packed projection's base, a rank that did not move): ``HonestProgressInv``;
* a split the spec infers under lockstep: ``LockstepInferenceInv``, as are the
  provenance entries (``reported``, ``unknown``, ``projected``, ``cursor``).

An implementation that writes the provenance key (``elastic_loader``) is held to
the whole dict, the key included (its ``table`` pin and key order under
``CheckpointRoundTripInv``, its digest under ``ReachableLoadInv``: the spec
refuses a checkpoint whose digest does not match); one that does not (the
reference) is held to the reference keys, and the protocol judges catch the
consequences of what it leaves out.

Rules of this module: as :mod:`.judges` (never call the implementation, record
in a fixed order); a spec predicate or reading applied to the implementation's
data runs through :meth:`~.judges.Verdicts.judge`, so an input the spec cannot
read is a violation, not a bug of the suite.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from ...spec import RowState, SpecError, invariants as inv
from ...spec.loader import LoaderRun
from ...spec.protocols import RankResult
from ...spec.saved import EXTRA_KEY, Saved, snapshot_saved
from ..adapters import State
from .judges import Verdicts
from .model import EpochModel, ModelState, attempt, builtin_error, describe, split_value
from .sessions import Recorded

REFUSALS: Mapping[str, str] = {
    "progress_unknown": "PartialStateRefusedInv",
    "packed_partial_state": "PartialStateRefusedInv",
    "checkpoint_digest_mismatch": "ReachableLoadInv",
}
"""The invariant a load breaks when it accepts a checkpoint the spec refuses with this code
(any other code: ``CheckpointRoundTripInv``, the checkpoint does not fit the dataset)."""


def reference_view(checkpoint: Mapping[str, object], provenance: bool) -> dict[str, object]:
    """The part of a checkpoint an implementation is held to: all of it, or the reference keys."""
    return {k: v for k, v in checkpoint.items() if provenance or k != EXTRA_KEY}


def _unreadable(error: SpecError) -> str:
    if error.code in ("progress_out_of_range", "positions_below_samples"):
        return "ProgressBoundsInv"
    if error.code == "checkpoint_digest_mismatch":
        return "ReachableLoadInv"
    return "CheckpointRoundTripInv"


def judge_checkpoint(
    verdicts: Verdicts,
    model: EpochModel,
    state: Mapping[str, object],
    expected: Saved,
    start: Saved,
    owned: Sequence[int],
    exact: str,
    where: str,
    provenance: bool,
) -> Saved | None:
    """Judge a checkpoint the implementation wrote against the spec's ``expected`` one (written
    after loading ``start`` by an iterator or loader rank owning ``owned``); return the spec's
    reading of it, ``None`` when the spec cannot read it."""
    want = reference_view(snapshot_saved(expected), provenance)
    _judge_keys(verdicts, model, state, want, where)
    parsed = attempt(lambda: model.parse(state))
    if isinstance(parsed, SpecError):
        verdicts.fail(_unreadable(parsed), f"{where}: the spec cannot read {dict(state)!r}: {parsed}")
        return None
    canonical = reference_view(snapshot_saved(parsed), provenance)
    if dict(state) != canonical:
        verdicts.fail(
            "CheckpointRoundTripInv", f"{where}: {dict(state)!r} is not the canonical {canonical!r}"
        )
    if isinstance(parsed.state, RowState):
        row = parsed.state
        verdicts.judge("ProgressBoundsInv", lambda: inv.ProgressBoundsInv(row, model.split_len))
        verdicts.judge("SkipAccountingInv", lambda: inv.SkipAccountingInv(model.perm, model.faults, row))
    _judge_values(verdicts, model, parsed, expected, start, owned, exact, where)
    if provenance:
        _judge_provenance(verdicts, parsed, expected, where)
    return parsed


def _judge_keys(
    verdicts: Verdicts, model: EpochModel, state: Mapping[str, object], want: Mapping[str, object], where: str
) -> None:
    """The checkpoint's keys in order, and an ``"auto"`` budget resolved to the spec's estimate."""
    if list(state) != list(want):
        verdicts.fail("CheckpointRoundTripInv", f"{where}: keys {list(state)} != {list(want)}")
    if model.auto and state.get("blocks_per_epoch") != want.get("blocks_per_epoch"):
        reported = state.get("blocks_per_epoch")
        verdicts.fail(
            "AutoBudgetInv",
            f"{where}: blocks_per_epoch {reported!r}, spec estimate {want.get('blocks_per_epoch')}",
        )
        if isinstance(reported, int):
            verdicts.judge("AutoBudgetInv", lambda: inv.AutoBudgetInv(reported, model.config.num_splits))


def _judge_values(
    verdicts: Verdicts,
    model: EpochModel,
    parsed: Saved,
    expected: Saved,
    start: Saved,
    owned: Sequence[int],
    exact: str,
    where: str,
) -> None:
    """Every split's plain values against the spec's, each difference named as the module says."""
    kinds: dict[str, list[int]] = {exact: [], "HonestProgressInv": [], "LockstepInferenceInv": []}
    for s in range(model.config.num_splits):
        got, want = split_value(parsed.state, s), split_value(expected.state, s)
        if got == want:
            continue
        if s in owned:
            kinds[exact].append(s)
        elif want == split_value(start.state, s):
            kinds["HonestProgressInv"].append(s)
        else:
            kinds["LockstepInferenceInv"].append(s)
    what = {
        exact: "its own splits",
        "HonestProgressInv": "splits it neither owns nor infers (the spec keeps their loaded values)",
        "LockstepInferenceInv": "splits it infers under lockstep",
    }
    for name, splits in kinds.items():
        if splits:
            got_values = [split_value(parsed.state, s) for s in splits]
            want_values = [split_value(expected.state, s) for s in splits]
            verdicts.fail(
                name, f"{where}: {what[name]} {splits} at {got_values}, the spec says {want_values}"
            )


def _judge_provenance(verdicts: Verdicts, parsed: Saved, expected: Saved, where: str) -> None:
    """The provenance key against the spec's: what is reported, unknown, projected; the cursor; the pin."""
    entries = {
        "reported": (sorted(parsed.reported), sorted(expected.reported)),
        "unknown": (sorted(parsed.unknown), sorted(expected.unknown)),
        "projected": (dict(parsed.projections), dict(expected.projections)),
        "cursor": (parsed.cursor, expected.cursor),
    }
    for entry, (got, want) in entries.items():
        if got != want:
            verdicts.fail(
                "LockstepInferenceInv", f"{where}: {EXTRA_KEY}[{entry!r}] is {got}, the spec's {want}"
            )
    if parsed.table != expected.table:
        verdicts.fail(
            "CheckpointRoundTripInv", f"{where}: the table pin is {parsed.table}, the spec's {expected.table}"
        )


def judge_load(
    verdicts: Verdicts, spec: Saved | SpecError, error: Exception | None, record: Recorded, where: str
) -> bool:
    """``load_state_dict`` raised ``error`` (or nothing): it must fail exactly when the spec refuses,
    with the spec's builtin class; return whether the checkpoint is loaded.

    Refusing a checkpoint the spec loads breaks ``ReachableLoadInv`` (every checkpoint the
    implementation wrote must load back); accepting one the spec refuses breaks the invariant of
    :data:`REFUSALS` for the spec's reason.
    """
    if error is not None:
        if not isinstance(spec, SpecError):
            verdicts.fail("ReachableLoadInv", f"{where}: load_state_dict raised {describe(error)}")
        elif not isinstance(error, builtin_error(spec)):
            verdicts.fail(
                "CheckpointRoundTripInv", f"{where}: load_state_dict raised {describe(error)}; spec: {spec}"
            )
        return False
    if isinstance(spec, SpecError):
        verdicts.fail(
            REFUSALS.get(spec.code, "CheckpointRoundTripInv"),
            f"{where}: load_state_dict accepted {record!r} (epoch {record.epoch}); "
            f"the spec refuses it: {spec}",
        )
        return False
    return True


# ---------------------------------------------------------------- merges


def judge_merge(
    verdicts: Verdicts,
    model: EpochModel,
    impl: State | Exception,
    spec: Mapping[str, object] | SpecError,
    name: str,
    what: str,
    provenance: bool,
) -> None:
    """The implementation's merge (or its error) against the spec's merge of the same checkpoints,
    compared as the spec reads them (the plain progress only, for an implementation without the
    provenance key)."""
    if isinstance(spec, SpecError):
        if not isinstance(impl, builtin_error(spec)):
            verdicts.fail(name, f"{what}: implementation gave {impl!r}; the spec raises {spec}")
        return
    if isinstance(impl, Exception):
        verdicts.fail(name, f"{what}: implementation raised {describe(impl)}; spec {dict(spec)!r}")
        return
    mine = attempt(lambda: model.parse(impl))
    theirs = model.parse(spec)
    same = not isinstance(mine, SpecError) and (mine == theirs if provenance else mine.state == theirs.state)
    if not same:
        verdicts.fail(name, f"{what}: implementation {impl!r} != spec {dict(spec)!r}")


def judge_reported(
    verdicts: Verdicts,
    model: EpochModel,
    merged: Mapping[str, object],
    owners: Sequence[tuple[Mapping[str, object], Sequence[int]]],
    what: str,
) -> None:
    """``MergeReportedInv``: every split of the merge holds what its owner's checkpoint says of it
    (``owners``: each checkpoint with the splits its writer owned)."""
    parsed = attempt(lambda: model.parse(merged))
    if isinstance(parsed, SpecError):
        verdicts.fail("MergeReportedInv", f"{what}: the spec cannot read the merge: {parsed}")
        return
    wrong: list[str] = []
    for checkpoint, owned in owners:
        owner = attempt(functools.partial(model.parse, checkpoint))
        if isinstance(owner, SpecError):
            continue  # judged where it was written
        for s in owned:
            got = (split_value(parsed.state, s), parsed.projections.get(s))
            want = (split_value(owner.state, s), owner.projections.get(s))
            if got != want:
                wrong.append(f"split {s} merges to {got}, its owner reports {want}")
    if wrong:
        verdicts.fail("MergeReportedInv", f"{what}: " + "; ".join(wrong))


def judge_subset(
    verdicts: Verdicts, impl: State | Exception, spec: Mapping[str, object] | SpecError, what: str
) -> None:
    """``MergeReportedInv``: a merge that leaves out a rank raises exactly when the spec's does."""
    if isinstance(spec, SpecError) and not isinstance(impl, builtin_error(spec)):
        verdicts.fail("MergeReportedInv", f"{what}: accepted ({impl!r}); the spec raises {spec}")
    elif not isinstance(spec, SpecError) and isinstance(impl, Exception):
        verdicts.fail("MergeReportedInv", f"{what}: raised {describe(impl)}; the spec merges")


def judge_exact(
    verdicts: Verdicts, model: EpochModel, merged: Mapping[str, object], truth: ModelState, what: str
) -> None:
    """``MergeExactProp``: the merge resumes every split exactly where the job truly is."""
    parsed = attempt(lambda: model.parse(merged))
    if isinstance(parsed, SpecError):
        verdicts.fail("MergeExactProp", f"{what}: the spec cannot read the merge {dict(merged)!r}: {parsed}")
        return
    n = model.config.num_splits
    state = attempt(lambda: model.resolved(parsed, range(n)))
    if isinstance(state, SpecError):
        verdicts.fail("MergeExactProp", f"{what}: the merge cannot be resumed: {state}")
        return
    wrong = [s for s in range(n) if model.future(state, s) != model.future(truth, s)]
    if wrong:
        got = [split_value(state, s) for s in wrong]
        want = [split_value(truth, s) for s in wrong]
        verdicts.fail(
            "MergeExactProp",
            f"{what}: splits {wrong} merge to {got}; the job is at {want} ({dict(merged)!r})",
        )


# ---------------------------------------------------------------- lockstep sessions


def judge_lockstep(
    verdicts: Verdicts, model: EpochModel, checkpoints: Sequence[Saved], taken: Sequence[int], where: str
) -> None:
    """``LockstepInferenceInv`` on the implementation's checkpoints of one session (rank order) in
    which every rank took ``taken[r]`` batches (items): only judged when the counts are equal."""
    if len(set(taken)) != 1:
        return
    start = model.initial()
    results = [
        RankResult(r, LoaderRun(start, (), None), taken[r], saved) for r, saved in enumerate(checkpoints)
    ]
    corpus = model.corpus if model.packing is not None else None

    def check() -> None:
        inv.LockstepInferenceInv(model.perm, model.faults, corpus, results, model.skipping)

    verdicts.judge("LockstepInferenceInv", check, where)
